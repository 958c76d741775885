"""CUDA Graph Trees during a replay: listened to per sample, their observations turned into
:class:`CudagraphEvent` records.

With mode="reduce-overhead" CUDA graphs are recorded at run time, per compiled graph and per
distinct set of sizes, not at compile time: the structured trace holds no compile for them.
:class:`CudagraphCapture` listens where torch reports them (see torch_compat) and keeps the raw
observations per sample; :func:`cudagraph_events` (pure) turns one sample's observations into
:class:`CudagraphEvent` records; :func:`read_cudagraph_log` reads back the observations it wrote.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import IO, Any, Iterable

from .. import torch_compat
from ..model import CudagraphEvent, CudagraphEventKind
from ..text import normalize_reason

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
