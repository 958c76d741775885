"""The library facade: each function is one user-level operation, wiring the pure stages.

``analyze`` = load the corpus -> replay (torch.compile) -> classify + catalog (pure) -> write.
The CLI is a thin layer over these functions; scripts can call them directly.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from . import output, torch_compat
from .buckets import SHAPES_PER_GRAPH
from .catalog import CatalogBuilder, CudagraphSettings
from .corpus import load_corpus
from .errors import CatalogError, CompileOptionsError, CorpusError, TraceParseError
from .model import Catalog, parse_mark
from .modelspec import load_model
from .replay import ReplayOptions, check_marks, replay

if TYPE_CHECKING:
    from .diff import CatalogDiff


@dataclass(frozen=True)
class Analysis:
    catalog: Catalog
    corpus_dir: Path  # as the caller gave it
    out_dir: Path
    catalog_path: Path
    trace_path: Path
    timings_path: Path
    replay_seconds: float
    warnings: tuple[str, ...] = ()


# Production torch.compile options a corpus manifest carries; an analysis adds where it ran.
_PRODUCTION_FIELDS = ("dynamic", "fullgraph", "mode")
_ANALYSED_FIELDS = _PRODUCTION_FIELDS + ("backend", "device", "inference_mode")


def _replay_options(compile_options: dict[str, Any], fields: tuple[str, ...], **overrides: Any) -> ReplayOptions:
    """:class:`ReplayOptions` from the given fields of a compile-options dict (nulls mean the
    default), then the caller's overrides (not None)."""
    if compile_options.get("dynamic") not in (None, True, False):
        raise CompileOptionsError(
            f"compile.dynamic is {compile_options['dynamic']!r}; use true, false or null"
        )
    taken = {name: compile_options[name] for name in fields if compile_options.get(name) is not None}
    return replace(ReplayOptions(**taken), **{k: v for k, v in overrides.items() if v is not None})


def options_from_manifest(compile_options: dict[str, Any], **overrides: Any) -> ReplayOptions:
    """Production compile options from the manifest, then the caller's overrides (not None)."""
    unknown = sorted(set(compile_options) - set(_PRODUCTION_FIELDS) - {"backend"})
    if unknown:
        torch_compat.warn_once(f"ignoring unknown compile options in the manifest: {unknown}")
    return _replay_options(compile_options, _PRODUCTION_FIELDS, **overrides)


def _fingerprint(corpus: Any, spec: str, options: ReplayOptions, replay_mode: str) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: the same corpus, model and options."""
    return {
        "shards": [shard.sha256 for shard in corpus.manifest.shards],
        "model": spec,
        "options": options.compile_json(),
        "replay_mode": replay_mode,
        "torch": torch_compat.torch_version(),
    }


def analyze(
    corpus_dir: str | Path,
    out_dir: str | Path,
    *,
    model: str | None = None,
    strict: bool = False,
    force: bool = False,
    resume: bool = False,
    skip_bad_shards: bool = False,
    progress: Callable[[int], None] | None = None,
    replay_mode: str = "auto",
    checkpoint_every: float = 10.0,
    paddable: tuple[str, ...] | None = None,
    shapes_per_graph: int = SHAPES_PER_GRAPH,
    **overrides: Any,
) -> Analysis:
    """Replay ``corpus_dir`` and write ``catalog.json``, ``timings.json``, ``trace/`` and
    ``report.html``.

    ``overrides`` are :class:`ReplayOptions` fields (``backend``, ``dynamic``, ``device``...).
    ``replay_mode``: ``"guards"`` skips the forward of samples an existing graph accepts (only
    with ``fullgraph``; see :class:`guardscope.replay.ReplaySession`), ``"full"`` runs every
    sample, ``"auto"`` picks ``"guards"`` when it is sound.

    The replay goes shard by shard and checkpoints after a finished shard at most every
    ``checkpoint_every`` seconds (and after the first), so an interrupted analysis keeps its
    finished shards and ``resume=True`` continues it (the graphs of finished shards
    are rebuilt by re-running only the samples that compiled). With ``skip_bad_shards`` a
    corrupt shard is listed in the catalog instead of stopping the analysis. With ``strict``, an
    unclassified guard failure or unreadable trace record raises :class:`TraceParseError` after
    the outputs are written.

    When the compile mode uses CUDA graphs (``mode="reduce-overhead"``), the catalog gains a
    ``cudagraphs`` section: padding buckets for the dynamic dims (``paddable``: the dims, as
    ``"x.size()[0]"``, the user confirmed can be padded; ``shapes_per_graph``: the budget),
    and, when the replay really runs CUDA graphs (inductor on a GPU), every recording and
    "skipping cudagraphs" reason with its sample. CUDA graphs record at run time, so such a
    replay runs every sample (``replay_mode`` is then ``"full"`` whatever was asked). The
    expected recordings follow the graph Dynamo really runs per sample (its lookup order,
    :class:`guardscope.torch_compat.LookupOrder`) and inductor's settings at call time
    (``cudagraph_skip_dynamic_graphs``, graph partitioning: :func:`torch_compat.cudagraph_config`).
    """
    from .errors import ShardError
    from .replay import ReplaySession

    corpus = load_corpus(corpus_dir)
    if len(corpus) == 0:
        raise CorpusError(f"the corpus {corpus_dir} holds no samples: record some calls into it first")
    spec = model or corpus.manifest.model
    options = options_from_manifest(corpus.manifest.compile, **overrides)
    options.validate()
    if replay_mode not in ("auto", "guards", "full"):
        raise CompileOptionsError(f"replay mode {replay_mode!r} is not auto, guards or full")
    if replay_mode == "guards" and not options.fullgraph:
        raise CompileOptionsError(
            "--replay guards needs fullgraph=True: with graph breaks later frames see runtime "
            "values, so a sample cannot be skipped on the first frame's guards; use --replay full or auto"
        )
    if shapes_per_graph < 1:
        raise CompileOptionsError(f"--shapes-per-graph {shapes_per_graph} must be at least 1")
    warnings = [w for w in (torch_compat.check_supported_version(),) if w]
    if options.uses_cudagraphs and replay_mode == "guards":
        warnings.append("--replay guards ignored: CUDA graphs record at run time, so every sample runs")
    cudagraphs = (
        CudagraphSettings(observed=options.uses_cudagraphs, paddable=paddable,
                          shapes_per_graph=shapes_per_graph, **torch_compat.cudagraph_config())
        if torch_compat.mode_uses_cudagraphs(options.mode) else None
    )
    fingerprint = _fingerprint(corpus, spec, options, replay_mode)
    # Everything the user can get wrong is checked before the output folder is touched.
    user_model = load_model(spec, base_dir=corpus.path)
    check_marks(user_model, corpus.sample(0), options.mark_unbacked)
    out = output.prepare_output_dir(out_dir, force=force, resume=resume)
    state = output.read_checkpoint(out, fingerprint) if resume else None
    if not resume:
        output.clear_checkpoint(out)
        # An interrupted run must not leave an earlier analysis's catalog looking like its own.
        output.remove_owned(out, output.CATALOG)

    builder = CatalogBuilder.from_state(state["builder"]) if state else CatalogBuilder(track_shapes=cudagraphs is not None)
    skipped: list[dict[str, str]] = list(state["skipped_shards"]) if state else []
    done_before = builder.samples
    if progress is not None and done_before:
        progress(done_before, 0)
    with output.open_trace_stream(out, append=resume, keep_bytes=(state or {}).get("trace_bytes")) as trace_stream, (
        output.open_trace_stream(out, append=resume, name=output.CUDAGRAPH_LOG,
                                 keep_bytes=(state or {}).get("cudagraph_bytes"))
        if options.uses_cudagraphs else contextlib.nullcontext()
    ) as cudagraph_stream:
        # Where the replay stands: every sample before ``next`` is done and in the builder,
        # and the trace streams were this long after it. A checkpoint is written from it every
        # ``checkpoint_every`` seconds and when the run is interrupted, so finished work is kept.
        done = {"next": state["next_sample"] if state else 0, "time": time.monotonic(),
                "trace": output.stream_size(trace_stream), "cudagraphs": output.stream_size(cudagraph_stream)}

        def checkpoint() -> None:
            done["time"] = time.monotonic()
            output.write_checkpoint(out, {
                "fingerprint": fingerprint,
                "next_sample": done["next"],
                "compile_samples": session.compile_samples(before=done["next"]),
                "lookup_order": session.lookup_order,
                "builder": builder.to_state(),
                "skipped_shards": skipped,
                "seconds": (state["seconds"] if state else 0.0) + session.seconds,
                "trace_bytes": done["trace"],
                "cudagraph_bytes": done["cudagraphs"],
            })

        def finished(index: int) -> None:
            done.update(next=index + 1, trace=output.stream_size(trace_stream),
                        cudagraphs=output.stream_size(cudagraph_stream))
            if time.monotonic() - done["time"] >= checkpoint_every:
                checkpoint()

        with ReplaySession(
            user_model,
            options,
            on_sample=builder.add_sample,
            trace_stream=trace_stream,
            progress=(lambda count: progress(done_before + count, session.compiles)) if progress else None,
            guard_only=replay_mode in ("auto", "guards"),
            cudagraph_stream=cudagraph_stream,
            track_lookup=cudagraphs is not None,
            after_sample=finished,
        ) as session:
            if state:
                # Rebuild the graphs the finished samples compiled: their compile events come back
                # identical, so the catalog equals an uninterrupted run's. Dynamo's lookup order
                # is the one the finished samples left, not the warm-up's.
                session.warm(corpus.sample(index) for index in state["compile_samples"])
                session.restore_lookup_order(state.get("lookup_order", session.lookup_order))
            started = done["next"]
            try:
                for shard in corpus.manifest.shards:
                    if shard.first + shard.samples <= done["next"]:
                        continue
                    try:
                        samples = corpus.load_shard(shard)
                    except ShardError as exc:
                        if not skip_bad_shards:
                            raise
                        skipped.append({"file": shard.file, "error": str(exc)})
                        warnings.append(f"skipped shard {shard.file}: {exc}")
                        done["next"] = shard.first + shard.samples
                        continue
                    session.replay(sample for sample in samples if sample.index >= done["next"])
            except (KeyboardInterrupt, SystemExit):
                if done["next"] > started:
                    checkpoint()  # keep what finished since the last checkpoint
                raise
            # Every sample is done: an interruption from here on resumes straight to the catalog.
            checkpoint()
        result = session.result()
    replay_seconds = (state["seconds"] if state else 0.0) + result.seconds
    catalog = builder.build(
        events=result.events,
        torch_version=result.torch_version,
        corpus_path=Path(os.path.relpath(corpus.path.resolve(), out.resolve())).as_posix(),
        model=spec,
        compile_options=options.compile_json(),
        replay_mode=result.replay_mode,
        unparsed={**result.unparsed, **(
            {"cudagraph_records": result.unreadable_cudagraph_records} if result.unreadable_cudagraph_records else {}
        )},
        arguments=result.arguments,
        skipped_shards=tuple(skipped),
        cudagraphs=cudagraphs,
        frame_arguments=result.frame_arguments,
        graph_breaks=result.graph_breaks,
    )
    catalog_path = output.write_json(out / output.CATALOG, catalog.to_json())
    # Where the corpus is, absolutely: a copied or moved analysis folder still finds it. Kept out of
    # catalog.json, which must not depend on the machine.
    output.write_json(out / output.LOCATIONS, {"corpus": str(corpus.path.resolve())})
    recording_times = builder.recording_times() if options.uses_cudagraphs else None
    timings_path = output.write_json(
        out / output.TIMINGS,
        {
            "replay_seconds": round(replay_seconds, 6),
            "compiles": [
                {"compile_id": e.compile_id, "sample": e.sample, "seconds": e.seconds}
                for e in sorted(result.events, key=lambda e: (e.frame_id, e.frame_compile_id))
            ],
            **({"cudagraph_recordings": recording_times} if recording_times is not None else {}),
        },
    )
    output.clear_checkpoint(out)
    from .report import write_report

    write_report(out)
    if catalog.not_analysed:
        warnings.append(not_analysed_warning(catalog, options.recompile_limit))
    if len(catalog.frames) > 1 and not result.frames_followed:
        warnings.append(
            f"torch {torch_compat.torch_version()} does not show guardscope which graph of a frame after a graph "
            "break each call ran: topologies here are the first frame's only"
        )
    if len(catalog.frames) > 1 and catalog.compile.get("backend") != "inductor":
        warnings.append(
            f"the model compiles to {len(catalog.frames)} frames ({len(catalog.graph_breaks)} distinct graph "
            f"breaks): where a graph breaks, the {catalog.compile.get('backend')} backend's guards can differ "
            f"from inductor's; run 'guardscope fidelity {out}' on the production machine to check"
        )
    analysis = Analysis(
        catalog=catalog,
        corpus_dir=Path(corpus_dir),
        out_dir=out,
        catalog_path=catalog_path,
        trace_path=out / output.TRACE_DIR / output.TRACE_FILE,
        timings_path=timings_path,
        replay_seconds=replay_seconds,
        warnings=tuple(warnings),
    )
    if strict and catalog.unparsed:
        details = ", ".join(f"{k}: {v}" for k, v in sorted(catalog.unparsed.items()))
        raise TraceParseError(
            f"strict mode: {details} (see 'other' failures in {catalog_path}); "
            "rerun without --strict to accept them"
        )
    return analysis


def not_analysed_warning(catalog: Catalog, recompile_limit: int) -> str:
    """Why samples ran without a compiled graph, as far as the catalog shows it: the first
    frame's graphs against the recompile limit, else no claim about the cause."""
    first_frame = next((f for f in catalog.frames if f["frame"] == 0), None)
    graphs = first_frame["graphs"] + first_frame["failed_compiles"] if first_frame else len(catalog.graphs)
    count = len(catalog.not_analysed)
    if graphs >= recompile_limit:
        return (f"{count} samples ran without a compiled graph: the first frame reached Dynamo's recompile "
                f"limit ({recompile_limit}); they are listed as not analysed")
    return (f"{count} samples ran without a compiled graph accepting them in the first frame ({graphs} graphs, "
            f"recompile limit {recompile_limit}); they are listed as not analysed")


# --- emit-warmup -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fixes:
    out_dir: Path
    files: tuple[Path, ...]
    warmup: Any
    unbacked: Any
    export: Any


def production_options(catalog: dict[str, Any], **overrides: Any) -> ReplayOptions:
    """The analysed compile options without the analysis-only marks and settings."""
    return _replay_options(catalog["compile"], _ANALYSED_FIELDS, **overrides)


def _respec(spec: str, corpus_dir: Path, new_dir: Path) -> str:
    """Re-express a file model spec relative to another corpus directory."""
    from .modelspec import split_spec

    target, attr = split_spec(spec)
    if not (target.endswith(".py") or "/" in target) or Path(target).is_absolute():
        return spec
    source = corpus_dir / target if (corpus_dir / target).is_file() else Path.cwd() / target
    return f"{Path(os.path.relpath(source.resolve(), new_dir.resolve())).as_posix()}:{attr}"


def corpus_dir_of(out: Path, catalog: dict[str, Any], corpus_dir: str | Path | None = None) -> Path:
    """Where the corpus of the analysis in ``out`` is: ``corpus_dir`` when given; else the path
    the catalog records relative to the folder (the two moved together), else the absolute path
    the analysis recorded in locations.json (the folder was copied or moved alone)."""
    if corpus_dir is not None:
        return Path(corpus_dir)
    relative = out / catalog["corpus"]["path"]
    if (relative / "corpus.json").is_file():
        return relative
    recorded = (output.read_locations(out) or {}).get("corpus")
    if recorded and (Path(recorded) / "corpus.json").is_file():
        return Path(recorded)
    where = f"{relative}" + (f" or {recorded}" if recorded else "")
    raise CatalogError(f"the corpus of the analysis in {out} is not where it was ({where}); "
                       "pass --corpus DIR to say where it is now")


def _load_analysis(out_dir: str | Path, corpus_dir: str | Path | None = None) -> tuple[Path, dict[str, Any], Any, Any]:
    """The analysis in ``out_dir``: its catalog, its corpus (or ``corpus_dir``) and model."""
    out = Path(out_dir)
    catalog = output.read_catalog(out)
    corpus = load_corpus(corpus_dir_of(out, catalog, corpus_dir))
    model = load_model(catalog["model"], base_dir=corpus.path)
    return out, catalog, corpus, model


def load_probed(out: Path, first_index: int) -> tuple[dict[str, Any], list[Any]]:
    """``probe/probe.json`` and its synthetic samples, numbered after the corpus (``first_index``
    on) so they never collide with corpus sample numbers."""
    from .corpus import load_corpus as load
    from .model import Sample

    path = out / output.PROBE_DIR / output.PROBE_FILE
    if not path.is_file():
        raise CatalogError(f"no probe results in {out}: run 'guardscope probe {out}' first")
    document = output.read_json(path, f"rerun 'guardscope probe {out}'")
    from .report import catalog_digest

    if document.get("catalog_sha256") != catalog_digest(output.read_catalog(out)):
        raise CatalogError(f"{path} belongs to an earlier analysis of {out}: rerun 'guardscope probe {out}'")
    if not document.get("new_topologies"):
        return document, []
    probed = load(out / output.PROBE_DIR / "corpus")
    samples = [Sample(first_index + s.index, s.args, s.kwargs) for s in probed]
    if len(samples) != len(document["new_topologies"]):
        raise CatalogError(f"{out / output.PROBE_DIR} is inconsistent (probe.json and corpus/ differ); rerun 'guardscope probe {out}'")
    return document, samples


def with_probed(catalog: dict[str, Any], document: dict[str, Any], first_index: int) -> dict[str, Any]:
    """The catalog with each probed topology appended (ids after the corpus's, one sample each)."""
    extended = dict(catalog)
    topologies = list(catalog["topologies"])
    for position, probed in enumerate(document.get("new_topologies", [])):
        sample = first_index + position
        topologies.append({
            "id": len(topologies),
            "compile_id": probed["compile_id"],
            "first_sample": sample,
            "count": 1,
            "samples": [sample],
            "facts": probed["facts"],
            "probed": probed["id"],
        })
    extended["topologies"] = topologies
    return extended


def emit_warmup(out_dir: str | Path, *, margin: float = 0.0, include_probed: bool = False,
                corpus: str | Path | None = None) -> Fixes:
    """Write the three fixes for the analysis in ``out_dir`` (see DESIGN "Emitted modules").

    With ``include_probed``, the warmup and the unbacked plan also cover the topologies
    ``probe`` found (``probe/corpus``), and ``verify`` replays those samples too."""
    from . import plan as planning
    from .corpus import CorpusWriter
    from .emit.export_dims import render_export_dims
    from .emit.unbacked import render_unbacked
    from .emit.warmup import render_warmup
    from .exporting import plan_export

    if margin < 0:
        raise CompileOptionsError(f"margin {margin} must be >= 0")
    out, catalog, corpus, model = _load_analysis(out_dir, corpus)
    output.refuse_foreign(out, [*FIX_FILES.values(), output.FIXES])
    options = production_options(catalog)
    probed: list[Any] = []
    if include_probed:
        document, probed = load_probed(out, len(corpus))
        catalog = with_probed(catalog, document, len(corpus))
    by_index = {sample.index: sample for sample in probed}

    def sample_at(index: int) -> Any:
        return by_index[index] if index in by_index else corpus.sample(index)

    frames = len(catalog.get("frames") or ()) or 1
    warmup_plan = planning.plan_warmup(model, catalog["topologies"], sample_at, options, frames=frames)
    unbacked_plan = planning.residual_samples(
        model, itertools.chain(corpus, probed), planning.choose_unbacked(catalog), options, catalog
    )
    export_plan = plan_export(model, catalog, sample_at, margin)
    unbacked_ok = unbacked_plan.status == "ok"

    folders = [("warmup", [step.sample for step in warmup_plan.steps])]
    if unbacked_ok:
        folders.append(("unbacked_warmup", list(unbacked_plan.residual)))
    else:
        output.remove_corpus(out / "unbacked_warmup")
    for folder, samples in folders:
        target = out / folder
        spec = _respec(catalog["model"], corpus.path, target)
        with CorpusWriter(target, model=spec, compile=corpus.manifest.compile, overwrite=True) as writer:
            for index in samples:
                sample = sample_at(index)
                writer.add(*sample.args, **sample.kwargs)

    codes = {
        "warmup": render_warmup(catalog, warmup_plan),
        "unbacked": render_unbacked(
            catalog, unbacked_plan, plain_graphs=warmup_plan.graphs,
            supports_unbacked_sources=torch_compat.supports_unbacked_sources(),
        ) if unbacked_ok else None,
        "export": render_export_dims(catalog, export_plan) if export_plan.feasible else None,
    }
    files = FIX_FILES
    written = []
    for name, code in codes.items():
        if code is None:  # an infeasible fix: no module, and none left from an earlier run
            output.remove_generated(out / files[name])
        else:
            written.append(output.write_text(out / files[name], code))
    fixes = {
        "schema": 1,
        "probed": {"included": bool(include_probed), "topologies": len(probed),
                   "corpus": f"{output.PROBE_DIR}/corpus" if probed else None},
        "artifacts": [
            {
                "name": "warmup",
                "file": files["warmup"],
                "title": "Warmup set",
                "status": "ok",
                "reason": None,
                "summary": (
                    f"{len(warmup_plan.steps)} samples compile {warmup_plan.graphs} graphs for "
                    f"{warmup_plan.topologies} topologies (one sample per topology, in corpus order: "
                    f"{warmup_plan.one_per_topology} graphs)"
                ),
                "code": codes["warmup"],
                "details": {
                    "samples": [step.sample for step in warmup_plan.steps],
                    "graphs": warmup_plan.graphs,
                    "one_per_topology_graphs": warmup_plan.one_per_topology,
                    "covers": {f"T{s.topology}": [f"T{c}" for c in s.covers] for s in warmup_plan.steps if s.covers},
                },
            },
            {
                "name": "unbacked",
                "file": files["unbacked"] if unbacked_ok else None,
                "title": "mark_unbacked configuration",
                "status": unbacked_plan.status,
                "reason": unbacked_plan.reason,
                "summary": unbacked_summary(unbacked_plan, warmup_plan.graphs),
                "code": codes["unbacked"],
                "details": {
                    "dims": [f"{d.argument}:{d.axis}" for d in unbacked_plan.dims],
                    "duck_shape": unbacked_plan.duck_shape,
                    "residual_samples": list(unbacked_plan.residual),
                    "graphs": unbacked_plan.graphs,
                    "frames": unbacked_plan.frames,
                    "added_graph_breaks": list(unbacked_plan.added_breaks),
                    "not_marked": {dim: why for dim, why in unbacked_plan.skipped},
                    "failed_samples": [{"sample": i, "error": e} for i, e in unbacked_plan.failed[:20]],
                },
            },
            {
                "name": "export",
                "file": files["export"] if export_plan.feasible else None,
                "title": "torch.export Dim bounds",
                "status": export_plan.status,
                "reason": export_plan.reason,
                "summary": (
                    f"{sum(d.kind == 'dim' for d in export_plan.dims)} Dims for "
                    f"{sum(len(d.members) for d in export_plan.dims)} dynamic dims"
                    + (f", margin {export_plan.margin:.0%}" if export_plan.margin else "")
                    + (f"; {len(export_plan.outside)} topologies ({sum(o.samples for o in export_plan.outside)} "
                       f"samples) outside them" if export_plan.outside else "")
                    if export_plan.feasible else f"not possible on this model: {export_plan.reason}"
                ),
                "code": codes["export"],
                "details": {
                    "dims": {d.name: [d.min, d.max] for d in export_plan.dims},
                    "relations": {d.name: d.expression for d in export_plan.dims if d.kind != "dim"},
                    "example_sample": export_plan.example_sample,
                    "example_topology": export_plan.example_topology,
                    "suggested_fixes": list(export_plan.fixes),
                    "outside": [
                        {"topology": o.topology, "sample": o.sample, "samples": o.samples, "reason": o.reason}
                        for o in export_plan.outside
                    ],
                    "not_declared": list(export_plan.warnings),
                    **({"torch_message": export_plan.torch_message} if export_plan.torch_message else {}),
                },
            },
        ],
    }
    written.append(output.write_json(out / output.FIXES, fixes))
    from .report import write_report

    written.append(write_report(out))
    return Fixes(out_dir=out, files=tuple(written), warmup=warmup_plan, unbacked=unbacked_plan, export=export_plan)


# --- probe -------------------------------------------------------------------------------------


# The module each fix is written to.
FIX_FILES = {"warmup": "warmup.py", "unbacked": "unbacked.py", "export": "export_dims.py"}


def unbacked_summary(plan: Any, warmup_graphs: int) -> str:
    """One line on the unbacked plan for fixes.json, the report and the terminal."""
    if plan.status != "ok":
        return f"not possible on this model: {plan.reason.splitlines()[0] if plan.reason else 'no reason given'}"
    line = (f"{len(plan.dims)} dims unbacked, duck sizing {'on' if plan.duck_shape else 'off'}; "
            f"{len(plan.residual)} residual warmup samples, {plan.graphs} graphs (plain warmup: {warmup_graphs})")
    if plan.frames > 1:
        line += f"; {plan.frames} frames under the marks"
    if plan.added_breaks:
        line += f", the marks add {len(plan.added_breaks)} graph break(s)"
    if plan.skipped:
        line += f"; {len(plan.skipped)} dim(s) not markable"
    return line


def analysis_options(catalog: dict[str, Any]) -> ReplayOptions:
    """Exactly the options the analysis replayed with (duck sizing, marks and limit included),
    so a replay of its compile samples rebuilds its graphs."""
    compile_options = catalog["compile"]
    marks = tuple(parse_mark(text) for text in compile_options.get("mark_unbacked") or ())
    overrides: dict[str, Any] = {"mark_unbacked": marks}
    for name in ("duck_shape", "recompile_limit", "mark_samples"):
        if compile_options.get(name) is not None:
            overrides[name] = compile_options[name]
    return _replay_options(compile_options, _ANALYSED_FIELDS, **overrides)


@dataclass(frozen=True)
class ProbeResult:
    out_dir: Path
    document: dict[str, Any]
    corpus_dir: Path | None


def probe(
    out_dir: str | Path,
    *,
    values: tuple[int, ...] | None = None,
    pairwise: str = "general",
    max_candidates: int | None = None,
    break_relations: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    corpus: str | Path | None = None,
) -> ProbeResult:
    """Look for topologies the corpus of the analysis in ``out_dir`` has not shown yet.

    Synthesises edited copies of each topology's representative (see :mod:`guardscope.probe`),
    checks each against the analysis' compiled graphs (rebuilt by replaying its compile samples;
    a synthetic sample a graph accepts is not run) and compiles the ones none accepts: each new
    graph is a topology the corpus never showed. Writes ``probe/probe.json`` (what was explored,
    what was found) and ``probe/corpus/`` (one synthetic sample per new topology, a corpus that
    ``emit-warmup --include-probed`` covers), then re-renders the report.

    Edits keep the dims the corpus always shows equal equal; ``break_relations`` also edits
    them apart (candidates of kind ``"broken"``), and ``explored.model_error_by_kind`` says how
    many of each kind raised in the model.
    """
    from . import probe as probing
    from .corpus import CorpusWriter
    from .binding import describe
    from .replay import ReplaySession

    values = tuple(sorted(set(values if values is not None else probing.DEFAULT_VALUES)))
    if not values or min(values) < 0:
        raise CompileOptionsError(f"probe values {list(values)} must be sizes >= 0")
    if pairwise not in probing.PAIRWISE:
        raise CompileOptionsError(f"pairwise {pairwise!r} is not one of {', '.join(probing.PAIRWISE)}")
    limit = probing.DEFAULT_MAX_CANDIDATES if max_candidates is None else max_candidates
    if limit < 1:
        raise CompileOptionsError(f"--max-candidates {limit} must be at least 1")
    out, catalog, corpus, model = _load_analysis(out_dir, corpus)
    options = analysis_options(catalog)
    options.validate()
    served = [t for t in catalog["topologies"] if t.get("compile_id") is not None]
    if not served:
        raise CatalogError("the analysis has no compiled topology to probe from")

    # Read the corpus once: dtypes and layouts seen, and which integer inputs index which dim.
    scanner = probing.Scanner()
    bases = {t["first_sample"]: corpus.sample(t["first_sample"]) for t in served}
    representatives = {index: probing.bind(model, sample) for index, sample in bases.items()}
    if any(bound is None for bound in representatives.values()):
        raise CatalogError("the model's forward signature does not bind the corpus samples; probe needs named inputs")
    for bound in representatives.values():
        scanner.add(bound.arguments, for_indexes=True)
    for sample in corpus:
        bound = probing.bind(model, sample)
        if bound is not None:
            scanner.add(bound.arguments)
        if progress is not None and sample.index % 1000 == 999:
            progress("scan", sample.index + 1, len(corpus))
    scanned = scanner.result()

    def per_base(read: Callable[[Any], Any]) -> dict[int, dict[str, Any]]:
        return {
            index: {path: read(tensor) for path, tensor in probing.tensors_of(bound.arguments)}
            for index, bound in representatives.items()
        }

    planned = probing.plan_candidates(
        catalog,
        per_base(lambda t: tuple(t.shape)),
        scanned,
        values=values,
        pairwise=pairwise,
        base_layouts=per_base(probing.layout_of),
        base_dtypes=per_base(lambda t: str(t.dtype).replace("torch.", "")),
        break_relations=break_relations,
    )
    chosen, truncated = planned[:limit], max(0, len(planned) - limit)

    first_virtual = len(corpus)
    synthetic: list[tuple[probing.Candidate, Any]] = []
    invalid: dict[str, int] = {}
    seen_keys: set = set()
    duplicates = 0
    for candidate in chosen:
        bound = representatives[candidate.base_sample]
        try:
            sample = probing.synthesize(bases[candidate.base_sample], bound, candidate, scanned.indexes,
                                        first_virtual + len(synthetic))
        except probing.InvalidCandidate as exc:
            reason = str(exc).split(",")[0]
            invalid[reason] = invalid.get(reason, 0) + 1
            continue
        meta = describe(probing.bind(model, sample).arguments, 0, None, None)
        key = (meta.tensors, meta.lengths, meta.scalars)
        if key in seen_keys:
            duplicates += 1
            continue
        seen_keys.add(key)
        synthetic.append((candidate, sample))

    metas: dict[int, Any] = {}
    builder = CatalogBuilder()

    def on_sample(meta: Any) -> None:
        metas[meta.index] = meta
        builder.add_sample(meta)

    compile_samples = [c["sample"] for c in catalog["compiles"] if c.get("fail_type") is None and c["sample"] is not None]
    with ReplaySession(model, options, on_sample=on_sample, guard_only=True,
                       progress=(lambda done: progress("check", done, len(compile_samples) + len(synthetic)))
                       if progress else None) as session:
        session.replay(corpus.sample(index) for index in compile_samples)
        session.replay(sample for _, sample in synthetic)
        result = session.result()
    probed = builder.build(
        events=result.events, torch_version=result.torch_version, corpus_path="", model=catalog["model"],
        compile_options=options.compile_json(), replay_mode=result.replay_mode, arguments=result.arguments,
    )
    known = {t["compile_id"]: t["id"] for t in served}
    rebuilt = {metas[i].serving for i in compile_samples if i in metas}
    warnings = []
    if not rebuilt <= set(known):
        warnings.append(
            "replaying the analysis' compile samples did not rebuild its graphs (compile ids "
            f"{sorted(rebuilt - set(known))}); was the catalog made by another torch or model?"
        )
    outcomes = {"accepted": 0, "new_graph": 0, "model_error": 0, "not_analysed": 0}
    model_errors: list[dict[str, Any]] = []
    errors_by_kind: dict[str, int] = {}
    by_compile: dict[str, list[int]] = {}
    for position, (candidate, sample) in enumerate(synthetic):
        meta = metas[sample.index]
        if meta.error is not None:
            outcomes["model_error"] += 1
            errors_by_kind[candidate.kind] = errors_by_kind.get(candidate.kind, 0) + 1
            if len(model_errors) < 20:
                model_errors.append({"found_by": candidate.describe(), "error": meta.error})
        elif meta.serving is None:
            outcomes["not_analysed"] += 1
        elif meta.serving in known:
            outcomes["accepted"] += 1
        else:
            outcomes["new_graph"] += 1
            by_compile.setdefault(meta.serving, []).append(position)
    facts = {t.compile_id: list(t.facts) for t in probed.topologies}
    new_topologies = []
    for number, (compile_id, positions) in enumerate(sorted(by_compile.items(), key=lambda item: item[1][0])):
        candidate, _ = synthetic[positions[0]]
        new_topologies.append({
            "id": f"P{number}",
            "compile_id": compile_id,
            "probe_sample": number,
            "facts": facts.get(compile_id, []),
            "found_by": candidate.describe(),
            "base_topology": candidate.base_topology,
            "base_sample": candidate.base_sample,
            "edits": [edit.to_json() for edit in candidate.edits],
            "candidates": len(positions),
        })
    by_kind: dict[str, int] = {}
    for candidate in planned:
        by_kind[candidate.kind] = by_kind.get(candidate.kind, 0) + 1
    from .report import catalog_digest

    document = {
        "schema": 1,
        "catalog_sha256": catalog_digest(catalog),
        "torch_version": result.torch_version,
        "bounds": {"values": list(values), "pairwise": pairwise, "max_candidates": limit,
                   "break_relations": break_relations},
        "scan": scanned.to_json(),
        "explored": {
            "bases": len(representatives),
            "planned": len(planned),
            "planned_by_kind": dict(sorted(by_kind.items())),
            "truncated": truncated,
            "invalid": sum(invalid.values()),
            "invalid_reasons": dict(sorted(invalid.items())),
            "duplicates": duplicates,
            "checked": len(synthetic),
            **outcomes,
            "model_error_by_kind": dict(sorted(errors_by_kind.items())),
        },
        "new_topologies": new_topologies,
        "model_errors": model_errors,
        "warnings": warnings,
    }
    probe_dir = out / output.PROBE_DIR
    corpus_dir = None
    if new_topologies:
        corpus_dir = probe_dir / "corpus"
        spec = _respec(catalog["model"], corpus.path, corpus_dir)
        with CorpusWriter(corpus_dir, model=spec, compile=corpus.manifest.compile, overwrite=True) as writer:
            for compile_id, positions in sorted(by_compile.items(), key=lambda item: item[1][0]):
                _, sample = synthetic[positions[0]]
                writer.add(*sample.args, **sample.kwargs)
    else:
        output.remove_corpus(probe_dir / "corpus")
    output.write_json(probe_dir / output.PROBE_FILE, document)
    from .report import write_report

    write_report(out)
    return ProbeResult(out_dir=out, document=document, corpus_dir=corpus_dir)


# --- fidelity --------------------------------------------------------------------------------


FIDELITY_DIR = "fidelity"
FIDELITY_FILE = "fidelity.json"


def fidelity(
    out_dir: str | Path,
    *,
    backend: str = "inductor",
    device: str = "cuda",
    mode: str | None = None,
    timeout: float = 3600.0,
    corpus: str | Path | None = None,
) -> dict[str, Any]:
    """Re-analyse the corpus of ``out_dir`` with the production backend and device, in a child
    process, into ``out_dir/fidelity/``, and compare the two catalogs.

    The default analysis uses the eager backend because Dynamo's guards (and so recompiles and
    topologies) do not depend on the backend; this checks that claim on the user's own model.
    Guard wording that differs between backends (inductor adds int32 bounds) is ignored; every
    other difference is kept, written to ``fidelity.json`` and shown in the report.
    """
    import subprocess
    import sys

    from .diff import GUARD_TEXT, diff_catalogs

    out = Path(out_dir)
    catalog = output.read_catalog(out)
    options = analysis_options(catalog)
    checked = replace(options, backend=backend, device=device, mode=mode or options.mode)
    checked.validate()
    corpus_dir = corpus_dir_of(out, catalog, corpus).resolve()
    target = out / FIDELITY_DIR
    command = [sys.executable, "-m", "guardscope.cli", "analyze", str(corpus_dir), "--out", str(target),
               # this process is the isolation: the child analyses in itself (no grandchild to orphan)
               "--force", "--quiet", "--no-isolate", "--backend", backend, "--device", device,
               "--model", str(catalog["model"]), "--recompile-limit", str(options.recompile_limit)]
    if checked.mode:
        command += ["--mode", checked.mode]
    if not options.duck_shape:
        command.append("--no-duck-shape")
    for path, dim in options.mark_unbacked:
        command += ["--mark-unbacked", f"{path}:{dim}"]
    if options.mark_unbacked:
        command += ["--mark-samples", options.mark_samples]
    from .isolation import child_environment, output_tail, signal_name

    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                   env=child_environment(), cwd=str(corpus_dir))
    except subprocess.TimeoutExpired:
        raise CompileOptionsError(f"the {backend} analysis took longer than {timeout:.0f} s") from None
    if completed.returncode != 0 or not (target / output.CATALOG).is_file():
        tail = " | ".join(output_tail(completed.stderr or completed.stdout or "", lines=4))
        status = signal_name(completed.returncode) if completed.returncode < 0 else f"exit {completed.returncode}"
        raise CompileOptionsError(f"the {backend} analysis on {device} failed ({status}): {tail}")
    labels = (f"default analysis ({catalog['compile'].get('backend')}, {catalog['compile'].get('device')})",
              f"{backend} on {device}")
    result = diff_catalogs(catalog, output.read_catalog(target), ignore=GUARD_TEXT, labels=labels)
    document = {
        "schema": 1,
        "backend": backend,
        "device": device,
        "mode": checked.mode,
        "ignore": list(GUARD_TEXT),
        "identical": result.identical,
        "labels": list(labels),
        "summary": result.summary_lines(),
    }
    output.write_json(out / FIDELITY_FILE, document)
    from .report import write_report

    write_report(out)
    return document


# --- verify ------------------------------------------------------------------------------------


def verify(
    out_dir: str | Path,
    *,
    artifacts: tuple[str, ...] | None = None,
    holdout: float | None = None,
    timeout: float = 3600.0,
    progress: Callable[[str], None] | None = None,
    bundle: bool = True,
    corpus: str | Path | None = None,
) -> dict[str, Any]:
    """Verify each emitted artifact in a fresh subprocess; write ``verification.json``.

    With ``bundle``, a plan that has a compile-cache bundle also gets its set-up measured with
    and without it, each in a fresh process with empty cache folders (the result's ``bundle``).
    Returns the verification document: ``{"schema": 1, "passed": bool, "artifacts": [...]}``.
    """
    from .verify import ARTIFACTS, OK_STATUSES, run_artifact

    out = Path(out_dir)
    # Clear errors before any subprocess starts: the catalog, and where the corpus is.
    where = corpus_dir_of(out, output.read_catalog(out), corpus)
    load_corpus(where)
    if holdout is not None and not 0.0 < holdout < 1.0:
        raise CompileOptionsError(f"--holdout {holdout} must be a fraction between 0 and 1")
    chosen = artifacts or ARTIFACTS
    unknown = sorted(set(chosen) - set(ARTIFACTS))
    if unknown:
        raise CompileOptionsError(f"unknown artifacts {unknown}; choose from {', '.join(ARTIFACTS)}")
    results = []
    for name in chosen:
        if progress is not None:
            progress(name)
        results.append(run_artifact(out, name, holdout=holdout, timeout=timeout, bundle=bundle, corpus=where))
    # Artifacts not re-run this time keep their last result.
    previous_path = out / output.VERIFICATION
    if artifacts and previous_path.is_file():
        previous = output.read_json(previous_path, "rerun 'guardscope verify DIR'")
        kept = [r for r in previous.get("artifacts", []) if r.get("name") not in chosen]
        results = sorted(kept + results, key=lambda r: ARTIFACTS.index(r["name"]))
    document = {
        "schema": 1,
        "holdout": holdout,
        "passed": all(r["status"] in OK_STATUSES for r in results)
        and any(r["status"] == "passed" for r in results),
        "artifacts": results,
    }
    output.write_json(out / output.VERIFICATION, document)
    from .report import write_report

    write_report(out)
    return document


# --- diff --------------------------------------------------------------------------------------


def diff_analyses(
    old: str | Path,
    new: str | Path,
    *,
    ignore: tuple[str, ...] = (),
    html: str | Path | None = None,
    json_path: str | Path | None = None,
) -> CatalogDiff:
    """Compare two analyses (each an analysis folder or its ``catalog.json``); ``old`` is the
    baseline. Writes the HTML page to ``html`` and the diff JSON to ``json_path`` when given.

    Returns the :class:`guardscope.diff.CatalogDiff`; its ``identical`` says whether compiles,
    failures and topologies are the same (see :func:`guardscope.diff.diff_catalogs`).
    """
    from .diff import diff_catalogs
    from .report import write_diff_html

    result = diff_catalogs(output.read_catalog_at(old), output.read_catalog_at(new),
                           ignore=ignore, labels=(str(old), str(new)))
    if json_path is not None:
        output.write_json(json_path, result.to_json())
    if html is not None:
        write_diff_html(html, result)
    return result
# --- bench -------------------------------------------------------------------------------------


def bench(
    out_dir: str | Path,
    *,
    device: str = "cuda",
    corpus: str | Path | None = None,
    strategies: tuple[str, ...] | None = None,
    backend: str = "inductor",
    repeat: int = 1,
    paired: int = 1,
    timeout: float = 1200.0,
    criteria: Any = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure serving latency under each strategy, each in a fresh process; write ``bench.json``.

    Strategies (see :mod:`guardscope.bench`): ``eager``, ``compile`` (plain torch.compile),
    ``warmup``, ``unbacked`` and ``export`` (torch.export + AOTInductor, eager fallback outside the
    bounds); the last three need ``emit-warmup``. ``device`` defaults to CUDA: on a machine
    without one this raises unless ``device="cpu"`` is asked for explicitly. ``corpus`` overrides
    the analysed corpus (the same requests elsewhere, e.g. on the GPU machine). Returns the
    document written to ``DIR/bench.json`` (and refreshes ``report.html``).
    """
    import torch

    from . import bench as benchmark

    out = Path(out_dir)
    catalog = output.read_catalog(out)
    chosen = tuple(strategies or benchmark.STRATEGIES)
    unknown = sorted(set(chosen) - set(benchmark.STRATEGIES))
    if unknown:
        raise CompileOptionsError(f"unknown strategies {unknown}; choose from {', '.join(benchmark.STRATEGIES)}")
    if repeat < 1:
        raise CompileOptionsError(f"--repeat {repeat} must be at least 1")
    if paired < 0:
        raise CompileOptionsError(f"--paired {paired} must be 0 (off) or more")
    if timeout <= 0:
        raise CompileOptionsError(f"--timeout {timeout} must be positive")
    try:
        parsed = torch.device(device)
    except RuntimeError as exc:
        raise CompileOptionsError(f"device {device!r} is not a torch device: {exc}") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise CompileOptionsError(
            f"guardscope bench measures serving latency on a GPU (device {device!r}), but "
            f"torch.cuda.is_available() is False here (torch {torch.__version__}). Run it on a CUDA "
            "machine, or pass --device cpu to measure CPU serving (slow: every strategy compiles "
            "with inductor for the CPU; meant for testing)"
        )
    corpus_dir = corpus_dir_of(out, catalog, corpus)
    samples = len(load_corpus(corpus_dir))  # a clear error before any subprocess starts
    options = production_options(catalog, backend=backend, device=device)
    options.validate()
    rows = []
    for name in benchmark.STRATEGIES:
        if name not in chosen:
            continue
        if progress is not None:
            progress(name)
        rows.append(benchmark.run_strategy(
            out, name, device=device, backend=backend,
            corpus_dir=corpus_dir.resolve() if corpus is not None else None,
            repeat=repeat, paired=paired, timeout=timeout,
        ))
    compile_options = options.compile_json()
    import importlib.util

    bytecode = benchmark.bytecode_note(bool(sys.flags.dont_write_bytecode),
                                       Path(importlib.util.cache_from_source(torch.__file__)).is_file())
    document = benchmark.build_document(
        rows,
        criteria=criteria or benchmark.Criteria(),
        torch_version=torch_compat.torch_version(),
        device=device,
        options={key: compile_options[key] for key in ("backend", "dynamic", "fullgraph", "mode", "inference_mode")},
        corpus_path=Path(os.path.relpath(corpus_dir.resolve(), out.resolve())).as_posix(),
        samples=samples,
        repeat=repeat,
        paired=paired,
        notes=(bytecode,) if bytecode else (),
    )
    output.write_json(out / output.BENCH, document)
    from .report import write_report

    write_report(out)
    return document
# --- bundle ------------------------------------------------------------------------------------


def production_backend(out_dir: str | Path, corpus: str | Path | None = None) -> str:
    """The backend production compiles with: the corpus manifest's ``compile.backend``, else
    inductor (an analysis runs with eager, so the catalog's backend is not it)."""
    from .corpus import read_manifest

    out = Path(out_dir)
    catalog = output.read_catalog(out)
    return str(read_manifest(corpus_dir_of(out, catalog, corpus)).compile.get("backend") or "inductor")


def bundle(
    out_dir: str | Path,
    *,
    artifacts: tuple[str, ...] | None = None,
    backend: str | None = None,
    device: str | None = None,
    timeout: float = 3600.0,
    progress: Callable[[str], None] | None = None,
    corpus: str | Path | None = None,
) -> list[dict[str, Any]]:
    """Compile each plan (``warmup``, ``unbacked``) with the production backend on ``device`` in a
    fresh process with empty compile caches, and save its compile-cache bundle beside its module:
    ``DIR/<plan>.compile-cache.bin`` + ``.json`` (see :mod:`guardscope.bundle`). Run it on a
    machine of the production kind. Returns the manifests; refreshes ``report.html``.
    """
    from .bundle import ARTIFACTS, make_bundle
    from .errors import BundleError
    from .replay import BACKENDS
    from .verify import FILES

    out = Path(out_dir)
    catalog = output.read_catalog(out)
    chosen = artifacts or ARTIFACTS
    unknown = sorted(set(chosen) - set(ARTIFACTS))
    if unknown:
        raise CompileOptionsError(f"unknown plans {unknown}; bundles are made for {', '.join(ARTIFACTS)}")
    missing = [FILES[name] for name in chosen if not (out / FILES[name]).is_file()]
    if missing:
        raise BundleError(f"{', '.join(missing)} not found in {out}: run 'guardscope emit-warmup {out}' first")
    backend = backend or production_backend(out, corpus)
    if backend not in BACKENDS:
        raise CompileOptionsError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    device = device or catalog["compile"].get("device") or "cpu"
    manifests = []
    for name in chosen:
        if progress is not None:
            progress(name)
        manifests.append(make_bundle(out, name, backend=backend, device=device, timeout=timeout, corpus=corpus))
    from .report import write_report

    write_report(out)
    return manifests
