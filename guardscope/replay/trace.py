"""The structured trace's records: what one is, which the analysis keeps, and reading a trace file
back.

:class:`TraceRecord` is one record of torch's structured trace (the ``torch.__trace`` logger that
``TORCH_TRACE`` and tlparse use), attributed to the sample being replayed when it was emitted
(:mod:`guardscope.replay.capture` collects them live). :func:`read_trace` parses a trace file back
into records, so the parser (:mod:`guardscope.replay.events`) is tested on traces recorded by other
torch versions; a line it cannot read is counted, never a crash.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

# Keys torch adds to every record's metadata next to the record's own name.
_CONTEXT_KEYS = frozenset(
    {
        "rank",
        "compiled_autograd_id",
        "frame_id",
        "frame_compile_id",
        "attempt",
        "severity",
        "timestamp",
        "pathname",
        "thread",
        "subgraph_name",
        "has_payload",
        "stack",
    }
)

# Records the analysis reads; the trace file keeps everything.
KEPT_RECORDS = frozenset(
    {
        "dynamo_start",
        "compilation_metrics",
        "recompile_reasons",
        "dynamo_cpp_guards_str",
        "symbolic_shape_specialization",
        "create_symbol",
        "guard_added_fast",
        "guardscope_sample",
        "dynamo_graph_break_reason",
    }
)

SAMPLE_MARKER = "guardscope_sample"


@dataclass(frozen=True)
class TraceRecord:
    """One structured-trace record: its name (an artifact's own name for ``artifact``)."""

    name: str
    metadata: dict[str, Any]
    payload: str | None
    frame_id: int | None
    frame_compile_id: int | None
    sample: int | None


def record_name(metadata: dict[str, Any]) -> str | None:
    names = [key for key in metadata if key not in _CONTEXT_KEYS]
    if not names:
        return None
    name = names[0]
    if name == "artifact" and isinstance(metadata.get("artifact"), dict):
        return str(metadata["artifact"].get("name", "artifact"))
    return name


def to_record(metadata: Any, payload: Any, sample: int | None) -> TraceRecord | None:
    if not isinstance(metadata, dict):
        return None
    name = record_name(metadata)
    if name is None:
        return None
    frame_id = metadata.get("frame_id")
    frame_compile_id = metadata.get("frame_compile_id")
    return TraceRecord(
        name=name,
        metadata=metadata,
        payload=payload if isinstance(payload, str) else None,
        frame_id=frame_id if isinstance(frame_id, int) else None,
        frame_compile_id=frame_compile_id if isinstance(frame_compile_id, int) else None,
        sample=sample,
    )


# --- reading a trace file back -----------------------------------------------------------------

_GLOG_LINE = re.compile(r"^[VIWEC]\d{4} \d\d:\d\d:\d\d\.\d+ \d+ \S*:\d+\](?: \[[^\]]*\])* (\{.*\})$")


def read_trace(lines: Iterable[str]) -> tuple[list[TraceRecord], int]:
    """Parse a tlparse-format trace; return (records, count of lines that could not be read).

    Sample attribution comes from the ``guardscope_sample`` markers guardscope writes.
    """
    records: list[TraceRecord] = []
    unreadable = 0
    sample: int | None = None
    current: tuple[dict[str, Any], list[str]] | None = None

    def finish() -> None:
        nonlocal sample
        if current is None:
            return
        metadata, payload_lines = current
        payload = "\n".join(payload_lines) if payload_lines else None
        if record_name(metadata) == SAMPLE_MARKER:
            try:
                sample = int(json.loads(payload or "")["sample"])
            except (ValueError, KeyError, TypeError):
                pass
            return
        parsed = to_record(metadata, payload, sample)
        if parsed is not None and parsed.name in KEPT_RECORDS:
            records.append(parsed)

    for line in lines:
        line = line.rstrip("\n")
        if line.startswith("\t"):
            if current is not None:
                current[1].append(line[1:])
            continue
        if not line.strip():
            continue
        finish()
        current = None
        match = _GLOG_LINE.match(line)
        if not match:
            unreadable += 1
            continue
        try:
            metadata = json.loads(match.group(1))
        except ValueError:
            unreadable += 1
            continue
        if not isinstance(metadata, dict):
            unreadable += 1
            continue
        current = (metadata, [])
    finish()
    return records, unreadable
