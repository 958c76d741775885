"""The commands that write the fixes: ``emit-warmup`` (the warmup set, the mark_unbacked plan, the
export Dims, or with ``--transform`` the input canonicalisation), ``bundle`` (their compile-cache
bundles) and ``precompile`` (the warmup's graphs compiled ahead of time)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..plans import BUNDLED, EXPORT, PLANNABLE, SHAPES_SPEC, UNBACKED
from ..terminal import format_probed
from ..text import counted, first_line, torch_log_lines
from .common import (
    analysis_dir,
    artifact_option,
    backend_option,
    corpus_option,
    device_option,
    friendly_errors,
    timeout_option,
    transform_option,
)


@click.command("emit-warmup")
@analysis_dir
@click.option("--margin", type=float, default=0.0, show_default=True,
              help="Headroom on torch.export Dim maxima, as a fraction (0.25 = 25%).")
@click.option("--include-probed", is_flag=True,
              help="Also cover the new topologies 'guardscope probe DIR' found (DIR/probe/corpus); the output lists "
                   "each one and the warmup's samples and graphs with and without them.")
@click.option("--exclude-probed-size", "exclude_probed_sizes", type=click.IntRange(min=0), multiple=True,
              metavar="N",
              help="With --include-probed: leave out the probed topologies found by setting a dimension to N "
                   "(repeatable; 0: empty batches and length-0 sequences, which production may never send).")
@click.option("--only", "only", type=click.Choice(PLANNABLE), multiple=True,
              help="Plan only these (repeatable); the warmup always. fixes.json says the others were not planned. "
                   "'--only warmup' alone takes the warmup from the analysis's compiles (each topology's first "
                   "sample, in corpus order) and compiles nothing: seconds, where all the plans take minutes.")
@click.option("--bundle", "make_bundles", is_flag=True,
              help="Then compile both plans with the production backend and save their compile-cache "
              "bundles (as 'guardscope bundle DIR' with its defaults).")
@transform_option(help="Instead of the three fixes: write DIR/canonicalise.py, applying these input transforms "
                  "(repeatable, in order; the forms of 'guardscope whatif'), and DIR/canonical_warmup/, the warmup "
                  "for the transformed inputs.")
@corpus_option()
@friendly_errors
def emit_warmup(out_dir: str, margin: float, include_probed: bool, exclude_probed_sizes: tuple[int, ...],
                only: tuple[str, ...], make_bundles: bool, transforms: tuple[str, ...], corpus: str | None) -> None:
    """Write the fixes for the analysis in DIR: a warmup set, a mark_unbacked plan, export Dims.

    Reads DIR/catalog.json and the corpus it names; writes DIR/warmup/ + DIR/warmup.py,
    DIR/unbacked_warmup/ + DIR/unbacked.py, DIR/export_dims.py and DIR/fixes.json, then refreshes
    DIR/report.html. The warmup is planned first; each plan's start and end (and the warmup's
    topologies) are printed to stderr as it goes, and a plan that compiles more graphs than the
    warmup says so ("costs N graphs, the warmup M"). What torch logs while the plans are tried (its tracebacks) goes to
    DIR/emit-warmup.log, one line per cause to the terminal. Prove the fixes with 'guardscope
    verify DIR' before trusting them.

    \b
    Example:
      guardscope analyze samples/gnn/corpus --out out/
      guardscope emit-warmup out/
      guardscope verify out/
      guardscope emit-warmup out/ --only warmup      # the warmup alone, in seconds
      guardscope emit-warmup out/ --only unbacked    # the warmup and the mark_unbacked plan
      guardscope probe out/ && guardscope emit-warmup out/ --include-probed
      guardscope emit-warmup out/ --include-probed --exclude-probed-size 0   # never an empty batch
      guardscope emit-warmup out/ --bundle     # plus compile-cache bundles, on the production machine
      guardscope emit-warmup out/ --transform cast:images:float32 --transform contiguous:images
    """
    from .. import pipeline

    if transforms and (make_bundles or include_probed or exclude_probed_sizes or margin or only):
        raise click.UsageError("--transform writes canonicalise.py alone: run it without --bundle, --include-probed, "
                               "--only and --margin")
    if transforms:
        plan, files = pipeline.emit_canonical(
            out_dir, transforms, corpus=corpus,
            progress=lambda chain: click.echo(f"replaying the corpus transformed by {chain}...", err=True))
        _echo_canonical(plan, files)
        return

    fixes = pipeline.emit_warmup(
        out_dir, margin=margin, include_probed=include_probed, exclude_probed_sizes=exclude_probed_sizes, corpus=corpus,
        only=only or None, progress=lambda line: click.echo(line, err=True))
    warmup = fixes.warmup
    click.echo(f"warmup      {len(warmup.steps)} samples {[s.sample for s in warmup.steps]} compile "
               f"{warmup.graphs} graphs for {warmup.topologies} topologies "
               f"(one per topology: {warmup.one_per_topology})")
    for line in format_probed(fixes.probed or {}):
        click.echo(line)
    _echo_unbacked(fixes)
    _echo_export(fixes)
    for line in fixes.limits:  # never a raised recompile limit unsaid
        click.secho(f"limit       {line}", fg="yellow")
    for line in torch_log_lines(fixes.torch_log, fixes.torch_log_file, "emit-warmup tried its plans"):
        click.secho(f"torch       {line}", fg="yellow")
    click.echo("wrote       " + ", ".join(str(p) for p in fixes.files))
    if make_bundles:
        _echo_bundles(out_dir, pipeline.bundle(out_dir, progress=_bundle_progress, corpus=corpus))


def _echo_canonical(plan: Any, files: tuple[Path, ...]) -> None:
    """emit-warmup --transform's lines: the topologies before and after canonicalising, its
    warmup, the samples that raise once transformed, the files written."""
    click.echo(f"canonical   the corpus's {counted(plan.topologies, 'topology', 'topologies')} become "
               f"{counted(plan.canonical_topologies, 'topology', 'topologies')} once canonicalised; warmup: "
               f"{counted(len(plan.warmup), 'transformed sample')} {list(plan.warmup)} compile "
               f"{counted(plan.graphs, 'graph')} in all")
    if plan.raised:
        click.secho(f"            {len(plan.raised)} sample(s) raise once transformed, first {plan.raised[0]}",
                    fg="yellow")
    click.echo("wrote       " + ", ".join(str(p) for p in files))


def _echo_unbacked(fixes: Any) -> None:
    """The unbacked plan's lines (not planned, its dims and residual warmup with its shapes_spec
    form, or why it is not possible), then the dims it could not mark."""
    from ..fixes.document import costs_more, not_planned_reason

    warmup, unbacked = fixes.warmup, fixes.unbacked
    if unbacked is None:
        click.echo(f"unbacked    {not_planned_reason(UNBACKED, fixes.planned)}")
    elif unbacked.status == "ok":
        more = costs_more(unbacked.graphs, warmup.graphs)
        click.echo(f"unbacked    {_not_a_peer(more)}{len(unbacked.dims)} dims "
                   f"{[f'{d.argument}:{d.axis}' for d in unbacked.dims]}, duck sizing "
                   f"{'on' if unbacked.duck_shape else 'off'}; residual warmup {list(unbacked.residual)} "
                   f"({unbacked.graphs} graphs" + (f" in {unbacked.frames} frames" if unbacked.frames > 1 else "") + ")")
        for added in unbacked.added_breaks:
            click.secho(f"            the marks add a graph break: {added}", fg="yellow")
        spec = fixes.spec
        if SHAPES_SPEC not in fixes.planned:
            click.echo(f"shapes_spec {not_planned_reason(SHAPES_SPEC, fixes.planned)}")
        elif spec is not None and spec.status == "ok":
            more = costs_more(spec.graphs, warmup.graphs)
            click.echo(f"shapes_spec {_not_a_peer(more)}the same dims as torch.compile({spec.keyword}=unbacked.shapes_spec()), every other "
                       f"dim static: residual warmup {list(spec.residual)} ({spec.graphs} graphs)")
        elif spec is not None:
            click.echo(f"shapes_spec not written: {first_line(spec.reason)}")
    else:
        click.secho(f"unbacked    NOT POSSIBLE on this model, unbacked.py not written: {first_line(unbacked.reason)} "
                    "(the whole reason is in fixes.json and the report)", fg="yellow")
    for dim, why in unbacked.skipped if unbacked is not None else ():
        click.echo(f"            not marked {dim}: {why}")


def _echo_export(fixes: Any) -> None:
    """The export plan's line: not planned, its Dims (and the topologies outside them), or why it
    is not possible."""
    from ..fixes.document import not_planned_reason

    export = fixes.export
    if export is None:
        click.echo(f"export      {not_planned_reason(EXPORT, fixes.planned)}")
    elif export.feasible:
        click.echo(f"export      {sum(d.kind == 'dim' for d in export.dims)} Dims: "
                   + (", ".join(d.describe() for d in export.dims) or "every dim static")
                   + (f"; outside them: {', '.join(f'T{o.topology}' for o in export.outside)} "
                      f"({sum(o.samples for o in export.outside)} samples, see fixes.json)" if export.outside else ""))
    else:
        click.secho(f"export      NOT POSSIBLE on this model, export_dims.py not written: {first_line(export.reason)}"
                    + (" (torch's whole message is in fixes.json and the report)" if export.torch_message else ""),
                    fg="yellow")


def _not_a_peer(costs: str | None) -> str:
    """The head of a plan's line when it compiles more graphs than the warmup (``costs``, from
    :func:`guardscope.fixes.document.costs_more`): it is not the warmup's peer."""
    return f"{costs} (more than the plan to deploy): " if costs else ""


def _bundle_progress(name: str) -> None:
    click.echo(f"bundling {name} (compiles the plan in a fresh process with empty caches)...", err=True)


def _echo_bundles(out_dir: str, manifests: list[dict]) -> None:
    for manifest in manifests:
        compile_options = manifest["compile"]
        click.echo(f"bundle      {manifest['artifact']}: {manifest['graphs']} graphs compiled in "
                   f"{manifest['compile_seconds']:.1f} s ({compile_options['backend']} on "
                   f"{manifest['device_name']}, torch {manifest['torch_version']}); "
                   f"{manifest['bytes'] / 1e6:.1f} MB -> {Path(out_dir) / manifest['file']}")


@click.command()
@analysis_dir
@artifact_option(BUNDLED, help="Bundle only this plan (repeatable); default both.")
@backend_option(None, help="Production backend; default the corpus manifest's compile.backend, else inductor.")
@device_option(None, help="Device to compile on (cpu, cuda, cuda:1...); default the analysis's device.")
@timeout_option(3600.0, help="Seconds allowed per plan.")
@corpus_option()
@friendly_errors
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
    from .. import pipeline

    manifests = pipeline.bundle(out_dir, artifacts=artifacts or None, backend=backend, device=device,
                                timeout=timeout, progress=_bundle_progress, corpus=corpus)
    _echo_bundles(out_dir, manifests)



@click.command()
@analysis_dir
@backend_option(None, help="Production backend; default the corpus manifest's compile.backend, else inductor.")
@device_option(None, help="Device to compile on (cpu, cuda, cuda:1...); default the analysis's device.")
@timeout_option(3600.0, help="Seconds allowed for the build.")
@corpus_option()
@friendly_errors
def precompile(out_dir: str, backend: str | None, device: str | None, timeout: float, corpus: str | None) -> None:
    """Compile the warmup's graphs ahead of time, so a new replica loads them instead of compiling.

    Traces and compiles one fullgraph graph per warmup step of DIR/warmup.py, in its order, with
    the production backend, options and grad mode, in a fresh process with empty cache folders
    (torch's AOT compile, torch 2.13+), and saves them with their guards to
    DIR/warmup.precompiled.bin and a manifest DIR/warmup.precompiled.json (torch version, device
    name, backend and settings, grad mode, plan hash, checksum). warmup.py's warmup() then loads
    them when they fit, and a call none accepts compiles through torch.compile as usual. A model
    with graph breaks, a compiled method or a torch without the API is refused in one line;
    the compile-cache bundle stays the warm start. Run it on a machine of the production kind;
    'guardscope verify DIR' then proves the precompiled graphs in a fresh process.

    \b
    Example:
      guardscope emit-warmup out/
      guardscope precompile out/ --device cuda
      guardscope verify out/
    """
    from .. import pipeline

    click.echo("precompiling the warmup (traces and compiles each step in a fresh process)...", err=True)
    manifest = pipeline.precompile(out_dir, backend=backend, device=device, timeout=timeout, corpus=corpus)
    compile_options = manifest["compile"]
    click.echo(f"precompiled warmup: {manifest['graphs']} graphs built in {manifest['build_seconds']:.1f} s "
               f"({compile_options['backend']} on {manifest['device_name']}, torch {manifest['torch_version']}, "
               f"{manifest['grad_mode']}); {manifest['bytes'] / 1e6:.1f} MB -> {Path(out_dir) / manifest['file']}")
