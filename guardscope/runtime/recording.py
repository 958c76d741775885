"""Recording calls into a guardscope corpus while serving: :class:`FallbackRecorder` (a bounded,
sampled record of the calls no compiled graph accepted) and :class:`TrafficRecorder` (every call,
by signature), with :func:`input_signature`, the coarse description of a call they sample by.

The serving thread only decides and copies; a writer thread writes with
:class:`guardscope.CorpusWriter`. Nothing here raises into a served call.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .. import torch_compat
from ..corpus.compile_log import append_compiles, compile_record
from ..corpus.format import MANIFEST_NAME, check_grad_mode, check_method_name, check_model_spec
from ..corpus.log_files import ROLL_BYTES, ROLL_SECONDS, WINDOW_ROWS, roll_bounds
from ..corpus.requests import check_request
from ..corpus.signature import call_key, signature
from ..corpus.values import check_sample, snapshot, storage_bytes
from ..corpus.weights import as_model_print, model_print
from ..corpus.writer import LOG_CHOICES, CorpusWriter, default_replica
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
# Distinct cheap call keys a TrafficRecorder remembers the signature of (then it forgets them all).
KNOWN_CALLS = 1 << 16

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
        while True:
            try:
                item = self._queue.get(timeout=self.flush_every or None)
            except queue.Empty:
                item = None
            if item is _STOP:
                break
            if isinstance(item, threading.Event):  # flush(): everything queued before it is added
                if writer is not None:
                    try:
                        self._flushing(writer)
                        writer.flush()
                    except Exception as exc:
                        self.error(f"writing the {self._KIND} corpus {self.directory}", exc)
                    last_flush = time.monotonic()
                item.set()
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
                    writer.flush()
            except Exception as exc:
                self.error(f"writing the {self._KIND} corpus {self.directory}", exc)
            if item is not None:
                with self._lock:
                    self._pending -= 1
                    if written:
                        self._recorded += 1
                    else:
                        self._drop(ERROR)
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


class TrafficRecorder(FallbackRecorder):
    """Records every call it is offered into a traffic log by signature (format 5,
    ``CorpusWriter(keep="signatures", log="parquet")``; ``log="shards"``: format 3): the first
    ``full_per_signature`` calls of each signature with their tensors, every other call as its
    signature only (sizes, strides, dtypes, aliasing, scalars: no tensor data). The repeats of a
    signature between two flushes (``flush_every`` seconds) are one row of the log, with their
    count, the times of the first and last of them and ``replica`` (default ``host:pid``), so the
    logs of several processes merge in a defined order; DuckDB, pandas or pyarrow read the log
    as it is (:mod:`guardscope.corpus.traffic_log`).

    On the serving thread a call of a layout seen before costs its cheap key
    (:func:`~guardscope.corpus.signature.call_key`: the seed's six tensors, about 11 us at the
    median; ``bench/bench_recorder.py``), a new one its signature and check, and a call recorded
    in full a copy of its arguments; the background thread writes.
    Bounded: at most ``max_bytes`` bytes of tensor storage are recorded in full (after that,
    new signatures are recorded as signatures only), ``max_signatures`` signatures are counted
    towards ``full_per_signature`` (later new ones are recorded as signatures only), and at most
    ``max_pending`` calls wait for the writer (beyond that a call is dropped, ``queue_full``).
    A signature-only record takes a few dozen bytes on disk. ``full_per_signature=0`` records
    no tensor data at all. With ``compiles`` (the default) it also records each compile this
    process makes while it is open (torch's compile callbacks: compile id, frame, seconds, what
    triggered it, and whether a call was being served: :meth:`serving`, which :meth:`wrap` enters
    for you) into ``compiles.jsonl`` as it flushes (:mod:`guardscope.corpus.compile_log`), so the
    analysis reports production's own compile stalls, not only its replay's.
    Never raises into the call; see :class:`FallbackRecorder` for
    ``flush_every``, ``overwrite``, :meth:`flush` and :meth:`close`.

    A flush (``flush_every`` s or ``WINDOW_ROWS`` rows) writes its window as a file, folded into one
    past ``roll_bytes`` or ``roll_seconds`` and at :meth:`close` (:mod:`guardscope.corpus.log_files`;
    None: a file per flush): a killed process loses at most its last window.

    Example::

        traffic = TrafficRecorder("traffic/", model="myapp/model.py:build", compile={"dynamic": True},
                                  recorded_from=model)
        for request in requests:
            traffic.offer(request.args, request.kwargs)
            reply(model(*request.args, **request.kwargs))
        traffic.close()          # then: guardscope analyze traffic/
    """

    _KIND = "traffic"

    def __init__(
        self,
        directory: str | Path,
        *,
        model: str,
        compile: dict[str, Any] | None = None,
        full_per_signature: int = 1,
        max_bytes: int = 256 * 2**20,
        max_pending: int = 4096,
        max_signatures: int = 1 << 20,
        flush_every: float = 30.0,
        overwrite: bool = False,
        method: str | None = None,
        recorded_from: Any = None,
        grad_mode: str | None = None,
        replica: str | None = None,
        log: str = "parquet",
        roll_bytes: int | None = ROLL_BYTES,
        roll_seconds: float | None = ROLL_SECONDS,
        compiles: bool = True,
    ) -> None:
        self.roll_bytes, self.roll_seconds = roll_bounds(roll_bytes, roll_seconds, ServeError)
        if type(full_per_signature) is not int or full_per_signature < 0:
            raise ServeError(f"full_per_signature must be an int >= 0, got {full_per_signature!r}")
        self.full_per_signature = full_per_signature
        if replica is not None and (type(replica) is not str or not replica):
            raise ServeError(f"replica must be a non-empty str naming this process in the log, got {replica!r}")
        if log not in LOG_CHOICES:
            raise ServeError(f"log must be one of {', '.join(map(repr, LOG_CHOICES))}, got {log!r}")
        self.replica = replica if replica is not None else default_replica()
        self.log = log
        self._full_counts: dict[int, int] = {}  # hash of a signature -> calls recorded in full
        self._full = 0
        self._known: dict[tuple, tuple] = {}  # call_key -> (signature, devices, its hash)
        self._once: set[int] = set()  # hashes of the call keys seen once
        self._local = threading.local()  # .request: [tag, next step] of this thread's request; .calling
        self._marked = False  # serving() was entered: a compile outside it is not a call's stall
        # Production's compiles, observed in this process and written beside the calls (compiles.jsonl).
        self._observer = torch_compat.CompileObserver(self._in_served_call) if compiles else None
        if self._observer is not None and not self._observer.available:
            logger.warning("guardscope runtime: this process's compiles are not recorded: %s", self._observer.cause)
        super().__init__(directory, model=model, compile=compile, max_samples=0, max_bytes=max_bytes,
                         repeat_rate=1.0, max_pending=max_pending, max_signatures=max_signatures,
                         flush_every=flush_every, overwrite=overwrite, method=method,
                         recorded_from=recorded_from, grad_mode=grad_mode)

    def offer(self, args: tuple, kwargs: dict, arguments: dict[str, Any] | None = None) -> str | None:
        """Record one call (``arguments`` is not needed here). Returns None when it is queued,
        else why not (a ``dropped_by_reason`` key). Never raises."""
        return super().offer(tuple(args), dict(kwargs), arguments or {})

    @contextlib.contextmanager
    def request(self, tag: str | int) -> Iterator[None]:
        """Tag the calls this thread offers inside the block as steps 0, 1, 2... of request
        ``tag`` (a str or an int; the corpus's ``requests.json``), so the analysis says which
        request and step compiled::

            with traffic.request(request_id):
                model.generate(...)         # its forward wrapped by traffic.wrap(...)
        """
        try:
            tag = check_request(tag)
        except TypeError as exc:
            raise ServeError(str(exc)) from None
        previous = getattr(self._local, "request", None)
        self._local.request = [tag, 0]
        try:
            yield
        finally:
            self._local.request = previous

    def _offer(self, args: tuple, kwargs: dict, arguments: dict[str, Any]) -> str | None:
        current = getattr(self._local, "request", None)
        tag = None
        if current is not None:  # a dropped call is a step of its request all the same
            tag = (current[0], current[1])
            current[1] += 1
        # A flat call's cheap key finds its signature, checked once (corpus.signature.call_key).
        cheap = call_key(args, kwargs)
        known = self._known.get(cheap) if cheap is not None else None
        if known is None:
            try:
                devices = check_sample(args, kwargs)
            except SampleError as exc:
                logger.debug("call not recorded: %s", exc)
                with self._lock:
                    return self._drop(UNSTORABLE)
            sig = signature(args, kwargs, inference=False)
            known = (sig, devices, hash(sig))
            if cheap is not None:
                # Kept from a layout's second call on: a flood of layouts seen once fills no table
                # (a large one costs every later garbage collection its walk).
                seen = hash(cheap)
                if seen not in self._once:
                    if len(self._once) >= KNOWN_CALLS:
                        self._once.clear()
                    self._once.add(seen)
                else:
                    if len(self._known) >= KNOWN_CALLS:
                        self._known.clear()  # bounded: a long tail of new keys is taken again later
                    self._known[cheap] = known
        sig, devices, key = known
        when = time.time_ns()
        with self._lock:
            if self._closed:
                return self._drop(CLOSED)
            if self._pending >= self.max_pending:
                return self._drop(QUEUE_FULL)
            full = self._full_counts.get(key, 0) < self.full_per_signature
            if not full:  # the common case, a signature's record: queued in the same hold of the lock
                self._pending += 1
                self._queue.put(("signature", sig, devices, tag, when))
                return None
            size = storage_bytes((args, kwargs))
            if self._reserved_bytes + size > self.max_bytes:
                full = False  # the data budget is spent: its signature only
            if full and key not in self._full_counts and len(self._full_counts) >= self.max_signatures:
                full = False  # too many signatures to count: its signature only
            if full:
                self._full_counts[key] = self._full_counts.get(key, 0) + 1
                self._reserved_bytes += size
            self._pending += 1
        item: Any = ("signature", sig, devices, tag, when)
        if full:
            try:
                # Copied on this thread: the caller may reuse its buffers once the call returns.
                item = ("full", *snapshot(args, kwargs), sig, tag, when)
            except Exception as exc:
                self.error("copying a call's arguments", exc)
        with self._lock:
            if not self._closed:
                self._queue.put(item)  # its place was taken under the lock (_pending)
                self._full += item[0] == "full"
                return None
            self._pending -= 1
            if full:
                self._reserved_bytes -= size
                self._full_counts[key] -= 1
            return self._drop(CLOSED)

    def wrap(self, function: Any) -> Any:
        """``function`` recording every call it gets before running it: with
        ``model.forward = traffic.wrap(torch.compile(model.forward))``, every forward call that
        ``model.generate()`` makes (prefill and each decode step, with its KV cache) is recorded,
        bounded as :meth:`offer` is. The call is recorded as it comes in: the forward may grow
        the cache afterwards.

        The corpus then says what production compiles: a bound method such as ``model.forward``
        (compiled or not) makes ``method`` that method's name, unless it was given, so the
        replay compiles ``model.forward`` of the model spec's module, as production did; and
        it keeps the shape of that module's weights (as ``recorded_from`` does), so an analysis
        that builds another model says so; and a ``torch.compile``d ``function`` puts its backend
        in the manifest's ``compile`` (unless given), the backend ``verify`` proves plans with.
        Wrap before the first call is recorded."""
        # Through the wrappers (torch.compile's, functools.wraps ones) to the first bound method
        # of a module; not further: a decorated forward's function wraps other functions.
        target, seen = function, 0
        while not isinstance(getattr(target, "__self__", None), torch.nn.Module) and seen < 32:
            target, seen = getattr(target, "__wrapped__", None), seen + 1
        name = getattr(target, "__name__", None)
        # model.__call__ (transformers' generate() compiles it) is the module itself, as
        # torch.compile(model) compiles it; a name no manifest can store stays unsaid.
        if self.method is None and target is not None and isinstance(name, str) and not name.startswith("_"):
            with self._lock:
                self.method = name if name.isidentifier() else None
        # The backend production compiles with, read off torch.compile's wrapper (the proofs use it).
        settings, seen = None, 0
        target = function
        while settings is None and target is not None and seen < 32:
            settings = torch_compat.compiled_settings(target)
            target, seen = getattr(target, "__wrapped__", None), seen + 1
        if settings is not None:
            with self._lock:
                self.compile.setdefault("backend", settings["backend"])
                if settings.get("recompile_limit") is not None:  # torch 2.13's per-call limit
                    self.compile.setdefault("recompile_limit", settings["recompile_limit"])
                if settings.get("mode") not in (None, "default"):  # mode= (its cudagraphs change the analysis)
                    self.compile.setdefault("mode", settings["mode"])
                if settings.get("beyond_mode"):  # options= beyond the mode's: recorded, reported
                    self.compile.setdefault("inductor_options", settings["beyond_mode"])
                if settings.get("isolate_recompiles"):  # torch 2.13: this call's own recompile count
                    self.compile.setdefault("isolate_recompiles", True)
        printed = model_print(function) if self.recorded_model is None else None  # None: no module behind it
        if printed is not None:
            with self._lock:
                if self.recorded_model is None:
                    self.recorded_model = printed

        self.marks_calls()

        @functools.wraps(function)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.offer(args, kwargs)
            with self.serving():
                return function(*args, **kwargs)

        return recorded

    def counts(self) -> dict[str, Any]:
        counted = super().counts()
        with self._lock:
            counted["signatures"] = len(self._full_counts)
            counted["full"] = self._full
        return counted

    def _open_writer(self) -> CorpusWriter:
        return CorpusWriter(self.directory, model=self.model, compile=self.compile, overwrite=self.overwrite,
                            method=self.method, recorded_from=self.recorded_model, keep="signatures",
                            dynamo_config=self.dynamo_config, grad_mode=self.grad_mode,
                            full_per_signature=self.full_per_signature,
                            max_signatures=self.max_signatures, log=self.log, replica=self.replica,
                            shard_size=WINDOW_ROWS if self.log == "parquet" else 256,
                            roll_bytes=self.roll_bytes, roll_seconds=self.roll_seconds,
                            # The bound this recorder applies before copying, so the writer's
                            # never refuses a call copied for it and its summary states this one.
                            max_full_bytes=self.max_bytes)

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Mark the block as serving one call (a function :meth:`wrap` made does it for you):
        a compile inside it is that call's stall, and once a call was marked, a compile outside
        every marked call (a warmup before serving) is recorded as such in ``compiles.jsonl``, so
        the analysis does not take it for a call's::

            traffic.offer(args, kwargs)
            with traffic.serving():
                reply(compiled(*args, **kwargs))
        """
        self._marked = True
        depth = getattr(self._local, "calling", 0)
        self._local.calling = depth + 1
        try:
            yield
        finally:
            self._local.calling = depth

    def marks_calls(self) -> None:
        """Say that from now on every served call runs inside :meth:`serving` (a function
        :meth:`wrap` made does, and ``serve()`` does before its warmup), so a compile outside
        them — a warmup before serving — is recorded as start-up, not as some call's stall."""
        self._marked = True

    def _in_served_call(self) -> bool | None:
        """Whether this thread is serving a call (:meth:`serving`); None (cannot tell) until a
        call was marked: calls offered by hand run where the recorder cannot see."""
        if not self._marked:
            return None
        return getattr(self._local, "calling", 0) > 0

    def _flushing(self, writer: CorpusWriter, *, closing: bool = False) -> None:
        if self._observer is None:
            return
        events = self._observer.drain(wait=not closing)
        if events:
            backend = self.compile.get("backend")
            append_compiles(self.directory, [compile_record(e, replica=self.replica, backend=backend) for e in events])

    def close(self) -> None:
        super().close()
        if self._observer is not None:
            self._observer.close()

    def _write(self, writer: CorpusWriter, item: Any) -> None:
        if item[0] == "full":  # its signature taken on the serving thread
            writer.add_snapshot(item[1], item[2], item[3], request=item[4], when=item[5])
        else:
            writer.add_signature(item[1], item[2], request=item[3], when=item[4])


__all__ = [
    "CLOSED",
    "ERROR",
    "MAX_BYTES",
    "MAX_SAMPLES",
    "QUEUE_FULL",
    "SAMPLED_OUT",
    "UNSTORABLE",
    "FallbackRecorder",
    "TrafficRecorder",
    "input_signature",
    "storage_bytes",
]
