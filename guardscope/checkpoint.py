"""An analysis's checkpoint in its folder: the progress an interrupted ``guardscope analyze`` kept,
the topologies' members it streamed beside it, and the start and finish of an analysis (a
clean start or a resume; the catalog, locations and timings written, the checkpoint gone).

The file names, and the atomic writes with their ownership rules, are :mod:`guardscope.store`'s;
besides store, only this module reads and writes files of the analysis folder (the checkpoint's
members file, appended to and cut back to a checkpoint's size).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import store
from .errors import OutputError
from .json_text import ints_text

CHECKPOINT_VERSION = 3  # 2: checkpoints within shards (next_sample); 3: members in store.MEMBERS
CHECKPOINT_VERSIONS = (2, 3)  # read: a version 2 checkpoint holds the members itself


def write_checkpoint(directory: str | Path, state: dict[str, Any]) -> Path:
    """Progress after a finished shard, written atomically (an interruption keeps the last one)."""
    return store.write_text(Path(directory) / store.CHECKPOINT, json.dumps({"version": CHECKPOINT_VERSION, **state}))


def read_checkpoint(directory: str | Path, fingerprint: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint to resume from, its builder's members read back from
    :data:`guardscope.store.MEMBERS` (as far as the checkpoint says: what an interrupted run
    appended after it is not kept)."""
    state = store.read_json(Path(directory) / store.CHECKPOINT, "run without --resume")
    if not isinstance(state, dict) or state.get("version") not in CHECKPOINT_VERSIONS:
        raise OutputError(f"{Path(directory) / store.CHECKPOINT} is not a checkpoint this guardscope reads; use --force")
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
                f"{Path(directory) / store.MEMBERS} does not hold the members {Path(directory) / store.CHECKPOINT} counts; "
                "run again with --force to start over"
            )
        state["builder"]["members"] = [[key, found] for key, found in members.items()]
    return state


def append_members(directory: str | Path, found: Mapping[str, Sequence[int]], keep_bytes: int) -> int:
    """Append the members found since the last checkpoint (topology key -> sample indices) to
    :data:`guardscope.store.MEMBERS`, after cutting it back to ``keep_bytes`` (its size at that
    checkpoint); returns its size, which the next checkpoint records."""
    path = Path(directory) / store.MEMBERS
    try:
        with open(path, "ab") as stream:
            stream.truncate(keep_bytes)
            if found:
                stream.write(("{" + ",".join(f"{json.dumps(key)}:{ints_text(values, ',')}"
                                             for key, values in found.items()) + "}\n").encode())
            stream.flush()
            os.fsync(stream.fileno())
            return stream.seek(0, os.SEEK_END)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc


def read_members(directory: str | Path, size: int) -> dict[str, list[int]]:
    """The members :func:`append_members` wrote, up to ``size`` bytes, merged in order."""
    path = Path(directory) / store.MEMBERS
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
    (Path(directory) / store.CHECKPOINT).unlink(missing_ok=True)
    (Path(directory) / store.MEMBERS).unlink(missing_ok=True)


def begin_analysis(directory: Path, fingerprint: dict[str, Any], *, resume: bool) -> dict[str, Any] | None:
    """The checkpoint to resume from (``resume``), or a clean start: no checkpoint, and no earlier
    analysis's catalog that an interrupted run could be mistaken for."""
    if resume:
        return read_checkpoint(directory, fingerprint)
    clear_checkpoint(directory)
    store.remove_owned(directory, store.CATALOG)
    return None


def write_analysis(directory: Path, catalog: dict[str, Any], *, corpus: Path, timings: dict[str, Any]) -> tuple[Path, Path]:
    """An analysis's documents: ``catalog.json``, ``locations.json`` (where the corpus is,
    absolutely, so a copied or moved folder still finds it; kept out of the catalog, which must
    not depend on the machine) and ``timings.json``; then the checkpoint goes. Returns the
    catalog's and the timings' paths."""
    catalog_path = store.write_document(directory, store.CATALOG, catalog)
    store.write_document(directory, store.LOCATIONS, {"corpus": str(corpus)})
    timings_path = store.write_document(directory, store.TIMINGS, timings)
    clear_checkpoint(directory)
    return catalog_path, timings_path


def checkpoint_progress(directory: str | Path) -> int:
    """How many samples an interrupted analysis in ``directory`` finished (0: none, or none kept)."""
    try:
        return int(json.loads((Path(directory) / store.CHECKPOINT).read_text()).get("next_sample", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return 0
