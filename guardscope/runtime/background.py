"""Background compiles: a topology that fell back is compiled off the serving thread, then served
compiled, with no restart (``serve(..., background_compile=True)``).

The seed article's Option 5 compiles a new topology on a background thread of the serving process
(one process, so the new graph lands in the Dynamo cache the serving thread reads). guardscope
keeps that shape and bounds it:

* **one worker thread** (a daemon), one compile at a time;
* **a bounded queue, most frequent first**: one job per :func:`~.recording.input_signature`,
  holding a private copy of the first fallback of that signature; each later fallback of it adds
  to its count, and the worker takes the pending signature with the most fallbacks (ties: the
  oldest). At most ``max_pending`` wait; at most ``max_compiles`` are ever started;
* **the GIL switch interval** (``sys.setswitchinterval``, process-wide) lowered while a compile
  runs — the article's 0.1 ms, which cut its eager calls' worst case during a compile from
  1,580 ms to 317 ms on its GPU — and restored after;
* **no guard-latency measurement**: Dynamo times each new compile's guards once, after flushing
  the CPU caches (20-35 ms with the GIL held), only for a compile metric; a background compile
  skips it (:func:`~guardscope.torch_compat.without_guard_latency_profile`);
* **the compile steps aside** (``yield_to_serving``, :mod:`.yielding`): at each Python call, the
  worker waits while served calls are in flight (at most 20 ms at a time), so it runs in the
  gaps between served calls instead of taking turns with them;
* **the serving thread never compiles**: the ``eager_on_recompile`` stance is one process-wide
  variable that Dynamo reads when a compiled function is entered, and it sets the entering
  thread's own (thread-local) frame callback from it. The worker must enter under the default
  stance, the serving threads under ``eager_on_recompile``; :class:`StanceGate` orders the two:
  the worker waits for the served calls in flight to leave, enters, and lets served calls in again
  as soon as its compile has started (Dynamo's compile-start callback, on the worker's thread) —
  from then on the stance no longer matters to the worker's call;
* **failures stay local**: a compile that raises (an unsupported op, a backend error) leaves the
  topology served eagerly; it is counted, logged once (one warning on ``guardscope.runtime``) and
  never retried;
* **clean close**: :meth:`BackgroundCompiler.close` drops the pending jobs and waits for a
  running compile up to a timeout, then abandons it (the thread is a daemon; it cannot hang the
  process).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from .. import torch_compat
from ..errors import ServeError
from .yielding import yielding_to

logger = logging.getLogger("guardscope.runtime")

DONE = "done"  # compiled: a graph now accepts the topology's calls
FAILED = "failed"  # the compile raised, or left no graph accepting the call: served eagerly

# The article's mitigation: while a compile runs, the interpreter asks the thread holding the GIL
# to drop it every 0.1 ms instead of every 5 ms, so the serving thread waits less for it.
DEFAULT_SWITCH_INTERVAL = 1e-4

# Where a background compile runs (serve's background_compile).
THREAD = "thread"  # on the worker thread of this process, the whole compile (the article's Option 5)
PROCESS = "process"  # in a child process first (.child_compile), then a cached compile on the worker
STRATEGIES = (THREAD, PROCESS)


def background_strategy(choice: Any, backend: str) -> str | None:
    """The strategy ``serve(background_compile=choice)`` means: None (off) for False or None;
    for True or ``"auto"``, guardscope's choice — a child process when the backend has compile
    caches to hand back (inductor), else the thread; ``"thread"`` or ``"process"`` as said.
    ``ServeError`` for anything else."""
    if choice is None or choice is False:
        return None
    if choice is True or choice == "auto":
        return PROCESS if backend == "inductor" else THREAD
    if isinstance(choice, str) and choice in STRATEGIES:
        return choice
    raise ServeError(f"background_compile must be False, True, 'auto', 'thread' or 'process'; got {choice!r}")


# Why a fallback started no background compile (keys of dropped_by_reason).
BOUND = "max_compiles"  # max_compiles compiles were started or are queued already
QUEUE_FULL = "queue_full"  # max_pending signatures wait already
CLOSED = "closed"  # after close()


class BackgroundCompileError(RuntimeError):
    """A background compile ended without a compiled graph that accepts its call."""


# --- the stance gate -------------------------------------------------------------------------------


class StanceGate:
    """Orders the serving threads' ``eager_on_recompile`` stance and a worker entering a compiled
    function under the default stance (see the module docstring). One per process: the stance is.

    Served calls hold :meth:`serving` around the stance. A worker holds :meth:`entering` around
    its compiled call and calls the ``release`` it yields once its compile has started: new served
    calls wait from the moment the worker asks until then (the calls in flight when it asked
    finish first), at most ``serving_wait`` seconds; after that they go ahead under the stance and
    the worker's call, should it enter only then, runs eagerly and compiles nothing (counted as a
    failed background compile, never a compile on a serving thread).
    """

    def __init__(self, serving_wait: float = 1.0) -> None:
        self._cond = threading.Condition()
        self._stanced = 0  # served calls in flight that hold the stance (what entering() waits for)
        # Every served call in flight, and how many have ended: what a compile that steps aside
        # (:mod:`.yielding`) reads, without the lock, at each of its Python calls.
        self.in_flight = 0
        self.left = 0
        self._entering = False
        self.serving_wait = serving_wait

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no served call is in flight; False after ``timeout`` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: not self.in_flight, timeout=timeout)

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """A served call under the stance: waits while a worker enters, then counted."""
        with self._cond:
            if self._entering:
                self._cond.wait_for(lambda: not self._entering, timeout=self.serving_wait)
            self._stanced += 1
            self.in_flight += 1
        try:
            yield
        finally:
            self._leave(stanced=True)

    @contextlib.contextmanager
    def counted(self) -> Iterator[None]:
        """A served call without the stance (``eager_on_recompile=False``): only counted, for
        compiles that step aside; it neither waits for a worker entering nor holds one up."""
        with self._cond:
            self.in_flight += 1
        try:
            yield
        finally:
            self._leave(stanced=False)

    def _leave(self, *, stanced: bool) -> None:
        with self._cond:
            self.in_flight -= 1
            self.left += 1
            if stanced:
                self._stanced -= 1
            if not self.in_flight or not self._stanced:
                self._cond.notify_all()

    @contextlib.contextmanager
    def entering(self, timeout: float = 60.0) -> Iterator[Callable[[], None]]:
        with self._cond:
            if not self._cond.wait_for(lambda: not self._entering, timeout=timeout):
                raise BackgroundCompileError(f"another background compile held the gate for {timeout:g} s")
            self._entering = True  # from here new served calls wait
            if not self._cond.wait_for(lambda: not self._stanced, timeout=timeout):
                self._entering = False
                self._cond.notify_all()
                raise BackgroundCompileError(f"served calls were in flight for {timeout:g} s without a pause")
        released = False

        def release() -> None:
            nonlocal released
            with self._cond:
                if not released:
                    released = True
                    self._entering = False
                    self._cond.notify_all()

        try:
            yield release
        finally:
            release()


GATE = StanceGate()


@contextlib.contextmanager
def serving_stance() -> Iterator[bool]:
    """The serving threads' side: through :data:`GATE`, then the ``eager_on_recompile`` stance
    (shared by all threads, :func:`guardscope.torch_compat.eager_on_recompile`); yields whether it
    is held."""
    with GATE.serving(), torch_compat.eager_on_recompile() as held:
        yield held


# --- the GIL switch interval -----------------------------------------------------------------------

_interval_lock = threading.Lock()
_interval_depth = 0
_interval_saved = 0.0


@contextlib.contextmanager
def switch_interval(seconds: float | None) -> Iterator[None]:
    """``sys.setswitchinterval(seconds)`` for the block (process-wide; nested or concurrent
    blocks share it, the last one out restores the interval before the first); None: unchanged."""
    global _interval_depth, _interval_saved
    if seconds is None:
        yield
        return
    with _interval_lock:
        if _interval_depth == 0:
            _interval_saved = sys.getswitchinterval()
            sys.setswitchinterval(seconds)
        _interval_depth += 1
    try:
        yield
    finally:
        with _interval_lock:
            _interval_depth -= 1
            if _interval_depth == 0:
                sys.setswitchinterval(_interval_saved)


# --- the garbage collector -------------------------------------------------------------------------


def freeze_before_compile() -> None:
    """Collect the young generations, then ``gc.freeze()`` every object tracked so far.

    A compile allocates many long-lived objects (graphs, guards, generated code), and CPython then
    runs full collections, each of which walks every tracked object of the process with the GIL
    held: a few hundred milliseconds in a process that has imported torch and inductor (about
    250 ms for 440,000 objects on a 2-core CPU), a stall for whichever thread is serving. Frozen
    objects sit in the permanent generation, which collections skip: during and after the compile
    they walk only what was allocated since. The price: cyclic garbage that already existed in the
    old generation when it was frozen is never collected (the young generations are collected
    first; the old one is not, as that full collection is the stall avoided). Process-wide, never
    undone (``gc.unfreeze()`` would put the stall back)."""
    gc.collect(1)
    gc.freeze()


# --- private copies of a call ----------------------------------------------------------------------


def private_copy(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A copy of one call for a compile that runs after the call returned (the caller may reuse
    its buffers): every tensor copied with its storage, offset, strides and aliasing
    (``copy.deepcopy`` with one memo), on its device, and as an inference tensor exactly when it
    was one — whatever the grad mode of the copying thread — since Dynamo's guards tell the two
    apart. Other values are deep-copied."""
    memo: dict[int, Any] = {}

    def copied(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            with torch.inference_mode(value.is_inference()):
                return copy.deepcopy(value, memo)
        if type(value) in (list, tuple):
            return type(value)(copied(item) for item in value)
        if type(value) is dict:
            return {key: copied(item) for key, item in value.items()}
        with torch.inference_mode(False):
            return copy.deepcopy(value, memo)

    return tuple(copied(value) for value in args), {name: copied(value) for name, value in kwargs.items()}


# --- the compiler ----------------------------------------------------------------------------------


def check_background_options(**options: Any) -> dict[str, Any]:
    """``options`` of a :class:`BackgroundCompiler` (``max_compiles``, ``max_pending``,
    ``switch_interval``, ``gc_freeze``, ``yield_to_serving``), checked; ``ServeError`` for a bad one."""
    for label in ("max_compiles", "max_pending"):
        value = options.get(label, 0)
        if type(value) is not int or value < 0:
            raise ServeError(f"{label} must be an int >= 0, got {value!r}")
    for label in ("gc_freeze", "yield_to_serving"):
        if type(options.get(label, True)) is not bool:
            raise ServeError(f"{label} must be True or False, got {options[label]!r}")
    interval = options.get("switch_interval")
    if interval is not None and not (type(interval) in (int, float) and 0 < interval < 1):
        raise ServeError(f"the background switch interval must be seconds between 0 and 1, or None; got {interval!r}")
    return options


@dataclass
class _Job:
    signature: tuple
    args: tuple | None
    kwargs: dict | None
    order: int
    calls: int = 1  # fallbacks of this signature since it was queued: served eagerly meanwhile


@dataclass(frozen=True)
class BackgroundCompile:
    """One finished background compile: ``status`` (``done``/``failed``), its ``seconds``, the
    ``eager_calls`` of its topology served eagerly from its first fallback to the compile's end
    (that first fallback included), and the ``error`` of a failed one."""

    status: str
    seconds: float
    eager_calls: int
    error: str | None = None
    # What the compile function reported about a done compile (``compile`` returned a dict): the
    # strategy, a child process's seconds, the compile-cache hits and misses of the serving
    # process's own compile...
    details: tuple[tuple[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "seconds": round(self.seconds, 6), "eager_calls": self.eager_calls,
                "error": self.error, **dict(self.details)}


class BackgroundCompiler:
    """Compiles fallback topologies on one daemon worker thread, most frequent first.

    ``compile(args, kwargs)`` runs on the worker with a private copy of a fallback call: it
    returns True once a compiled graph accepts that call (it compiled one) — or a dict of details
    about that compile, kept in its :class:`BackgroundCompile` — False when one accepted it
    already (nothing to do), and raises when the compile failed. :meth:`offer` is the
    serving thread's side and never raises. See the module docstring for the bounds.
    """

    def __init__(
        self,
        compile: Callable[[tuple, dict], bool | dict[str, Any]],
        *,
        max_compiles: int = 8,
        max_pending: int = 16,
        switch_interval: float | None = DEFAULT_SWITCH_INTERVAL,
        gc_freeze: bool = True,
        yield_to_serving: bool = True,
        name: str = "guardscope-background-compile",
    ) -> None:
        check_background_options(max_compiles=max_compiles, max_pending=max_pending, switch_interval=switch_interval,
                                 gc_freeze=gc_freeze, yield_to_serving=yield_to_serving)
        self._compile = compile
        self.max_compiles = max_compiles
        self.max_pending = max_pending
        self.switch_interval = switch_interval
        self.gc_freeze = gc_freeze
        self.yield_to_serving = yield_to_serving
        self._cond = threading.Condition()
        self._pending: dict[tuple, _Job] = {}
        self._running: _Job | None = None
        self._failed: set[tuple] = set()
        self._started = 0  # compiles started (or taken from the queue), covered ones excluded
        self._order = 0
        self._compiles: list[BackgroundCompile] = []
        self._dropped: dict[str, int] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    # -- serving thread --

    def offer(self, signature: tuple, args: tuple, kwargs: dict) -> None:
        """A fallback call of this :func:`~.recording.input_signature`: queue its topology for a
        compile (copying the call) unless it is queued, compiling, failed already or over the
        bounds. Never raises."""
        try:
            self._offer(signature, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - never into the served call
            logger.warning("guardscope runtime: queueing a background compile failed (%s: %s); serving goes on",
                           type(exc).__name__, exc)

    def _offer(self, signature: tuple, args: tuple, kwargs: dict) -> None:
        with self._cond:
            if self._closed:
                self._drop(CLOSED)
                return
            job = self._pending.get(signature)
            if job is None and self._running is not None and self._running.signature == signature:
                job = self._running
            if job is not None:
                job.calls += 1
                return
            if signature in self._failed:
                return
            if self._started + len(self._pending) >= self.max_compiles:
                self._drop(BOUND)
                return
            if len(self._pending) >= self.max_pending:
                self._drop(QUEUE_FULL)
                return
            try:
                # Copied here, under the lock: one copy per queued signature, its device's memcpy.
                copied_args, copied_kwargs = private_copy(args, kwargs)
            except Exception as exc:  # noqa: BLE001 - a call that cannot be copied is not compiled
                self._fail(signature, 1, 0.0, f"copying its arguments: {type(exc).__name__}: {exc}")
                return
            self._order += 1
            self._pending[signature] = _Job(signature, copied_args, copied_kwargs, self._order)
            self._cond.notify_all()

    def _drop(self, reason: str) -> None:
        self._dropped[reason] = self._dropped.get(reason, 0) + 1

    def _fail(self, signature: tuple, calls: int, seconds: float, error: str) -> None:
        """Record a failed compile (under the lock) and log it: once, as a failed signature is
        never compiled again."""
        self._failed.add(signature)
        self._compiles.append(BackgroundCompile(FAILED, seconds, calls, error))
        if self._closed:
            return  # ended by close(): not news
        logger.warning("guardscope runtime: a background compile failed (%s); that topology stays served eagerly, "
                       "serving goes on", error)

    # -- worker thread --

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._pending)
                if self._closed:
                    return
                job = max(self._pending.values(), key=lambda j: (j.calls, -j.order))
                del self._pending[job.signature]
                self._running = job
                self._started += 1
            started = time.perf_counter()
            error = None
            compiled = True
            try:
                if self.gc_freeze:
                    freeze_before_compile()
                with switch_interval(self.switch_interval), torch_compat.without_guard_latency_profile(), \
                        yielding_to(GATE, enabled=self.yield_to_serving) as yielded:
                    compiled = self._compile(job.args, job.kwargs)
            except Exception as exc:  # noqa: BLE001 - counted and logged, serving goes on
                error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            seconds = time.perf_counter() - started
            job.args = job.kwargs = None  # the copy's memory goes now
            with self._cond:
                self._running = None
                if error is not None:
                    self._fail(job.signature, job.calls, seconds, error)
                elif compiled:
                    details = dict(compiled) if isinstance(compiled, dict) else {}
                    if self.yield_to_serving:
                        details["yielded"] = yielded.to_json()
                    self._compiles.append(BackgroundCompile(DONE, seconds, job.calls,
                                                            details=tuple(sorted(details.items()))))
                else:  # a graph accepted it already (it was compiled meanwhile): no compile
                    self._started -= 1
                self._cond.notify_all()

    # -- any thread --

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no compile is queued or running; False if that did not happen within
        ``timeout`` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and self._running is None, timeout=timeout)

    def counts(self) -> dict[str, Any]:
        with self._cond:
            compiles = tuple(self._compiles)
            return {
                "done": sum(c.status == DONE for c in compiles),
                "failed": sum(c.status == FAILED for c in compiles),
                "pending": len(self._pending) + (self._running is not None),
                "dropped": sum(self._dropped.values()),
                "dropped_by_reason": tuple(sorted(self._dropped.items())),
                "compiles": compiles,
            }

    @property
    def running(self) -> bool:
        """Whether a compile is running now."""
        with self._cond:
            return self._running is not None

    def begin_close(self) -> None:
        """The first half of :meth:`close`, without waiting: no more offers, the queued jobs
        dropped; a compile that fails from now on is counted but not logged (ending it is the
        caller's doing). Idempotent."""
        with self._cond:
            if not self._closed:
                self._closed = True
                for _ in self._pending:
                    self._drop(CLOSED)
                self._pending.clear()
                self._cond.notify_all()

    def close(self, timeout: float | None = 30.0) -> bool:
        """Drop the queued jobs and stop the worker, waiting up to ``timeout`` seconds for a
        compile it is running; True once the worker has ended. A compile still running then is
        abandoned to its daemon thread (logged); it cannot keep the process alive. Idempotent."""
        self.begin_close()
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("guardscope runtime: a background compile was still running %s s after close(); "
                           "left to its daemon thread", timeout)
            return False
        return True


__all__ = [
    "BOUND",
    "CLOSED",
    "DEFAULT_SWITCH_INTERVAL",
    "DONE",
    "FAILED",
    "GATE",
    "PROCESS",
    "QUEUE_FULL",
    "STRATEGIES",
    "THREAD",
    "BackgroundCompile",
    "BackgroundCompileError",
    "BackgroundCompiler",
    "StanceGate",
    "background_strategy",
    "check_background_options",
    "freeze_before_compile",
    "private_copy",
    "serving_stance",
    "switch_interval",
]
