"""Production's compiles as they happen in the process that serves: :class:`CompileObserver` times
every Dynamo compile (and every compile torch defers to run time: a training step's backward
graph, a CUDA-graph recording) through torch's compile callbacks, and names each compile's frame
from Dynamo's compilation metrics.

* ``torch._dynamo.callback.callback_handler`` (torch 2.5+; read on 2.9, 2.11, 2.13, 2.14):
  ``register_start_callback`` / ``register_end_callback`` and their ``remove_*``; each callback
  gets a ``CallbackArgs`` with ``callback_trigger`` (``CallbackTrigger.DYNAMO``, ``LAZY_BACKWARD``,
  ``CUDAGRAPH_RECORDING``) and ``compile_id`` (``"3/1"``; ``"3/1_1"`` after a restart). The start
  and end callbacks run on the compiling thread, around the whole compile (the backend's
  included), only on the outermost compile in flight.
* ``torch._dynamo.utils.get_compilation_metrics()`` (the last 64 compiles' ``CompilationMetrics``:
  ``compile_id``, ``co_name``, ``co_filename``, ``co_firstlineno``, ``is_forward``,
  ``entire_frame_compile_time_s``, ``backend_compile_time_s``, ``fail_type``), recorded as a
  compile's metrics context exits, just after its end callback.

Nothing here raises into the compile it observes.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable

import torch

from .frames import _callbacks_or_cause

# A finished compile whose metrics torch has not recorded yet is held this long, then given out
# with the seconds the callbacks measured and no frame name.
METRICS_WAIT_S = 30.0


def _metrics_by_id() -> dict[tuple[str, bool], Any]:
    """Dynamo's recent compilation metrics keyed by (compile id, is_forward); {} where torch has
    none to give."""
    try:
        from torch._dynamo.utils import get_compilation_metrics
        metrics = get_compilation_metrics()
    except Exception:  # pragma: no cover - a torch without it: the callbacks' seconds stand
        return {}
    found: dict[tuple[str, bool], Any] = {}
    for entry in metrics:
        compile_id = getattr(entry, "compile_id", None)
        if isinstance(compile_id, str):
            found[(compile_id.strip("[]"), getattr(entry, "is_forward", None) is not False)] = entry
    return found


def _number(value: Any) -> float | None:
    return round(float(value), 6) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class CompileObserver:
    """Every compile of this process while it is open: its compile id, what triggered it
    (``dynamo``: a call Dynamo compiled a frame for; ``lazy_backward``: the backward graph of a
    training step, compiled when ``backward()`` first ran it; ``cudagraph_recording``), the wall
    time it started (ns since the epoch), its seconds, and for Dynamo's compiles the frame's code
    (``co_name``, ``co_filename``, ``co_firstlineno``), Dynamo's own ``entire_frame_compile_time_s``
    (which ``seconds`` then is) and the backend's share, and ``fail_type`` for a compile that failed.

    ``in_call``, when given, is asked on the compiling thread as each compile starts whether that
    thread is inside a call the caller watches (a recorder's wrapped forward); its answer, unless
    None, is the event's ``in_call``: a compile outside every such call (a warmup at start-up) is
    not a call's stall.

    :meth:`drain` hands out the finished compiles (thread-safe); :meth:`close` stops observing.
    ``available`` is False, with ``cause``, on a torch without compile callbacks."""

    def __init__(self, in_call: Callable[[], bool | None] | None = None) -> None:
        self._lock = threading.Lock()
        self._in_call = in_call
        self._open: dict[tuple[str, str, int], tuple[int, float, bool | None]] = {}
        self._done: list[tuple[float, dict[str, Any]]] = []  # (monotonic end, event)
        self._handler, self.cause = _callbacks_or_cause()
        self.available = self._handler is not None and callable(getattr(self._handler, "register_end_callback", None))
        if self._handler is not None and not self.available:  # pragma: no cover - torch < 2.5
            self.cause = f"torch {torch.__version__}'s compile callbacks have no register_end_callback"
        if self.available:
            self._handler.register_start_callback(self._started)
            self._handler.register_end_callback(self._ended)

    @staticmethod
    def _key(args: Any) -> tuple[str, str, int]:
        trigger = getattr(getattr(args, "callback_trigger", None), "name", "DYNAMO")
        return str(getattr(args, "compile_id", "")).strip("[]"), str(trigger).lower(), threading.get_ident()

    def _started(self, args: Any) -> None:
        with contextlib.suppress(Exception):
            key = self._key(args)
            inside = self._in_call() if self._in_call is not None else None
            with self._lock:
                self._open[key] = (time.time_ns(), time.perf_counter(), inside)

    def _ended(self, args: Any) -> None:
        with contextlib.suppress(Exception):
            ended = time.perf_counter()
            key = self._key(args)
            with self._lock:
                begun = self._open.pop(key, None)
                if begun is None:
                    return
                event = {"compile_id": key[0], "trigger": key[1], "start_ns": begun[0],
                         "seconds": round(ended - begun[1], 6)}
                if begun[2] is not None:
                    event["in_call"] = bool(begun[2])
                self._done.append((time.monotonic(), event))

    def drain(self, *, wait: bool = True) -> list[dict[str, Any]]:
        """The compiles finished since the last drain, oldest first, each named from Dynamo's
        metrics. With ``wait``, a Dynamo compile whose metrics are not recorded yet stays for the
        next drain (for at most :data:`METRICS_WAIT_S`)."""
        with self._lock:
            done, self._done = self._done, []
        if not done:
            return []
        metrics = _metrics_by_id()
        given, kept = [], []
        now = time.monotonic()
        for ended, event in done:
            found = metrics.get((event["compile_id"], event["trigger"] != "lazy_backward"))
            if found is None and event["trigger"] == "dynamo" and wait and now - ended < METRICS_WAIT_S:
                kept.append((ended, event))
                continue
            given.append(_named(event, found))
        if kept:
            with self._lock:
                self._done[:0] = kept
        return sorted(given, key=lambda e: (e["start_ns"], e["compile_id"], e["trigger"]))

    def close(self) -> None:
        if not self.available:
            return
        for remove, callback in (("remove_start_callback", self._started), ("remove_end_callback", self._ended)):
            with contextlib.suppress(Exception):
                getattr(self._handler, remove)(callback)
        self.available = False


def _named(event: dict[str, Any], metrics: Any) -> dict[str, Any]:
    """``event`` with its frame's code and Dynamo's own timings, where ``metrics`` has them."""
    if metrics is None:
        return event
    named = dict(event)
    for field in ("co_name", "co_filename"):
        value = getattr(metrics, field, None)
        if isinstance(value, str):
            named[field] = value
    line = getattr(metrics, "co_firstlineno", None)
    if isinstance(line, int):
        named["co_firstlineno"] = line
    whole = _number(getattr(metrics, "entire_frame_compile_time_s", None))
    if whole is not None:
        named["callback_seconds"] = named["seconds"]
        named["seconds"] = whole
    backend = _number(getattr(metrics, "backend_compile_time_s", None))
    if backend is not None:
        named["backend_seconds"] = backend
    fail_type = getattr(metrics, "fail_type", None)
    if isinstance(fail_type, str):
        named["fail_type"] = fail_type
    return named


__all__ = ["METRICS_WAIT_S", "CompileObserver"]
