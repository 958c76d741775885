"""Recording every call while serving: :class:`TrafficRecorder`, a :class:`FallbackRecorder` that
records each call it is offered into a traffic log by signature, and the compiles its process
makes (production's own stalls, ``compiles.jsonl``).

The serving thread only decides and copies; a writer thread writes with
:class:`guardscope.CorpusWriter`. Nothing here raises into a served call.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .. import torch_compat
from ..corpus.storage.compile_log import append_compiles, compile_record
from ..corpus.traffic_log.files import ROLL_BYTES, ROLL_SECONDS, WINDOW_ROWS, roll_bounds
from ..corpus.storage.requests import check_request
from ..corpus.signatures.signature import call_key, signature
from ..corpus.values.sample import check_sample, snapshot, storage_bytes
from ..corpus.storage.weights import model_print
from ..corpus.writer import LOG_CHOICES, CorpusWriter, default_replica
from ..errors import SampleError, ServeError
from .recording import CLOSED, QUEUE_FULL, UNSTORABLE, FallbackRecorder, logger

# Distinct cheap call keys a TrafficRecorder remembers the signature of (then it forgets them all).
KNOWN_CALLS = 1 << 16


class TrafficRecorder(FallbackRecorder):
    """Records every call it is offered into a traffic log by signature (format 5,
    ``CorpusWriter(keep="signatures", log="parquet")``; ``log="shards"``: format 3): the first
    ``full_per_signature`` calls of each signature with their tensors, every other call as its
    signature only (sizes, strides, dtypes, aliasing, scalars: no tensor data). The repeats of a
    signature between two flushes (``flush_every`` seconds) are one row of the log, with their
    count, the times of the first and last of them and ``replica`` (default ``host:pid``), so the
    logs of several processes merge in a defined order; DuckDB, pandas or pyarrow read the log
    as it is (:mod:`guardscope.corpus.traffic_log.parquet`).

    On the serving thread a call of a layout seen before costs its cheap key
    (:func:`~guardscope.corpus.signatures.signature.call_key`: the seed's six tensors, about 11 us at the
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
    for you) into ``compiles.jsonl`` as it flushes (:mod:`guardscope.corpus.storage.compile_log`), so the
    analysis reports production's own compile stalls, not only its replay's.
    Never raises into the call; see :class:`FallbackRecorder` for
    ``flush_every``, ``overwrite``, :meth:`flush` and :meth:`close`.

    A flush (``flush_every`` s or ``WINDOW_ROWS`` rows) writes its window as a file, folded into one
    past ``roll_bytes`` or ``roll_seconds`` and at :meth:`close` (:mod:`guardscope.corpus.traffic_log.files`;
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
        # A flat call's cheap key finds its signature, checked once (corpus.signatures.signature.call_key).
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
                            # The log's files written off this thread (corpus.traffic_log.tail): a window of
                            # calls kept in full takes seconds to encode, and the queue fills meanwhile.
                            background=self.log == "parquet",
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


__all__ = ["KNOWN_CALLS", "TrafficRecorder"]
