"""Pure: the frames Dynamo compiled (the model's forward, resume functions after graph breaks,
callees that broke their own graphs), their graph breaks, and the frames it stopped compiling after
a compile of them failed, as ``catalog.json`` lists them."""

from __future__ import annotations

import re
from typing import Any

from ..model import CompileEvent, GraphBreak, compile_order
from ..text import first_line

def frame_summaries(events: list[CompileEvent]) -> tuple[dict[str, Any], ...]:
    """One entry per frame Dynamo compiled (the model's forward is frame 0; each resume function
    after a graph break and each callee that broke its own graph is a frame too): its code, its
    graphs, its recompiles and the samples that compiled them, sorted."""
    by_frame: dict[int, list[CompileEvent]] = {}
    for event in events:
        by_frame.setdefault(event.frame_id, []).append(event)
    frames = []
    for frame_id, members in sorted(by_frame.items()):
        members.sort(key=lambda e: e.frame_compile_id)
        graphs = [e for e in members if e.fail_type is None]
        first = members[0]
        frames.append({
            "frame": frame_id,
            "name": first.co_name,
            "location": first.location,
            "label": frame_label(first.co_name, first.location),
            "graphs": len(graphs),
            "recompiles": sum(1 for e in graphs if e.frame_compile_id > 0),
            "failed_compiles": len(members) - len(graphs),
            "compile_samples": sorted({e.sample for e in graphs if e.sample is not None}),
        })
    return tuple(frames)


def break_summaries(breaks: tuple[GraphBreak, ...], events: list[CompileEvent]) -> tuple[dict[str, Any], ...]:
    """Each distinct graph break (frame, place, reason) with how many compiles hit it and the
    first sample: every break splits its frame, and each part recompiles on its own."""
    labels = {e.frame_id: frame_label(e.co_name, e.location) for e in events if e.frame_compile_id == 0}
    grouped: dict[tuple[int, str, str], list[GraphBreak]] = {}
    for found in breaks:
        key = (frame_of(found.compile_id), found.location or "", found.reason)
        grouped.setdefault(key, []).append(found)
    summaries = []
    for (frame, location, reason), found in sorted(grouped.items(), key=lambda item: (item[0][0], item[0][1], item[0][2])):
        samples = sorted({b.sample for b in found if b.sample is not None})
        summaries.append({
            "frame": frame,
            "frame_label": labels.get(frame),
            "location": location or None,
            "reason": reason,
            "compiles": len({b.compile_id for b in found}),
            "first_sample": samples[0] if samples else None,
        })
    return tuple(summaries)


# Compile failures Dynamo suppresses ("soft" ones, torch/_dynamo/convert_frame.py): unless
# fullgraph turns them into errors, it then marks the frame's code to be skipped for good (the
# default FrameExecStrategy of ConvertFrameReturn, SKIP, applied to the code), so every later call
# runs that frame eagerly, even one a graph compiled before would accept, and the frame never
# compiles again. The recompile limit fails the same way but keeps running the graphs it has.
SKIPPING_FAILURES = ("Unsupported", "UserError")
# torch's summary of a failure that is the user's code raising while Dynamo traced it.
OBSERVED_EXCEPTION = "Observed exception"


def hit_recompile_limit(event: CompileEvent) -> bool:
    """Whether a failed compile is Dynamo's recompile limit ("Dynamo recompile limit exceeded")."""
    return "recompile limit" in first_line(event.fail_reason).lower()


def skipped_frames(events: list[CompileEvent], breaks: tuple[GraphBreak, ...], *, fullgraph: bool,
                   errors: dict[int, str]) -> tuple[dict[str, Any], ...]:
    """Each frame whose last compile failed in a way that makes Dynamo skip it from then on
    (:data:`SKIPPING_FAILURES`, not the recompile limit, not under ``fullgraph``): the failed
    compile, torch's one-line reason, and ``error``, the exception the sample raised when that
    reason is the user's code raising (``errors``: the samples that raised, by index). Only a
    frame's last compile is looked at: a frame that compiled again was not skipped."""
    if fullgraph:
        return ()
    last: dict[int, CompileEvent] = {}
    for event in events:
        if event.frame_id not in last or event.frame_compile_id > last[event.frame_id].frame_compile_id:
            last[event.frame_id] = event
    found = []
    for frame, event in sorted(last.items()):
        if event.fail_type not in SKIPPING_FAILURES or event.sample is None or hit_recompile_limit(event):
            continue
        reason = first_line(event.fail_reason) or event.fail_type
        found.append({
            "frame": frame,
            "frame_label": frame_label(event.co_name, event.location),
            "compile_id": event.compile_id,
            "sample": event.sample,
            "fail_type": event.fail_type,
            "reason": reason,
            "location": next((b.location for b in breaks if b.compile_id == event.compile_id), None),
            "error": errors.get(event.sample) if reason == OBSERVED_EXCEPTION else None,
        })
    return tuple(found)


def frame_of(compile_id: str) -> int:
    """``"7/2"`` -> 7."""
    return compile_order(compile_id)[0]


_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<function>\w+?)_at_(?P<line>\d+)$")


def frame_label(co_name: str | None, location: str | None) -> str:
    """How a report names a frame: ``forward (tests/model.py:12)``, and a resume function (the
    rest of a function after a graph break) as ``forward after line 222 (tests/model.py:222)``."""
    name = co_name or "?"
    match = _RESUME.match(name)
    if match:
        name = f"{match.group('function')} after line {match.group('line')}"
    return f"{name} ({location})" if location else name


