"""The library facade: each function is one user-level operation, wiring the pure stages.

``analyze`` = load the corpus -> replay (torch.compile) -> classify + catalog (pure) -> write.
The CLI is a thin layer over these functions; scripts can call them directly.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from . import output, torch_compat
from .catalog import CatalogBuilder
from .corpus import load_corpus
from .errors import CompileOptionsError, TraceParseError
from .model import Catalog
from .modelspec import load_model
from .replay import ReplayOptions, replay


@dataclass(frozen=True)
class Analysis:
    catalog: Catalog
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
    """
    from .errors import ShardError
    from .replay import ReplaySession

    corpus = load_corpus(corpus_dir)
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
    warnings = [w for w in (torch_compat.check_supported_version(),) if w]
    fingerprint = _fingerprint(corpus, spec, options, replay_mode)
    out = output.prepare_output_dir(out_dir, force=force, resume=resume)
    state = output.read_checkpoint(out, fingerprint) if resume else None
    if not resume:
        output.clear_checkpoint(out)
    user_model = load_model(spec, base_dir=corpus.path)

    builder = CatalogBuilder.from_state(state["builder"]) if state else CatalogBuilder()
    skipped: list[dict[str, str]] = list(state["skipped_shards"]) if state else []
    next_shard = state["next_shard"] if state else 0
    done_before = builder.samples
    if progress is not None and done_before:
        progress(done_before)
    with output.open_trace_stream(out, append=resume) as trace_stream, ReplaySession(
        user_model,
        options,
        on_sample=builder.add_sample,
        trace_stream=trace_stream,
        progress=(lambda done: progress(done_before + done)) if progress else None,
        guard_only=replay_mode in ("auto", "guards"),
    ) as session:
        if state:
            # Rebuild the graphs the finished shards compiled: their compile events come back
            # identical, so the catalog equals an uninterrupted run's.
            session.warm(corpus.sample(index) for index in state["compile_samples"])
        last_checkpoint = time.monotonic()
        for position, shard in enumerate(corpus.manifest.shards):
            if position < next_shard:
                continue
            try:
                samples = corpus.load_shard(shard)
            except ShardError as exc:
                if not skip_bad_shards:
                    raise
                skipped.append({"file": shard.file, "error": str(exc)})
                warnings.append(f"skipped shard {shard.file}: {exc}")
            else:
                session.replay(samples)
            if time.monotonic() - last_checkpoint < checkpoint_every and position > next_shard:
                continue
            last_checkpoint = time.monotonic()
            output.write_checkpoint(
                out,
                {
                    "fingerprint": fingerprint,
                    "next_shard": position + 1,
                    "compile_samples": session.compile_samples(),
                    "builder": builder.to_state(),
                    "skipped_shards": skipped,
                    "seconds": (state["seconds"] if state else 0.0) + session.seconds,
                },
            )
        result = session.result()
    replay_seconds = (state["seconds"] if state else 0.0) + result.seconds
    catalog = builder.build(
        events=result.events,
        torch_version=result.torch_version,
        corpus_path=Path(os.path.relpath(corpus.path.resolve(), out.resolve())).as_posix(),
        model=spec,
        compile_options=options.compile_json(),
        replay_mode=result.replay_mode,
        unparsed=result.unparsed,
        arguments=result.arguments,
        skipped_shards=tuple(skipped),
    )
    catalog_path = output.write_json(out / output.CATALOG, catalog.to_json())
    timings_path = output.write_json(
        out / output.TIMINGS,
        {
            "replay_seconds": round(replay_seconds, 6),
            "compiles": [
                {"compile_id": e.compile_id, "sample": e.sample, "seconds": e.seconds}
                for e in sorted(result.events, key=lambda e: (e.frame_id, e.frame_compile_id))
            ],
        },
    )
    output.clear_checkpoint(out)
    from .report import write_report

    write_report(out)
    if catalog.not_analysed:
        warnings.append(
            f"{len(catalog.not_analysed)} samples ran without a compiled graph (Dynamo's recompile "
            f"limit, {options.recompile_limit} here, was reached): they are listed as not analysed"
        )
    analysis = Analysis(
        catalog=catalog,
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


def _load_analysis(out_dir: str | Path) -> tuple[Path, dict[str, Any], Any, Any]:
    out = Path(out_dir)
    catalog = output.read_catalog(out)
    corpus = load_corpus(out / catalog["corpus"]["path"])
    model = load_model(catalog["model"], base_dir=corpus.path)
    return out, catalog, corpus, model


def emit_warmup(out_dir: str | Path, *, margin: float = 0.0) -> Fixes:
    """Write the three fixes for the analysis in ``out_dir`` (see DESIGN "Emitted modules")."""
    from . import plan as planning
    from .corpus import CorpusWriter
    from .emit.export_dims import render_export_dims
    from .emit.unbacked import render_unbacked
    from .emit.warmup import render_warmup

    if margin < 0:
        raise CompileOptionsError(f"margin {margin} must be >= 0")
    out, catalog, corpus, model = _load_analysis(out_dir)
    options = production_options(catalog)
    warmup_plan = planning.plan_warmup(model, catalog["topologies"], corpus.sample, options)
    unbacked_plan = planning.residual_samples(model, corpus, planning.choose_unbacked(catalog), options)
    export_plan = planning.choose_export_dims(catalog, margin)

    for folder, samples in (
        ("warmup", [step.sample for step in warmup_plan.steps]),
        ("unbacked_warmup", list(unbacked_plan.residual)),
    ):
        target = out / folder
        spec = _respec(catalog["model"], corpus.path, target)
        with CorpusWriter(target, model=spec, compile=corpus.manifest.compile, overwrite=True) as writer:
            for index in samples:
                sample = corpus.sample(index)
                writer.add(*sample.args, **sample.kwargs)

    codes = {
        "warmup": render_warmup(catalog, warmup_plan),
        "unbacked": render_unbacked(
            catalog, unbacked_plan, plain_graphs=warmup_plan.graphs,
            supports_unbacked_sources=torch_compat.supports_unbacked_sources(),
        ),
        "export": render_export_dims(catalog, export_plan),
    }
    files = {"warmup": "warmup.py", "unbacked": "unbacked.py", "export": "export_dims.py"}
    written = [output.write_text(out / files[name], code) for name, code in codes.items()]
    fixes = {
        "schema": 1,
        "artifacts": [
            {
                "name": "warmup",
                "file": files["warmup"],
                "title": "Warmup set",
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
                "file": files["unbacked"],
                "title": "mark_unbacked configuration",
                "summary": (
                    f"{len(unbacked_plan.dims)} dims unbacked, duck sizing "
                    f"{'on' if unbacked_plan.duck_shape else 'off'}; {len(unbacked_plan.residual)} residual "
                    f"warmup samples, {unbacked_plan.graphs} graphs (plain warmup: {warmup_plan.graphs})"
                ),
                "code": codes["unbacked"],
                "details": {
                    "dims": [f"{d.argument}:{d.axis}" for d in unbacked_plan.dims],
                    "duck_shape": unbacked_plan.duck_shape,
                    "residual_samples": list(unbacked_plan.residual),
                    "graphs": unbacked_plan.graphs,
                },
            },
            {
                "name": "export",
                "file": files["export"],
                "title": "torch.export Dim bounds",
                "summary": f"{len(export_plan.dims)} Dims for {sum(len(d.members) for d in export_plan.dims)} dynamic dims"
                + (f", margin {export_plan.margin:.0%}" if export_plan.margin else ""),
                "code": codes["export"],
                "details": {
                    "dims": {d.name: [d.min, d.max] for d in export_plan.dims},
                    "example_sample": export_plan.example_sample,
                    "not_declared": list(export_plan.warnings),
                },
            },
        ],
    }
    written.append(output.write_json(out / output.FIXES, fixes))
    from .report import write_report

    written.append(write_report(out))
    return Fixes(out_dir=out, files=tuple(written), warmup=warmup_plan, unbacked=unbacked_plan, export=export_plan)


# --- verify ------------------------------------------------------------------------------------


def verify(
    out_dir: str | Path,
    *,
    artifacts: tuple[str, ...] | None = None,
    holdout: float | None = None,
    timeout: float = 3600.0,
    progress: Callable[[str], None] | None = None,
    bundle: bool = True,
) -> dict[str, Any]:
    """Verify each emitted artifact in a fresh subprocess; write ``verification.json``.

    With ``bundle``, a plan that has a compile-cache bundle also gets its set-up measured with
    and without it, each in a fresh process with empty cache folders (the result's ``bundle``).
    Returns the verification document: ``{"schema": 1, "passed": bool, "artifacts": [...]}``.
    """
    from .verify import ARTIFACTS, run_artifact

    out = Path(out_dir)
    output.read_catalog(out)  # a clear error before any subprocess starts
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
        results.append(run_artifact(out, name, holdout=holdout, timeout=timeout, bundle=bundle))
    # Artifacts not re-run this time keep their last result.
    previous_path = out / output.VERIFICATION
    if artifacts and previous_path.is_file():
        previous = output.read_json(previous_path, "rerun 'guardscope verify DIR'")
        kept = [r for r in previous.get("artifacts", []) if r.get("name") not in chosen]
        results = sorted(kept + results, key=lambda r: ARTIFACTS.index(r["name"]))
    document = {
        "schema": 1,
        "holdout": holdout,
        "passed": all(r["status"] in ("passed", "skipped") for r in results)
        and any(r["status"] == "passed" for r in results),
        "artifacts": results,
    }
    output.write_json(out / output.VERIFICATION, document)
    from .report import write_report

    write_report(out)
    return document


# --- bundle ------------------------------------------------------------------------------------


def production_backend(out_dir: str | Path) -> str:
    """The backend production compiles with: the corpus manifest's ``compile.backend``, else
    inductor (an analysis runs with eager, so the catalog's backend is not it)."""
    from .corpus import read_manifest

    out = Path(out_dir)
    catalog = output.read_catalog(out)
    return str(read_manifest(out / catalog["corpus"]["path"]).compile.get("backend") or "inductor")


def bundle(
    out_dir: str | Path,
    *,
    artifacts: tuple[str, ...] | None = None,
    backend: str | None = None,
    device: str | None = None,
    timeout: float = 3600.0,
    progress: Callable[[str], None] | None = None,
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
    backend = backend or production_backend(out)
    if backend not in BACKENDS:
        raise CompileOptionsError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    device = device or catalog["compile"].get("device") or "cpu"
    manifests = []
    for name in chosen:
        if progress is not None:
            progress(name)
        manifests.append(make_bundle(out, name, backend=backend, device=device, timeout=timeout))
    from .report import write_report

    write_report(out)
    return manifests
