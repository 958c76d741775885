"""Capture torch's structured trace in-process and turn it into :class:`CompileEvent` records.

:class:`TraceCapture` is a context manager: on entry it attaches a handler to the
``torch.__trace`` logger (the one ``TORCH_TRACE`` and tlparse use), on exit it removes it and
restores the logger's level, so nothing leaks into the user's process. Each record is attributed
to the sample being replayed when it was emitted, and, when a stream is given, written out in
torch's own trace format (readable by tlparse) with a ``guardscope_sample`` marker record before
the first record of each sample.

:func:`events_from_records` is pure: records in, compile events out. :func:`read_trace` parses a
trace file back into records, so the parser is tested on traces recorded by other torch versions.
A record it cannot read is counted in :class:`ParsedTrace.unparsed`, never a crash.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import IO, Any, Iterable

from . import torch_compat
from .model import CompileEvent

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


def _to_record(metadata: Any, payload: Any, sample: int | None) -> TraceRecord | None:
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


class _Handler(logging.Handler):
    def __init__(self, capture: TraceCapture) -> None:
        super().__init__(level=logging.DEBUG)
        self.capture = capture

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.capture._receive(record)
        except Exception:  # a broken record must never break the user's forward pass
            self.capture.dropped += 1


class TraceCapture:
    """Attach to the structured trace; collect :class:`TraceRecord` objects per sample.

    >>> with TraceCapture() as capture:          # doctest: +SKIP
    ...     capture.set_sample(0); compiled(x)
    >>> parsed = events_from_records(capture.records)
    """

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream
        self.records: list[TraceRecord] = []
        self.dropped = 0
        self._sample: int | None = None
        self._marked: int | None = None
        self._handler = _Handler(self)
        self._formatter = torch_compat.trace_formatter()
        self._logger = torch_compat.trace_logger()
        self._saved_level = self._logger.level
        self._saved_propagate = self._logger.propagate

    def set_sample(self, index: int | None) -> None:
        self._sample = index

    def __enter__(self) -> TraceCapture:
        self._saved_level = self._logger.level
        self._saved_propagate = self._logger.propagate
        self._logger.setLevel(logging.DEBUG)
        # The trace is megabytes of JSON: keep it out of the user's root logger handlers.
        self._logger.propagate = False
        self._logger.addHandler(self._handler)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._logger.removeHandler(self._handler)
        self._logger.setLevel(self._saved_level)
        self._logger.propagate = self._saved_propagate
        if self.stream is not None:
            self.stream.flush()

    def _write(self, record: logging.LogRecord) -> None:
        if self.stream is None:
            return
        self.stream.write(self._formatter.format(record) + "\n")

    def _receive(self, record: logging.LogRecord) -> None:
        metadata = getattr(record, "metadata", None)
        payload = getattr(record, "payload", None)
        sample = self._sample
        if sample is not None and sample != self._marked and self.stream is not None:
            self._marked = sample
            marker = logging.makeLogRecord(
                {
                    "name": self._logger.name,
                    "levelno": logging.DEBUG,
                    "levelname": "DEBUG",
                    "pathname": __file__,
                    "lineno": 0,
                    "msg": "",
                    "metadata": {"artifact": {"name": SAMPLE_MARKER, "encoding": "json"}},
                    "payload": json.dumps({"sample": sample}),
                }
            )
            self._write(marker)
        self._write(record)
        parsed = _to_record(metadata, payload, sample)
        if parsed is not None and parsed.name in KEPT_RECORDS:
            self.records.append(parsed)


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
        parsed = _to_record(metadata, payload, sample)
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


# --- records -> compile events -----------------------------------------------------------------


@dataclass
class ParsedTrace:
    events: list[CompileEvent]
    unparsed: dict[str, int] = field(default_factory=dict)

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
_INPUT_GUARD = re.compile(r"^(TENSOR_MATCH|LAMBDA_GUARD|LENGTH_CHECK|EQUALS_MATCH|TYPE_MATCH|ID_MATCH)\b")


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


def events_from_records(records: Iterable[TraceRecord]) -> ParsedTrace:
    """Group records by compile id and build one :class:`CompileEvent` per compilation."""
    parsed = ParsedTrace(events=[])
    reasons: dict[str, list[str]] = {}
    guards: dict[str, tuple[str, ...]] = {}
    samples: dict[str, int | None] = {}
    metrics: list[tuple[str, dict[str, Any], int | None]] = []
    for record in records:
        key = _compile_id(record.frame_id, record.frame_compile_id)
        if record.name == "recompile_reasons":
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
