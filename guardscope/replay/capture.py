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

from .. import torch_compat
from ..model import CompileEvent, CudagraphEvent, CudagraphEventKind, GraphBreak
from ..text import normalize_reason, short_location

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
        self.compiles = 0  # compilation_metrics records so far (every frame)
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
            if parsed.name == "compilation_metrics":
                self.compiles += 1


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


# --- CUDA Graph Trees ---------------------------------------------------------------------------
#
# With mode="reduce-overhead" CUDA graphs are recorded at run time, per compiled graph and per
# distinct set of sizes, not at compile time: the structured trace above holds no compile for
# them. :class:`CudagraphCapture` listens where torch reports them (see torch_compat) and keeps
# the raw observations per sample; :func:`cudagraph_events` (pure) turns one sample's
# observations into :class:`CudagraphEvent` records.

# The chromium event torch's dynamo_timed writes around each CUDA graph capture (torch >= 2.6).
RECORDING_EVENT = "CUDAGraphNode.record"

_COMPILE_PREFIX = r"^(?:\[(?P<compile_id>[^\]]*)\]\s*)?"
# Log lines of the ``cudagraphs`` artifact, as worded from torch 2.2 to 2.13. First match wins.
# 2.2: "recording cudagraph tree for (12, 30)"; 2.3+: "... for symint key (12, 30)" or
# "... for graph without symints"; 2.11+ prefixes "[0/1] " and capitalises "Recording".
NEW_SHAPE_LINE = re.compile(
    _COMPILE_PREFIX + r"recording cudagraph tree for (?:symint key (?P<key>.+)|(?P<none>graph without symints)|(?P<old>.+))$",
    re.IGNORECASE | re.DOTALL,
)
# "Recording function 3 of graph recording id 7" (2.5-2.10), "Recording function 1 (f) of ...",
# "[0/1] Recording function=f, mode=INFERENCE, cuda_graph_id=3, inputs: ..." (2.13).
RECORDING_LINE = re.compile(_COMPILE_PREFIX + r"Recording function\b", re.DOTALL)
RERECORD_LINE = re.compile(_COMPILE_PREFIX + r"Re-recording function\b.*?reason[=:]\s*(?P<reason>.*)$", re.DOTALL)
# "skipping cudagraphs due to mutated inputs ...", "skipping cudagraph due to function 2
# exceeding max re-recording limit ...", "disabling cudagraphs due to override_cudagraphs ...".
SKIP_LINE = re.compile(r"^(?:skipping|disabling) cudagraphs?\b(?:.*?\bdue to\s+)?(?P<reason>.*)$", re.IGNORECASE | re.DOTALL)
SIZES_WARNING = "CUDAGraph supports dynamic shapes by recording a new graph for each distinct input size"
SIZES_HINT = "torch warns of many CUDA graphs"
_OBSERVED_SIZES = re.compile(r"observed (\d+) distinct sizes")
_HINT_PREFIXES = (SIZES_HINT, "re-recorded: ")
UNLOGGED_SKIP = "reason not logged (counted by torch)"

# Data pointers and addresses in re-record reasons ("data pointer changed from 1398... to ...").
_ADDRESS = re.compile(r"\b(?:0x[0-9a-fA-F]{6,}|\d{9,})\b")
# Skip reasons end with "Found from : <stack trace>": the stack holds machine paths.
_FOUND_FROM = re.compile(r"\s*\.?\s*Found from\b", re.IGNORECASE)
DETAIL_LIMIT = 300
_WARNING_LEVELS = ("WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True)
class CudagraphRecord:
    """One raw observation during one call: a ``cudagraphs`` log line (``source="log"``), a
    chromium event from the structured trace (``"trace"``, its JSON), or the increase of torch's
    skip counter over the call (``"counter"``, digits)."""

    source: str
    text: str
    level: str = ""
    logger: str = ""
    sample: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"sample": self.sample, "source": self.source, "level": self.level,
                "logger": self.logger, "text": self.text}


def _clean(text: str) -> str:
    """One machine-independent line: the first line, addresses and source paths normalised."""
    first = _FOUND_FROM.split(text.strip(), maxsplit=1)[0]
    first = first.splitlines()[0] if first else ""
    return _ADDRESS.sub("<addr>", normalize_reason(first)).strip()[:DETAIL_LIMIT]


def _log_event(record: CudagraphRecord) -> CudagraphEvent | None:
    text = record.text.strip()
    match = NEW_SHAPE_LINE.match(text)
    if match:
        key = match.group("key") or match.group("old")
        return CudagraphEvent(CudagraphEventKind.NEW_SHAPE, "no sizes" if match.group("none") else _clean(key),
                              compile_id=match.group("compile_id"))
    match = RERECORD_LINE.match(text)
    if match:
        return CudagraphEvent(CudagraphEventKind.HINT, "re-recorded: " + _clean(match.group("reason")),
                              compile_id=match.group("compile_id"))
    match = RECORDING_LINE.match(text)
    if match:
        return CudagraphEvent(CudagraphEventKind.RECORDING, compile_id=match.group("compile_id"))
    match = SKIP_LINE.match(text)
    if match:
        return CudagraphEvent(CudagraphEventKind.SKIP, _clean(match.group("reason")) or _clean(text))
    if SIZES_WARNING in text:
        observed = _OBSERVED_SIZES.search(text)
        count = f"{observed.group(1)} " if observed else ""
        return CudagraphEvent(CudagraphEventKind.HINT, f"{SIZES_HINT}: {count}distinct sizes recorded for one graph")
    if record.level in _WARNING_LEVELS:
        # Never dropped. A warning of unknown wording may be a skip: cudagraph_events decides
        # with torch's skip counter (some reasons are logged bare, e.g. "graph with symbolic
        # shapes inputs and config.triton.cudagraph_skip_dynamic_graphs=True.").
        return CudagraphEvent(CudagraphEventKind.HINT, _clean(text))
    return None  # the chatter of DEBUG logging: warm-ups, checkpoints, input lists


def _recordings_from_trace(records: list[CudagraphRecord]) -> tuple[list[CudagraphEvent], int]:
    """Pair the begin/end chromium events of each capture; return (recordings, unreadable)."""
    events: list[CudagraphEvent] = []
    open_at: dict[str, list[float]] = {}
    unreadable = 0
    for record in records:
        try:
            event = json.loads(record.text)
            phase, name, ts = event["ph"], event["name"], float(event["ts"])
        except (ValueError, KeyError, TypeError):
            unreadable += 1
            continue
        if name != RECORDING_EVENT:
            continue
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        compile_id = str(args.get("compile_id") or "").strip("[]") or None
        compile_id = None if compile_id == "None" else compile_id
        key = compile_id or ""
        if phase == "B":
            open_at.setdefault(key, []).append(ts)
        elif phase == "E":
            started = open_at.get(key, [])
            seconds = round((ts - started.pop()) / 1e6, 6) if started else None
            events.append(CudagraphEvent(CudagraphEventKind.RECORDING, compile_id=compile_id, seconds=seconds))
    for key, starts in sorted(open_at.items()):  # a capture that never ended (it raised)
        events.extend(CudagraphEvent(CudagraphEventKind.RECORDING, compile_id=key or None) for _ in starts)
    return events, unreadable


def cudagraph_events(records: Iterable[CudagraphRecord]) -> tuple[tuple[CudagraphEvent, ...], int]:
    """One call's raw observations -> (events, count of records that could not be read).

    Recordings come from the trace's timed events where torch writes them (with their capture
    time), else from the log lines; skips torch counted but whose message was not seen (an
    unknown wording) are kept as skips with an unknown reason, never dropped.
    """
    records = list(records)
    traced, unreadable = _recordings_from_trace([r for r in records if r.source == "trace"])
    logged = [e for e in (_log_event(r) for r in records if r.source == "log") if e is not None]
    if traced:
        logged = [e for e in logged if e.kind is not CudagraphEventKind.RECORDING]
    counted = sum(int(r.text) for r in records if r.source == "counter" and r.text.isdigit())
    missing = counted - sum(1 for e in logged if e.kind is CudagraphEventKind.SKIP)
    events = []
    for event in logged:
        if missing > 0 and event.kind is CudagraphEventKind.HINT and not event.detail.startswith(_HINT_PREFIXES):
            event, missing = CudagraphEvent(CudagraphEventKind.SKIP, event.detail), missing - 1
        events.append(event)
    events += [CudagraphEvent(CudagraphEventKind.SKIP, UNLOGGED_SKIP)] * max(missing, 0)
    return tuple(events + traced), unreadable


def read_cudagraph_log(lines: Iterable[str]) -> tuple[dict[int | None, list[CudagraphRecord]], int]:
    """Read back the JSON lines :class:`CudagraphCapture` writes (``trace/cudagraphs.jsonl``):
    records grouped by sample, and the count of lines that could not be read."""
    by_sample: dict[int | None, list[CudagraphRecord]] = {}
    unreadable = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            record = CudagraphRecord(source=str(data["source"]), text=str(data["text"]),
                                     level=str(data.get("level") or ""), logger=str(data.get("logger") or ""),
                                     sample=data.get("sample") if isinstance(data.get("sample"), int) else None)
        except (ValueError, KeyError, TypeError):
            unreadable += 1
            continue
        by_sample.setdefault(record.sample, []).append(record)
    return by_sample, unreadable


class _CudagraphHandler(logging.Handler):
    def __init__(self, capture: CudagraphCapture, source: str) -> None:
        super().__init__(level=logging.DEBUG)
        self.capture, self.source = capture, source

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.capture._receive(self.source, record)
        except Exception:  # never break the user's forward pass
            self.capture.dropped += 1


class CudagraphCapture:
    """Listen to CUDA Graph Trees for the duration of a replay; restore every logger on exit.

    While active, the ``cudagraphs`` loggers are at DEBUG and do not propagate (their
    messages land in the catalog and, with ``stream``, as JSON lines in the trace folder,
    instead of on stderr). ``set_sample(i)`` before a call, ``take()`` after it returns the
    call's events.
    """

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream
        self.dropped = 0
        self.unreadable = 0
        self._sample: int | None = None
        self._pending: list[CudagraphRecord] = []
        self._skips_before = 0
        self._loggers = torch_compat.cudagraph_loggers()
        self._trace_logger = torch_compat.trace_logger()
        self._log_handler = _CudagraphHandler(self, "log")
        self._trace_handler = _CudagraphHandler(self, "trace")
        self._saved: list[tuple[logging.Logger, int, bool]] = []

    def __enter__(self) -> CudagraphCapture:
        for logger in [*self._loggers, self._trace_logger]:
            self._saved.append((logger, logger.level, logger.propagate))
        for logger in self._loggers:
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
            logger.addHandler(self._log_handler)
        self._trace_logger.setLevel(logging.DEBUG)
        self._trace_logger.addHandler(self._trace_handler)
        self._skips_before = torch_compat.cudagraph_skip_count()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for logger in self._loggers:
            logger.removeHandler(self._log_handler)
        self._trace_logger.removeHandler(self._trace_handler)
        for logger, level, propagate in reversed(self._saved):
            logger.setLevel(level)
            logger.propagate = propagate
        self._saved.clear()
        if self.stream is not None:
            self.stream.flush()

    def set_sample(self, index: int | None) -> None:
        self._sample = index

    def _keep(self, record: CudagraphRecord) -> None:
        self._pending.append(record)
        if self.stream is not None:
            self.stream.write(json.dumps(record.to_json(), sort_keys=True) + "\n")

    def _receive(self, source: str, record: logging.LogRecord) -> None:
        if source == "trace":
            metadata = getattr(record, "metadata", None)
            payload = getattr(record, "payload", None)
            if not isinstance(metadata, dict) or "chromium_event" not in metadata:
                return
            if not isinstance(payload, str) or RECORDING_EVENT not in payload:
                return
            self._keep(CudagraphRecord("trace", " ".join(payload.split()), sample=self._sample))
            return
        self._keep(CudagraphRecord("log", record.getMessage(), level=record.levelname,
                                   logger=record.name, sample=self._sample))

    def take(self) -> tuple[CudagraphEvent, ...]:
        """The events since the last ``take()``, attributed to the current sample."""
        skips = torch_compat.cudagraph_skip_count()
        if skips > self._skips_before:
            self._keep(CudagraphRecord("counter", str(skips - self._skips_before), sample=self._sample))
        self._skips_before = skips
        records, self._pending = self._pending, []
        events, unreadable = cudagraph_events(records)
        self.unreadable += unreadable
        return events
