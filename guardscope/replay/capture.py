"""Capture torch's structured trace in-process, record by record, attributed to the sample being
replayed.

:class:`TraceCapture` is a context manager: on entry it attaches a handler to the
``torch.__trace`` logger (the one ``TORCH_TRACE`` and tlparse use), on exit it removes it and
restores the logger's level, so nothing leaks into the user's process. Each record is attributed
to the sample being replayed when it was emitted, and, when a stream is given, written out in
torch's own trace format (readable by tlparse) with a ``guardscope_sample`` marker record before
the first record of each sample. The records it keeps (:mod:`guardscope.replay.trace`) become
compile events in :mod:`guardscope.replay.events`.
"""

from __future__ import annotations

import json
import logging
from typing import IO, Any

from .. import torch_compat
from .trace import KEPT_RECORDS, SAMPLE_MARKER, TraceRecord, to_record


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
        self.compiles = 0  # graphs compiled so far (every frame): compilation_metrics without a failure
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
        parsed = to_record(metadata, payload, sample)
        if parsed is not None and parsed.name in KEPT_RECORDS:
            self.records.append(parsed)
            # A graph compiled (a failed compile, whose sample raised or hit a limit, is not one:
            # the progress line counts what the summary counts).
            if parsed.name == "compilation_metrics" and not _failed(parsed.metadata):
                self.compiles += 1


def _failed(metadata: dict) -> bool:
    """Whether a compilation_metrics record is of a compile that failed."""
    body = metadata.get("compilation_metrics")
    return isinstance(body, dict) and isinstance(body.get("fail_type"), str)
