"""Records -> compile events: pure parsing of the structured trace's records.

:func:`events_from_records` groups :class:`~guardscope.replay.trace.TraceRecord` objects by compile
id and builds one :class:`CompileEvent` per compilation, with the graph breaks the records report.
A record it cannot read is counted in :class:`ParsedTrace.unparsed`, never a crash.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..model import CompileEvent, GraphBreak
from ..text import short_location
from .trace import TraceRecord


@dataclass
class ParsedTrace:
    events: list[CompileEvent]
    unparsed: dict[str, int] = field(default_factory=dict)
    graph_breaks: list[GraphBreak] = field(default_factory=list)

    def count(self, what: str) -> None:
        self.unparsed[what] = self.unparsed.get(what, 0) + 1


def parse_reasons(payload: str | None) -> list[str] | None:
    """The ``recompile_reasons`` payload: a JSON list (several entries) or a bare string (one)."""
    if payload is None:
        return None
    text = payload.strip()
    if text.startswith("["):
        try:
            value = json.loads(text)
        except ValueError:
            return None
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        return None
    if text.startswith('"'):
        try:
            value = json.loads(text)
        except ValueError:
            return None
        return [value] if isinstance(value, str) else None
    return [payload] if text else []


_TREE_PREFIX = re.compile(r"^[\s|]*\+-\s*")
_INPUT_GUARD = re.compile(r"^(TENSOR_MATCH|LAMBDA_GUARD|LENGTH_CHECK|EQUALS_MATCH|TYPE_MATCH|ID_MATCH|TRUE_MATCH|FALSE_MATCH)\b")


def guard_lines(payload: str | None) -> tuple[str, ...]:
    """The guards of a compiled entry that describe its inputs (not module parameters)."""
    if not payload:
        return ()
    kept = []
    for raw in payload.splitlines():
        line = _TREE_PREFIX.sub("", raw).strip()
        if not _INPUT_GUARD.match(line):
            continue
        if "._modules[" in line or "._parameters[" in line or "._buffers[" in line:
            continue
        if line.startswith(("ID_MATCH", "TYPE_MATCH")) and "L['self']" in line:
            continue
        kept.append(line)
    return tuple(kept)


def _compile_id(frame_id: int | None, frame_compile_id: int | None) -> str | None:
    if frame_id is None or frame_compile_id is None:
        return None
    return f"{frame_id}/{frame_compile_id}"


_COMPILE_ID = re.compile(r"^\[?(\d+)/(\d+)\]?")
_BREAK_AT = re.compile(r"^Graph break(?: \(user stack suppressed[^)]*\))? in user code at (?P<where>\S+?:\d+)\s*$", re.M)
_BREAK_REASON = re.compile(r"^Graph Break Reason:\s*(?P<reason>.*)$", re.M)


def parse_graph_break(payload: str | None) -> tuple[str | None, str] | None:
    """``(location, reason)`` of a ``dynamo_graph_break_reason`` payload: where in user code the
    graph broke and the first line that says why (torch's summary, e.g. "Unsupported Tensor.item()
    call with capture_scalar_outputs=False"); None when the payload is not one."""
    if not payload:
        return None
    where = _BREAK_AT.search(payload)
    location = None
    if where is not None:
        path, _, line = where.group("where").rpartition(":")
        location = short_location(path, int(line)) if line.isdigit() else None
    reason = None
    match = _BREAK_REASON.search(payload)
    if match is not None:
        # The headline is followed by a blank line and torch's one-line summary of the cause.
        after = [l.strip() for l in payload[match.end():].splitlines()]
        summary = next((l for l in after if l and not l.startswith(("Explanation:", "Hint:"))), "")
        headline = match.group("reason").strip()
        reason = summary if summary and not summary.startswith(("Developer debug", "For more", "User code")) else headline
    if reason is None:
        lines = [l.strip() for l in payload.splitlines() if l.strip()]
        if not lines:
            return None
        reason = lines[0]
    return location, reason[:300]


def events_from_records(records: Iterable[TraceRecord]) -> ParsedTrace:
    """Group records by compile id and build one :class:`CompileEvent` per compilation."""
    parsed = ParsedTrace(events=[])
    reasons: dict[str, list[str]] = {}
    guards: dict[str, tuple[str, ...]] = {}
    samples: dict[str, int | None] = {}
    metrics: list[tuple[str, dict[str, Any], int | None]] = []
    for record in records:
        key = _compile_id(record.frame_id, record.frame_compile_id)
        if record.name == "dynamo_graph_break_reason":
            found = parse_graph_break(record.payload)
            if found is None or key is None:
                parsed.count("dynamo_graph_break_reason")
            else:
                parsed.graph_breaks.append(GraphBreak(compile_id=key, location=found[0], reason=found[1],
                                                      sample=record.sample))
        elif record.name == "recompile_reasons":
            parsed_reasons = parse_reasons(record.payload)
            if parsed_reasons is None:
                parsed.count("recompile_reasons")
                parsed_reasons = [record.payload or ""]
            if key is not None:
                reasons[key] = parsed_reasons
        elif record.name == "dynamo_cpp_guards_str" and key is not None:
            guards[key] = guard_lines(record.payload)
        elif record.name == "dynamo_start" and key is not None:
            samples.setdefault(key, record.sample)
        elif record.name == "compilation_metrics":
            body = record.metadata.get("compilation_metrics")
            if not isinstance(body, dict):
                parsed.count("compilation_metrics")
                continue
            compile_id = body.get("compile_id")
            if not isinstance(compile_id, str) or not _COMPILE_ID.match(compile_id):
                compile_id = key
            if compile_id is None:
                parsed.count("compilation_metrics")
                continue
            compile_id = compile_id.strip("[]")
            metrics.append((compile_id, body, record.sample))
    for compile_id, body, sample in metrics:
        match = _COMPILE_ID.match(compile_id)
        frame_id, frame_compile_id = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
        event_reasons = reasons.get(compile_id)
        if event_reasons is None and body.get("recompile_reason"):
            # Older torch builds carry the reason only in the metrics record.
            event_reasons = [str(body["recompile_reason"])]
        seconds = body.get("entire_frame_compile_time_s")
        parsed.events.append(
            CompileEvent(
                compile_id=compile_id,
                frame_id=frame_id,
                frame_compile_id=frame_compile_id,
                sample=samples.get(compile_id, sample),
                co_name=body.get("co_name") if isinstance(body.get("co_name"), str) else None,
                location=short_location(body.get("co_filename"), body.get("co_firstlineno")),
                seconds=float(seconds) if isinstance(seconds, (int, float)) else None,
                reasons=tuple(event_reasons or ()),
                guards=guards.get(compile_id, ()),
                fail_type=body.get("fail_type") if isinstance(body.get("fail_type"), str) else None,
                fail_reason=(
                    body.get("fail_reason") if isinstance(body.get("fail_reason"), str) else None
                ),
            )
        )
    return parsed
