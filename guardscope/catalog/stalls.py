"""Pure: production's compile stalls, as its recorder observed them (``compiles.jsonl``,
:mod:`guardscope.corpus.storage.compile_log`), matched to the analysis's compiles.

The analysis compiles with its own backend (eager by default: fast, but its seconds say nothing of
production's), so the seconds production stalled are the ones its own process recorded. A recorded
Dynamo compile is matched to the analysis's compile of the same frame (the same code: ``co_name``
and location) and the same place in that frame's order (``0/3`` is the frame's fourth graph in
both processes: the analysis compiles at the same calls as production did). The backward graph a
training step compiled later (``lazy_backward``) is added to its compile's stall. A fleet's
replicas each compiled their own graphs: their seconds are given per replica, and per compile only
for a corpus recorded by one process.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from ..model import CompileEvent

_COMPILE_ID = re.compile(r"^(\d+)/(\d+)")


def _order(compile_id: str) -> tuple[int, int] | None:
    match = _COMPILE_ID.match(compile_id)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _frame_keys(events: Iterable[CompileEvent]) -> dict[int, tuple[str | None, str | None]]:
    """Each of the analysis's frames -> its code (``co_name``, location), from its first compile."""
    keys: dict[int, tuple[str | None, str | None]] = {}
    for event in sorted(events, key=lambda e: (e.frame_id, e.frame_compile_id)):
        keys.setdefault(event.frame_id, (event.co_name, event.location))
    return keys


def _frame_map(analysis: dict[int, tuple[str | None, str | None]], recorded: list[dict[str, Any]]) -> dict[int, int]:
    """The analysis's frame -> the recording process's frame of the same code. Where several of
    the process's frames share that code (two models compiled through the same torch wrapper),
    the one with the most compiles."""
    counts: dict[int, int] = {}
    keys: dict[int, tuple[Any, Any]] = {}
    for record in recorded:
        order = _order(record["compile_id"])
        if order is None or record.get("co_name") is None:
            continue
        counts[order[0]] = counts.get(order[0], 0) + 1
        keys.setdefault(order[0], (record.get("co_name"), record.get("location")))
    mapped = {}
    for frame, key in analysis.items():
        candidates = [f for f, k in keys.items() if k == key]
        if candidates:
            mapped[frame] = max(candidates, key=lambda f: (counts[f], -f))
    return mapped


def _replica_stalls(recorded: list[dict[str, Any]], frames: dict[int, int]) -> dict[str, Any]:
    model_frames = set(frames.values())
    model = [r for r in recorded if (_order(r["compile_id"]) or (-1,))[0] in model_frames]
    own = [r for r in model if r.get("in_call") is not False]
    startup = [r for r in model if r.get("in_call") is False]
    forward = [r for r in own if r.get("trigger", "dynamo") == "dynamo" and r.get("fail_type") is None]
    return {
        "compiles": len(forward),
        "seconds": round(sum(r["seconds"] for r in own), 6),
        "startup_compiles": len(startup),
        "startup_seconds": round(sum(r["seconds"] for r in startup), 6),
        "other_compiles": len(recorded) - len(model),
    }


def production_stalls(records: list[dict[str, Any]] | None, events: list[CompileEvent]) -> dict[str, Any] | None:
    """catalog.json's ``production_compiles``: what each compile stalled production, as its
    process recorded it (``records``, the corpus's compile log; None: not recorded, and so is the
    result). ``compiles``: per analysis compile its recorded seconds (Dynamo's whole frame
    compile, the backend's included) and a training step's ``backward_seconds``, matched as the
    module says; ``replicas``: per recording process, its model's compiles and seconds and the
    compiles made outside every recorded call (``startup_*``: a warmup before serving; no call
    waited for them) and the process's other compiles (of code the analysis did not compile);
    ``unmatched``: the analysis's
    compiles the record has no compile for (a process that started recording after compiling)."""
    if records is None:
        return None
    by_replica: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_replica.setdefault(str(record.get("replica") or ""), []).append(record)
    analysis_frames = _frame_keys(events)
    replicas = {}
    frame_maps = {}
    for name, recorded in sorted(by_replica.items()):
        frame_maps[name] = _frame_map(analysis_frames, recorded)
        replicas[name] = _replica_stalls(recorded, frame_maps[name])
    backends = sorted({str(r["backend"]) for r in records if r.get("backend")})
    result: dict[str, Any] = {
        "source": "recorded",
        "backend": backends[0] if len(backends) == 1 else (", ".join(backends) or None),
        "replicas": replicas,
        "compiles": [],
        "unmatched": [],
    }
    if len(by_replica) != 1:  # a fleet: each process compiled its own graphs, at its own calls
        return result
    (name, recorded), = by_replica.items()
    if replicas[name]["startup_compiles"]:
        # Graphs compiled before serving (a warmup) shift the process's numbering off the
        # analysis's, which compiles at the calls alone: no per-compile figure is honest then.
        result["unmatched"] = [e.compile_id for e in sorted(events, key=lambda e: (e.frame_id, e.frame_compile_id))]
        return result
    frames = frame_maps[name]
    forward: dict[tuple[int, int], dict[str, Any]] = {}
    backward: dict[str, float] = {}
    for record in recorded:
        order = _order(record["compile_id"])
        if order is None or record.get("in_call") is False:  # a start-up warmup's: no call waited
            continue
        if record.get("trigger", "dynamo") == "dynamo":
            forward.setdefault(order, record)
        elif record.get("trigger") == "lazy_backward":
            backward[record["compile_id"]] = backward.get(record["compile_id"], 0.0) + record["seconds"]
    for event in sorted(events, key=lambda e: (e.frame_id, e.frame_compile_id)):
        frame = frames.get(event.frame_id)
        found = forward.get((frame, event.frame_compile_id)) if frame is not None else None
        if found is None:
            result["unmatched"].append(event.compile_id)
            continue
        entry = {"compile_id": event.compile_id, "production_compile_id": found["compile_id"],
                 "sample": event.sample, "seconds": found["seconds"]}
        if found["compile_id"] in backward:
            entry["backward_seconds"] = round(backward[found["compile_id"]], 6)
        result["compiles"].append(entry)
    return result


def stall_seconds(production_compiles: dict[str, Any] | None) -> dict[str, float]:
    """Per analysis compile id, production's recorded stall (its backward graph's included)."""
    return {entry["compile_id"]: round(entry["seconds"] + entry.get("backward_seconds", 0.0), 6)
            for entry in (production_compiles or {}).get("compiles", [])}


__all__ = ["production_stalls", "stall_seconds"]
