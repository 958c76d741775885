"""The commands that make and re-render an analysis: ``analyze`` (a corpus replayed and catalogued,
checkpointed, resumable after Ctrl-C or SIGTERM, in a child process when asked) and ``report``."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import click

from .. import checkpoint, store
from ..model import GRAD_MODES
from ..terminal import ReplayProgress, format_summary
from ..text import error_line, torch_log_lines
from .common import analysis_dir, backend_option, device_option, friendly_errors, mode_option


def _parse_marks(values: tuple[str, ...], option: str = "--mark-unbacked") -> tuple[tuple[str, int], ...]:
    from ..options import parse_mark

    marks = []
    for value in values:
        try:
            marks.append(parse_mark(value))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=option) from None
    return tuple(marks)


def _paddable_dims(values: tuple[str, ...]) -> tuple[str, ...] | None:
    from ..catalog.buckets import dim_name

    if not values:
        return None
    return tuple(dim_name(path, dim) for path, dim in _parse_marks(values, "--paddable"))


_TRISTATE = {"true": True, "false": False, "auto": None}


def _terminate(signum: int, frame: Any) -> None:
    # SIGTERM takes the same path as Ctrl-C: unwind, keep the last checkpoint, say how to resume.
    raise KeyboardInterrupt


@click.command()
@click.argument("corpora", nargs=-1, required=True, metavar="CORPUS...", type=click.Path(file_okay=False, path_type=str))
@click.option("--out", "out_dir", default="guardscope-out", show_default=True,
              type=click.Path(file_okay=False), help="Folder for catalog.json, timings.json and trace/.")
@click.option("--model", default=None,
              help="Model spec overriding the manifest's: 'pkg.mod:attr' or 'path/file.py:attr' (a relative path "
              "from the corpus folder, else the working directory; the file's folder is put on the import path, "
              "as 'python path/file.py' would, so it imports the modules beside it).")
@backend_option("eager", help="Analysis backend. Guards come from Dynamo, so 'eager' finds the same recompiles far "
                "faster; 'inductor' measures real compile times.")
@device_option("cpu", help="Device to replay on (cpu, cuda, cuda:1...). The CPU by default: Dynamo's guards, and so "
               "the catalog, do not depend on the device, and any machine has one (bench and fidelity default to "
               "cuda: they measure the production device).")
@click.option("--dynamic", type=click.Choice(["true", "false", "auto"]), default=None,
              help="Override the manifest's torch.compile(dynamic=...); 'auto' is dynamic=None.")
@click.option("--fullgraph/--no-fullgraph", default=None, help="Override the manifest's fullgraph.")
@mode_option(help="Override the manifest's torch.compile mode (inductor only).")
@click.option("--grad-mode", type=click.Choice(list(GRAD_MODES)), default=None,
              help="Autograd's mode around each call, as production serves it (Dynamo guards on it): for a corpus "
                   "that does not record it (the traffic recorders do); default: the recorded one, else inference_mode.")
@click.option("--no-duck-shape", is_flag=True, help="Replay with duck sizing off (use_duck_shape=False).")
@click.option("--mark-unbacked", "marks", multiple=True, metavar="ARG:DIM",
              help="mark_unbacked this argument dimension before the call; repeatable (e.g. x:0).")
@click.option("--mark-samples", type=click.Choice(["all", "first"]), default="all", show_default=True,
              help="Apply --mark-unbacked to every sample or only the first (the seed article's Option 3).")
@click.option("--recompile-limit", type=int, default=4096, show_default=True,
              help="Dynamo recompile limit during the replay (raised so every topology is seen; production's own "
                   "limit, recorded or torch's default, is modelled in catalog.json's 'production').")
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
@click.option("--split-by", type=click.Choice(["model"]), default=None,
              help="Replicas recorded differently (model, weights, compile options, Dynamo settings, grad mode, "
              "torch version): analyse each group alike on its own, into OUT/group-1, OUT/group-2, ...")
@click.option("--engine", type=click.Choice(["embedded", "dask"]), default="embedded", show_default=True,
              help="Where a traffic log's shards are read and decoded: this process, or a Dask cluster "
              "(pip install 'guardscope[fleet]'); the replay stays here and the catalog is the same.")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="With --engine dask: a running scheduler (tcp://host:8786; default: $DASK_SCHEDULER_ADDRESS, "
              "else a LocalCluster of one worker process per core).")
@click.option("--isolate/--no-isolate", default=None,
              help="Replay in a child process, so a crash (a segfault in a compiler backend) is reported "
              "instead of killing guardscope; default: on for --backend inductor.")
@click.option("--replica-compiles/--no-replica-compiles", default=None,
              help="A fleet: replay each replica's calls alone to count the graphs its own process compiles, its "
                   "first call's included (about one more replay of the calls); default: for fleets of at most "
                   "16 replicas.")
@click.option("--accept-errors", is_flag=True,
              help="Exit 0 even when some samples raised in the model (they are listed in the catalog either way).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@friendly_errors
def analyze(corpora: tuple[str, ...], out_dir: str, model: str | None, backend: str, device: str, dynamic: str | None,
            fullgraph: bool | None, mode: str | None, grad_mode: str | None, no_duck_shape: bool, marks: tuple[str, ...],
            mark_samples: str, recompile_limit: int, replay_mode: str, paddable: tuple[str, ...],
            shapes_per_graph: int, strict: bool, force: bool, resume: bool, checkpoint_every: float,
            skip_bad_shards: bool, split_by: str | None, engine: str, scheduler: str | None, isolate: bool | None,
            replica_compiles: bool | None, accept_errors: bool, quiet: bool) -> None:
    """Replay CORPUS through torch.compile and catalog every recompile.

    Writes OUT/catalog.json (compiles, classified guard failures, topologies, per-dimension
    facts), OUT/timings.json and the raw structured trace OUT/trace/ (open it with tlparse).

    Several replicas' traffic logs (several CORPUS folders, a folder of them, or a quoted glob)
    are analysed as one fleet: merged in fleet order (first-seen time, then replica name; see
    docs/fleet.md) into OUT/fleet-corpus, and the catalog counts each topology's calls per replica.

    \b
    Examples:
      guardscope analyze samples/gnn/corpus --out out/
      guardscope analyze corpus/ --out out/ --backend inductor --device cuda
      guardscope analyze corpus/ --out out/ --no-duck-shape --mark-unbacked x:0 --mark-samples first
      guardscope analyze corpus/ --out out/ --resume     # after an interruption
      guardscope analyze traffic/replica-*/ --out out/   # a fleet: its replicas' traffic as one
      guardscope analyze traffic/ --out out/ --engine dask --scheduler tcp://10.0.0.5:8786
      guardscope analyze traffic/ --out out/ --split-by model   # replicas of two model versions
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
    from .. import pipeline
    from ..corpus.reader import load_corpus

    if split_by is not None:
        _analyze_groups(corpora, out_dir, backend, isolate)
        return
    corpus = str(pipeline.corpus_to_replay(corpora, out_dir, force=force, resume=resume,
                                           skip_bad_shards=skip_bad_shards, notice=click.echo))
    total = len(load_corpus(corpus))
    if isolate or (isolate is None and backend == "inductor"):
        _analyze_in_child(out_dir, corpus)
        return
    overrides = _replay_overrides(backend, device, dynamic, fullgraph, mode, grad_mode, recompile_limit, mark_samples,
                                  no_duck_shape, marks)
    analysis = _replay_and_summarize(corpus, out_dir, total, quiet, model=model, strict=strict, force=force,
                                     resume=resume, skip_bad_shards=skip_bad_shards,
                                     checkpoint_every=checkpoint_every, replay_mode=replay_mode,
                                     paddable=_paddable_dims(paddable), shapes_per_graph=shapes_per_graph,
                                     engine=engine, scheduler=scheduler, replica_compiles=replica_compiles,
                                     **overrides)
    _exit_on_failed_samples(analysis, accept_errors)


def _analyze_groups(corpora: tuple[str, ...], out_dir: str, backend: str, isolate: bool | None) -> None:
    """--split-by: each group of replicas recorded alike analysed on its own into OUT/NAME (all in
    one child when isolated); a group that fails does not stop the next ones, an interrupt does."""
    from .. import pipeline

    if isolate or (isolate is None and backend == "inductor"):
        _analyze_in_child(out_dir, ", ".join(corpora))  # every group in one child
        return
    groups = pipeline.fleet_groups(corpora)
    options = {name: value for name, value in click.get_current_context().params.items()
               if name not in ("corpora", "out_dir", "split_by")}
    failed: list[tuple[str, int]] = []
    for number, (name, paths, differing) in enumerate(groups):
        shown = "; ".join(f"{what} {value}" for what, value in differing.items()) or "recorded alike"
        click.echo(f"{'' if not number else chr(10)}group       {name}: {len(paths)} "
                   f"replica{'' if len(paths) == 1 else 's'} ({shown}) -> {Path(out_dir) / name}")
        try:  # a group that fails (bad input, samples that raised) does not stop the next ones
            analyze.callback(corpora=tuple(paths), out_dir=str(Path(out_dir) / name), split_by=None,
                             **{**options, "isolate": False})
        except SystemExit as exit_:
            if exit_.code == 130:  # interrupted: the later groups are not started
                raise
            if exit_.code:
                failed.append((name, int(exit_.code) if isinstance(exit_.code, int) else 2))
    if failed:
        click.secho(f"error: {len(failed)} of {len(groups)} groups did not analyse cleanly: "
                    + ", ".join(f"{name} (exit {code})" for name, code in failed), fg="red", err=True)
        sys.exit(max(code for _, code in failed))


def _replay_overrides(backend: str, device: str, dynamic: str | None, fullgraph: bool | None, mode: str | None,
                      grad_mode: str | None, recompile_limit: int, mark_samples: str, no_duck_shape: bool,
                      marks: tuple[str, ...]) -> dict[str, Any]:
    """The options given on the command line, as :class:`ReplayOptions` overrides of the manifest's."""
    overrides = {
        "backend": backend,
        "device": device,
        "dynamic": _TRISTATE[dynamic] if dynamic is not None else None,
        "fullgraph": fullgraph,
        "mode": mode,
        "grad_mode": grad_mode,
        "recompile_limit": recompile_limit,
        "mark_samples": mark_samples,
    }
    if no_duck_shape:
        overrides["duck_shape"] = False
    if marks:
        overrides["mark_unbacked"] = _parse_marks(marks)
    if "dynamic" in overrides and overrides["dynamic"] is None and dynamic == "auto":
        overrides.pop("dynamic")
    return overrides


def _replay_and_summarize(corpus: str, out_dir: str, total: int, quiet: bool, **analyze_args: Any) -> Any:
    """Run the analysis with a progress line and SIGTERM handled, then print its warnings, summary
    and torch's log causes; an interrupt says what was kept and exits 130."""
    from .. import pipeline

    progress = ReplayProgress(total, stream=sys.stderr, quiet=quiet)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        analysis = pipeline.analyze(corpus, out_dir, progress=progress, notice=progress.note, **analyze_args)
        progress.close()
        for warning in analysis.warnings:
            click.secho(f"warning: {warning}", fg="yellow", err=True)
        click.echo(format_summary(analysis))
        for line in torch_log_lines(analysis.torch_log, analysis.torch_log_file, "the corpus was replayed"):
            click.secho(f"torch       {line}", fg="yellow")
    except KeyboardInterrupt:
        progress.close()
        click.secho(f"interrupted: {_kept(out_dir, corpus)}", fg="yellow", err=True)
        sys.exit(130)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return analysis


def _exit_on_failed_samples(analysis: Any, accept_errors: bool) -> None:
    """Exit 1 when samples raised in the model, unless --accept-errors."""
    failed = analysis.catalog.failed_samples
    if failed and not accept_errors:
        rest = ("no sample could be catalogued" if len(failed) == analysis.catalog.samples
                else "every other sample is catalogued")
        click.secho(f"error: {len(failed)} of {analysis.catalog.samples} samples raised in the model "
                    f"(first, sample {failed[0].index}: {error_line(failed[0].error)}); {rest}. Fix the model or "
                    "the corpus, or pass --accept-errors.", fg="red", err=True)
        sys.exit(1)


@click.command()
@analysis_dir
@friendly_errors
def report(out_dir: str) -> None:
    """Re-render DIR/report.html from the analysis files in DIR.

    Reads DIR/catalog.json and, when present, timings.json, fixes.json (from emit-warmup) and
    verification.json (from verify); replays nothing. The page is self-contained: open it in a
    browser or attach it to a code review.

    \b
    Example:
      guardscope report out/
    """
    from ..report.page import write_report

    click.echo(f"wrote       {write_report(out_dir)}")


def _kept(out_dir: str, corpus: str) -> str:
    """What an interrupted analysis left to resume, as the checkpoint says (never an offer of a
    resume that has nothing to continue from)."""
    done = checkpoint.checkpoint_progress(out_dir)
    if not done and (Path(out_dir) / store.CATALOG).is_file():
        return (f"the analysis had been written ({Path(out_dir) / store.CATALOG}); re-render its report with "
                f"'guardscope report {out_dir}' if {store.REPORT} is missing")
    if not done:
        return "no sample had finished, nothing is kept; run the same command again"
    return (f"the first {done} samples are kept in {out_dir}; continue with "
            f"'guardscope analyze {corpus} --out {out_dir} --resume'")


def _analyze_in_child(out_dir: str, corpus: str) -> None:
    """Run this same command with --no-isolate in a child; report its death by a signal."""
    from ..proving.isolation import run_foreground, signal_name

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
