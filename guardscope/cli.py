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

from .errors import GuardscopeError


def _friendly_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except GuardscopeError as exc:
            click.secho(f"error: {exc}", fg="red", err=True)
            sys.exit(2)

    return wrapper


def _parse_marks(values: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    marks = []
    for value in values:
        path, _, dim = value.rpartition(":")
        if not path or not dim.lstrip("-").isdigit():
            raise click.BadParameter(f"{value!r} is not ARG:DIM (e.g. x:0)", param_hint="--mark-unbacked")
        marks.append((path, int(dim)))
    return tuple(marks)


_TRISTATE = {"true": True, "false": False, "auto": None}


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
      guardscope report out/                             # re-renders report.html
    """


@main.command()
@click.argument("corpus", type=click.Path(file_okay=False, path_type=str))
@click.option("--out", "out_dir", default="guardscope-out", show_default=True,
              type=click.Path(file_okay=False), help="Folder for catalog.json, timings.json and trace/.")
@click.option("--model", default=None, help="Model spec overriding the manifest's: 'pkg.mod:attr' or 'path/file.py:attr'.")
@click.option("--backend", type=click.Choice(["eager", "aot_eager", "inductor"]), default="eager",
              show_default=True, help="Analysis backend. Guards come from Dynamo, so 'eager' finds the same recompiles far faster; 'inductor' measures real compile times.")
@click.option("--device", default="cpu", show_default=True, help="Device to replay on (cpu, cuda, cuda:1...).")
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
@click.option("--strict", is_flag=True, help="Fail when any guard failure is unclassified or a trace record unreadable.")
@click.option("--force", is_flag=True, help="Overwrite an existing analysis in --out.")
@click.option("--resume", is_flag=True, help="Continue an interrupted analysis in --out (same corpus and options).")
@click.option("--checkpoint-every", type=float, default=10.0, show_default=True, metavar="SECONDS",
              help="Checkpoint progress after a finished shard at most this often (0: after every shard).")
@click.option("--skip-bad-shards", is_flag=True,
              help="Analyse the rest when a shard is corrupt; the catalog and report list what was skipped.")
@click.option("--isolate/--no-isolate", default=None,
              help="Replay in a child process, so a crash (a segfault in a compiler backend) is reported "
              "instead of killing guardscope; default: on for --backend inductor.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@_friendly_errors
def analyze(corpus: str, out_dir: str, model: str | None, backend: str, device: str, dynamic: str | None,
            fullgraph: bool | None, mode: str | None, no_duck_shape: bool, marks: tuple[str, ...],
            mark_samples: str, recompile_limit: int, replay_mode: str, strict: bool, force: bool,
            resume: bool, checkpoint_every: float, skip_bad_shards: bool, isolate: bool | None,
            quiet: bool) -> None:
    """Replay CORPUS through torch.compile and catalog every recompile.

    Writes OUT/catalog.json (compiles, classified guard failures, topologies, per-dimension
    facts), OUT/timings.json and the raw structured trace OUT/trace/ (open it with tlparse).

    \b
    Examples:
      guardscope analyze samples/gnn/corpus --out out/
      guardscope analyze corpus/ --out out/ --backend inductor --device cuda
      guardscope analyze corpus/ --out out/ --no-duck-shape --mark-unbacked x:0 --mark-samples first
      guardscope analyze corpus/ --out out/ --resume     # after an interruption

    The analysis checkpoints after every shard: on Ctrl-C, SIGTERM or a kill the finished shards
    are kept, and --resume continues with the same result as an uninterrupted run.
    """
    from . import pipeline
    from .corpus import load_corpus

    total = len(load_corpus(corpus))
    if isolate or (isolate is None and backend == "inductor"):
        _analyze_in_child(out_dir)
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
    with click.progressbar(length=total, label="replaying", file=sys.stderr,
                           hidden=quiet or not sys.stderr.isatty()) as bar:
        last = [0]

        def progress(done: int) -> None:
            bar.update(done - last[0])
            last[0] = done

        previous = signal.signal(signal.SIGTERM, _terminate)
        try:
            analysis = pipeline.analyze(corpus, out_dir, model=model, strict=strict, force=force,
                                        resume=resume, skip_bad_shards=skip_bad_shards,
                                        checkpoint_every=checkpoint_every,
                                        progress=progress, replay_mode=replay_mode, **overrides)
        except KeyboardInterrupt:
            click.secho(f"\ninterrupted: finished shards are kept in {out_dir}; continue with "
                        f"'guardscope analyze {corpus} --out {out_dir} --resume'", fg="yellow", err=True)
            sys.exit(130)
        finally:
            signal.signal(signal.SIGTERM, previous)
    for warning in analysis.warnings:
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    click.echo(format_summary(analysis))


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
    from .report import write_report

    click.echo(f"wrote       {write_report(out_dir)}")


@main.command("emit-warmup")
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=str))
@click.option("--margin", type=float, default=0.0, show_default=True,
              help="Headroom on torch.export Dim maxima, as a fraction (0.25 = 25%).")
@click.option("--bundle", "make_bundles", is_flag=True,
              help="Then compile both plans with the production backend and save their compile-cache "
              "bundles (as 'guardscope bundle DIR' with its defaults).")
@_friendly_errors
def emit_warmup(out_dir: str, margin: float, make_bundles: bool) -> None:
    """Write the fixes for the analysis in DIR: a warmup set, a mark_unbacked plan, export Dims.

    Reads DIR/catalog.json and the corpus it names; writes DIR/warmup/ + DIR/warmup.py,
    DIR/unbacked_warmup/ + DIR/unbacked.py, DIR/export_dims.py and DIR/fixes.json, then refreshes
    DIR/report.html. Prove them with 'guardscope verify DIR' before trusting them.

    \b
    Example:
      guardscope analyze samples/gnn/corpus --out out/
      guardscope emit-warmup out/
      guardscope verify out/
      guardscope emit-warmup out/ --bundle     # plus compile-cache bundles, on the production machine
    """
    from . import pipeline

    click.echo("planning the warmup (compiles each topology's representative once)...", err=True)
    fixes = pipeline.emit_warmup(out_dir, margin=margin)
    warmup, unbacked = fixes.warmup, fixes.unbacked
    click.echo(f"warmup      {len(warmup.steps)} samples {[s.sample for s in warmup.steps]} compile "
               f"{warmup.graphs} graphs for {warmup.topologies} topologies "
               f"(one per topology: {warmup.one_per_topology})")
    click.echo(f"unbacked    {len(unbacked.dims)} dims "
               f"{[f'{d.argument}:{d.axis}' for d in unbacked.dims]}, duck sizing "
               f"{'on' if unbacked.duck_shape else 'off'}; residual warmup {list(unbacked.residual)} "
               f"({unbacked.graphs} graphs)")
    click.echo(f"export      {len(fixes.export.dims)} Dims: "
               + ", ".join(f"{d.name}[{d.min}..{d.max}]" for d in fixes.export.dims))
    click.echo("wrote       " + ", ".join(str(p) for p in fixes.files))
    if make_bundles:
        _echo_bundles(out_dir, pipeline.bundle(out_dir, progress=_bundle_progress))


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
@click.option("--artifact", "artifacts", multiple=True, type=click.Choice(["warmup", "unbacked"]),
              help="Bundle only this plan (repeatable); default both.")
@click.option("--backend", type=click.Choice(["eager", "aot_eager", "inductor"]), default=None,
              help="Production backend; default the corpus manifest's compile.backend, else inductor.")
@click.option("--device", default=None,
              help="Device to compile on (cpu, cuda, cuda:1...); default the analysis's device.")
@click.option("--timeout", type=float, default=3600.0, show_default=True, help="Seconds allowed per plan.")
@_friendly_errors
def bundle(out_dir: str, artifacts: tuple[str, ...], backend: str | None, device: str | None,
           timeout: float) -> None:
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
                                timeout=timeout, progress=_bundle_progress)
    _echo_bundles(out_dir, manifests)


@main.command()
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=str))
@click.option("--artifact", "artifacts", multiple=True, type=click.Choice(["warmup", "unbacked", "export"]),
              help="Verify only these artifacts (repeatable); default all three.")
@click.option("--holdout", type=float, default=None,
              help="Replay only the last FRACTION of the corpus (e.g. 0.3), to test on samples the plan did not see first.")
@click.option("--timeout", type=float, default=3600.0, show_default=True, help="Seconds allowed per artifact.")
@click.option("--no-bundle", is_flag=True,
              help="Do not measure the set-up of compile-cache bundles (two more fresh processes per bundled plan).")
@_friendly_errors
def verify(out_dir: str, artifacts: tuple[str, ...], holdout: float | None, timeout: float, no_bundle: bool) -> None:
    """Prove the fixes in DIR on the corpus, each in a fresh subprocess.

    Each artifact is applied as its docstring says (warmup; configure + mark + warmup; export),
    then the corpus is replayed with every compile counted as a failure. Writes
    DIR/verification.json and refreshes DIR/report.html. Exits with status 1 when any artifact
    fails or crashes. A plan with a compile-cache bundle (guardscope bundle) also gets its set-up
    measured with and without the bundle, each in a fresh process with empty cache folders.

    \b
    Example:
      guardscope verify out/
      guardscope verify out/ --artifact warmup --holdout 0.3
    """
    from . import pipeline

    document = pipeline.verify(out_dir, artifacts=artifacts or None, holdout=holdout, timeout=timeout,
                               progress=lambda name: click.echo(f"verifying {name}...", err=True),
                               bundle=not no_bundle)
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
        click.echo(line)
        if result["reason"]:
            click.echo(f"          {result['reason']}")
        if result.get("bundle"):
            click.echo(f"          {format_bundle_setup(result['bundle'])}")
    click.echo(f"verdict     {'PASSED' if document['passed'] else 'FAILED'} (DIR/verification.json)")
    if not document["passed"]:
        sys.exit(1)


def _analyze_in_child(out_dir: str) -> None:
    """Run this same command with --no-isolate in a child; report its death by a signal."""
    import subprocess

    from .output import CHECKPOINT

    arguments = [a for a in sys.argv[1:] if a not in ("--isolate",)] + ["--no-isolate"]
    completed = subprocess.run([sys.executable, "-m", "guardscope.cli", *arguments])
    if completed.returncode > 0:
        sys.exit(completed.returncode)
    if completed.returncode == 0:
        return
    try:
        name = signal.Signals(-completed.returncode).name
    except ValueError:
        name = f"signal {-completed.returncode}"
    checkpoint = Path(out_dir) / CHECKPOINT
    kept = ""
    if checkpoint.is_file():
        import json

        done = json.loads(checkpoint.read_text()).get("next_shard", 0)
        kept = f"; {done} finished shard(s) are kept: rerun with --resume to continue after them"
    click.secho(f"error: the replay crashed ({name}) while compiling or running the model{kept}. "
                "Try --backend eager (the guards, and so the catalog, are the same) to analyse anyway.",
                fg="red", err=True)
    sys.exit(3)


def format_bundle_setup(measured: dict) -> str:
    """One line on a plan's compile-cache bundle from its verification result."""
    line = f"bundle {measured['status'].upper()}"
    without, with_ = measured.get("without") or {}, measured.get("with") or {}
    if without.get("setup_seconds") is not None and with_.get("setup_seconds") is not None:
        cache = with_.get("cache") or {}
        line += (f": set-up {with_['setup_seconds']:.1f} s with {measured['file']} vs {without['setup_seconds']:.1f} s "
                 f"without ({measured['backend']}, {measured['device']}; fresh processes, empty caches; "
                 f"{cache.get('fxgraph_hits', 0)} graphs from the cache, {cache.get('fxgraph_misses', 0)} compiled)")
    if measured.get("reason"):
        line += f"; {measured['reason']}"
    return line


def format_summary(analysis: Any) -> str:
    catalog = analysis.catalog
    data = catalog.to_json()["summary"]
    lines = [
        f"corpus      {catalog.corpus_path} ({catalog.samples} samples), model {catalog.model}",
        f"compile     backend={catalog.compile['backend']} dynamic={catalog.compile['dynamic']} "
        f"fullgraph={catalog.compile['fullgraph']} device={catalog.compile['device']} "
        f"torch {catalog.torch_version}",
        f"compiles    {data['compiles']} at samples {data['compile_samples']}",
        f"recompiles  {data['recompiles']} at samples {data['recompile_samples']}",
    ]
    if data["failures_by_kind"]:
        kinds = ", ".join(f"{k} {v}" for k, v in data["failures_by_kind"].items())
        lines.append(f"failures    {kinds}")
    timed = [c for c in catalog.compiles if c.event.seconds is not None]
    if timed:
        slowest = max(timed, key=lambda c: c.event.seconds)
        total = sum(c.event.seconds for c in timed)
        lines.append(
            f"compile time {total:.2f} s in all; slowest {slowest.event.seconds:.2f} s "
            f"(compile {slowest.event.compile_id}, sample {slowest.event.sample})"
        )
    lines.append(f"topologies  {data['topologies']}")
    for topology in catalog.topologies:
        facts = "; ".join(topology.facts[:4]) + (" ..." if len(topology.facts) > 4 else "")
        lines.append(
            f"  T{topology.id:<3} {topology.count:>6} samples, first {topology.first_sample:<6} "
            f"graph {topology.compile_id}: {facts}"
        )
    if catalog.failed_samples:
        lines.append(f"failed      {len(catalog.failed_samples)} samples raised (see catalog.json)")
    if catalog.not_analysed:
        lines.append(f"not analysed {len(catalog.not_analysed)} samples ran without a compiled graph "
                     f"(recompile limit reached), first {list(catalog.not_analysed[:10])}")
    if catalog.skipped_shards:
        lines.append(f"skipped     {len(catalog.skipped_shards)} corrupt shards: "
                     + ", ".join(s['file'] for s in catalog.skipped_shards))
    if catalog.unparsed:
        lines.append(f"unparsed    {dict(sorted(catalog.unparsed.items()))}")
    lines.append(f"replay      {analysis.replay_seconds:.1f} s ({catalog.replay_mode} replay; "
                 f"Dynamo's recompile limit raised to {catalog.compile.get('recompile_limit')} for it)")
    lines.append(f"wrote       {analysis.catalog_path}, {analysis.timings_path}, "
                 f"{analysis.out_dir / 'report.html'}, {analysis.trace_path}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    main()
