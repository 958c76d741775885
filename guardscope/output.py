"""The only module that writes analysis results to disk.

Every file is written atomically (a temporary file in the same folder, then ``os.replace``), so
an interrupted run never leaves half a file behind, and an output folder that already holds
results is not overwritten without ``force``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any

from .errors import OutputError

CATALOG = "catalog.json"
TIMINGS = "timings.json"
TRACE_DIR = "trace"
TRACE_FILE = "torch_trace.log"
CUDAGRAPH_LOG = "cudagraphs.jsonl"  # what the cudagraphs loggers said, per sample (mode="reduce-overhead" on a GPU)
CHECKPOINT = ".guardscope-checkpoint.json"
CHECKPOINT_VERSION = 1


def prepare_output_dir(directory: str | Path, *, force: bool = False, resume: bool = False) -> Path:
    """Create ``directory``; refuse one that already holds results unless ``force``, and one
    holding an interrupted analysis unless ``resume`` or ``force``."""
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise OutputError(f"output path {path} exists and is not a directory")
    if resume:
        if not (path / CHECKPOINT).is_file():
            raise OutputError(
                f"nothing to resume in {path}: no interrupted analysis ({CHECKPOINT}) is there; "
                "run without --resume"
            )
    elif (path / CHECKPOINT).exists() and not force:
        raise OutputError(
            f"{path} holds an interrupted analysis; pass --resume to continue it or --force to "
            "start over"
        )
    elif (path / CATALOG).exists() and not force:
        raise OutputError(
            f"{path} already holds an analysis ({CATALOG}); pass --force to overwrite it "
            "or choose another --out directory"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create output directory {path}: {exc}") from exc
    return path


def remove_corpus(directory: str | Path) -> None:
    """Delete a corpus guardscope wrote (its manifest and shards, nothing else) if present."""
    path = Path(directory)
    if not (path / "corpus.json").is_file():
        return
    for item in [path / "corpus.json", *path.glob("shard-*.pt")]:
        item.unlink()
    try:
        path.rmdir()
    except OSError:
        pass  # something else lives there: leave it


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return path


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8, newlines as written) to ``path`` atomically."""
    return write_bytes(path, text.encode("utf-8"))


def dumps(data: Any) -> str:
    """The one JSON style of every file guardscope writes: stable, indented, newline-terminated."""
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: str | Path, data: Any) -> Path:
    return write_text(path, dumps(data))


def open_trace_stream(directory: str | Path, *, append: bool = False, name: str = TRACE_FILE,
                      keep_bytes: int | None = None) -> IO[str]:
    """The raw structured trace (or, with ``name=CUDAGRAPH_LOG``, the raw CUDA graph log
    lines as JSON), streamed while the replay runs (readable by tlparse).

    A resumed analysis appends (``append``) after cutting the file back to ``keep_bytes``, its
    size at the checkpoint: what the interrupted run wrote after it is replayed again, so the
    trace holds each compile once, as an uninterrupted run's does."""
    trace_dir = Path(directory) / TRACE_DIR
    trace_dir.mkdir(parents=True, exist_ok=True)
    path = trace_dir / name
    if append and keep_bytes is not None and path.is_file() and path.stat().st_size > keep_bytes:
        with open(path, "r+b") as existing:
            existing.truncate(keep_bytes)
    return open(path, "a" if append else "w", encoding="utf-8")


def stream_size(stream: IO[str] | None) -> int | None:
    """Bytes written to a trace stream so far (flushed first), for the checkpoint."""
    if stream is None:
        return None
    stream.flush()
    return stream.tell()


def write_checkpoint(directory: str | Path, state: dict[str, Any]) -> Path:
    """Progress after a finished shard, written atomically (an interruption keeps the last one)."""
    return write_text(Path(directory) / CHECKPOINT, json.dumps({"version": CHECKPOINT_VERSION, **state}))


def read_checkpoint(directory: str | Path, fingerprint: dict[str, Any]) -> dict[str, Any]:
    state = read_json(Path(directory) / CHECKPOINT, "run without --resume")
    if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION:
        raise OutputError(f"{Path(directory) / CHECKPOINT} is not a checkpoint this guardscope reads; use --force")
    if state.get("fingerprint") != fingerprint:
        raise OutputError(
            f"the interrupted analysis in {directory} used another corpus, model, torch or options; "
            "resume with the same command, or pass --force to start over"
        )
    return state


def clear_checkpoint(directory: str | Path) -> None:
    (Path(directory) / CHECKPOINT).unlink(missing_ok=True)


FIXES = "fixes.json"
PROBE_DIR = "probe"
PROBE_FILE = "probe.json"
VERIFICATION = "verification.json"
BENCH = "bench.json"
# A plan's compile-cache bundle (guardscope bundle DIR): DIR/<plan>.compile-cache.bin + .json.
BUNDLE_SUFFIX = ".compile-cache.bin"
BUNDLE_MANIFEST_SUFFIX = ".compile-cache.json"


def bundle_files(artifact: str) -> tuple[str, str]:
    """File names of a plan's bundle and its manifest, beside the plan's module."""
    return artifact + BUNDLE_SUFFIX, artifact + BUNDLE_MANIFEST_SUFFIX


def read_json(path: str | Path, what: str) -> Any:
    """Read one of guardscope's JSON results; a missing or broken file says how to make it."""
    from .errors import CatalogError

    path = Path(path)
    if not path.is_file():
        raise CatalogError(f"{path} not found: {what}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CatalogError(f"{path} is not readable JSON ({exc}): {what}") from exc


def read_catalog(directory: str | Path) -> dict[str, Any]:
    catalog = read_json(Path(directory) / CATALOG, "run 'guardscope analyze CORPUS --out DIR' first")
    _check_schema(catalog, Path(directory) / CATALOG)
    return catalog


def _check_schema(catalog: Any, path: Path) -> None:
    if not isinstance(catalog, dict) or catalog.get("schema") != 1:
        from .errors import CatalogError

        raise CatalogError(
            f"{path} has schema {catalog.get('schema') if isinstance(catalog, dict) else None!r}; "
            "this guardscope reads schema 1: re-run 'guardscope analyze'"
        )


# What every catalog holds (see README "catalog.json"); fixes.json and verification.json also
# carry "schema": 1, so the schema alone does not say a file is a catalog.
CATALOG_KEYS = ("torch_version", "corpus", "compile", "summary", "compiles", "topologies")


def read_catalog_at(path: str | Path) -> dict[str, Any]:
    """Read an analysis's catalog from its folder or from the ``catalog.json`` path itself."""
    from .errors import CatalogError

    path = Path(path)
    if path.is_dir():
        path = path / CATALOG
    elif not path.exists():
        raise CatalogError(
            f"{path} not found: pass an analysis folder (from 'guardscope analyze CORPUS --out DIR') "
            "or its catalog.json"
        )
    catalog = read_json(path, "pass an analysis folder written by 'guardscope analyze' or its catalog.json")
    missing = [key for key in CATALOG_KEYS if key not in catalog] if isinstance(catalog, dict) else list(CATALOG_KEYS)
    if not isinstance(catalog, dict) or "schema" not in catalog or (catalog.get("schema") == 1 and missing):
        raise CatalogError(
            f"{path} is not a guardscope catalog (it lacks {', '.join(missing) or 'schema'}); pass the "
            "catalog.json that 'guardscope analyze' writes, or its folder"
        )
    _check_schema(catalog, path)
    return catalog
