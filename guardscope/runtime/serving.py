"""Serve a compiled model with a guardscope plan: no blocking recompiles, and a corpus of what fell back.

``guardscope emit-warmup DIR`` writes fixes proven on a recorded corpus. In production, inputs
will come that the corpus never held (a new topology), and each would stop the process to
recompile. :func:`serve` applies a plan from ``DIR`` and then serves so that such an input runs
the original model eagerly instead, once, without compiling — and records it, so the next
``guardscope analyze`` sees it::

    import guardscope.runtime

    served = guardscope.runtime.serve(model, "out/", fallback_dir="fallbacks/")
    with served:
        for request in requests:
            reply(served(**request))
    print(served.stats)        # calls, fallbacks, recorded, dropped, ...

How a call is served: the arguments are checked against the guards of the compiled graphs (the
check Dynamo itself makes, a few microseconds a graph). When one accepts, the compiled model
runs, under ``torch.compiler.set_stance("eager_on_recompile")`` where torch has it (2.6+), so
even a call the check misjudged cannot compile. When none accepts, the call is a *fallback*: the
original model runs eagerly and the arguments are offered to a :class:`FallbackRecorder`, which
keeps a bounded sample of them in a guardscope corpus. Recording never raises into the call:
its failures are logged (logger ``guardscope.runtime``) and counted in :attr:`ServedModel.stats`.
The model's own exceptions propagate unchanged.

Everything torch-version-dependent (the stance, the cache entries and their guard checks) is
in :mod:`guardscope.torch_compat`; the plan's own logic stays in the generated modules, which
are imported from ``DIR`` by path and called as their docstrings say.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from .. import plans, store, torch_compat
from ..corpus.spec import respec
from ..corpus.weights import model_print
from ..errors import ServeError
from ..options import production_fields, production_options
from ..proving.isolation import import_file
from ..replay.arguments import CallBinder
from ..replay.session import compile_model
from .background import (
    DEFAULT_SWITCH_INTERVAL,
    GATE,
    PROCESS,
    THREAD,
    BackgroundCompile,
    BackgroundCompileError,
    BackgroundCompiler,
    background_strategy,
    check_background_options,
    serving_stance,
)
from .child_compile import ChildCompile, ChildCompileError, ChildCompiler

# Recording moved to .recording; its names stay importable from here.
from .recording import (  # noqa: F401
    _LOG_EVERY,
    _LOG_FIRST,
    CLOSED,
    ERROR,
    MAX_BYTES,
    MAX_SAMPLES,
    QUEUE_FULL,
    SAMPLED_OUT,
    UNSTORABLE,
    FallbackRecorder,
    TrafficRecorder,
    input_signature,
    storage_bytes,
)

logger = logging.getLogger("guardscope.runtime")

PLANS = plans.SERVED


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


# --- choosing the plan (pure) --------------------------------------------------------------------


def choose_plan(
    requested: str, fixes: dict[str, Any] | None, verification: dict[str, Any] | None
) -> tuple[str, str | None]:
    """The plan to apply and a warning (or None), from ``fixes.json`` and ``verification.json``.

    ``"auto"`` takes the first of ``warmup``, ``unbacked`` that ``guardscope verify`` passed:
    the warmup set changes no process-wide setting and needs no per-call marks, and its graphs
    keep every specialization; the ``mark_unbacked`` plan compiles fewer graphs but turns duck
    sizing off for the whole process and marks every call. Without ``verification.json`` it takes
    ``warmup`` and warns that the plan is unproven. An explicit plan is taken as asked, with a
    warning when verification failed it.
    """
    if requested not in ("auto", *PLANS):
        raise ServeError(f"plan {requested!r} is not one of auto, {', '.join(PLANS)}")
    statuses = {}
    if verification is not None:
        statuses = {
            entry.get("name"): entry.get("status")
            for entry in verification.get("artifacts", [])
            if isinstance(entry, dict)
        }
    if requested != "auto":
        status = statuses.get(requested)
        if status is not None and status != "passed":
            return requested, f"plan {requested!r} did not pass 'guardscope verify' ({status})"
        return requested, None
    if fixes is None:
        raise ServeError(
            "no fixes.json in the plan directory: run 'guardscope emit-warmup DIR' first, "
            "or pass plan='warmup' or plan='unbacked'"
        )
    emitted = {entry.get("name") for entry in fixes.get("artifacts", [])
               if isinstance(entry, dict) and entry.get("status", "ok") == "ok"}  # not an infeasible one
    available = [name for name in PLANS if name in emitted]
    if not available:
        raise ServeError("fixes.json lists no warmup or unbacked plan: re-run 'guardscope emit-warmup DIR'")
    if verification is None:
        return available[0], (
            f"serving plan {available[0]!r}, which was not verified: run 'guardscope verify DIR' "
            "to prove it on the corpus first"
        )
    passed = [name for name in available if statuses.get(name) == "passed"]
    if not passed:
        found = ", ".join(f"{name} {statuses.get(name) or 'not verified'}" for name in available)
        raise ServeError(
            f"no plan passed 'guardscope verify' ({found}); see DIR/verification.json and the "
            "report, or pass plan='warmup' or plan='unbacked' to serve one anyway"
        )
    return passed[0], None


# --- the served model ----------------------------------------------------------------------------


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
        self._grad = torch.inference_mode if options.inference_mode else torch.no_grad
        self._lock = threading.Lock()
        self._calls = 0
        self._compiled_calls = 0
        self._fallbacks = 0
        self._errors = 0
        self._eager_tracing = 0
        self._closed = False
        self.graphs = len(torch_compat.cache_entries(self._code) or [])
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

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._mark is not None:
            try:
                self._mark(*args, **kwargs)
            except Exception as exc:
                self._error("the plan's mark()", exc)
        if self.traffic is not None:
            self.traffic.offer(args, kwargs)
        with self._stance(), self._grad():
            arguments = self._binder.arguments(args, kwargs)
            frame = self._binder.frame_locals(args, kwargs) if arguments is not None else {}
            if not frame:  # they do not fit forward: the call raises its TypeError
                with self._lock:
                    self._calls += 1
                return self._call_compiled(args, kwargs, counted=False)
            if self.accepts(frame):
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
                    self._grad():
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


# --- serve ---------------------------------------------------------------------------------------


def _import_plan(path: Path) -> Any:
    if not path.is_file():
        raise ServeError(f"{path} not found: run 'guardscope emit-warmup {path.parent}' first")

    return import_file(path)


def _model_device(model: Any) -> str | None:
    """The device of a module's first parameter or buffer (None: no tensors, or a function)."""
    if not isinstance(model, torch.nn.Module):
        return None
    tensor = next(itertools.chain(model.parameters(), model.buffers()), None)
    return str(tensor.device) if tensor is not None else None


def serve(
    model: Any,
    plan_dir: str | Path,
    *,
    plan: str = "auto",
    backend: str = "inductor",
    device: str | None = None,
    inference_mode: bool | None = None,
    fallback_dir: str | Path | None = None,
    max_samples: int = 1000,
    max_bytes: int = 256 * 2**20,
    repeat_rate: float = 0.01,
    flush_every: float = 30.0,
    overwrite_fallback: bool = False,
    model_spec: str | None = None,
    eager_on_recompile: bool = True,
    traffic_dir: str | Path | None = None,
    traffic_full_per_signature: int = 1,
    traffic_max_bytes: int = 256 * 2**20,
    overwrite_traffic: bool = False,
    background_compile: bool | str = False,
    max_background_compiles: int = 8,
    background_switch_interval: float | None = DEFAULT_SWITCH_INTERVAL,
    background_timeout: float = 600.0,
    background_gc_freeze: bool = True,
    background_yield: bool = True,
) -> ServedModel:
    """Compile ``model`` as analysed in ``plan_dir``, apply a plan, and return a
    :class:`ServedModel` whose calls never compile.

    ``plan_dir`` is a ``guardscope analyze`` output after ``guardscope emit-warmup`` (only
    ``catalog.json``, ``fixes.json``, ``verification.json`` when there is one, and the plan's
    module with its warmup corpus are read: the analysed corpus need not be deployed).
    ``plan``: ``"warmup"`` runs ``warmup.py``'s samples, ``"unbacked"`` calls ``unbacked.py``'s
    ``configure()`` (process-wide: duck sizing), its residual ``warmup()`` and ``mark()`` on
    every call; ``"auto"`` picks one as :func:`choose_plan` says.

    Compile options are the analysed ones (``catalog.json`` ``compile``: dynamic, fullgraph,
    mode, device, inference_mode) with ``backend`` (``"inductor"`` in production; the analysis
    used ``"eager"``, whose guards are the same), ``device`` and ``inference_mode`` overridable.
    Calls run under ``torch.inference_mode()`` (or ``torch.no_grad()`` when the analysis did not
    use inference mode): grad mode is part of every guard. ``device`` is where the warmup
    samples go: by default the device of the model's parameters (the analysed device for a
    model without any); requests must be on it too.

    With ``fallback_dir``, fallback calls are recorded there as a corpus (see
    :class:`FallbackRecorder` for ``max_samples``, ``max_bytes``, ``repeat_rate``,
    ``flush_every``), named ``model_spec`` (default: the catalog's model, re-expressed relative
    to ``fallback_dir``) with the analysed production compile options, ready for
    ``guardscope analyze FALLBACK_DIR``. A directory already holding a corpus is refused unless
    ``overwrite_fallback``.

    With ``traffic_dir``, every call is recorded there by signature (a
    :class:`TrafficRecorder` with ``traffic_full_per_signature`` and ``traffic_max_bytes``;
    ``overwrite_traffic`` replaces a corpus already there): ``guardscope analyze TRAFFIC_DIR``
    audits the whole traffic, for a few dozen bytes a call on disk.

    ``eager_on_recompile``: hold ``torch.compiler.set_stance("eager_on_recompile")`` during
    each call (torch 2.6+), so a call the guard check misjudged runs eagerly rather than
    compiling. The stance is process-wide in torch: while a served call is in flight, other
    compiled functions in the process do not compile either.

    ``background_compile`` (off by default: serving then never compiles, as before): a fallback
    topology is compiled off the serving thread (:mod:`guardscope.runtime.background`), at most
    ``max_background_compiles`` of them, most frequent first, with the GIL switch interval at
    ``background_switch_interval`` seconds while one runs (None: unchanged); once compiled, its
    calls are served compiled. Its fallbacks are still recorded. ``stats`` counts the compiles.
    ``"thread"`` compiles on a worker thread of this process; ``"process"`` has a child process
    compile it first (:mod:`guardscope.runtime.child_compile`, at most ``background_timeout``
    seconds; the model rebuilt there from ``model_spec`` or the catalog's) and the worker then
    compiles from the compile-cache artifacts it hands back; True (or ``"auto"``) is
    ``"process"`` with the inductor backend, ``"thread"`` with the others (they have no caches
    to hand back). ``background_gc_freeze``: before each background compile, ``gc.freeze()``
    the objects so far (process-wide), so that the compile's garbage collections do not walk
    them all with the GIL held (:func:`guardscope.runtime.background.freeze_before_compile`).
    ``background_yield``: the compile's thread waits while served calls are in flight (at most
    20 ms at a time, :mod:`guardscope.runtime.yielding`), so that served calls do not take turns
    with it for the GIL.

    Raises :class:`~guardscope.errors.ServeError` (or ``CatalogError``) for a plan directory
    it cannot serve, before anything is compiled.
    """

    started = time.perf_counter()
    plan_dir = Path(plan_dir)
    if isinstance(model, torch.nn.Module) and torch_compat.compiled_module_original(model) is not None:
        raise ServeError("the model is already compiled: pass the model itself, serve() compiles it")
    catalog = store.read_catalog(plan_dir)
    fixes = store.read_document(plan_dir, store.FIXES)
    verification = store.read_document(plan_dir, store.VERIFICATION)
    chosen, warning = choose_plan(plan, fixes, verification)
    notes = tuple(w for w in (warning, torch_compat.check_supported_version()) if w)
    for note in notes:
        warnings.warn(note, RuntimeWarning, stacklevel=2)
    background = None
    strategy = background_strategy(background_compile, backend)
    if strategy is not None:
        background = check_background_options(max_compiles=max_background_compiles,
                                              switch_interval=background_switch_interval,
                                              gc_freeze=background_gc_freeze,
                                              yield_to_serving=background_yield)
        if not (type(background_timeout) in (int, float) and background_timeout > 0):
            raise ServeError(f"background_timeout must be seconds > 0, got {background_timeout!r}")
    if device is None:
        device = _model_device(model)
    options = production_options(catalog, backend=backend, device=device, inference_mode=inference_mode)
    options.validate()
    module = _import_plan(plan_dir / plans.MODULES[chosen])

    recorder = traffic = None
    corpus_dir = plan_dir / catalog["corpus"]["path"]
    served = model_print(model)  # the shape of its weights (None: not a module), for the recorded corpora
    production = production_fields(catalog["compile"])
    if fallback_dir is not None:
        spec = model_spec or respec(catalog["model"], corpus_dir, Path(fallback_dir))
        recorder = FallbackRecorder(
            fallback_dir, model=spec, compile=production, max_samples=max_samples,
            max_bytes=max_bytes, repeat_rate=repeat_rate, flush_every=flush_every,
            overwrite=overwrite_fallback, method=catalog.get("method"), recorded_from=served,
        )
    if traffic_dir is not None:
        try:
            traffic = TrafficRecorder(
                traffic_dir, model=model_spec or respec(catalog["model"], corpus_dir, Path(traffic_dir)),
                compile=production, full_per_signature=traffic_full_per_signature,
                max_bytes=traffic_max_bytes, flush_every=flush_every, overwrite=overwrite_traffic,
                method=catalog.get("method"), recorded_from=served,
            )
        except BaseException:
            if recorder is not None:
                recorder.close()
            raise
    try:
        if chosen == "unbacked":
            module.configure()
        compiled = compile_model(model, options)
        module.warmup(compiled, device=options.device, inference_mode=options.inference_mode)
        if torch_compat.cache_entries(torch_compat.code_of(model)) is None:
            raise ServeError(
                f"torch {torch_compat.torch_version()} does not expose Dynamo's cache entries "
                "(torch._dynamo.eval_frame._debug_get_cache_entry_list), which guardscope.runtime "
                "checks each call against"
            )
        child = None
        if strategy == PROCESS:
            child = ChildCompiler(
                plan_dir=plan_dir, plan=chosen,
                spec_for=lambda folder: model_spec or respec(catalog["model"], corpus_dir, folder),
                compile=production, method=catalog.get("method"), backend=options.backend,
                device=options.device, inference_mode=options.inference_mode, timeout=background_timeout)
    except BaseException:
        for made in (recorder, traffic):
            if made is not None:
                made.close()
        raise
    return ServedModel(
        model=model,
        compiled=compiled,
        plan=chosen,
        plan_dir=plan_dir,
        options=options,
        mark=module.mark if chosen == "unbacked" else None,
        configure=module.configure if chosen == "unbacked" else None,
        recorder=recorder,
        traffic=traffic,
        eager_on_recompile=eager_on_recompile,
        setup_seconds=time.perf_counter() - started,
        warnings=notes,
        background=background,
        child=child,
    )


__all__ = [
    "FallbackRecorder",
    "RuntimeStats",
    "ServedModel",
    "TrafficRecorder",
    "choose_plan",
    "input_signature",
    "serve",
    "storage_bytes",
]
