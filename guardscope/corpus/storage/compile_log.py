"""A traffic log's record of what production compiled: ``compiles.jsonl`` in the corpus folder, one
JSON object a line, appended by :class:`guardscope.TrafficRecorder` as it flushes (each of the
recording process's compiles, observed by :class:`guardscope.torch_compat.compile_events.CompileObserver`).

A line: ``compile_id`` (production's, ``"0/3"``), ``trigger`` (``dynamo``, ``lazy_backward``,
``cudagraph_recording``), ``start_ns`` (wall clock, ns since the epoch), ``seconds`` (the compile's
stall: Dynamo's ``entire_frame_compile_time_s`` where torch recorded it, else the wall time between
torch's compile callbacks), ``backend_seconds``, ``co_name`` and ``location`` (the compiled frame's
code, ``external_utils.py:67`` style, machine-independent), ``fail_type``, ``replica`` and
``backend`` (the recording process's), ``in_call`` (false: compiled outside every recorded call,
a warmup at start-up; absent where the recorder could not tell). A process killed mid-write leaves at most a partial last
line, which reading skips."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

from ...text import short_location

COMPILE_LOG = "compiles.jsonl"


def compile_record(event: dict[str, Any], *, replica: str | None, backend: str | None) -> dict[str, Any]:
    """One line of the log from an observed compile (the frame's file reduced to its short,
    machine-independent location)."""
    record = {key: event[key] for key in ("compile_id", "trigger", "start_ns", "seconds", "backend_seconds",
                                          "co_name", "fail_type", "in_call") if event.get(key) is not None}
    location = short_location(event.get("co_filename"), event.get("co_firstlineno"))
    if location is not None:
        record["location"] = location
    if replica is not None:
        record["replica"] = replica
    if backend is not None:
        record["backend"] = backend
    return record


def append_compiles(directory: str | os.PathLike[str], records: Iterable[dict[str, Any]]) -> int:
    """Append ``records`` to the folder's compile log; how many were written."""
    lines = [json.dumps(record, sort_keys=True) + "\n" for record in records]
    if not lines:
        return 0
    with open(Path(directory) / COMPILE_LOG, "a", encoding="utf-8") as log:
        log.writelines(lines)
        log.flush()
    return len(lines)


def read_compiles(directory: str | os.PathLike[str]) -> list[dict[str, Any]] | None:
    """The compiles the folder's recorder observed, in the order written; None when it has no
    compile log (recorded before guardscope kept one, or not by a TrafficRecorder). A line that
    does not parse (the last one of a killed process) is skipped."""
    path = Path(directory) / COMPILE_LOG
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("compile_id"), str) \
                and isinstance(record.get("seconds"), (int, float)):
            records.append(record)
    return records


def merge_compile_logs(sources: Iterable[str | os.PathLike[str]], destination: str | os.PathLike[str]) -> int:
    """A merged fleet's compile log: every replica folder's lines, in the order the folders come
    (each line names its replica); how many were written. Writes nothing where no source has one."""
    records = [record for source in sources for record in (read_compiles(source) or [])]
    target = Path(destination) / COMPILE_LOG
    if target.exists():
        target.unlink()
    return append_compiles(destination, records)


__all__ = ["COMPILE_LOG", "append_compiles", "compile_record", "merge_compile_logs", "read_compiles"]
