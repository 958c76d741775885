"""The library facade: each function is one user-level operation, wiring the pure stages.

``analyze`` = load the corpus -> replay (torch.compile) -> classify + catalog (pure) -> write.
The CLI is a thin layer over these functions; scripts can call them directly.
"""

from __future__ import annotations

import os
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


def options_from_manifest(compile_options: dict[str, Any], **overrides: Any) -> ReplayOptions:
    """Production compile options from the manifest, then the caller's overrides (not None)."""
    known = {"dynamic", "fullgraph", "mode"}
    unknown = sorted(set(compile_options) - known - {"backend"})
    options = ReplayOptions(
        dynamic=compile_options.get("dynamic"),
        fullgraph=bool(compile_options.get("fullgraph", False)),
        mode=compile_options.get("mode"),
    )
    if options.dynamic not in (None, True, False):
        raise CompileOptionsError(
            f"manifest compile.dynamic is {options.dynamic!r}; use true, false or null"
        )
    if unknown:
        torch_compat.warn_once(f"ignoring unknown compile options in the manifest: {unknown}")
    return replace(options, **{k: v for k, v in overrides.items() if v is not None})


def analyze(
    corpus_dir: str | Path,
    out_dir: str | Path,
    *,
    model: str | None = None,
    strict: bool = False,
    force: bool = False,
    progress: Callable[[int], None] | None = None,
    replay_mode: str = "auto",
    **overrides: Any,
) -> Analysis:
    """Replay ``corpus_dir`` and write ``catalog.json``, ``timings.json`` and ``trace/``.

    ``overrides`` are :class:`ReplayOptions` fields (``backend``, ``dynamic``, ``device``...).
    ``replay_mode``: ``"guards"`` skips the forward of samples an existing graph accepts (only
    with ``fullgraph``; see :func:`guardscope.replay.replay`), ``"full"`` runs every sample,
    ``"auto"`` picks ``"guards"`` when it is sound.
    With ``strict``, an unclassified guard failure or unreadable trace record raises
    :class:`TraceParseError` after the outputs are written.
    """
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
    user_model = load_model(spec, base_dir=corpus.path)
    out = output.prepare_output_dir(out_dir, force=force)

    builder = CatalogBuilder()
    with output.open_trace_stream(out) as trace_stream:
        result = replay(
            user_model,
            corpus,
            options,
            on_sample=builder.add_sample,
            trace_stream=trace_stream,
            progress=progress,
            guard_only=replay_mode in ("auto", "guards"),
        )
    catalog = builder.build(
        events=result.events,
        torch_version=result.torch_version,
        corpus_path=Path(os.path.relpath(corpus.path.resolve(), out.resolve())).as_posix(),
        model=spec,
        compile_options=options.compile_json(),
        replay_mode=result.replay_mode,
        unparsed=result.unparsed,
        arguments=result.arguments,
    )
    catalog_path = output.write_json(out / output.CATALOG, catalog.to_json())
    timings_path = output.write_json(
        out / output.TIMINGS,
        {
            "replay_seconds": round(result.seconds, 6),
            "compiles": [
                {"compile_id": e.compile_id, "sample": e.sample, "seconds": e.seconds}
                for e in sorted(result.events, key=lambda e: (e.frame_id, e.frame_compile_id))
            ],
        },
    )
    analysis = Analysis(
        catalog=catalog,
        out_dir=out,
        catalog_path=catalog_path,
        trace_path=out / output.TRACE_DIR / output.TRACE_FILE,
        timings_path=timings_path,
        replay_seconds=result.seconds,
        warnings=tuple(warnings),
    )
    if strict and catalog.unparsed:
        details = ", ".join(f"{k}: {v}" for k, v in sorted(catalog.unparsed.items()))
        raise TraceParseError(
            f"strict mode: {details} (see 'other' failures in {catalog_path}); "
            "rerun without --strict to accept them"
        )
    return analysis


def compile_seconds(analysis: Analysis) -> dict[str, float | None]:
    return {e.event.compile_id: e.event.seconds for e in analysis.catalog.compiles}
