"""The served model: :class:`ServedModel` (made by :func:`~guardscope.runtime.serving.serve`) serves
each call so that none compiles, and :class:`RuntimeStats` is a snapshot of its counters.

How a call is served: the arguments are checked against the guards of the compiled graphs (the
check Dynamo itself makes, a few microseconds a graph). When one accepts, the compiled model
runs, under ``torch.compiler.set_stance("eager_on_recompile")`` where torch has it (2.6+), so
even a call the check misjudged cannot compile. When none accepts, the call is a *fallback*: the
original model runs eagerly and the arguments are offered to a :class:`FallbackRecorder`, which
keeps a bounded sample of them in a guardscope corpus. Recording never raises into the call:
its failures are logged (logger ``guardscope.runtime``) and counted in :attr:`ServedModel.stats`.
The model's own exceptions propagate unchanged.

Everything torch-version-dependent (the stance, the cache entries and their guard checks) is
in :mod:`guardscope.torch_compat`.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .. import torch_compat
from ..precompiled import precompiled_forward
from ..replay.arguments import CallBinder
from .background import (
    GATE,
    PROCESS,
    THREAD,
    BackgroundCompile,
    BackgroundCompileError,
    BackgroundCompiler,
    serving_stance,
)
from .child_compile import ChildCompile, ChildCompileError, ChildCompiler
from .recording import _LOG_EVERY, _LOG_FIRST, FallbackRecorder, input_signature
from .traffic import TrafficRecorder

logger = logging.getLogger("guardscope.runtime")


@dataclass(frozen=True)
class RuntimeStats:
    """A snapshot of a :class:`ServedModel`'s counters.

    With a fallback directory, ``fallbacks == recorded + dropped + pending`` whenever no call is
    in flight, and ``pending`` is 0 after :meth:`ServedModel.close`. ``dropped`` counts fallbacks not recorded for any reason,
    sampling included; ``dropped_by_reason`` splits it (``sampled_out``, ``max_samples``,
    ``max_bytes``, ``queue_full``, ``unstorable``, ``error``, ``closed``). ``errors`` counts
    failures inside guardscope's own recording or marking, each logged.
    """

    calls: int = 0
    compiled: int = 0  # calls a compiled graph accepted
    precompiled: int = 0  # of those, calls a precompiled graph served (guardscope precompile DIR)
    fallbacks: int = 0  # calls no compiled graph accepted: they ran eagerly
    recorded: int = 0  # fallbacks written to the fallback corpus
    pending: int = 0  # fallbacks accepted for recording, not yet written
    dropped: int = 0
    dropped_by_reason: tuple[tuple[str, int], ...] = ()
    signatures: int = 0  # distinct input signatures among the recorded fallbacks
    errors: int = 0
    # With a traffic directory (every call recorded by signature, TrafficRecorder): calls
    # written, waiting, dropped (queue_full, unstorable, error, closed), and written in full.
    traffic_recorded: int = 0
    traffic_pending: int = 0
    traffic_dropped: int = 0
    traffic_full: int = 0
    # With background_compile (BackgroundCompiler): compiles finished (a graph now accepts the
    # topology) and failed (served eagerly), queued or running, fallbacks that started none
    # (max_compiles, queue_full, closed), and each finished compile (seconds, eager calls).
    background_done: int = 0
    background_failed: int = 0
    background_pending: int = 0
    background_dropped: int = 0
    background_compiles: tuple[BackgroundCompile, ...] = ()
    # Calls a compiled graph accepted that ran eagerly instead: an FX trace was on in the process
    # (a background inductor compile's), and torch then refuses compiled calls on every thread.
    background_eager_tracing: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "compiled": self.compiled,
            "precompiled": self.precompiled,
            "fallbacks": self.fallbacks,
            "recorded": self.recorded,
            "pending": self.pending,
            "dropped": self.dropped,
            "dropped_by_reason": dict(self.dropped_by_reason),
            "signatures": self.signatures,
            "errors": self.errors,
            "traffic": {"recorded": self.traffic_recorded, "pending": self.traffic_pending,
                        "dropped": self.traffic_dropped, "full": self.traffic_full},
            "background": {"done": self.background_done, "failed": self.background_failed,
                           "pending": self.background_pending, "dropped": self.background_dropped,
                           "eager_while_tracing": self.background_eager_tracing,
                           "compiles": [c.to_json() for c in self.background_compiles]},
        }


class ServedModel:
    """A compiled model with a plan applied, serving so that no call compiles. Made by :func:`serve`.

    Call it as the model. :attr:`stats` counts calls, fallbacks and what was recorded;
    :meth:`close` (or leaving a ``with`` block) writes the pending fallback samples and the
    corpus manifest. Calls after :meth:`close` are still served (nothing more is recorded).
    Safe to call from several threads. With ``background_compile``, :attr:`background` compiles
    the fallback topologies on a worker thread (:mod:`.background`) and :meth:`wait_background`
    waits for it.
    """

    def __init__(
        self,
        *,
        model: Any,
        compiled: Any,
        plan: str,
        plan_dir: Path,
        options: Any,
        mark: Callable[..., None] | None,
        recorder: FallbackRecorder | None,
        eager_on_recompile: bool,
        traffic: TrafficRecorder | None = None,
        setup_seconds: float,
        warnings: tuple[str, ...],
        background: dict[str, Any] | None = None,
        configure: Callable[[], None] | None = None,
        child: ChildCompiler | None = None,
    ) -> None:
        self.model = model
        self.compiled = compiled
        self.plan = plan
        self.plan_dir = plan_dir
        self.options = options
        self.recorder = recorder
        self.fallback_dir = recorder.directory if recorder is not None else None
        self.traffic = traffic
        self.traffic_dir = traffic.directory if traffic is not None else None
        self.eager_on_recompile = eager_on_recompile and torch_compat.supports_eager_on_recompile()
        self.setup_seconds = setup_seconds
        self.warnings = warnings
        self._mark = mark
        # The plan's global settings (the unbacked plan's duck sizing): torch 2.13 keeps settings
        # made in code per thread, so the background worker makes them again on its own thread.
        self._configure = configure
        self._binder = CallBinder(model)
        self._code = self._binder.code
        self._grad = functools.partial(torch_compat.grad_context, options.grad_mode)
        # The settings torch.compile(dynamic=True/False) makes around each call, held while any call
        # is in flight: on torch 2.11 threads' calls otherwise leave them changed for the process.
        # Decided once here, not on every call: where torch keeps them per thread, nothing is held.
        dynamic = None if options.shapes_spec else options.dynamic  # compile_model passes no dynamic= with a spec
        held = torch_compat.dynamic_call_settings(dynamic) and not torch_compat.supports_per_thread_config()
        self._dynamic = functools.partial(torch_compat.held_call_settings, dynamic) if held else contextlib.nullcontext
        self._lock = threading.Lock()
        self._calls = 0
        self._compiled_calls = 0
        self._fallbacks = 0
        self._errors = 0
        self._eager_tracing = 0
        self._closed = False
        # The warmup's precompiled graphs, when warmup() loaded them: the compiled module's forward
        # is then guardscope's dispatch over them, and Dynamo's cache holds none of them.
        self.precompiled = precompiled_forward(compiled)
        # (the warmup's own calls through it are not this model's to count)
        self._precompiled_before = sum(self.precompiled.stats.served) if self.precompiled is not None else 0
        self.graphs = len(torch_compat.cache_entries(self._code) or []) + (
            len(self.precompiled.graphs) if self.precompiled is not None else 0)
        # Options of a BackgroundCompiler (max_compiles, switch_interval...); None: off.
        # background_compile="process": a child process compiles first, this process loads its caches.
        self.child = child if background is not None else None
        self.background_strategy = None if background is None else PROCESS if self.child is not None else THREAD
        self.background = BackgroundCompiler(self._compile_in_background, **background) if background is not None else None
        atexit.register(self.close)

    def __repr__(self) -> str:
        stats = self.stats
        return (
            f"<ServedModel plan={self.plan!r} graphs={self.graphs} calls={stats.calls} "
            f"fallbacks={stats.fallbacks} recorded={stats.recorded}>"
        )

    def _stance(self) -> contextlib.AbstractContextManager[Any]:
        if self.eager_on_recompile:
            return serving_stance()  # the stance, ordered with background compiles entering
        if self.background is not None:
            return GATE.counted()  # in flight: a background compile steps aside for it
        return contextlib.nullcontext(False)

    def accepts(self, frame: dict[str, Any]) -> bool:
        """Whether a compiled graph's guards accept a call with these first-frame locals
        (:meth:`guardscope.replay.arguments.CallBinder.frame_locals`), in the current grad mode."""
        entries = torch_compat.cache_entries(self._code) or []
        return torch_compat.first_accepting(entries, frame) is not None

    def _precompiled_accepts(self, args: tuple, kwargs: dict) -> bool:
        """Whether a precompiled graph's guards accept the call (the dispatch checks them again
        when it serves it: a few microseconds a graph)."""
        return self.precompiled is not None and self.precompiled.accepting(args, kwargs) is not None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._mark is not None:
            try:
                self._mark(*args, **kwargs)
            except Exception as exc:
                self._error("the plan's mark()", exc)
        if self.traffic is not None:
            self.traffic.offer(args, kwargs)
        # A compile while serving is this call's stall; the warmup's, before, are not (compiles.jsonl).
        with self.traffic.serving() if self.traffic is not None else contextlib.nullcontext(), \
                self._stance(), self._dynamic(), self._grad():
            arguments = self._binder.arguments(args, kwargs)
            frame = self._binder.frame_locals(args, kwargs) if arguments is not None else {}
            if not frame:  # they do not fit forward: the call raises its TypeError
                with self._lock:
                    self._calls += 1
                return self._call_compiled(args, kwargs, counted=False)
            if self.accepts(frame) or self._precompiled_accepts(args, kwargs):
                with self._lock:
                    self._calls += 1
                return self._call_compiled(args, kwargs)
            with self._lock:
                self._calls += 1
                self._fallbacks += 1
            if self.recorder is not None:
                self.recorder.offer(args, kwargs, arguments)
            if self.background is not None:
                self._offer_background(args, kwargs, arguments)
            return self.model(*args, **kwargs)

    def _call_compiled(self, args: tuple, kwargs: dict, *, counted: bool = True) -> Any:
        """The compiled model; the model eagerly (counted) while an FX trace is on anywhere in the
        process — a background inductor compile's make_fx on the worker — since torch's flag is
        process-wide and Dynamo would refuse the call. A trace that starts between the check and
        the call makes Dynamo refuse on entry, before anything ran: that call is served eagerly
        too. Never raises for it."""
        if not torch_compat.fx_symbolic_tracing():
            if counted:
                with self._lock:
                    self._compiled_calls += 1
            try:
                return self.compiled(*args, **kwargs)
            except RuntimeError as exc:
                if not torch_compat.refused_for_fx_trace(exc):
                    raise
            if counted:
                with self._lock:
                    self._compiled_calls -= 1
        if counted:
            with self._lock:
                self._eager_tracing += 1
        return self.model(*args, **kwargs)

    def _offer_background(self, args: tuple, kwargs: dict, arguments: dict[str, Any]) -> None:
        try:
            signature = input_signature(arguments)
        except Exception as exc:  # noqa: BLE001 - never into the served call
            self._error("describing a fallback for a background compile", exc)
            return
        self.background.offer(signature, args, kwargs)

    def _compile_in_background(self, args: tuple, kwargs: dict) -> dict[str, Any] | bool:
        """On the background worker, with a private copy of a fallback call: compile the model
        for it (BackgroundCompiler's ``compile``). Details of the compile once a graph accepts
        the call, False when one did already; raises when none does after the compile.

        With a child compiler (``background_compile="process"``) the child compiles the call's
        topology first and its compile-cache artifacts are loaded here, so this thread's compile
        is Dynamo's trace plus cache hits; the details count them."""
        if self._configure is not None:
            self._configure()  # this thread's settings, as the serving thread's (torch 2.13: per thread)
        if self._mark is not None:
            self._mark(*args, **kwargs)  # the plan's marks, as on the serving path
        with self._grad():
            frame = self._binder.frame_locals(args, kwargs)
            if not frame:
                raise BackgroundCompileError("the call's arguments do not fit forward")
            if self.accepts(frame):
                return False
        details: dict[str, Any] = {"strategy": self.background_strategy}
        done = None
        if self.child is not None:
            try:
                done = self.child.compile(args, kwargs)
            except ChildCompileError as exc:
                raise BackgroundCompileError(str(exc)) from None
            details["child_seconds"] = round(done.seconds, 6)
            details["child_started"] = bool(done.result.get("set_up"))  # a new compile process (set up the plan)
        try:
            if done is not None:
                details["artifacts"] = torch_compat.load_compile_cache(done.artifacts) if done.artifacts else None
            return self._compile_here(args, kwargs, frame, details, done)
        except BaseException:
            if done is not None:
                self.child.discard()  # it compiled what this process did not: its Dynamo state is ahead
            raise

    def _compile_here(self, args: tuple, kwargs: dict, frame: dict[str, Any], details: dict[str, Any],
                      done: ChildCompile | None) -> dict[str, Any]:
        """The worker's own compile of the call (from the compile process's caches when ``done``)."""
        counters = torch_compat.compile_cache_counters()
        begun = time.perf_counter()
        entries = len(torch_compat.cache_entries(self._code) or [])
        worker = threading.get_ident()
        gate = GATE.entering() if self.eager_on_recompile else contextlib.nullcontext(lambda: None)
        with gate as release:
            def started(_: Any) -> None:  # Dynamo's compile-start callback, on the compiling thread
                if threading.get_ident() == worker:
                    release()  # this call's frame callback is set: served calls may take the stance again

            # Room for one more graph of this frame: the plan's graphs may fill Dynamo's limit.
            with torch_compat.compile_start_callback(started), torch_compat.raised_recompile_limit(entries + 1), \
                    self._dynamic(), self._grad():
                self.compiled(*args, **kwargs)
        details["compile_seconds"] = round(time.perf_counter() - begun, 6)
        after = torch_compat.compile_cache_counters()
        details["cache"] = {name: after[name] - counters[name] for name in sorted(after)}
        with self._grad():
            if not self.accepts(frame):
                raise BackgroundCompileError("no compiled graph accepts the call after its compile")
        if done is not None:
            self.child.commit(done)
        return details

    def wait_background(self, timeout: float | None = None) -> bool:
        """Wait until no background compile is queued or running (True; also without
        background compiles), False after ``timeout`` seconds."""
        return self.background.wait(timeout) if self.background is not None else True

    def _error(self, doing: str, exc: BaseException) -> None:
        if self.recorder is not None:
            self.recorder.error(doing, exc)
            return
        with self._lock:
            self._errors += 1
            count = self._errors
        if count <= _LOG_FIRST or count % _LOG_EVERY == 0:
            logger.warning("guardscope runtime: %s failed (%s: %s); serving goes on",
                           doing, type(exc).__name__, exc)

    @property
    def stats(self) -> RuntimeStats:
        with self._lock:
            calls, compiled, fallbacks, errors = self._calls, self._compiled_calls, self._fallbacks, self._errors
            eager_tracing = self._eager_tracing
        traffic = {"background_eager_tracing": eager_tracing}
        if self.traffic is not None:
            counted = self.traffic.counts()
            errors += counted["errors"]
            traffic = {"traffic_recorded": counted["recorded"], "traffic_pending": counted["pending"],
                       "traffic_dropped": counted["dropped"], "traffic_full": counted["full"]}
        if self.background is not None:
            counted = self.background.counts()
            traffic.update(background_done=counted["done"], background_failed=counted["failed"],
                           background_pending=counted["pending"], background_dropped=counted["dropped"],
                           background_compiles=counted["compiles"])
        if self.precompiled is not None:
            traffic["precompiled"] = sum(self.precompiled.stats.served) - self._precompiled_before
        recorded = self.recorder.counts() if self.recorder is not None else None
        if recorded is None:
            return RuntimeStats(calls=calls, compiled=compiled, fallbacks=fallbacks,
                                dropped=0, errors=errors, **traffic)
        return RuntimeStats(
            **traffic,
            calls=calls,
            compiled=compiled,
            fallbacks=fallbacks,
            recorded=recorded["recorded"],
            pending=recorded["pending"],
            dropped=recorded["dropped"],
            dropped_by_reason=recorded["dropped_by_reason"],
            signatures=recorded["signatures"],
            errors=errors + recorded["errors"],
        )

    def flush(self, timeout: float | None = None) -> bool:
        """Write the fallback samples recorded so far to disk now, while serving goes on (e.g.
        before a planned restart); True once they are. The recorder also flushes by itself
        every ``flush_every`` seconds."""
        flushed = self.recorder.flush(timeout) if self.recorder is not None else True
        return (self.traffic.flush(timeout) if self.traffic is not None else True) and flushed

    def close(self, timeout: float | None = 30.0) -> None:
        """Stop background compiles (the queued ones dropped, a running one waited for up to
        ``timeout`` seconds, then left to its daemon thread), write the pending fallback samples
        and the corpus manifest; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.close)
        if self.background is not None:
            self.background.begin_close()
        if self.child is not None:
            self.child.close()  # a compile process still running is killed: the worker's job fails
        if self.background is not None:
            self.background.close(timeout)
        if self.recorder is not None:
            self.recorder.close()
        if self.traffic is not None:
            self.traffic.close()

    def __enter__(self) -> ServedModel:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


__all__ = ["RuntimeStats", "ServedModel"]
