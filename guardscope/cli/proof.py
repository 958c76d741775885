"""The commands that check the fixes and the analysis against production: ``verify`` (each fix
proved on the corpus), ``bench`` (what each way of serving costs) and ``fidelity`` (the analysis
redone with the production backend and device)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .. import store
from ..plans import NAMES, SHAPES_SPEC, STRATEGIES
from ..terminal import format_bundle_setup, format_precompiled_setup, format_replicas, reason_lines
from .common import (
    analysis_dir,
    artifact_option,
    backend_option,
    corpus_option,
    device_option,
    exit_code_option,
    friendly_errors,
    mode_option,
    timeout_option,
)


@click.command()
@analysis_dir
@artifact_option((*NAMES, SHAPES_SPEC, "canonical"),
                 help="Verify only these artifacts (repeatable). Default: what you would deploy, the warmup and "
                 "its peers, the plans that compile no more graphs at set-up (unbacked, unbacked.py's shapes_spec "
                 "form of torch 2.13) or that bench recommends, the export, and canonicalise.py (canonical) when "
                 "emit-warmup --transform wrote it; --all adds the rest.")
@click.option("--holdout", type=float, default=None,
              help="Replay only the last FRACTION of the corpus (e.g. 0.3), to test on samples the plan did not see first.")
@timeout_option(3600.0, help="Seconds allowed per artifact.")
@click.option("--no-bundle", is_flag=True,
              help="Do not measure the set-up of compile-cache bundles (two more fresh processes per bundled plan).")
@corpus_option()
@click.option("--backend", type=click.Choice(["eager", "aot_eager", "inductor"]), default=None,
              help="Compile the plans with this backend; default production's (recorded by the traffic recorder's "
                   "wrap(), else inductor, torch.compile's default). A proof holds for the backend it ran with.")
@click.option("--all", "everything", is_flag=True,
              help="Also prove the plans that compile more graphs at set-up than the warmup (often the shapes_spec "
                   "form: 140 graphs where the warmup compiles 4), which the default reports as skipped.")
@friendly_errors
def verify(out_dir: str, artifacts: tuple[str, ...], holdout: float | None, timeout: float, no_bundle: bool,
           corpus: str | None, backend: str | None, everything: bool) -> None:
    """Prove the fixes in DIR on the corpus, each in a fresh subprocess.

    By default it proves what you would deploy: the warmup and the plans that compile no more graphs
    at set-up than it (or that bench recommends), the export and canonicalise.py; a plan that
    compiles more graphs (often the shapes_spec form) is reported skipped, saying so, unless --all
    or --artifact asks for it.

    Each artifact is applied as its docstring says (warmup; configure + mark + warmup; export;
    shapes_spec: configure + torch.compile(dynamic_shapes=), shapes_spec= on torch 2.13, + warmup(spec=True)),
    then the corpus is replayed with every compile counted as a failure. Writes
    DIR/verification.json and refreshes DIR/report.html. The verdict is PASSED, PARTIAL (nothing
    failed, but a fix serves only part of the corpus: an export with topologies outside its Dims)
    or FAILED; exits with status 1 when it is FAILED (an artifact failed or crashed, or none
    passed). A plan with a compile-cache bundle (guardscope bundle) also gets its set-up
    measured with and without the bundle, each in a fresh process with empty cache folders.

    \b
    Example:
      guardscope verify out/
      guardscope verify out/ --artifact warmup --holdout 0.3
      guardscope verify out/ --backend eager      # quicker; proves the guards, not inductor's strides
      guardscope verify out/ --all                # every plan, also those that compile more graphs
    """
    from .. import pipeline

    document = pipeline.verify(out_dir, artifacts=artifacts or None, holdout=holdout, timeout=timeout,
                               progress=lambda name: click.echo(f"verifying {name}...", err=True),
                               bundle=not no_bundle, corpus=corpus, backend=backend, everything=everything)
    for result in document["artifacts"]:
        line = f"{result['name']:<9} {result['status'].upper():<8}"
        if result["setup_graphs"] is not None:
            line += f" set-up {result['setup_graphs']} graphs in {result['setup_seconds']:.1f} s"
        if result["replay_recompiles"] is not None:
            line += f"; replay of {result['samples_replayed']} samples: {result['replay_recompiles']} recompiles"
            if result["recompile_samples"]:
                line += f" at {result['recompile_samples']}"
            if result.get("raised_as_recorded"):
                line += f" ({result['raised_as_recorded']} raised in the model, as recorded)"
        if result["topologies"]:
            passed = sum(t["passed"] for t in result["topologies"])
            line += f"; {passed}/{len(result['topologies'])} topologies run"
            if result.get("topology_samples"):
                line += (f", {result['served_samples']}/{result['topology_samples']} samples served "
                         f"({result['served_samples'] / result['topology_samples']:.0%})")
        click.echo(line)
        if result["reason"]:
            click.echo(reason_lines(result["reason"], store.VERIFICATION))
        if result.get("bundle"):
            click.echo(f"          {format_bundle_setup(result['bundle'])}")
        if result.get("precompiled"):
            click.echo(f"          {format_precompiled_setup(result['precompiled'])}")
        if result.get("replicas"):
            click.echo(f"          {format_replicas(result['replicas'])}")
        said = []
        if result.get("keyword") and result["setup_graphs"] is not None:  # the spec form: the keyword it compiled with
            said.append(f"compiled with torch.compile({result['keyword']}=unbacked.shapes_spec())")
        if result.get("same_as_unbacked"):
            said.append("the same verdict as the mark_unbacked module")
        if said:
            click.echo(f"          {'; '.join(said)}")
        if result.get("outputs"):
            outputs = result["outputs"]
            differing = [f"T{t['topology']}" for t in outputs["topologies"] if not t["equal"]]
            click.echo("          outputs " + ("equal" if outputs["equal"] else "CHANGED on " + ", ".join(differing))
                       + (f" (max diff {outputs['max_diff']:.3g})" if outputs["max_diff"] is not None else ""))
    statuses = ", ".join(f"{r['name']} {r['status']}" for r in document["artifacts"])
    click.echo(f"verdict     {document['verdict'].upper()} under {document['backend']} ({document['backend_source']}): "
               f"{statuses} ({Path(out_dir) / store.VERIFICATION})")
    for warning in document["warnings"]:
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    if document["verdict"] == "failed":
        sys.exit(1)


@click.command()
@analysis_dir
@device_option("cuda", help="Where to serve. Needs a GPU unless you pass --device cpu (CPU serving; slow, for testing).")
@corpus_option(help="Replay this corpus instead of the analysed one (the same requests on another machine).")
@click.option("--strategy", "strategies", multiple=True,
              type=click.Choice(STRATEGIES),
              help="Measure only these strategies (repeatable); default all five.")
@backend_option("inductor", help="torch.compile backend of the compiled strategies (export always uses AOTInductor).")
@click.option("--repeat", type=int, default=1, show_default=True, help="Replay the corpus this many times per strategy.")
@click.option("--paired", type=int, default=1, show_default=True,
              help="Passes in which each request also runs eagerly, back to back, in the strategy's own "
                   "process: the paired speedup the target is judged on (0: off, judge the eager process's mean).")
@timeout_option(1200.0, help="Seconds allowed per strategy.")
@click.option("--min-speedup", type=float, default=1.25, show_default=True, help="Target: steady speedup over eager.")
@click.option("--max-setup", type=float, default=70.0, show_default=True, help="Target: set-up seconds.")
@click.option("--max-worst-ratio", type=float, default=3.0, show_default=True,
              help="Target: worst request during the replay, as a multiple of eager's worst.")
@friendly_errors
def bench(out_dir: str, device: str, corpus: str | None, strategies: tuple[str, ...], backend: str, repeat: int,
          paired: int, timeout: float, min_speedup: float, max_setup: float, max_worst_ratio: float) -> None:
    """Measure what each way of serving costs: eager, plain torch.compile, and guardscope's fixes.

    For each strategy (eager; plain compile; the warmup; the mark_unbacked plan; torch.export +
    AOTInductor with an eager fallback outside the bounds), in a fresh process with empty
    inductor and triton caches: set-up time, graphs compiled, recompiles during the replay of the
    corpus and their latency, steady mean / p50 / p99 / max latency, the worst request and the
    speedup over eager: against the eager process, and paired (eager and the strategy on the same
    requests in the strategy's process, free of the drift between processes). Recommends the plan
    that meets the targets. Writes DIR/bench.json and refreshes DIR/report.html. Run
    'guardscope emit-warmup DIR' first.

    \b
    Examples:
      guardscope bench out/                                  # on a CUDA machine
      guardscope bench out/ --corpus /data/corpus --timeout 300
      guardscope bench out/ --repeat 3 --paired 2             # more requests, tighter figures
      guardscope bench out/ --device cpu --strategy eager --strategy warmup
    """
    from .. import pipeline
    from ..proving.bench_results import Criteria, format_table

    document = pipeline.bench(
        out_dir, device=device, corpus=corpus, strategies=strategies or None, backend=backend,
        repeat=repeat, paired=paired, timeout=timeout, progress=lambda name: click.echo(f"measuring {name}...", err=True),
        criteria=Criteria(min_speedup=min_speedup, max_setup_seconds=max_setup, max_worst_ratio=max_worst_ratio),
    )
    where = document["device_name"] or document["device"]
    click.echo(f"device      {where}, torch {document['torch_version']}, backend {document['compile']['backend']}; "
               f"{document['corpus']['samples']} samples x {document['repeat']}")
    click.echo(format_table(document))
    click.echo(f"wrote       {Path(out_dir) / store.BENCH}, {Path(out_dir) / store.REPORT}")


@click.command()
@analysis_dir
@backend_option("inductor", help="The production backend to check the analysis against.")
@device_option("cuda", help="The production device (cuda, cuda:1, cpu...): cuda by default, since the check is "
               "against what serving really runs (analyze defaults to the CPU, where guards are the same).")
@mode_option(help="torch.compile mode for the check (e.g. max-autotune); default the manifest's.")
@timeout_option(3600.0, help="Seconds allowed for the re-analysis.")
@exit_code_option(help="Exit with status 1 when the two analyses differ in production (not for wording alone).")
@corpus_option()
@friendly_errors
def fidelity(out_dir: str, backend: str, device: str, mode: str | None, timeout: float, exit_code: bool,
             corpus: str | None) -> None:
    """Check the analysis in DIR against one made with the production backend and device.

    guardscope analyses with the eager backend because Dynamo's guards, and so the recompiles
    and topologies, do not depend on the backend. This re-analyses the same corpus with BACKEND
    on DEVICE in a child process (a crash is reported, not fatal), into DIR/fidelity/, and
    compares the two catalogs on what production feels: which samples compile, in which frame,
    failing which guards against which graph, and which samples share a graph. The verdict is
    IDENTICAL, SAME IN PRODUCTION (wording differs: a guard only one backend adds, listed apart)
    or DIFFERENT; it is printed, written to DIR/fidelity.json and shown in DIR/report.html.

    \b
    Example (on the GPU machine):
      guardscope analyze corpus/ --out out/
      guardscope fidelity out/                   # inductor on cuda
      guardscope fidelity out/ --device cpu      # inductor on the CPU
    """
    from .. import pipeline
    from ..catalog.diff import VERDICT_TITLES

    document = pipeline.fidelity(
        out_dir, backend=backend, device=device, mode=mode, timeout=timeout, corpus=corpus,
        started=lambda: click.echo(f"re-analysing with {backend} on {device} (compiles every graph for real)...",
                                   err=True))
    for line in document["summary"]:
        click.echo(line)
    for item in document["wording_only"]:
        click.echo(f"wording     only {item['label']}: {item['text']} ({', '.join(item['where'])})")
    click.echo(f"fidelity    {VERDICT_TITLES[document['verdict']]}: "
               f"{document['labels'][0]} vs {document['labels'][1]} (DIR/fidelity.json, report.html)")
    if exit_code and not document["same_in_production"]:
        sys.exit(1)
