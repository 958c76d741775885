"""The ``guardscope`` command line: each command parses options, calls one library function,
prints a summary. A :class:`GuardscopeError` becomes a one-paragraph message and exit status 2.

One module per group of commands, in the pipeline's order: ``analysis`` (analyze, report),
``fixes`` (emit-warmup, bundle, precompile), ``exploring`` (probe, whatif), ``proof`` (verify, bench,
fidelity), ``compare`` (diff), ``corpora`` (convert, merge); ``common`` holds what they share (the error decorator, the options
several commands declare). Torch-heavy modules are imported inside the command bodies, so
``guardscope --help`` imports no torch. ``python -m guardscope.cli`` runs ``__main__``.
"""

from __future__ import annotations

import click

from . import analysis, compare, corpora, exploring, fixes, proof


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="guardscope")
def main() -> None:
    """guardscope: find every torch.compile recompile a corpus of real inputs causes, and why.

    \b
    Typical use:
      guardscope analyze samples/gnn/corpus --out out/   # catalog.json, report.html, trace/
      guardscope emit-warmup out/                        # warmup.py, unbacked.py, export_dims.py
      guardscope bundle out/ --device cuda               # compile-cache bundles: fast set-up
      guardscope precompile out/ --device cuda           # the warmup compiled ahead of time: ready in seconds
      guardscope verify out/                             # proves each fix on the corpus
      guardscope bench out/                              # serving latency of each fix (GPU)
      guardscope report out/                             # re-renders report.html
      guardscope diff before/ after/                     # what changed between two analyses
      guardscope whatif out/ --transform cast:x:float32  # what an input transform would save
      guardscope convert corpus/ traffic/                # a corpus as Parquet traffic logs
      guardscope merge traffic/ --out fleet/             # many replicas' traffic as one compact corpus
    """


for command in (analysis.analyze, analysis.report, fixes.emit_warmup, fixes.bundle, fixes.precompile, proof.verify, exploring.probe,
                exploring.whatif, compare.diff, proof.fidelity, proof.bench, corpora.convert,
                corpora.merge):
    main.add_command(command)
