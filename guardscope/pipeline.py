"""The library facade: one function per user-level operation, each running its stages in order,
handing their documents to :mod:`guardscope.store` and rendering the report once.

``analyze`` = load the corpus -> replay (torch.compile) -> classify + catalog (pure) -> write.
The CLI is a thin layer over these functions; scripts can call them directly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from . import checkpoint, store, torch_compat
from .catalog.buckets import SHAPES_PER_GRAPH
from .catalog.builder import CatalogBuilder
from .catalog.caveats import caveats
from .catalog.fleet import sample_groups, with_fleet
from .catalog.limits import production_limits, production_section
from .catalog.cudagraphs import CudagraphSettings
from .catalog.requests import request_summary
from .catalog.stalls import production_stalls
from .corpus import load_corpus, load_model
from .corpus.fleet.samples import group_tally, replica_of_samples
from .corpus.storage.weights import recorded_model_warning
from .errors import CompileOptionsError, CorpusError, TraceParseError
from .json_text import as_read
from .model import Catalog
from .options import check_replay_request, dynamo_pairs, options_from_manifest

if TYPE_CHECKING:
    from .catalog.diff import CatalogDiff
    from .fixes.document import Fixes
    from .fixes.probe import ProbeResult
    from .options import ReplayOptions


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
    # What torch logged to the terminal while the corpus was replayed (its graph-break warnings):
    # one entry per cause, (level, cause, records); the lines themselves went to torch_log_file.
    torch_log: tuple[tuple[str, str, int], ...] = ()
    torch_log_file: Path | None = None
    # Signature records checked over columns and one by one (guardscope.replay.column_check's
    # ColumnStats as JSON); None when no record was checked over columns.
    column_checks: dict[str, Any] | None = None


def _render(out: Path, catalog: dict | None = None) -> Path:
    from .report import write_report

    return write_report(out) if catalog is None else write_report(out, catalog)


# --- analyze -----------------------------------------------------------------------------------


def analyze(
    corpus_dir: str | Path,
    out_dir: str | Path,
    *,
    model: str | None = None,
    strict: bool = False,
    force: bool = False,
    resume: bool = False,
    skip_bad_shards: bool = False,
    progress: Callable[[int, int], None] | None = None,
    notice: Callable[[str], None] | None = None,
    replay_mode: str = "auto",
    checkpoint_every: float = 10.0,
    paddable: tuple[str, ...] | None = None,
    shapes_per_graph: int = SHAPES_PER_GRAPH,
    engine: str = "embedded",
    scheduler: str | None = None,
    replica_compiles: bool | None = None,
    **overrides: Any,
) -> Analysis:
    """Replay ``corpus_dir`` and write ``catalog.json``, ``timings.json``, ``trace/`` and
    ``report.html``.

    A fleet's corpus (several replicas' rows): with ``replica_compiles`` (None: for fleets of at
    most :data:`REPLICA_REPLAYS` replicas) each replica's calls are replayed alone too, and the
    catalog's ``replica_compiles`` says what each replica's own process compiles.

    ``overrides`` are :class:`ReplayOptions` fields (``backend``, ``dynamic``, ``device``...).
    ``replay_mode``: ``"guards"`` skips the forward of samples an existing graph accepts (only
    with ``fullgraph``; see :class:`guardscope.replay.session.ReplaySession`), ``"full"`` runs every
    sample, ``"auto"`` picks ``"guards"`` when it is sound.

    The replay goes shard by shard and checkpoints after a finished shard at most every
    ``checkpoint_every`` seconds (and after the first), so an interrupted analysis keeps its
    finished shards and ``resume=True`` continues it (the finished samples are replayed again,
    unreported, to rebuild the Dynamo state they left: :mod:`guardscope.replay.resumable`). With ``skip_bad_shards`` a
    corrupt shard is listed in the catalog instead of stopping the analysis. Ctrl-C or SIGTERM
    stops the replay after the sample in flight (``notice`` is told when one arrives; a second
    stops it at once). ``engine``: where a traffic log's shards are read and decoded,
    ``"embedded"`` (this process) or ``"dask"`` (a Dask cluster at ``scheduler``, else a
    ``LocalCluster``: :mod:`guardscope.replay.engines`); the catalog is the same. With ``strict``, an
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
    from .replay.engines import engine as start_engine

    corpus = load_corpus(corpus_dir)
    if len(corpus) == 0:
        raise CorpusError(_empty_corpus(corpus_dir, corpus.manifest.recording))
    spec = model or corpus.manifest.model
    options, cudagraphs, warnings = _replay_options(corpus, overrides, replay_mode, paddable, shapes_per_graph)
    # Everything the user can get wrong is checked before the output folder is touched.
    method, user_model = _checked_model(corpus, spec, options, warnings)
    reader = start_engine(engine, scheduler, notice)  # an unreachable scheduler: before the folder is touched
    try:
        return _analyze(corpus, corpus_dir, out_dir, spec, method, user_model, options, reader, warnings, cudagraphs,
                        strict=strict, force=force, resume=resume, skip_bad_shards=skip_bad_shards,
                        progress=progress, notice=notice, replay_mode=replay_mode, checkpoint_every=checkpoint_every,
                        replica_compiles=replica_compiles)
    finally:
        reader.close()


def _replay_options(corpus: Any, overrides: dict[str, Any], replay_mode: str, paddable: tuple[str, ...] | None,
                    shapes_per_graph: int) -> tuple[ReplayOptions, CudagraphSettings | None, list[str]]:
    """The replay's options from the manifest and ``overrides``, validated; the CUDA graph settings
    when the compile mode uses CUDA graphs; and the warnings about the request so far."""
    # Production's grad mode: asked for (--grad-mode), else recorded, else the compile options' older
    # inference_mode, else inference mode.
    grad_mode = overrides.pop("grad_mode", None) or corpus.manifest.grad_mode
    options = options_from_manifest(corpus.manifest.compile, dynamo_config=dynamo_pairs(corpus.manifest.dynamo_config),
                                    grad_mode=grad_mode, **overrides)
    options.validate()
    warnings = [w for w in (torch_compat.check_supported_version(),) if w]
    warnings += check_replay_request(options, replay_mode, shapes_per_graph)
    cudagraphs = (
        CudagraphSettings(observed=options.uses_cudagraphs, paddable=paddable,
                          shapes_per_graph=shapes_per_graph, **torch_compat.cudagraph_config())
        if torch_compat.mode_uses_cudagraphs(options.mode) else None
    )
    return options, cudagraphs, warnings


def _checked_model(corpus: Any, spec: str, options: ReplayOptions, warnings: list[str]) -> tuple[str | None, Any]:
    """The callable production compiled (the model, or the method the corpus names: model.forward),
    loaded and checked against the first sample and the unbacked marks; a recorded-model warning is
    added to ``warnings``."""
    from .replay.runner import check_call_fits, check_marks

    method = corpus.manifest.method
    user_model = load_model(spec, base_dir=corpus.path, method=method)
    first = corpus.sample(0)
    check_call_fits(user_model, first, str(corpus.path / corpus.manifest.shards[0].file), spec)
    check_marks(user_model, first, options.mark_unbacked)
    warnings += [w for w in (recorded_model_warning(corpus.manifest.recorded_model, user_model),) if w]
    if corpus.manifest.recording:
        warnings.append(open_recording_warning(corpus))
    return method, user_model


def _empty_corpus(corpus_dir: str | Path, recording: bool) -> str:
    """Why a corpus holds no samples: its recorder, still open, has not flushed what it holds yet,
    or nothing was recorded."""
    if not recording:
        return f"the corpus {corpus_dir} holds no samples: record some calls into it first"
    return (f"the corpus {corpus_dir} holds no samples yet: its recorder is still open and has flushed "
            "nothing (a recorder writes the calls it holds on flush() or close(), a TrafficRecorder also "
            "every flush_every seconds, 30 by default); run this again after its next flush or once it "
            "is closed (a recorder that ended without closing lost the calls it held)")


# A fleet of at most this many replicas gets each replica replayed alone by default (each replay
# compiles that replica's graphs again: 64 replicas of the seed would add minutes to a 90 s analysis).
REPLICA_REPLAYS = 16


def _replica_compiles(corpus: Any, model: Any, options: Any) -> dict[str, int] | None:
    """A fleet's analysis: the graphs each replica's own process compiles, its calls replayed alone
    (:mod:`guardscope.replay.replicas`); None when the replicas cannot be told apart now."""
    from .replay.replicas import replica_compiles

    owners = replica_of_samples(corpus)
    if owners is None or len(owners[0]) < 2:
        return None
    with torch_compat.torch_logs_captured():  # the same lines as the fleet's replay, kept in its log
        return replica_compiles(corpus, model, options, *owners)


def open_recording_warning(corpus: Any) -> str:
    """A corpus whose writer had not closed when it last wrote the manifest (a recorder still
    running, or a killed one): what the analysis covers and what it cannot."""
    return (f"{corpus.path} is a recording whose writer had not closed (a recorder still running, or a process "
            f"killed): the analysis covers the {len(corpus):,} calls it had flushed; the calls it took after its "
            "last flush (at most one flush window) are not in the log")


def _analyze(corpus: Any, corpus_dir: str | Path, out_dir: str | Path, spec: str, method: str | None, user_model: Any, options: Any,
             reader: Any, warnings: list[str], cudagraphs: CudagraphSettings | None, *, strict: bool, force: bool,
             resume: bool, skip_bad_shards: bool, progress: Callable[[int, int], None] | None,
             notice: Callable[[str], None] | None, replay_mode: str, checkpoint_every: float,
             replica_compiles: bool | None = None) -> Analysis:
    from .replay.resumable import fingerprint, replay_corpus

    out = store.prepare_output_dir(out_dir, force=force, resume=resume)
    printed = fingerprint(corpus, spec if method is None else f"{spec} .{method}", options, replay_mode)
    state = checkpoint.begin_analysis(out, printed, resume=resume)

    builder = CatalogBuilder.from_state(state["builder"]) if state else CatalogBuilder(track_shapes=cudagraphs is not None)
    # torch's own terminal lines (a graph break's W-level warning with its source) belong in a log
    # file beside the trace, not between the progress lines: one line per cause is said at the end.
    with torch_compat.torch_logs_captured() as logged:
        try:
            replayed = replay_corpus(corpus, user_model, options, out, builder=builder, fingerprint=printed,
                                     state=state, replay_mode=replay_mode, checkpoint_every=checkpoint_every,
                                     skip_bad_shards=skip_bad_shards, track_lookup=cudagraphs is not None,
                                     progress=progress, notice=notice, engine=reader)
        finally:
            log_file = store.write_torch_log(out, store.ANALYZE_LOG, logged.text)
    causes = logged.ranked_causes()
    result = replayed.result
    catalog = _built_catalog(builder, replayed, corpus, out, spec, options, cudagraphs)
    catalog = _with_production(catalog, corpus, user_model, method, result.events)
    catalog = _with_replicas(catalog, corpus, replayed.skipped_shards, user_model, options, replica_compiles)
    catalog_path, timings_path = _write_outputs(out, catalog, corpus, replayed, builder, options, reader)
    warnings += [*replayed.warnings, *caveats(catalog, recompile_limit=options.recompile_limit,
                                                      frames_followed=result.frames_followed,
                                                      torch_version=torch_compat.torch_version(), out=out)]
    if strict and catalog.unparsed:
        details = ", ".join(f"{k}: {v}" for k, v in sorted(catalog.unparsed.items()))
        raise TraceParseError(
            f"strict mode: {details} (see 'other' failures in {catalog_path}); "
            "rerun without --strict to accept them"
        )
    return Analysis(catalog=catalog, corpus_dir=Path(corpus_dir), out_dir=out, catalog_path=catalog_path,
                    trace_path=out / store.TRACE_DIR / store.TRACE_FILE, timings_path=timings_path,
                    replay_seconds=replayed.seconds, warnings=tuple(warnings), torch_log=causes,
                    torch_log_file=log_file,
                    column_checks=result.column_checks.to_json() if result.column_checks is not None else None)


def _built_catalog(builder: CatalogBuilder, replayed: Any, corpus: Any, out: Path, spec: str, options: Any,
                   cudagraphs: CudagraphSettings | None) -> Catalog:
    """The catalog the replay's events and records build, its corpus path relative to ``out``."""
    result = replayed.result
    return builder.build(
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
        skipped_shards=replayed.skipped_shards,
        cudagraphs=cudagraphs,
        frame_arguments=result.frame_arguments,
        graph_breaks=result.graph_breaks,
    )


def _with_production(catalog: Catalog, corpus: Any, user_model: Any, method: str | None, events: Any) -> Catalog:
    """The catalog with the method compiled, what its indices are (an old log's: rows), the
    signature count corrected for calls kept in full checked over columns, the tagged requests,
    what production lives through under its recompile limits, and its recorded compile stalls."""
    from .corpus.chains import carries_state

    owner = torch_compat.forward_owner(user_model)
    if method is None and owner is not None and owner is not user_model:
        method = "forward"  # a spec returning model.forward: production compiles it in place, too
    if method is not None:
        catalog = replace(catalog, method=method)
    if corpus.row_indices:  # an old traffic log: its indices are its rows' order, not the calls'
        catalog = replace(catalog, indices="rows")
    if corpus.full_in_columns and catalog.signatures is not None:  # calls kept in full, checked over columns
        left = catalog.signatures["samples"] - sum(corpus.full_in_columns.values())
        catalog = replace(catalog, signatures={**catalog.signatures, "samples": left} if left > 0 else None)
    if corpus.requests is not None:
        catalog = replace(catalog, requests=request_summary(corpus.requests, catalog))
    limits = production_limits(corpus.manifest.dynamo_config, corpus.manifest.compile, torch_compat.dynamo_defaults())
    catalog = replace(catalog, production=production_section(catalog, limits, corpus.requests,
                                                              carries_state(corpus)))
    return replace(catalog, production_compiles=production_stalls(corpus.production_compiles, events))


def _with_replicas(catalog: Catalog, corpus: Any, skipped_shards: list[dict[str, Any]], user_model: Any,
                   options: Any, replica_compiles: bool | None) -> Catalog:
    """A merged fleet corpus: its calls per replica, and the graphs each replica's own process
    compiles; a traffic log with timestamps: each topology's first and last sighting (one read of
    the shards' few columns for both, a shard at a time)."""
    skipped = {entry["file"] for entry in skipped_shards}
    tally = group_tally(corpus, sample_groups(catalog, corpus.manifest.samples), len(catalog.topologies),
                        skipped) if catalog.samples else None
    if tally is not None and int(tally.calls.sum()) == catalog.samples:
        catalog = with_fleet(catalog, tally.names, tally.calls, tally.first_ns, tally.last_ns)
    if catalog.replicas is not None and not skipped_shards and (
            replica_compiles if replica_compiles is not None else len(catalog.replicas) <= REPLICA_REPLAYS):
        catalog = replace(catalog, replica_compiles=_replica_compiles(corpus, user_model, options))
    return catalog


def _write_outputs(out: Path, catalog: Catalog, corpus: Any, replayed: Any, builder: CatalogBuilder, options: Any,
                   reader: Any) -> tuple[Path, Path]:
    """Write ``catalog.json`` and ``timings.json`` (compile and CUDA graph recording times, column
    checks, the engine) and render the report; the two paths written."""
    result = replayed.result
    recording_times = builder.cudagraph_tally.recording_times() if options.uses_cudagraphs else None
    written = catalog.to_json()
    catalog_path, timings_path = checkpoint.write_analysis(out, written, corpus=corpus.path.resolve(), timings={
        "replay_seconds": round(replayed.seconds, 6),
        "compiles": [
            {"compile_id": e.compile_id, "sample": e.sample, "seconds": e.seconds}
            for e in sorted(result.events, key=lambda e: (e.frame_id, e.frame_compile_id))
        ],
        **({"cudagraph_recordings": recording_times} if recording_times is not None else {}),
        **({"column_checks": result.column_checks.to_json()} if result.column_checks is not None else {}),
        "engine": reader.summary(),
    })
    _render(out, as_read(written))
    return catalog_path, timings_path


# --- a fleet: several replicas' traffic as one corpus -------------------------------------------


FLEET_CORPUS = "fleet-corpus"  # where analyze merges several replicas' traffic, inside --out


def corpus_to_replay(paths: tuple[str, ...] | list[str], out_dir: str | Path, *, force: bool = False,
                     resume: bool = False, skip_bad_shards: bool = False,
                     notice: Callable[[str], None] | None = None) -> Path:
    """The one corpus ``analyze`` replays for its corpus arguments: a single corpus folder as it
    is, several replicas' traffic merged into ``OUT/fleet-corpus``. Whether they are a fleet is
    answered in one place, :func:`guardscope.corpus.fleet.replicas.fleet_of`, which also opens and
    checks the replicas it finds."""
    from .corpus.fleet.replicas import fleet_of

    replicas = fleet_of(paths)
    if replicas is None:
        return Path(paths[0])
    return fleet_corpus(paths, out_dir, force=force, resume=resume, skip_bad_shards=skip_bad_shards, notice=notice,
                        replicas=replicas)


def fleet_groups(paths: tuple[str, ...] | list[str]) -> list[tuple[str, list[str], dict[str, Any]]]:
    """The replicas ``paths`` name in groups recorded alike (``analyze --split-by model``): each
    group's name, replica folders and the settings that tell it from the others
    (:func:`guardscope.corpus.fleet.replicas.split_fleet`)."""
    from .corpus.fleet.replicas import split_fleet

    return split_fleet(paths)


def fleet_corpus(paths: tuple[str, ...] | list[str], out_dir: str | Path, *, force: bool = False, resume: bool = False,
                 skip_bad_shards: bool = False, notice: Callable[[str], None] | None = None,
                 replicas: list[Any] | None = None) -> Path:
    """Several replicas' traffic logs (corpus folders, folders of them, glob patterns) merged in
    fleet order (:mod:`guardscope.corpus.fleet.merge`) into ``OUT/fleet-corpus``, the corpus
    ``analyze`` then replays; the replicas are checked to be one fleet
    (:func:`guardscope.corpus.fleet.replicas.open_fleet`) before the output folder is touched, unless
    ``replicas`` gives them opened and checked already. A resumed analysis keeps the merged corpus
    it was reading."""
    from .corpus.fleet.merge import merge_fleet
    from .corpus.fleet.replicas import open_fleet
    from .corpus.storage.format import MANIFEST_NAME

    replicas = open_fleet(paths) if replicas is None else replicas
    out = store.prepare_output_dir(out_dir, force=force, resume=resume)
    target = out / FLEET_CORPUS
    if resume and (target / MANIFEST_NAME).is_file():
        return target
    merged = merge_fleet(replicas, target, overwrite=True, skip_bad_shards=skip_bad_shards)
    if notice is not None:
        for reason in merged.skipped:
            notice(f"skipped     {reason}")
        notice(f"merged      {merged.summary()} into {target}")
    return target


# --- the commands that read an analysis ---------------------------------------------------------


def emit_warmup(out_dir: str | Path, *, margin: float = 0.0, include_probed: bool = False,
                exclude_probed_sizes: tuple[int, ...] = (), corpus: str | Path | None = None,
                only: tuple[str, ...] | None = None, progress: Callable[[str], None] | None = None) -> Fixes:
    """Write the three fixes for the analysis in ``out_dir`` (see DESIGN "Emitted modules";
    :mod:`guardscope.fixes.document`), then refresh the report.

    With ``include_probed``, the warmup and the unbacked plan also cover the topologies
    ``probe`` found (``probe/corpus``), and ``verify`` replays those samples too, but those found by
    setting a dimension to one of ``exclude_probed_sizes`` (0: batches or sequences production
    never sends empty). ``only``: the plans to make (the warmup always; the others ``not planned``
    in fixes.json); ``progress`` hears a line as each plan starts and ends (and per topology of the
    warmup), only once the inputs are checked (the folder, its catalog, corpus and model): a caller's
    progress line never precedes an error about its inputs."""
    from .fixes.document import emit

    if margin < 0:
        raise CompileOptionsError(f"margin {margin} must be >= 0")
    if exclude_probed_sizes and not include_probed:
        raise CompileOptionsError("--exclude-probed-size leaves out probed topologies: use it with --include-probed")
    out, catalog, loaded, model = store.load_inputs(out_dir, corpus)
    store.refuse_foreign(out, [store.EMIT_LOG])
    # torch logs a failed trial (marks that make a shape data-dependent, an export it refuses)
    # with its whole traceback: those lines go to a file, the caller gets one entry per cause.
    with torch_compat.torch_logs_captured() as logged:
        try:
            fixes = emit(out, catalog, loaded, model, margin=margin, include_probed=include_probed,
                         exclude_probed_sizes=tuple(exclude_probed_sizes), only=only, progress=progress)
        finally:
            log_file = store.write_torch_log(out, store.EMIT_LOG, logged.text)
    report = _render(out)
    causes = logged.ranked_causes()
    return replace(fixes, files=(*fixes.files, *([log_file] if log_file else []), report),
                   torch_log=causes, torch_log_file=log_file)


def emit_canonical(out_dir: str | Path, transforms: tuple[str, ...], *, progress: Callable[[str], None] | None = None,
                   corpus: str | Path | None = None) -> tuple[Any, tuple[Path, ...]]:
    """``emit-warmup --transform``: write ``canonicalise.py`` and ``canonical_warmup/`` for the
    input transforms (:func:`guardscope.fixes.document.emit_canonical`); the other fixes are left
    as they are. Returns the plan and the files written."""
    from .fixes.document import emit_canonical as emit
    from .fixes.transforms import parse_transforms

    parsed = parse_transforms(transforms)  # before anything is loaded
    out, catalog, loaded, model = store.load_inputs(out_dir, corpus)
    return emit(out, catalog, loaded, model, parsed, progress=progress)


def probe(
    out_dir: str | Path,
    *,
    values: tuple[int, ...] | None = None,
    pairwise: str = "general",
    max_candidates: int | None = None,
    break_relations: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    corpus: str | Path | None = None,
    started: Callable[[], None] | None = None,
) -> ProbeResult:
    """Look for topologies the corpus of the analysis in ``out_dir`` has not shown yet (see
    :func:`guardscope.fixes.probe.run`); writes ``probe/`` and refreshes the report. ``started``
    is called once the request and the inputs are checked."""
    from .fixes.probe import check_request, run

    check_request(values, pairwise, max_candidates)  # before anything is loaded
    out, catalog, loaded, model = store.load_inputs(out_dir, corpus)
    if started is not None:
        started()
    result = run(out, catalog, loaded, model, values=values, pairwise=pairwise, max_candidates=max_candidates,
                 break_relations=break_relations, progress=progress)
    _render(out)
    return result


def whatif(
    out_dir: str | Path,
    transforms: tuple[str, ...] = (),
    *,
    json_path: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
    corpus: str | Path | None = None,
) -> dict[str, Any]:
    """Replay the corpus of the analysis in ``out_dir`` with each input transform alone and
    chained (:mod:`guardscope.fixes.whatif`); without ``transforms``, the chain the catalog's
    failure kinds suggest (:mod:`guardscope.fixes.advice`), and when it suggests none, nothing
    is replayed. The document carries the advice either way. Writes ``whatif.json`` (and
    ``json_path``, when given) and re-renders the report."""
    from .fixes.advice import advise, suggested_chain
    from .fixes.transforms import parse_transforms
    from .fixes.whatif import run

    parsed = parse_transforms(transforms) if transforms else None  # before anything is loaded
    out = Path(out_dir)
    catalog = store.read_catalog(out)
    store.refuse_foreign(out, [store.WHATIF])
    advice = advise(catalog)
    if parsed is None and suggested_chain(advice):
        parsed = parse_transforms(suggested_chain(advice))
    if parsed is None:
        document = {"schema": 1, "transforms": [], "rows": []}
    else:
        out, catalog, loaded, model = store.load_inputs(out_dir, corpus)
        document = run(catalog, loaded, model, parsed, progress=progress)
    document = {**document, "suggested": not transforms, "advice": [a.to_json() for a in advice],
                "catalog_sha256": store.catalog_digest(catalog)}
    store.write_document(out, store.WHATIF, document)
    if json_path is not None:
        store.write_json(json_path, document)
    _render(out)
    return document


def fidelity(
    out_dir: str | Path,
    *,
    backend: str = "inductor",
    device: str = "cuda",
    mode: str | None = None,
    timeout: float = 3600.0,
    corpus: str | Path | None = None,
    started: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Re-analyse the corpus of ``out_dir`` with the production backend and device, in a child
    process, and compare the two catalogs (:mod:`guardscope.proving.fidelity`); writes
    ``fidelity.json`` and refreshes the report. ``started`` is called once the catalog is read."""
    from .proving.fidelity import check

    out = Path(out_dir)
    catalog = store.read_catalog(out)
    if started is not None:
        started()
    document = check(out, catalog, corpus=corpus, backend=backend, device=device, mode=mode, timeout=timeout)
    _render(out)
    return document


def verify(
    out_dir: str | Path,
    *,
    artifacts: tuple[str, ...] | None = None,
    holdout: float | None = None,
    timeout: float = 3600.0,
    progress: Callable[[str], None] | None = None,
    bundle: bool = True,
    corpus: str | Path | None = None,
    backend: str | None = None,
    everything: bool = False,
) -> dict[str, Any]:
    """Verify each emitted fix in a fresh subprocess (:func:`guardscope.proving.verify.verify_fixes`),
    the plans compiled with ``backend`` (default: production's, recorded or inductor); writes
    ``verification.json`` and refreshes the report. Without ``artifacts``: what the user would
    deploy, every plan with ``everything`` (:func:`guardscope.proving.verify.deployed_artifacts`)."""
    from .proving.verify import verify_fixes

    out = Path(out_dir)
    # Clear errors before any subprocess starts: the catalog, and where the corpus is.
    where = store.corpus_dir_of(out, store.read_catalog(out), corpus)
    load_corpus(where)
    document = verify_fixes(out, where, artifacts=artifacts, holdout=holdout, timeout=timeout, progress=progress,
                            bundle=bundle, backend=backend, everything=everything)
    _render(out)
    return document


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
    """Measure serving latency under each strategy, each in a fresh process
    (:func:`guardscope.proving.bench.run_bench`); writes ``bench.json`` and refreshes the report."""
    from .proving.bench import run_bench

    out = Path(out_dir)
    catalog = store.read_catalog(out)
    document = run_bench(out, catalog, corpus=corpus, device=device, strategies=strategies, backend=backend,
                         repeat=repeat, paired=paired, timeout=timeout, criteria=criteria, progress=progress)
    _render(out)
    return document


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
    """Save a compile-cache bundle beside each plan (:func:`guardscope.proving.bundling.make_bundles`);
    refreshes the report. Returns the manifests."""
    from .proving.bundling import make_bundles

    out = Path(out_dir)
    catalog = store.read_catalog(out)
    manifests = make_bundles(out, catalog, corpus=corpus, artifacts=artifacts, backend=backend, device=device,
                             timeout=timeout, progress=progress)
    _render(out)
    return manifests


def precompile(
    out_dir: str | Path,
    *,
    backend: str | None = None,
    device: str | None = None,
    timeout: float = 3600.0,
    corpus: str | Path | None = None,
) -> dict[str, Any]:
    """Precompile the warmup plan ahead of time beside its module
    (:func:`guardscope.proving.precompiling.make_precompiled`); refreshes the report. Returns the manifest."""
    from .proving.precompiling import make_precompiled

    out = Path(out_dir)
    manifest = make_precompiled(out, store.read_catalog(out), corpus=corpus, backend=backend, device=device,
                                timeout=timeout)
    _render(out)
    return manifest


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

    Returns the :class:`guardscope.catalog.diff.CatalogDiff`; its ``identical`` says whether
    compiles, failures and topologies are the same (see :func:`guardscope.catalog.diff.diff_catalogs`).
    """
    from .catalog.diff import diff_catalogs
    from .report import write_diff_html

    result = diff_catalogs(store.read_catalog_at(old), store.read_catalog_at(new),
                           ignore=ignore, labels=(str(old), str(new)))
    if json_path is not None:
        store.write_json(json_path, result.to_json())
    if html is not None:
        write_diff_html(html, result)
    return result
