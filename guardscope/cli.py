"""The ``guardscope`` command line: each command parses options, calls one library function,
prints a summary. A :class:`GuardscopeError` becomes a one-paragraph message and exit status 2.
"""

from __future__ import annotations

import functools
import signal
import sys
from pathlib import Path
from typing import Any, Callable

import click

from . import store
from .errors import GuardscopeError
from .model import GUARD_TEXT, IGNORABLE
from .options import BACKENDS
from .plans import BUNDLED, NAMES, STRATEGIES
from .terminal import (  # noqa: F401  (format_cudagraphs, format_summary: used by tests and bench)
    ReplayProgress,
    format_advice,
    format_bundle_setup,
    format_cudagraphs,
    format_summary,
    format_whatif,
)
from .text import first_line, torch_log_lines


def _friendly_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except GuardscopeError as exc:
            click.secho(f"error: {exc}", fg="red", err=True)
            sys.exit(2)

    return wrapper


def _parse_marks(values: tuple[str, ...], option: str = "--mark-unbacked") -> tuple[tuple[str, int], ...]:
    from .options import parse_mark

    marks = []
    for value in values:
        try:
            marks.append(parse_mark(value))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=option) from None
    return tuple(marks)


def _paddable_dims(values: tuple[str, ...]) -> tuple[str, ...] | None:
    from .catalog.buckets import dim_name

    if not values:
        return None
    return tuple(dim_name(path, dim) for path, dim in _parse_marks(values, "--paddable"))


_TRISTATE = {"true": True, "false": False, "auto": None}


def _corpus_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--corpus DIR``, for every command that reads the analysed corpus."""
    return click.option(
        "--corpus", "corpus", default=None, type=click.Path(file_okay=False, path_type=str),
        help="The analysed corpus, when it is no longer where the analysis found it (the folder was "
             "copied or moved without it). By default: the path catalog.json records relative to DIR, "
             "then the absolute one in DIR/locations.json.")(command)


def _terminate(signum: int, frame: Any) -> None:
    # SIGTERM takes the same path as Ctrl-C: unwind, keep the last checkpoint, say how to resume.
    raise KeyboardInterrupt


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="guardscope")
def main() -> None:
    """guardscope: find every torch.compile recompile a corpus of real inputs causes, and why.

    \b
    Typical use:
      guardscope analyze samples/gnn/corpus --out out/   # catalog.json, report.html, trace/
      guardscope emit-warmup out/                        # warmup.py, unbacked.py, export_dims.py
      guardscope bundle out/ --device cuda               # compile-cache bundles: fast set-up
      guardscope verify out/                             # proves each fix on the corpus
      guardscope bench out/                              # serving latency of each fix (GPU)
      guardscope report out/                             # re-renders report.html
      guardscope diff before/ after/                     # what changed between two analyses
      guardscope whatif out/ --transform cast:x:float32  # what an input transform would save
    """


@main.command()
@click.argument("corpus", type=click.Path(file_okay=False, path_type=str))
@click.option("--out", "out_dir", default="guardscope-out", show_default=True,
              type=click.Path(file_okay=False), help="Folder for catalog.json, timings.json and trace/.")
@click.option("--model", default=None,
              help="Model spec overriding the manifest's: 'pkg.mod:attr' or 'path/file.py:attr' (a relative path "
              "from the corpus folder, else the working directory; the file's folder is put on the import path, "
              "as 'python path/file.py' would, so it imports the modules beside it).")
@click.option("--backend", type=click.Choice(BACKENDS), default="eager",
              show_default=True, help="Analysis backend. Guards come from Dynamo, so 'eager' finds the same recompiles far faster; 'inductor' measures real compile times.")
@click.option("--device", default="cpu", show_default=True,
              help="Device to replay on (cpu, cuda, cuda:1...). The CPU by default: Dynamo's guards, and so the "
              "catalog, do not depend on the device, and any machine has one (bench and fidelity default to "
              "cuda: they measure the production device).")
@click.option("--dynamic", type=click.Choice(["true", "false", "auto"]), default=None,
              help="Override the manifest's torch.compile(dynamic=...); 'auto' is dynamic=None.")
@click.option("--fullgraph/--no-fullgraph", default=None, help="Override the manifest's fullgraph.")
@click.option("--mode", default=None, help="Override the manifest's torch.compile mode (inductor only).")
@click.option("--no-duck-shape", is_flag=True, help="Replay with duck sizing off (use_duck_shape=False).")
@click.option("--mark-unbacked", "marks", multiple=True, metavar="ARG:DIM",
              help="mark_unbacked this argument dimension before the call; repeatable (e.g. x:0).")
@click.option("--mark-samples", type=click.Choice(["all", "first"]), default="all", show_default=True,
              help="Apply --mark-unbacked to every sample or only the first (the seed article's Option 3).")
@click.option("--recompile-limit", type=int, default=4096, show_default=True,
              help="Dynamo recompile limit during the replay (raised so every topology is seen).")
@click.option("--replay", "replay_mode", type=click.Choice(["auto", "guards", "full"]), default="auto",
              show_default=True, help="'guards' skips the forward of samples an existing graph's guards accept "
              "(they cannot recompile; needs fullgraph); 'full' runs every sample; 'auto' = guards when sound.")
@click.option("--paddable", "paddable", multiple=True, metavar="ARG:DIM",
              help="With a CUDA-graph mode (--mode reduce-overhead): a dim your model can pad (the padded "
              "part masked out), for the padding-bucket advice; repeatable. Default: every dynamic dim, flagged unconfirmed.")
@click.option("--shapes-per-graph", type=int, default=8, show_default=True,
              help="With a CUDA-graph mode: the most distinct shapes (CUDA graphs recorded) one compiled graph may "
              "have after padding; 8 is torch's own warning threshold.")
@click.option("--strict", is_flag=True, help="Fail when any guard failure is unclassified or a trace record unreadable.")
@click.option("--force", is_flag=True, help="Overwrite an existing analysis in --out.")
@click.option("--resume", is_flag=True, help="Continue an interrupted analysis in --out (same corpus and options).")
@click.option("--checkpoint-every", type=float, default=10.0, show_default=True, metavar="SECONDS",
              help="Save progress this often, and when interrupted (0: after every sample).")
@click.option("--skip-bad-shards", is_flag=True,
              help="Analyse the rest when a shard is corrupt; the catalog and report list what was skipped.")
@click.option("--isolate/--no-isolate", default=None,
              help="Replay in a child process, so a crash (a segfault in a compiler backend) is reported "
              "instead of killing guardscope; default: on for --backend inductor.")
@click.option("--accept-errors", is_flag=True,
              help="Exit 0 even when some samples raised in the model (they are listed in the catalog either way).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@_friendly_errors
def analyze(corpus: str, out_dir: str, model: str | None, backend: str, device: str, dynamic: str | None,
            fullgraph: bool | None, mode: str | None, no_duck_shape: bool, marks: tuple[str, ...],
            mark_samples: str, recompile_limit: int, replay_mode: str, paddable: tuple[str, ...],
            shapes_per_graph: int, strict: bool, force: bool, resume: bool, checkpoint_every: float,
            skip_bad_shards: bool, isolate: bool | None, accept_errors: bool, quiet: bool) -> None:
    """Replay CORPUS through torch.compile and catalog every recompile.

    Writes OUT/catalog.json (compiles, classified guard failures, topologies, per-dimension
    facts), OUT/timings.json and the raw structured trace OUT/trace/ (open it with tlparse).

    \b
    Examples:
      guardscope analyze samples/gnn/corpus --out out/
      guardscope analyze corpus/ --out out/ --backend inductor --device cuda
      guardscope analyze corpus/ --out out/ --no-duck-shape --mark-unbacked x:0 --mark-samples first
      guardscope analyze corpus/ --out out/ --resume     # after an interruption
      guardscope analyze corpus/ --out out/ --backend inductor --device cuda --mode reduce-overhead \\
          --paddable local_edge_index:1 --paddable cross_edge_index:1   # CUDA graph recordings, padding buckets

    The analysis checkpoints every --checkpoint-every seconds and when interrupted: after Ctrl-C,
    SIGTERM or a kill the finished samples are kept, and --resume continues with the same result
    as an uninterrupted run.

    \b
    Exit status: 0 analysed; 1 analysed, but some samples raised in the model (listed in the
    catalog; --accept-errors makes it 0); 2 bad input (a message says what to fix); 3 the replay
    crashed (a compiler backend died); 130 interrupted.
    """
    from . import pipeline
    from .corpus.reader import load_corpus

    total = len(load_corpus(corpus))
    if isolate or (isolate is None and backend == "inductor"):
        _analyze_in_child(out_dir, corpus)
        return
    overrides = {
        "backend": backend,
        "device": device,
        "dynamic": _TRISTATE[dynamic] if dynamic is not None else None,
        "fullgraph": fullgraph,
        "mode": mode,
        "recompile_limit": recompile_limit,
        "mark_samples": mark_samples,
    }
    if no_duck_shape:
        overrides["duck_shape"] = False
    if marks:
        overrides["mark_unbacked"] = _parse_marks(marks)
    if "dynamic" in overrides and overrides["dynamic"] is None and dynamic == "auto":
        overrides.pop("dynamic")
    progress = ReplayProgress(total, stream=sys.stderr, quiet=quiet)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        analysis = pipeline.analyze(corpus, out_dir, model=model, strict=strict, force=force,
                                    resume=resume, skip_bad_shards=skip_bad_shards,
                                    checkpoint_every=checkpoint_every,
                                    progress=progress, replay_mode=replay_mode,
                                    paddable=_paddable_dims(paddable), shapes_per_graph=shapes_per_graph,
                                    **overrides)
        progress.close()
        for warning in analysis.warnings:
            click.secho(f"warning: {warning}", fg="yellow", err=True)
        click.echo(format_summary(analysis))
    except KeyboardInterrupt:
        progress.close()
        click.secho(f"interrupted: {_kept(out_dir, corpus)}", fg="yellow", err=True)
        sys.exit(130)
    finally:
        signal.signal(signal.SIGTERM, previous)
    failed = analysis.catalog.failed_samples
    if failed and not accept_errors:
        click.secho(f"error: {len(failed)} of {analysis.catalog.samples} samples raised in the model "
                    f"(first, sample {failed[0].index}: {first_line(failed[0].error)}); every other sample "
                    "is catalogued. Fix the model or the corpus, or pass --accept-errors.", fg="red", err=True)
        sys.exit(1)


@main.command()
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=str))
@_friendly_errors
def report(out_dir: str) -> None:
    """Re-render DIR/report.html from the analysis files in DIR.

    Reads DIR/catalog.json and, when present, timings.json, fixes.json (from emit-warmup) and
    verification.json (from verify); replays nothing. The page is self-contained: open it in a
    browser or attach it to a code review.

    \b
    Example:
      guardscope report out/
    """
    from .report.page import write_report

    click.echo(f"wrote       {write_report(out_dir)}")


@main.command("emit-warmup")
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=str))
@click.option("--margin", type=float, default=0.0, show_default=True,
              help="Headroom on torch.export Dim maxima, as a fraction (0.25 = 25%).")
@click.option("--include-probed", is_flag=True,
              help="Also cover the new topologies 'guardscope probe DIR' found (DIR/probe/corpus).")
@click.option("--bundle", "make_bundles", is_flag=True,
              help="Then compile both plans with the production backend and save their compile-cache "
              "bundles (as 'guardscope bundle DIR' with its defaults).")
@click.option("--transform", "transforms", multiple=True, metavar="SPEC",
              help="Instead of the three fixes: write DIR/canonicalise.py, applying these input transforms "
              "(repeatable, in order; the forms of 'guardscope whatif'), and DIR/canonical_warmup/, the warmup "
              "for the transformed inputs.")
@_corpus_option
@_friendly_errors
def emit_warmup(out_dir: str, margin: float, include_probed: bool, make_bundles: bool, transforms: tuple[str, ...],
                corpus: str | None) -> None:
    """Write the fixes for the analysis in DIR: a warmup set, a mark_unbacked plan, export Dims.

    Reads DIR/catalog.json and the corpus it names; writes DIR/warmup/ + DIR/warmup.py,
    DIR/unbacked_warmup/ + DIR/unbacked.py, DIR/export_dims.py and DIR/fixes.json, then refreshes
    DIR/report.html. What torch logs while the plans are tried (its tracebacks) goes to
    DIR/emit-warmup.log, one line per cause to the terminal. Prove the fixes with 'guardscope
    verify DIR' before trusting them.

    \b
    Example:
      guardscope analyze samples/gnn/corpus --out out/
      guardscope emit-warmup out/
      guardscope verify out/
      guardscope probe out/ && guardscope emit-warmup out/ --include-probed
      guardscope emit-warmup out/ --bundle     # plus compile-cache bundles, on the production machine
      guardscope emit-warmup out/ --transform cast:images:float32 --transform contiguous:images
    """
    from . import pipeline

    if transforms and (make_bundles or include_probed or margin):
        raise click.UsageError("--transform writes canonicalise.py alone: run it without --bundle, --include-probed "
                               "and --margin")
    if transforms:
        plan, files = pipeline.emit_canonical(
            out_dir, transforms, corpus=corpus,
            progress=lambda chain: click.echo(f"replaying the corpus transformed by {chain}...", err=True))
        click.echo(f"canonical   {plan.topologies} topologies become {plan.canonical_topologies}; warmup "
                   f"{len(plan.warmup)} transformed samples {list(plan.warmup)} compile {plan.graphs} graphs")
        if plan.raised:
            click.secho(f"            {len(plan.raised)} sample(s) raise once transformed, first {plan.raised[0]}",
                        fg="yellow")
        click.echo("wrote       " + ", ".join(str(p) for p in files))
        return

    click.echo("planning the warmup (compiles each topology's representative once)...", err=True)
    fixes = pipeline.emit_warmup(out_dir, margin=margin, include_probed=include_probed, corpus=corpus)
    warmup, unbacked = fixes.warmup, fixes.unbacked
    click.echo(f"warmup      {len(warmup.steps)} samples {[s.sample for s in warmup.steps]} compile "
               f"{warmup.graphs} graphs for {warmup.topologies} topologies "
               f"(one per topology: {warmup.one_per_topology})")
    if unbacked.status == "ok":
        click.echo(f"unbacked    {len(unbacked.dims)} dims "
                   f"{[f'{d.argument}:{d.axis}' for d in unbacked.dims]}, duck sizing "
                   f"{'on' if unbacked.duck_shape else 'off'}; residual warmup {list(unbacked.residual)} "
                   f"({unbacked.graphs} graphs" + (f" in {unbacked.frames} frames" if unbacked.frames > 1 else "") + ")")
        for added in unbacked.added_breaks:
            click.secho(f"            the marks add a graph break: {added}", fg="yellow")
    else:
        click.secho(f"unbacked    NOT POSSIBLE on this model, unbacked.py not written: {first_line(unbacked.reason)} "
                    "(the whole reason is in fixes.json and the report)", fg="yellow")
    for dim, why in unbacked.skipped:
        click.echo(f"            not marked {dim}: {why}")
    export = fixes.export
    if export.feasible:
        click.echo(f"export      {sum(d.kind == 'dim' for d in export.dims)} Dims: "
                   + ", ".join(d.describe() for d in export.dims)
                   + (f"; outside them: {', '.join(f'T{o.topology}' for o in export.outside)} "
                      f"({sum(o.samples for o in export.outside)} samples, see fixes.json)" if export.outside else ""))
    else:
        click.secho(f"export      NOT POSSIBLE on this model, export_dims.py not written: {first_line(export.reason)} "
                    "(torch's whole message is in fixes.json and the report)", fg="yellow")
    for line in torch_log_lines(fixes.torch_log, fixes.torch_log_file, "emit-warmup tried its plans"):
        click.secho(f"torch       {line}", fg="yellow")
    click.echo("wrote       " + ", ".join(str(p) for p in fixes.files))
    if make_bundles:
        _echo_bundles(out_dir, pipeline.bundle(out_dir, progress=_bundle_progress, corpus=corpus))


def _bundle_progress(name: str) -> None:
    click.echo(f"bundling {name} (compiles the plan in a fresh process with empty caches)...", err=True)


def _echo_bundles(out_dir: str, manifests: list[dict]) -> None:
    for manifest in manifests:
        compile_options = manifest["compile"]
        click.echo(f"bundle      {manifest['artifact']}: {manifest['graphs']} graphs compiled in "
                   f"{manifest['compile_seconds']:.1f} s ({compile_options['backend']} on "
                   f"{manifest['device_name']}, torch {manifest['torch_version']}); "
                   f"{manifest['bytes'] / 1e6:.1f} MB -> {Path(out_dir) / manifest['file']}")


@main.command()
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=str))
@click.option("--artifact", "artifacts", multiple=True, type=click.Choice(BUNDLED),
              help="Bundle only this plan (repeatable); default both.")
@click.option("--backend", type=click.Choice(BACKENDS), default=None,
              help="Production backend; default the corpus manifest's compile.backend, else inductor.")
@click.option("--device", default=None,
              help="Device to compile on (cpu, cuda, cuda:1...); default the analysis's device.")
@click.option("--timeout", type=float, default=3600.0, show_default=True, help="Seconds allowed per plan.")
@_corpus_option
@_friendly_errors
def bundle(out_dir: str, artifacts: tuple[str, ...], backend: str | None, device: str | None,
           timeout: float, corpus: str | None) -> None:
    """Save a compile-cache bundle beside each plan, so set-up takes seconds instead of minutes.

    Compiles the plan (warmup.py, unbacked.py) with the production backend on DEVICE in a fresh
    process with empty cache folders, runs its warmup, and saves torch's compile-cache artifacts
    to DIR/<plan>.compile-cache.bin with a manifest DIR/<plan>.compile-cache.json (torch version,
    device name, backend and settings, plan hash). The generated module loads the bundle when it
    matches and warns why when it does not. Run it on a machine of the production kind; then
    'guardscope verify DIR' measures set-up with and without it.

    \b
    Example:
      guardscope emit-warmup out/
      guardscope bundle out/ --device cuda
      guardscope verify out/
    """
    from . import pipeline

    manifests = pipeline.bundle(out_dir, artifacts=artifacts or None, backend=backend, device=device,
                                timeout=timeout, progress=_bundle_progress, corpus=corpus)
    _echo_bundles(out_dir, manifests)


@main.command()
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=str))
@click.option("--artifact", "artifacts", multiple=True, type=click.Choice((*NAMES, "canonical")),
              help="Verify only these artifacts (repeatable); default all three, and canonicalise.py "
              "(canonical) when emit-warmup --transform wrote it.")
@click.option("--holdout", type=float, default=None,
              help="Replay only the last FRACTION of the corpus (e.g. 0.3), to test on samples the plan did not see first.")
@click.option("--timeout", type=float, default=3600.0, show_default=True, help="Seconds allowed per artifact.")
@click.option("--no-bundle", is_flag=True,
              help="Do not measure the set-up of compile-cache bundles (two more fresh processes per bundled plan).")
@_corpus_option
@_friendly_errors
def verify(out_dir: str, artifacts: tuple[str, ...], holdout: float | None, timeout: float, no_bundle: bool,
           corpus: str | None) -> None:
    """Prove the fixes in DIR on the corpus, each in a fresh subprocess.

    Each artifact is applied as its docstring says (warmup; configure + mark + warmup; export),
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
    """
    from . import pipeline

    document = pipeline.verify(out_dir, artifacts=artifacts or None, holdout=holdout, timeout=timeout,
                               progress=lambda name: click.echo(f"verifying {name}...", err=True),
                               bundle=not no_bundle, corpus=corpus)
    for result in document["artifacts"]:
        line = f"{result['name']:<9} {result['status'].upper():<8}"
        if result["setup_graphs"] is not None:
            line += f" set-up {result['setup_graphs']} graphs in {result['setup_seconds']:.1f} s"
        if result["replay_recompiles"] is not None:
            line += f"; replay of {result['samples_replayed']} samples: {result['replay_recompiles']} recompiles"
            if result["recompile_samples"]:
                line += f" at {result['recompile_samples']}"
        if result["topologies"]:
            passed = sum(t["passed"] for t in result["topologies"])
            line += f"; {passed}/{len(result['topologies'])} topologies run"
            if result.get("topology_samples"):
                line += (f", {result['served_samples']}/{result['topology_samples']} samples served "
                         f"({result['served_samples'] / result['topology_samples']:.0%})")
        click.echo(line)
        if result["reason"]:
            more = "" if "\n" not in result["reason"].strip() else f" (the whole reason is in {store.VERIFICATION})"
            click.echo(f"          {first_line(result['reason'])}{more}")
        if result.get("bundle"):
            click.echo(f"          {format_bundle_setup(result['bundle'])}")
        if result.get("outputs"):
            outputs = result["outputs"]
            differing = [f"T{t['topology']}" for t in outputs["topologies"] if not t["equal"]]
            click.echo("          outputs " + ("equal" if outputs["equal"] else "CHANGED on " + ", ".join(differing))
                       + (f" (max diff {outputs['max_diff']:.3g})" if outputs["max_diff"] is not None else ""))
    statuses = ", ".join(f"{r['name']} {r['status']}" for r in document["artifacts"])
    click.echo(f"verdict     {document['verdict'].upper()}: {statuses} ({Path(out_dir) / store.VERIFICATION})")
    for warning in document["warnings"]:
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    if document["verdict"] == "failed":
        sys.exit(1)


@main.command()
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=str))
@click.option("--values", default="0,1,2", show_default=True, metavar="N,N,...",
              help="Sizes each dynamic dimension is set to (Dynamo specialises on 0 and 1).")
@click.option("--pairwise", type=click.Choice(["general", "all", "none"]), default="general", show_default=True,
              help="Edit pairs of dimensions together on the most common topology's sample (general), on every topology's sample (all), or not at all.")
@click.option("--max-candidates", type=int, default=5000, show_default=True,
              help="Check at most this many synthetic samples (the rest are counted as truncated).")
@click.option("--break-relations", is_flag=True,
              help="Also edit dims the corpus always shows equal (a mask's rows and x's) apart; such inputs often raise in the model.")
@_corpus_option
@_friendly_errors
def probe(out_dir: str, values: str, pairwise: str, max_candidates: int, break_relations: bool,
          corpus: str | None) -> None:
    """Look for topologies the corpus has not shown yet, with synthetic inputs.

    From each topology's representative sample, builds edited copies at the boundaries Dynamo
    specialises on: each dynamic dimension (with the dims always equal to it) at 0, 1 and 2,
    pairs of dimensions at those sizes, pairs made equal, and the dtypes and memory layouts the
    corpus shows for an input. Dims always equal in the corpus stay equal unless
    --break-relations. Index tensors are kept in range; an edit that would index into an
    empty dimension is dropped. Each synthetic sample is checked against the analysis' compiled
    graphs (no forward when one accepts it); those no graph accepts are compiled, and each new
    graph is a topology the corpus never showed.

    Writes DIR/probe/probe.json (what was explored and found) and DIR/probe/corpus/ (one sample
    per new topology), and adds a Probe section to DIR/report.html. Cover the new topologies with
    'guardscope emit-warmup DIR --include-probed'; 'guardscope verify DIR' then replays them too.

    \b
    Example:
      guardscope analyze samples/gnn/corpus --out out/
      guardscope probe out/
      guardscope emit-warmup out/ --include-probed && guardscope verify out/
    """
    from . import pipeline
    from .fixes.probe import raised_words

    try:
        sizes = tuple(int(v) for v in values.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"{values!r} is not a comma-separated list of sizes", param_hint="--values")
    click.echo("probing (rebuilds the analysis' graphs, then checks each synthetic sample)...", err=True)
    result = pipeline.probe(out_dir, values=sizes, pairwise=pairwise, max_candidates=max_candidates,
                            break_relations=break_relations, corpus=corpus)
    document = result.document
    explored = document["explored"]
    click.echo(f"explored    {explored['planned']} edits on {explored['bases']} topology samples "
               f"({', '.join(f'{k} {v}' for k, v in explored['planned_by_kind'].items())})"
               + (f", {explored['truncated']} over --max-candidates" if explored["truncated"] else ""))
    click.echo(f"checked     {explored['checked']} distinct synthetic samples: {explored['accepted']} accepted "
               f"by a compiled graph, {explored['new_graph']} needed a new one; {explored['invalid']} invalid, "
               f"{explored['duplicates']} duplicates, {raised_words(explored)}")
    found = document["new_topologies"]
    click.echo(f"new         {len(found)} topologies the corpus never showed")
    for topology in found[:20]:
        click.echo(f"  {topology['id']:<5} {topology['found_by']}")
    if len(found) > 20:
        click.echo(f"  ... {len(found) - 20} more in {store.PROBE}")
    for warning in document["warnings"]:
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    wrote = [str(Path(out_dir) / store.PROBE)]
    if result.corpus_dir is not None:
        wrote.append(str(result.corpus_dir))
    click.echo("wrote       " + ", ".join(wrote))


@main.command()
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=str))
@click.option("--transform", "transforms", multiple=True, metavar="SPEC",
              help="An input transform; repeatable, chained in the order given: cast:PATH:DTYPE[:scale], "
              "contiguous:PATH, channels_last:PATH, pad:PATH:DIMS:multiple=N|buckets=A,B,...[:value=V]"
              "[:side=right|left][:with=MASK], fn:FILE.py:NAME. Without it: the chain the catalog suggests.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Also write the document (DIR/whatif.json) to this path.")
@_corpus_option
@_friendly_errors
def whatif(out_dir: str, transforms: tuple[str, ...], json_path: str | None, corpus: str | None) -> None:
    """Measure what canonicalising the inputs would save, and whether it changes the answers.

    For each --transform alone, then for the chain of them in the order given, replays the
    analysed corpus with every sample transformed (the analysis's compile options) and prints
    the graphs and frames compiled, the compile seconds, the padding's cost in % of input
    elements, and whether the model's outputs change: each topology's first sample runs eagerly
    as recorded and transformed, an output cut back on each dim where it differs from the
    recorded one by a padding (logits, a KV cache), and the largest difference is shown. A row
    whose outputs differ changes the results. Writes DIR/whatif.json.

    Arguments are named as for --mark-unbacked (images, input_ids, xs[0]); DIMS is 1 or 2,3.
    'cast:images:float32:scale' divides uint8 by 255; 'pad:input_ids:1:multiple=64:with=attention_mask'
    pads the mask with 0 too; 'pad:images:0:buckets=1,2,4,8' buckets the batch; 'fn:canon.py:canonicalise'
    calls canonicalise(args, kwargs), which returns (args, kwargs).

    Without --transform, the catalog's failure kinds choose the chain: dtype mismatches a cast to
    the argument's most common dtype, stride mismatches contiguous, size specializations a padding
    where one can keep the answers (a dim with a mask, the batch); the advice says in words which
    transforms apply and which do not (an edge list cannot be padded without a mask). The report's
    "Fixes at the input" section shows the table.

    \b
    Example:
      guardscope analyze corpus/ --out out/
      guardscope whatif out/ --transform cast:images:float32:scale --transform contiguous:images \\
          --transform pad:images:2,3:multiple=32
      guardscope whatif out/ --transform pad:input_ids:1:multiple=64:with=attention_mask
      guardscope whatif out/                      # the chain the catalog suggests
    """
    from . import pipeline

    def progress(label: str) -> None:
        click.echo(f"replaying the corpus: {label}...", err=True)

    document = pipeline.whatif(out_dir, transforms, json_path=json_path, progress=progress, corpus=corpus)
    if document["suggested"]:
        click.echo("\n".join(f"advice      {line}" for line in format_advice(document)))
        if not document["rows"]:
            click.echo("advice      the catalog suggests no input transform; give --transform SPEC to measure one")
    if document["rows"]:
        click.echo("\n".join(format_whatif(document)))
    click.echo("wrote       " + ", ".join([str(Path(out_dir) / store.WHATIF), *([json_path] if json_path else []),
                                           str(Path(out_dir) / store.REPORT)]))


@main.command()
@click.argument("old", type=click.Path(path_type=str))
@click.argument("new", type=click.Path(path_type=str))
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Also write the diff as a self-contained HTML page to this path.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Also write the diff as JSON to this path (every entry, nothing cut).")
@click.option("--ignore", "ignore", multiple=True, metavar="FIELD",
              type=click.Choice(["guard-text", *IGNORABLE]),
              help="Leave this guard-failure field out of the comparison; repeatable. 'guard-text' = "
              "guard and raw, whose printing differs between backends and torch versions.")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True,
              help="Entries shown per list in the terminal (0: all).")
@click.option("--exit-code", is_flag=True,
              help="Exit with status 1 when the analyses differ (like 'git diff --exit-code'); with "
              "--ignore guard-text, wording alone (facts or guard texts only one side has) does not count.")
@_friendly_errors
def diff(old: str, new: str, html_path: str | None, json_path: str | None, ignore: tuple[str, ...],
         limit: int, exit_code: bool) -> None:
    """Show what changed between two analyses: OLD (the baseline) and NEW.

    Each is an analysis folder (from 'guardscope analyze CORPUS --out DIR') or its catalog.json.
    Lists compiles added, removed or failing other guards, failure counts by kind, topologies
    new, vanished or changed (matched by their members, then facts, then graphs, not their
    ids), samples that moved between topologies, and dimension changes. A topology with the same
    members and graphs but other facts is 'reworded': a wording difference, not a production
    one. Context (torch version, backend, compile options) is shown but does not make the
    analyses differ. Nothing is replayed.

    \b
    Examples:
      guardscope diff before/ after/                          # e.g. before and after a torch upgrade
      guardscope diff eager/catalog.json inductor/ --ignore guard-text
      guardscope diff before/ after/ --html diff.html --json diff.json
      guardscope diff before/ after/ --exit-code > /dev/null  # in CI: status 1 when they differ
    """
    from . import pipeline

    fields = tuple(sorted({f for name in ignore for f in (GUARD_TEXT if name == "guard-text" else (name,))}))
    result = pipeline.diff_analyses(old, new, ignore=fields, html=html_path, json_path=json_path)
    click.echo("\n".join(result.summary_lines(limit=limit)))
    written = [p for p in (html_path, json_path) if p]
    if written:
        click.echo(f"wrote       {', '.join(written)}")
    if exit_code and result.differs:
        sys.exit(1)


@main.command()
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=str))
@click.option("--backend", type=click.Choice(BACKENDS), default="inductor", show_default=True,
              help="The production backend to check the analysis against.")
@click.option("--device", default="cuda", show_default=True,
              help="The production device (cuda, cuda:1, cpu...): cuda by default, since the check is against "
              "what serving really runs (analyze defaults to the CPU, where guards are the same).")
@click.option("--mode", default=None, help="torch.compile mode for the check (e.g. max-autotune); default the manifest's.")
@click.option("--timeout", type=float, default=3600.0, show_default=True, help="Seconds allowed for the re-analysis.")
@click.option("--exit-code", is_flag=True,
              help="Exit with status 1 when the two analyses differ in production (not for wording alone).")
@_corpus_option
@_friendly_errors
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
    from . import pipeline
    from .catalog.diff import VERDICT_TITLES

    click.echo(f"re-analysing with {backend} on {device} (compiles every graph for real)...", err=True)
    document = pipeline.fidelity(out_dir, backend=backend, device=device, mode=mode, timeout=timeout, corpus=corpus)
    for line in document["summary"]:
        click.echo(line)
    for item in document["wording_only"]:
        click.echo(f"wording     only {item['label']}: {item['text']} ({', '.join(item['where'])})")
    click.echo(f"fidelity    {VERDICT_TITLES[document['verdict']]}: "
               f"{document['labels'][0]} vs {document['labels'][1]} (DIR/fidelity.json, report.html)")
    if exit_code and not document["same_in_production"]:
        sys.exit(1)


@main.command()
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=str))
@click.option("--device", default="cuda", show_default=True,
              help="Where to serve. Needs a GPU unless you pass --device cpu (CPU serving; slow, for testing).")
@click.option("--corpus", default=None, type=click.Path(file_okay=False, path_type=str),
              help="Replay this corpus instead of the analysed one (the same requests on another machine).")
@click.option("--strategy", "strategies", multiple=True,
              type=click.Choice(STRATEGIES),
              help="Measure only these strategies (repeatable); default all five.")
@click.option("--backend", type=click.Choice(BACKENDS), default="inductor",
              show_default=True, help="torch.compile backend of the compiled strategies (export always uses AOTInductor).")
@click.option("--repeat", type=int, default=1, show_default=True, help="Replay the corpus this many times per strategy.")
@click.option("--paired", type=int, default=1, show_default=True,
              help="Passes in which each request also runs eagerly, back to back, in the strategy's own "
                   "process: the paired speedup the target is judged on (0: off, judge the eager process's mean).")
@click.option("--timeout", type=float, default=1200.0, show_default=True, help="Seconds allowed per strategy.")
@click.option("--min-speedup", type=float, default=1.25, show_default=True, help="Target: steady speedup over eager.")
@click.option("--max-setup", type=float, default=70.0, show_default=True, help="Target: set-up seconds.")
@click.option("--max-worst-ratio", type=float, default=3.0, show_default=True,
              help="Target: worst request during the replay, as a multiple of eager's worst.")
@_friendly_errors
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
    from . import pipeline
    from .proving.bench_results import Criteria, format_table

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


def _kept(out_dir: str, corpus: str) -> str:
    """What an interrupted analysis left to resume, as the checkpoint says (never an offer of a
    resume that has nothing to continue from)."""
    done = store.checkpoint_progress(out_dir)
    if not done and (Path(out_dir) / store.CATALOG).is_file():
        return (f"the analysis had been written ({Path(out_dir) / store.CATALOG}); re-render its report with "
                f"'guardscope report {out_dir}' if {store.REPORT} is missing")
    if not done:
        return "no sample had finished, nothing is kept; run the same command again"
    return (f"the first {done} samples are kept in {out_dir}; continue with "
            f"'guardscope analyze {corpus} --out {out_dir} --resume'")


def _analyze_in_child(out_dir: str, corpus: str) -> None:
    """Run this same command with --no-isolate in a child; report its death by a signal."""
    from .proving.isolation import run_foreground, signal_name

    arguments = [a for a in sys.argv[1:] if a not in ("--isolate",)] + ["--no-isolate"]
    returncode = run_foreground([sys.executable, "-m", "guardscope.cli", *arguments])
    if returncode > 0:
        sys.exit(returncode)
    if returncode == 0:
        return
    name = signal_name(returncode)
    click.secho(f"error: the replay crashed ({name}) while compiling or running the model; {_kept(out_dir, corpus)}. "
                "Try --backend eager (the guards, and so the catalog, are the same) to analyse anyway.",
                fg="red", err=True)
    sys.exit(3)


if __name__ == "__main__":  # pragma: no cover
    main()
