"""Recording calls into a guardscope corpus while serving: :class:`FallbackRecorder` (a bounded,
sampled record of the calls no compiled graph accepted; :class:`guardscope.runtime.traffic.TrafficRecorder`
builds on it to record every call, by signature), with :func:`input_signature`, the coarse
description of a call they sample by.

The serving thread only decides and copies; a writer thread writes with
:class:`guardscope.CorpusWriter`. Nothing here raises into a served call.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from pathlib import Path
from typing import Any

from .. import torch_compat
from ..corpus.storage.format import MANIFEST_NAME, check_grad_mode, check_method_name, check_model_spec
from ..corpus.values.sample import snapshot, storage_bytes
from ..corpus.storage.weights import as_model_print
from ..corpus.writer import CorpusWriter
from ..errors import CorpusError, ModelSpecError, SampleError, ServeError
from ..replay.arguments import describe

logger = logging.getLogger("guardscope.runtime")

# Why a fallback was not recorded (keys of RuntimeStats.dropped_by_reason).
SAMPLED_OUT = "sampled_out"  # its signature was recorded already and the repeat rate said no
MAX_SAMPLES = "max_samples"
MAX_BYTES = "max_bytes"
QUEUE_FULL = "queue_full"  # the writer thread is behind by max_pending samples
UNSTORABLE = "unstorable"  # a value the corpus format cannot store (SampleError)
ERROR = "error"  # recording failed (disk full, fallback directory unusable...): logged
CLOSED = "closed"  # the call came after close()

# Recording errors are logged this many times in full, then every LOG_EVERY-th.
_LOG_FIRST = 10
_LOG_EVERY = 1000

# --- input signatures (pure) ---------------------------------------------------------------------


def input_signature(arguments: dict[str, Any]) -> tuple:
    """A coarse description of what Dynamo's guards look at in one call's arguments (by name),
    used to record one fallback per kind of input rather than every one.

    Per tensor: dtype, device, ``requires_grad``, and for each size whether it is 0, 1, or
    which class of equal sizes it belongs to (sizes equal to each other share a class, as duck
    sizing makes them share a symbol); for each stride whether it is 0, 1 or larger. Lengths of
    lists, tuples and dicts; ints as 0, 1 or other; other scalars by value. Two calls of one
    signature usually need the same graph; the repeat rate covers the cases they do not.
    """
    meta = describe(arguments, -1, None, None)
    classes: dict[int, str] = {}

    def size(n: int) -> int | str:
        return n if n in (0, 1) else classes.setdefault(n, f"s{len(classes)}")

    tensors = tuple(
        (
            path,
            t.dtype,
            t.device,
            t.requires_grad,
            tuple(size(n) for n in t.shape),
            tuple(s if s in (0, 1) else "n" for s in t.stride),
        )
        for path, t in meta.tensors
    )
    scalars = tuple((path, _scalar_class(text)) for path, text in meta.scalars)
    return (tensors, meta.lengths, scalars)


def _steps(count: int, rate: float) -> int:
    return math.floor(count * rate + 1e-9)


def _scalar_class(text: str) -> str:
    kind, _, value = text.partition(":")
    if kind == "int":
        return f"int:{value}" if value in ("0", "1") else "int"
    return text[:80]


# --- the recorder --------------------------------------------------------------------------------


class FallbackRecorder:
    """Keeps a bounded, sampled record of fallback calls in a guardscope corpus directory.

    Offered a call, it records it when its :func:`input_signature` is new, and otherwise at
    ``repeat_rate`` (0.01: every hundredth repeat, deterministically);
    never more than ``max_samples`` samples or ``max_bytes`` bytes of tensor storage. The
    serving thread only decides and copies the arguments (:func:`guardscope.corpus.snapshot`);
    a background thread writes them with :class:`guardscope.CorpusWriter`, flushing a shard at
    least every ``flush_every`` seconds so a crash loses little. The corpus directory is
    created at the first recorded sample. ``recorded_from``, the served model, puts the shape
    of its weights in the manifest (see :class:`~guardscope.corpus.writer.CorpusWriter`). The
    manifest also keeps the Dynamo settings and the autograd mode in force where the first call
    is offered (``grad_mode`` given instead: ``"inference_mode"``, ``"no_grad"`` or ``"grad"``),
    so offer inside the block that serves the call, or say it. Safe to
    call from several threads; :meth:`offer` never raises.
    """

    _KIND = "fallback"  # in messages: what the recorded calls are

    def __init__(
        self,
        directory: str | Path,
        *,
        model: str,
        compile: dict[str, Any] | None = None,
        max_samples: int = 1000,
        max_bytes: int = 256 * 2**20,
        repeat_rate: float = 0.01,
        max_pending: int = 64,
        max_signatures: int = 4096,
        flush_every: float = 30.0,
        overwrite: bool = False,
        method: str | None = None,
        recorded_from: Any = None,
        grad_mode: str | None = None,
    ) -> None:

        for name, value in (("max_samples", max_samples), ("max_bytes", max_bytes),
                            ("max_pending", max_pending), ("max_signatures", max_signatures)):
            if type(value) is not int or value < 0:
                raise ServeError(f"{name} must be an int >= 0, got {value!r}")
        if not (isinstance(repeat_rate, (int, float)) and 0.0 <= repeat_rate <= 1.0):
            raise ServeError(f"repeat_rate must be between 0 and 1, got {repeat_rate!r}")
        if not (isinstance(flush_every, (int, float)) and flush_every >= 0 and math.isfinite(flush_every)):
            raise ServeError(f"flush_every must be a number of seconds >= 0, got {flush_every!r}")
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise ServeError(f"{self._KIND} directory {self.directory} exists and is not a directory")
        if (self.directory / MANIFEST_NAME).exists() and not overwrite:
            raise ServeError(
                f"{self._KIND} directory {self.directory} already holds a corpus; pass a fresh "
                "directory (one per process, e.g. with the host name and pid in it) or "
                f"overwrite_{self._KIND}=True to replace it"
            )
        self.model = check_model_spec(model)
        self.compile = dict(compile or {})
        try:
            self.method = None if method is None else check_method_name(method)
        except ModelSpecError as exc:
            raise ServeError(str(exc)) from None
        try:
            # The served model's weights' shape (never their values), for the manifest.
            self.recorded_model = as_model_print(recorded_from)
        except CorpusError as exc:
            raise ServeError(str(exc)) from None
        self.dynamo_config: dict[str, Any] | None = None  # read at the first call offered
        try:
            # The grad mode production serves under: given, or read at the first call offered.
            self.grad_mode = None if grad_mode is None else check_grad_mode(grad_mode)
        except ValueError as exc:
            raise ServeError(f"grad_mode {exc}") from None
        self.max_samples = max_samples
        self.max_bytes = max_bytes
        self.repeat_rate = float(repeat_rate)
        self.max_signatures = max_signatures
        self.flush_every = float(flush_every)
        self.overwrite = overwrite

        self._lock = threading.Lock()
        self._signatures: set[tuple] = set()
        self._repeats = 0
        self._reserved_samples = 0
        self._reserved_bytes = 0
        self._pending = 0
        self._recorded = 0
        self._errors = 0
        self._dropped: dict[str, int] = {}
        self._closed = False
        # Bounded by ``_pending`` (counted under the lock), so the serving thread's put is the
        # C queue's append, not queue.Queue's locked condition (a tenth of a microsecond, not one).
        self.max_pending = max_pending or math.inf  # 0: unbounded, as queue.Queue's maxsize 0
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write_loop, name=f"guardscope-{self._KIND}-recorder", daemon=True)
        self._thread.start()

    # -- serving thread --

    def offer(self, args: tuple, kwargs: dict, arguments: dict[str, Any]) -> str | None:
        """Consider one fallback call (``arguments``: by parameter name). Returns None when it
        is queued for recording, else why not (a ``dropped_by_reason`` key). Never raises."""
        try:
            if self.dynamo_config is None:  # production's settings, read on the serving thread
                self.grad_mode = self.grad_mode or torch_compat.current_grad_mode()
                self.dynamo_config = torch_compat.dynamo_settings()  # last: the writer thread's sign
            return self._offer(args, kwargs, arguments)
        except Exception as exc:
            self.error("recording a fallback", exc)
            with self._lock:
                self._drop(ERROR)
            return ERROR

    def _offer(self, args: tuple, kwargs: dict, arguments: dict[str, Any]) -> str | None:

        signature = input_signature(arguments)
        with self._lock:
            if self._closed:
                return self._drop(CLOSED)
            new = signature not in self._signatures
            if not new:
                # The n-th repeat is taken when floor(n * rate) steps up: evenly spaced, exact
                # (rate 0.1 takes the 10th, 20th...), the same for the same sequence of calls.
                self._repeats += 1
                if _steps(self._repeats, self.repeat_rate) == _steps(self._repeats - 1, self.repeat_rate):
                    return self._drop(SAMPLED_OUT)
            if self._pending >= self.max_pending:
                return self._drop(QUEUE_FULL)
            if self._reserved_samples >= self.max_samples:
                return self._drop(MAX_SAMPLES)
            size = storage_bytes((args, kwargs))
            if self._reserved_bytes + size > self.max_bytes:
                return self._drop(MAX_BYTES)
            # Reserved now, so concurrent offers cannot overshoot the bounds together.
            self._reserved_samples += 1
            self._reserved_bytes += size
            self._pending += 1
            if new and len(self._signatures) < self.max_signatures:
                self._signatures.add(signature)
        reason = None
        try:
            # Copied on this thread: the caller may reuse its buffers once the call returns.
            item = snapshot(args, kwargs)
        except SampleError as exc:
            logger.debug("fallback not recorded: %s", exc)
            reason = UNSTORABLE
        except Exception as exc:
            self.error("copying a fallback's arguments", exc)
            reason = ERROR
        with self._lock:
            if reason is None:
                if self._closed:  # closed while copying: the writer takes nothing more
                    reason = CLOSED
                else:
                    self._queue.put(item)  # its place was taken under the lock (_pending)
                    return None
            self._reserved_samples -= 1
            self._reserved_bytes -= size
            self._pending -= 1
            return self._drop(reason)

    def _drop(self, reason: str) -> str:
        self._dropped[reason] = self._dropped.get(reason, 0) + 1
        return reason

    def error(self, doing: str, exc: BaseException) -> None:
        """Count and log a failure (the first few in full, then every thousandth)."""
        with self._lock:
            self._errors += 1
            count = self._errors
        if count <= _LOG_FIRST or count % _LOG_EVERY == 0:
            logger.warning(
                "guardscope runtime: %s failed (%s: %s); serving goes on [error %d]",
                doing, type(exc).__name__, exc, count, exc_info=count <= _LOG_FIRST,
            )

    def counts(self) -> dict[str, Any]:
        with self._lock:
            return {
                "recorded": self._recorded,
                "pending": self._pending,
                "dropped": sum(self._dropped.values()),
                "dropped_by_reason": tuple(sorted(self._dropped.items())),
                "signatures": len(self._signatures),
                "errors": self._errors,
            }

    # -- writer thread --

    def _write_loop(self) -> None:

        writer = None
        broken = False  # the corpus could not be created: later samples are dropped
        last_flush = time.monotonic()
        settled = [0, 0]  # items written and failed since _pending was last counted down
        while True:
            try:
                item = self._queue.get(timeout=self.flush_every or None)
            except queue.Empty:
                item = None
            if item is _STOP or isinstance(item, threading.Event) or item is None:
                self._settle(settled)
            if item is _STOP:
                break
            if isinstance(item, threading.Event):  # flush(): everything queued before it is added
                done = item.set
                if writer is not None:
                    try:
                        self._flushing(writer)
                        writer.flush(wait=False)
                        writer.then(done)  # set once on disk; meanwhile this thread writes on
                        done = None
                    except Exception as exc:
                        self.error(f"writing the {self._KIND} corpus {self.directory}", exc)
                    last_flush = time.monotonic()
                if done is not None:
                    done()
                continue
            written = False
            try:
                if item is not None:
                    if writer is None and not broken:
                        broken = True
                        writer = self._open_writer()
                        broken = False
                    if writer is not None:
                        self._write(writer, item)
                        written = True
                if writer is not None and time.monotonic() - last_flush >= self.flush_every:
                    last_flush = time.monotonic()
                    self._flushing(writer)
                    writer.flush(wait=False)  # a background writer's files follow (flush() waits)
            except Exception as exc:
                self.error(f"writing the {self._KIND} corpus {self.directory}", exc)
            if item is not None:
                settled[not written] += 1
                if settled[0] + settled[1] >= SETTLE_EVERY or self._queue.empty():
                    self._settle(settled)
        if writer is not None:
            try:
                self._flushing(writer, closing=True)
                writer.close()
                logger.info("guardscope runtime: %s corpus %s: %s", self._KIND, self.directory, writer.summary())
            except Exception as exc:
                self.error(f"closing the {self._KIND} corpus {self.directory}", exc)
        while True:  # a flush() that raced with close(): its samples are written now
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, threading.Event):
                item.set()

    def _settle(self, settled: list[int]) -> None:
        """Count down ``_pending`` by the items written and failed (``settled``), in one hold of the
        lock: taken for every item, a serving thread that drops calls as fast as it can holds the
        lock so often that this thread waits for it (and the GIL) at nearly every item, falls
        further behind and never catches up (issue 53: 960,714 of 1M dropped)."""
        if settled[0] or settled[1]:
            with self._lock:
                self._pending -= settled[0] + settled[1]
                self._recorded += settled[0]
                if settled[1]:
                    self._dropped[ERROR] = self._dropped.get(ERROR, 0) + settled[1]
            settled[0] = settled[1] = 0

    def _open_writer(self) -> CorpusWriter:
        return CorpusWriter(self.directory, model=self.model, compile=self.compile, overwrite=self.overwrite,
                            method=self.method, recorded_from=self.recorded_model, dynamo_config=self.dynamo_config,
                            grad_mode=self.grad_mode)

    def _write(self, writer: CorpusWriter, item: Any) -> None:
        writer.add_snapshot(item[0], item[1])  # copied on the serving thread already

    def _flushing(self, writer: CorpusWriter, *, closing: bool = False) -> None:
        """Called on the writer thread before each flush of ``writer`` (and before it closes)."""

    def _send(self, item: object) -> bool:
        """Queue a control item for the writer (offers are bounded by ``max_pending``, control
        items never wait); False when the writer has stopped."""
        if not self._thread.is_alive():
            return False
        self._queue.put(item)
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Write every sample queued so far to disk (a shard and the manifest) and wait for it;
        False if that did not finish within ``timeout`` seconds or the recorder is closed."""
        with self._lock:
            if self._closed:
                return False
        done = threading.Event()
        if not self._send(done):
            return False
        deadline = None if timeout is None else time.monotonic() + timeout
        while not done.wait(0.1):
            if not self._thread.is_alive():  # closed meanwhile: close() wrote everything
                return done.is_set()
            if deadline is not None and time.monotonic() >= deadline:
                return False
        return True

    def close(self) -> None:
        """Stop taking samples, write the queued ones and the manifest, and wait for the writer
        thread. Calling it again does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True  # from here no offer queues anything
        self._send(_STOP)
        self._thread.join()


_STOP = object()
# The writer thread counts down _pending at least every this many items (and whenever the queue is empty).
SETTLE_EVERY = 256

__all__ = [
    "CLOSED",
    "ERROR",
    "MAX_BYTES",
    "MAX_SAMPLES",
    "QUEUE_FULL",
    "SAMPLED_OUT",
    "UNSTORABLE",
    "FallbackRecorder",
    "input_signature",
    "storage_bytes",
]
