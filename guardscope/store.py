"""The analysis folder: every file name in it, every read (with its schema check) and every write.

Nothing else in guardscope opens a file of an analysis folder. Every file is written atomically (a temporary file in the same folder, then ``os.replace``), so
an interrupted run never leaves half a file behind, with the permissions the umask gives any file
the user writes (0644 by default). An output folder that already holds results is not overwritten
without ``force``, and guardscope never replaces a file it did not write: an analysis folder
lists the files guardscope wrote in it (``.guardscope-files.json``), and a write to a path that
exists but is not listed there is refused, ``force`` or not.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import IO, Any

from .errors import CatalogError, OutputError
from .files import write_atomic

CATALOG = "catalog.json"
TIMINGS = "timings.json"
TRACE_DIR = "trace"
TRACE_FILE = "torch_trace.log"
CUDAGRAPH_LOG = "cudagraphs.jsonl"  # what the cudagraphs loggers said, per sample (mode="reduce-overhead" on a GPU)
CHECKPOINT = ".guardscope-checkpoint.json"
CHECKPOINT_VERSION = 3  # 2: checkpoints within shards (next_sample); 3: members in MEMBERS
CHECKPOINT_VERSIONS = (2, 3)  # read: a version 2 checkpoint holds the members itself
# The topologies' members an interrupted analysis had found, streamed: each checkpoint appends
# those found since the one before (one JSON line), so a checkpoint's size does not grow with
# the corpus.
MEMBERS = ".guardscope-members.jsonl"
OWNED = ".guardscope-files.json"  # the files guardscope wrote in an analysis folder
LOCATIONS = "locations.json"  # where the analysed corpus was, absolutely (catalog.json stays machine-free)
# What analyze writes (and finds in an analysis folder made before OWNED existed).
FIXES = "fixes.json"
PROBE_DIR = "probe"
PROBE_FILE = "probe.json"
VERIFICATION = "verification.json"
BENCH = "bench.json"
# A plan's compile-cache bundle (guardscope bundle DIR): DIR/<plan>.compile-cache.bin + .json.
BUNDLE_SUFFIX = ".compile-cache.bin"
BUNDLE_MANIFEST_SUFFIX = ".compile-cache.json"
REPORT = "report.html"
FIDELITY = "fidelity.json"
FIDELITY_DIR = "fidelity"  # the production-backend analysis guardscope fidelity compares with
PROBE = f"{PROBE_DIR}/{PROBE_FILE}"
# Documents that carry "schema": this guardscope reads these versions.
SCHEMAS = {CATALOG: 1, FIXES: 1, VERIFICATION: 1, BENCH: 1, PROBE: 1, FIDELITY: 1}
# How to make each document again, for the message when it is missing or unreadable.
REMAKE = {
    CATALOG: "run 'guardscope analyze CORPUS --out {out}' first",
    TIMINGS: "re-run 'guardscope analyze CORPUS --out {out} --force'",
    FIXES: "run 'guardscope emit-warmup {out}'",
    VERIFICATION: "run 'guardscope verify {out}'",
    BENCH: "run 'guardscope bench {out}'",
    PROBE: "run 'guardscope probe {out}'",
    FIDELITY: "run 'guardscope fidelity {out}'",
}
ANALYSIS_FILES = (CATALOG, TIMINGS, REPORT, f"{TRACE_DIR}/{TRACE_FILE}", f"{TRACE_DIR}/{CUDAGRAPH_LOG}")


def prepare_output_dir(directory: str | Path, *, force: bool = False, resume: bool = False) -> Path:
    """Create ``directory``; refuse one that already holds results unless ``force``, one holding
    an interrupted analysis unless ``resume`` or ``force``, and a non-empty folder that holds no
    guardscope analysis unless ``force`` — and even then refuse to replace any file in it that
    guardscope did not write."""
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
    ours = _analysis_folder(path)
    if not ours and path.is_dir() and any(path.iterdir()):
        if not force:
            raise OutputError(
                f"{path} is not empty and holds no guardscope analysis; choose another --out directory, "
                "or pass --force to write the analysis beside what is there (guardscope never replaces "
                "a file it did not write)"
            )
        foreign = [name for name in ANALYSIS_FILES if (path / name).exists()]
        if foreign:
            raise OutputError(
                f"{path} holds {', '.join(foreign)}, which guardscope did not write: it replaces no such "
                "file, even with --force; move them or choose another --out directory"
            )
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not (path / OWNED).is_file():
            # A folder analysed before the list existed: the analysis files in it are guardscope's.
            _write_owned(path, sorted(name for name in ANALYSIS_FILES if ours and (path / name).exists()))
    except OSError as exc:
        raise OutputError(f"cannot write to the output directory {path}: {exc.strerror or exc}") from exc
    return path


def _analysis_folder(path: Path) -> bool:
    return (path / OWNED).is_file() or (path / CATALOG).is_file() or (path / CHECKPOINT).is_file()


def _read_owned(root: Path) -> set[str]:
    try:
        names = json.loads((root / OWNED).read_text())
    except (OSError, ValueError):
        return set()
    return {str(name) for name in names} if isinstance(names, list) else set()


def _write_owned(root: Path, names: list[str]) -> None:
    write_atomic(root / OWNED, dumps(sorted(set(names))).encode("utf-8"))


def remove_owned(root: str | Path, name: str) -> None:
    """Delete ``name`` in the analysis folder ``root`` if guardscope wrote it."""
    folder = Path(root)
    if (folder / name).is_file() and (name in _read_owned(folder) or not (folder / OWNED).is_file()):
        (folder / name).unlink()


def refuse_foreign(root: str | Path, names: list[str]) -> None:
    """Before a command does its work: refuse if any of the files it will write in the analysis
    folder ``root`` exists but was not written by guardscope (see :func:`write_bytes`)."""
    folder = Path(root)
    if not (folder / OWNED).is_file():
        return  # an analysis folder from before the list: its files are guardscope's
    owned = _read_owned(folder)
    foreign = [name for name in names if (folder / name).exists() and name not in owned]
    if foreign:
        raise OutputError(
            f"{', '.join(str(folder / name) for name in foreign)} exist(s) and was not written by guardscope: "
            "it is not replaced; move it away or use another folder"
        )


def _owning_root(path: Path) -> Path | None:
    """The analysis folder ``path`` lies in (it, or a folder up to three levels above, holds the
    list of files guardscope wrote), or None for a path outside any (a file the user named)."""
    for folder in list(path.parents)[:4]:
        if (folder / OWNED).is_file():
            return folder
    return None


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


def remove_generated(path: str | Path, marker: str = "generated by guardscope") -> None:
    """Delete a module guardscope generated (its docstring says so) if present, so a fix that is
    no longer possible leaves no stale module behind; any other file is left alone."""
    target = Path(path)
    if target.is_file() and marker in target.read_text(errors="replace")[:2000]:
        target.unlink()


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically. Inside an analysis folder, a file that exists but
    that guardscope did not write is never replaced (:class:`OutputError`); the file is added to
    the folder's list. A read-only or full disk is an :class:`OutputError` naming the path."""
    path = Path(path)
    root = _owning_root(path)
    try:
        if root is not None:
            name = path.relative_to(root).as_posix()
            owned = _read_owned(root)
            if path.exists() and name not in owned:
                raise OutputError(
                    f"{path} exists and was not written by guardscope: it is not replaced; move it away "
                    f"or use another folder"
                )
        write_atomic(path, data)
        if root is not None and name not in owned:
            _write_owned(root, [*owned, name])
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc
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
    path = trace_dir / name
    try:
        trace_dir.mkdir(parents=True, exist_ok=True)
        if append and keep_bytes is not None and path.is_file() and path.stat().st_size > keep_bytes:
            with open(path, "r+b") as existing:
                existing.truncate(keep_bytes)
        stream = open(path, "a" if append else "w", encoding="utf-8")
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc
    root = Path(directory)
    if (root / OWNED).is_file():
        owned = _read_owned(root)
        relative = path.relative_to(root).as_posix()
        if relative not in owned:
            _write_owned(root, [*owned, relative])
    return stream


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
    """The checkpoint to resume from, its builder's members read back from :data:`MEMBERS`
    (as far as the checkpoint says: what an interrupted run appended after it is not kept)."""
    state = read_json(Path(directory) / CHECKPOINT, "run without --resume")
    if not isinstance(state, dict) or state.get("version") not in CHECKPOINT_VERSIONS:
        raise OutputError(f"{Path(directory) / CHECKPOINT} is not a checkpoint this guardscope reads; use --force")
    if state.get("fingerprint") != fingerprint:
        raise OutputError(
            f"the interrupted analysis in {directory} used another corpus, model, torch or options; "
            "resume with the same command, or pass --force to start over"
        )
    if "members_bytes" in state:
        members = read_members(directory, state["members_bytes"])
        counts = {key: len(found) for key, found in members.items()}
        if counts != state["builder"].get("member_counts"):
            raise OutputError(
                f"{Path(directory) / MEMBERS} does not hold the members {Path(directory) / CHECKPOINT} counts; "
                "run again with --force to start over"
            )
        state["builder"]["members"] = [[key, found] for key, found in members.items()]
    return state


def append_members(directory: str | Path, found: dict[str, list[int]], keep_bytes: int) -> int:
    """Append the members found since the last checkpoint (topology key -> sample indices) to
    :data:`MEMBERS`, after cutting it back to ``keep_bytes`` (its size at that checkpoint);
    returns its size, which the next checkpoint records."""
    path = Path(directory) / MEMBERS
    try:
        with open(path, "ab") as stream:
            stream.truncate(keep_bytes)
            if found:
                stream.write((json.dumps(found, separators=(",", ":")) + "\n").encode())
            stream.flush()
            os.fsync(stream.fileno())
            return stream.seek(0, os.SEEK_END)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc


def read_members(directory: str | Path, size: int) -> dict[str, list[int]]:
    """The members :func:`append_members` wrote, up to ``size`` bytes, merged in order."""
    path = Path(directory) / MEMBERS
    try:
        with open(path, "rb") as stream:
            data = stream.read(size)
    except OSError as exc:
        raise OutputError(f"cannot read {path}: {exc.strerror or exc}; run again with --force to start over") from exc
    members: dict[str, list[int]] = {}
    try:
        if len(data) != size:
            raise ValueError(f"{len(data)} bytes, not {size}")
        for line in data.decode().splitlines():
            for key, found in json.loads(line).items():
                members.setdefault(key, []).extend(found)
    except (ValueError, AttributeError) as exc:
        raise OutputError(f"{path} is damaged ({exc}); run again with --force to start over") from None
    return members


def clear_checkpoint(directory: str | Path) -> None:
    (Path(directory) / CHECKPOINT).unlink(missing_ok=True)
    (Path(directory) / MEMBERS).unlink(missing_ok=True)


def begin_analysis(directory: Path, fingerprint: dict[str, Any], *, resume: bool) -> dict[str, Any] | None:
    """The checkpoint to resume from (``resume``), or a clean start: no checkpoint, and no earlier
    analysis's catalog that an interrupted run could be mistaken for."""
    if resume:
        return read_checkpoint(directory, fingerprint)
    clear_checkpoint(directory)
    remove_owned(directory, CATALOG)
    return None


def write_analysis(directory: Path, catalog: dict[str, Any], *, corpus: Path, timings: dict[str, Any]) -> tuple[Path, Path]:
    """An analysis's documents: ``catalog.json``, ``locations.json`` (where the corpus is,
    absolutely, so a copied or moved folder still finds it; kept out of the catalog, which must
    not depend on the machine) and ``timings.json``; then the checkpoint goes. Returns the
    catalog's and the timings' paths."""
    catalog_path = write_document(directory, CATALOG, catalog)
    write_document(directory, LOCATIONS, {"corpus": str(corpus)})
    timings_path = write_document(directory, TIMINGS, timings)
    clear_checkpoint(directory)
    return catalog_path, timings_path


def bundle_files(artifact: str) -> tuple[str, str]:
    """File names of a plan's bundle and its manifest, beside the plan's module."""
    return artifact + BUNDLE_SUFFIX, artifact + BUNDLE_MANIFEST_SUFFIX


def read_json(path: str | Path, what: str) -> Any:
    """Read one of guardscope's JSON results; a missing or broken file says how to make it."""
    path = Path(path)
    if not path.is_file():
        raise CatalogError(f"{path} not found: {what}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CatalogError(f"{path} is not readable JSON ({exc}): {what}") from exc


def read_locations(directory: str | Path) -> dict[str, Any] | None:
    """locations.json of an analysis folder, or None (an older analysis, or unreadable)."""
    try:
        data = json.loads((Path(directory) / LOCATIONS).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_catalog(directory: str | Path) -> dict[str, Any]:
    catalog = read_json(Path(directory) / CATALOG, "run 'guardscope analyze CORPUS --out DIR' first")
    _check_schema(catalog, Path(directory) / CATALOG)
    return catalog


def _check_schema(catalog: Any, path: Path) -> None:
    if not isinstance(catalog, dict) or catalog.get("schema") != 1:
        raise CatalogError(
            f"{path} has schema {catalog.get('schema') if isinstance(catalog, dict) else None!r}; "
            "this guardscope reads schema 1: re-run 'guardscope analyze'"
        )


# What every catalog holds (see README "catalog.json"); fixes.json and verification.json also
# carry "schema": 1, so the schema alone does not say a file is a catalog.
CATALOG_KEYS = ("torch_version", "corpus", "compile", "summary", "compiles", "topologies")


def read_catalog_at(path: str | Path) -> dict[str, Any]:
    """Read an analysis's catalog from its folder or from the ``catalog.json`` path itself."""
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


# --- the documents of an analysis folder -------------------------------------------------------


def _check_document(data: Any, name: str, path: Path, out: Path) -> None:
    expected = SCHEMAS.get(name)
    if expected is None:
        return
    found = data.get("schema") if isinstance(data, dict) else None
    if found != expected:
        raise CatalogError(f"{path} has schema {found!r}; this guardscope reads schema {expected}: "
                           + REMAKE[name].format(out=out))


def read_document(directory: str | Path, name: str, *, required: bool = False) -> dict[str, Any] | None:
    """One JSON document of the analysis folder (``store.FIXES``, ``store.VERIFICATION``...),
    its schema checked; None when it does not exist (an error when ``required``)."""
    out = Path(directory)
    path = out / name
    if not path.is_file():
        if required:
            raise CatalogError(f"{path} not found: {REMAKE.get(name, 'make it first').format(out=out)}")
        return None
    data = read_json(path, REMAKE.get(name, "make it again").format(out=out))
    _check_document(data, name, path, out)
    return data


def write_document(directory: str | Path, name: str, data: Any) -> Path:
    """Write one JSON document of the analysis folder (the one JSON style, atomically)."""
    return write_json(Path(directory) / name, data)


def read_fidelity(directory: str | Path) -> dict[str, Any] | None:
    """fidelity.json with the production-backend catalog it compared against (``catalog``)."""
    out = Path(directory)
    document = read_document(out, FIDELITY)
    if document is None:
        return None
    checked = out / FIDELITY_DIR
    return dict(document, catalog=read_catalog(checked) if (checked / CATALOG).is_file() else None)


def read_bundle_manifest(directory: str | Path, artifact: str) -> dict[str, Any] | None:
    """The manifest of a plan's compile-cache bundle beside its module, or None."""
    path = Path(directory) / bundle_files(artifact)[1]
    if not path.is_file():
        return None
    return read_json(path, f"re-run 'guardscope bundle {directory} --artifact {artifact}'")


def read_bundle_manifest_at(path: str | Path) -> Any:
    """A bundle's manifest by its path (beside a generated module); OSError/ValueError as raised."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def read_bundle_at(path: str | Path) -> bytes:
    """A bundle's bytes by its path; OSError as raised."""
    return Path(path).read_bytes()


def checkpoint_progress(directory: str | Path) -> int:
    """How many samples an interrupted analysis in ``directory`` finished (0: none, or none kept)."""
    try:
        return int(json.loads((Path(directory) / CHECKPOINT).read_text()).get("next_sample", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


def catalog_digest(catalog: dict[str, Any]) -> str:
    """A digest of the catalog's content, to tell which analysis other results belong to."""
    return hashlib.sha256(dumps(catalog).encode()).hexdigest()


def fix_entry(directory: str | Path, name: str) -> dict[str, Any] | None:
    """One artifact's entry in fixes.json, or None."""
    fixes = read_document(directory, FIXES) or {}
    return next((a for a in fixes.get("artifacts", []) if a.get("name") == name), None)


# --- finding the corpus and model of an analysis ------------------------------------------------


def corpus_dir_of(out: Path, catalog: dict[str, Any], corpus_dir: str | Path | None = None) -> Path:
    """Where the corpus of the analysis in ``out`` is: ``corpus_dir`` when given; else the path
    the catalog records relative to the folder (the two moved together), else the absolute path
    the analysis recorded in locations.json (the folder was copied or moved alone)."""
    if corpus_dir is not None:
        return Path(corpus_dir)
    relative = out / catalog["corpus"]["path"]
    if (relative / "corpus.json").is_file():
        return relative
    recorded = (read_locations(out) or {}).get("corpus")
    if recorded and (Path(recorded) / "corpus.json").is_file():
        return Path(recorded)
    where = f"{relative}" + (f" or {recorded}" if recorded else "")
    raise CatalogError(f"the corpus of the analysis in {out} is not where it was ({where}); "
                       "pass --corpus DIR to say where it is now")


def load_inputs(out_dir: str | Path, corpus_dir: str | Path | None = None) -> tuple[Path, dict[str, Any], Any, Any]:
    """The analysis in ``out_dir``: its folder, catalog, corpus (or ``corpus_dir``) and model."""
    from .corpus import load_corpus, load_model

    out = Path(out_dir)
    catalog = read_catalog(out)
    corpus = load_corpus(corpus_dir_of(out, catalog, corpus_dir))
    model = load_model(catalog["model"], base_dir=corpus.path)
    return out, catalog, corpus, model


def load_probed(out: Path, first_index: int) -> tuple[dict[str, Any], list[Any]]:
    """``probe/probe.json`` and its synthetic samples, numbered after the corpus (``first_index``
    on) so they never collide with corpus sample numbers."""
    from .corpus import load_corpus
    from .model import Sample

    path = out / PROBE
    if not path.is_file():
        raise CatalogError(f"no probe results in {out}: run 'guardscope probe {out}' first")
    document = read_document(out, PROBE, required=True)
    if document.get("catalog_sha256") != catalog_digest(read_catalog(out)):
        raise CatalogError(f"{path} belongs to an earlier analysis of {out}: rerun 'guardscope probe {out}'")
    if not document.get("new_topologies"):
        return document, []
    probed = load_corpus(out / PROBE_DIR / "corpus")
    samples = [Sample(first_index + s.index, s.args, s.kwargs) for s in probed]
    if len(samples) != len(document["new_topologies"]):
        raise CatalogError(f"{out / PROBE_DIR} is inconsistent (probe.json and corpus/ differ); rerun 'guardscope probe {out}'")
    return document, samples


def probed_samples(out: Path, corpus_size: int) -> tuple[dict[str, Any] | None, list[Any]]:
    """The probe document and samples when the fixes were emitted with --include-probed."""
    fixes = read_document(out, FIXES) or {}
    if not fixes.get("probed", {}).get("included"):
        return None, []
    return load_probed(out, corpus_size)
