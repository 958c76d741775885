"""Every touch of torch internals, in one place, each gated on what the installed torch has.

guardscope supports torch 2.9 to 2.14. Private APIs used here, and why:

* ``torch._logging._internal.trace_log`` / ``TorchLogsFormatter(trace=True)``: the structured
  trace that tlparse reads (``TORCH_TRACE``). Attaching our own handler captures it in-process.
* ``torch._logging._internal.log_registry`` / ``_is_torch_handler``: the loggers torch registers
  and the terminal handlers it put on them, which :func:`torch_logs_captured` swaps for a
  collector while ``emit-warmup`` tries its plans.
* ``torch._dynamo.eval_frame._debug_get_cache_entry_list``: the cache entries of a code object,
  each with its ``compile_id`` and ``guard_manager``; ``guard_manager.check(f_locals)`` evaluates
  an entry's guards without running anything (about 5-15 us).
* ``torch._dynamo.config.recompile_limit`` (named ``cache_size_limit`` before 2.6; 2.9+ keeps the
  old name as an alias) and ``accumulated_recompile_limit``.
* ``torch.fx.experimental._config.use_duck_shape``: duck sizing.
* ``torch.compiler.set_stance("eager_on_recompile")`` (public, torch 2.6+; 2.11 and 2.13 have
  it): the serving runtime's guarantee that a call runs eagerly rather than compiling. torch
  keeps the stance in one process-wide variable, so :func:`eager_on_recompile` shares it
  between threads.
* ``torch.fx._symbolic_trace.is_fx_symbolic_tracing`` / ``_is_fx_tracing_flag``: one process-wide
  flag; while another thread's compile traces, Dynamo refuses compiled calls on every thread
  (:func:`fx_symbolic_tracing`, :func:`refused_for_fx_trace`).
* ``torch._dynamo.guards.profile_guard_manager`` (the name ``CheckFunctionManager`` calls, bound
  from ``torch._C._dynamo.guards``): after each compile it times the new guards once, after
  flushing the CPU caches, for a compile metric; 20-35 ms with the GIL held.
  :func:`without_guard_latency_profile` replaces it while a background compile runs.
* CUDA Graph Trees (``mode="reduce-overhead"``), observed without patching torch: the
  ``cudagraphs`` artifact loggers of ``torch._inductor.cudagraph_trees`` / ``cudagraph_utils``
  (new trees per size key, recordings, "skipping cudagraphs due to ..."), the
  ``chromium_event`` records torch writes to the structured trace around each capture
  (``CUDAGraphNode.record``, torch >= 2.6), and ``torch._dynamo.utils.counters["inductor"]
  ["cudagraph_skips"]``, which counts skips even when a message's wording is unknown.
* ``torch.compiler.save_cache_artifacts`` / ``load_cache_artifacts`` (public since 2.7, same
  signature in 2.11 and 2.13) and the cache counters in ``torch._dynamo.utils.counters``
  (``inductor.fxgraph_cache_hit/miss``, ``aot_autograd.autograd_cache_hit/miss``): compile-cache
  bundles. The backend and inductor settings of a compiled module are read from its Dynamo
  context (``OptimizedModule.dynamo_ctx.callback``, unwrapped through
  ``_torchdynamo_orig_backend`` down to ``torch._TorchCompileInductorWrapper``/``_TorchCompileWrapper``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import threading
import types
import warnings
from typing import Any, Callable, Iterator

import torch

from .model import compile_order
from .text import first_line, message_line

TESTED_RANGE = ((2, 9), (2, 14))


def torch_version() -> str:
    return str(torch.__version__).split("+")[0]


def version_tuple(version: str | None = None) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version or torch_version())
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def check_supported_version() -> str | None:
    """Return a warning text when the installed torch is outside the tested range."""
    current = version_tuple()
    low, high = TESTED_RANGE
    if low <= current <= high:
        return None
    return (
        f"torch {torch_version()} is outside the range guardscope is tested on "
        f"({low[0]}.{low[1]}-{high[0]}.{high[1]}); guard texts it cannot parse are kept as 'other'"
    )


# --- dtype names ------------------------------------------------------------------------------

# Every torch dtype by the name catalogs, corpus shards and messages spell it ("float32"), and back.
DTYPES: dict[str, torch.dtype] = {
    str(value).removeprefix("torch."): value for value in vars(torch).values() if isinstance(value, torch.dtype)
}
_DTYPE_NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in DTYPES.items()}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``, the one spelling of a dtype in guardscope's files."""
    name = _DTYPE_NAMES.get(dtype)
    return name if name is not None else str(dtype).removeprefix("torch.")


# --- structured trace -------------------------------------------------------------------------


def trace_logger() -> logging.Logger:
    """The ``torch.__trace`` logger tlparse's input is written to."""
    from torch._logging import _internal

    return _internal.trace_log


def trace_formatter() -> logging.Formatter:
    """The formatter torch itself uses for ``TORCH_TRACE`` files, so tlparse can read ours."""
    from torch._logging import _internal

    return _internal.TorchLogsFormatter(trace=True)


# --- torch's own log lines ---------------------------------------------------------------------


@dataclasses.dataclass
class TorchLog:
    """What torch's loggers said while :func:`torch_logs_captured` held them: every line as torch
    formats it (for a file), and how many warnings and errors each distinct cause logged."""

    lines: list[str] = dataclasses.field(default_factory=list)
    # (level, cause) -> records: ("error", "GuardOnDataDependentSymNode: failed while attempting
    # to run meta for aten._transformer_encoder_layer_fwd.default")
    causes: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)


def log_cause(record: logging.LogRecord) -> str:
    """One line naming why a torch record was logged: the exception it carries (its type, then
    the record's own first line), else the record's first line."""
    try:
        message = first_line(record.getMessage())[:200]
    except (TypeError, ValueError):  # a record whose arguments do not format
        message = first_line(record.msg)[:200]
    exc = record.exc_info[1] if record.exc_info else None
    return f"{type(exc).__name__}: {message}" if exc is not None else message


class _Collector(logging.Handler):
    def __init__(self, log: TorchLog, formatter: logging.Formatter | None) -> None:
        super().__init__(logging.DEBUG)
        self.log = log
        if formatter is not None:
            self.setFormatter(formatter)

    # Called inside a compiled model's eager parts too: Dynamo must not try to compile it.
    @torch.compiler.disable
    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.log.lines.append(self.format(record))
        except (TypeError, ValueError):  # as logging does: a record that does not format is reported, not raised
            self.handleError(record)
            return
        if record.levelno >= logging.WARNING:
            key = (record.levelname.lower(), log_cause(record))
            self.log.causes[key] = self.log.causes.get(key, 0) + 1


def _terminal_handlers() -> list[tuple[logging.Logger, logging.Handler]]:
    """The handlers torch put on its registered loggers (``torch``, ``torch._dynamo``,
    ``torch.fx.experimental.symbolic_shapes``...) that print to the terminal: plain
    ``StreamHandler``s it made itself (``torch._logging._internal._is_torch_handler``), not its
    trace handler, a ``TORCH_LOGS_OUT`` file, or handlers a user added. Registered loggers do not
    propagate, so each record reaches one of these at most."""
    from torch._logging import _internal

    registry = getattr(_internal, "log_registry", None)
    names = registry.get_log_qnames() if registry is not None and hasattr(registry, "get_log_qnames") else {"torch"}
    ours = getattr(_internal, "_is_torch_handler", None)
    found = []
    for name in sorted(names):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if type(handler) is logging.StreamHandler and (ours is None or ours(handler)):
                found.append((logger, handler))
    return found


def _in_torch(filename: str) -> bool:
    folder = os.path.dirname(os.path.abspath(torch.__file__))
    return os.path.abspath(filename).startswith(folder + os.sep)


@contextlib.contextmanager
def torch_logs_captured() -> Iterator[TorchLog]:
    """While held, what torch logs to the terminal (Dynamo's, symbolic shapes' and export's
    warnings and errors with their tracebacks, and what ``TORCH_LOGS`` asked for) and the Python
    warnings torch's own code raises (a prototype API's ``UserWarning``) are kept in the yielded
    :class:`TorchLog` instead, formatted as torch and Python would have printed them. Warnings
    filters still decide what is shown at all; other warnings (the user's, guardscope's) reach
    the terminal as before. torch's handlers are put back afterwards."""
    log = TorchLog()
    held = [(logger, handler, _Collector(log, handler.formatter)) for logger, handler in _terminal_handlers()]
    for logger, handler, collector in held:  # each in its place: a user's handlers keep their order
        logger.handlers[logger.handlers.index(handler)] = collector
    shown = warnings.showwarning

    @torch.compiler.disable  # a warning raised in a compiled model's eager parts: not a frame to compile
    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        if file is not None or not _in_torch(filename):
            shown(message, category, filename, lineno, file, line)
            return
        log.lines.append(warnings.formatwarning(message, category, filename, lineno, line).rstrip("\n"))
        key = ("warning", f"{category.__name__}: {first_line(message)[:200]}")
        log.causes[key] = log.causes.get(key, 0) + 1

    warnings.showwarning = show
    try:
        yield log
    finally:
        if warnings.showwarning is show:
            warnings.showwarning = shown
        for logger, handler, collector in held:
            if collector in logger.handlers:
                logger.handlers[logger.handlers.index(collector)] = handler
            else:
                logger.addHandler(handler)


# --- Dynamo state ------------------------------------------------------------------------------


def reset_dynamo() -> None:
    """Forget every compiled graph and counter, so a replay starts from a cold process."""
    torch._dynamo.reset()


def _recompile_limit_names() -> tuple[str, str]:
    config = torch._dynamo.config
    # torch >= 2.6 renamed cache_size_limit to recompile_limit (the old name stays an alias).
    if hasattr(config, "recompile_limit"):
        return "recompile_limit", "accumulated_recompile_limit"
    return "cache_size_limit", "accumulated_cache_size_limit"  # pragma: no cover - torch < 2.6


@contextlib.contextmanager
def raised_recompile_limit(limit: int) -> Iterator[None]:
    """Raise Dynamo's per-frame and accumulated recompile limits; restore them on exit."""
    config = torch._dynamo.config
    names = _recompile_limit_names()
    saved = {name: getattr(config, name) for name in names}
    try:
        for name in names:
            setattr(config, name, max(limit, saved[name]))
        yield
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


_profile_lock = threading.Lock()
_profile_depth = 0
_profile_saved: Any = None


def _no_guard_latency(*args: Any) -> float:
    return 0.0


@contextlib.contextmanager
def without_guard_latency_profile() -> Iterator[None]:
    """Within the block, Dynamo does not time a new compile's guards: the measurement
    (``profile_guard_manager``: a CPU cache flush, then one guard evaluation) holds the GIL for
    20-35 ms, a stall for every other thread, and only feeds the compile metric
    ``guard_latency_us`` (0 for those compiles). Process-wide; nested or concurrent blocks share
    it, the last one out puts torch's function back. Where torch has no such name, nothing."""
    global _profile_depth, _profile_saved
    try:
        from torch._dynamo import guards
    except ImportError:
        guards = None
    if guards is None or not callable(getattr(guards, "profile_guard_manager", None)):
        yield
        return
    with _profile_lock:
        if _profile_depth == 0:
            _profile_saved = guards.profile_guard_manager
            guards.profile_guard_manager = _no_guard_latency
        _profile_depth += 1
    try:
        yield
    finally:
        with _profile_lock:
            _profile_depth -= 1
            # Put torch's function back, unless someone replaced ours meanwhile (theirs stays).
            if _profile_depth == 0 and guards.profile_guard_manager is _no_guard_latency:
                guards.profile_guard_manager = _profile_saved


@contextlib.contextmanager
def patched_config(settings: dict[str, Any]) -> Iterator[None]:
    """Apply ``{"torch.fx.experimental._config.use_duck_shape": False, ...}``; restore on exit."""
    import importlib

    saved: list[tuple[Any, str, Any]] = []
    try:
        for dotted, value in settings.items():
            module_name, _, attr = dotted.rpartition(".")
            module = importlib.import_module(module_name)
            saved.append((module, attr, getattr(module, attr)))
            setattr(module, attr, value)
        yield
    finally:
        for module, attr, value in reversed(saved):
            setattr(module, attr, value)


DUCK_SHAPE_SETTING = "torch.fx.experimental._config.use_duck_shape"


# --- cache entries and guards ------------------------------------------------------------------


def forward_owner(model: Any) -> Any:
    """The module whose ``forward`` ``model`` is: the module itself, or the owner of a bound
    ``forward`` (``torch.compile(model.forward)``, as generate() users compile); None for any
    other callable (torch.export exports a module's forward only)."""
    if isinstance(model, torch.nn.Module):
        return model
    owner = getattr(model, "__self__", None)
    if isinstance(owner, torch.nn.Module) and getattr(model, "__name__", None) == "forward":
        return owner
    return None


def compiled_module_original(module: torch.nn.Module) -> torch.nn.Module | None:
    """The module ``torch.compile(module)`` wrapped (its ``OptimizedModule``'s ``_orig_mod``, a
    registered submodule since torch 2.0); None for a module torch.compile did not make."""
    original = module._modules.get("_orig_mod")
    return original if isinstance(module, torch._dynamo.eval_frame.OptimizedModule) else None


def compiled_function_original(function: Any) -> Any:
    """The callable ``torch.compile(function)`` wraps (``_torchdynamo_orig_callable``); None for
    anything else."""
    return getattr(function, "_torchdynamo_orig_callable", None)


def code_of(model: Any) -> Any:
    """The code object Dynamo compiles for ``model(...)``: ``forward`` for an nn.Module."""
    if isinstance(model, torch.nn.Module):
        return type(model).forward.__code__
    function = getattr(model, "__func__", model)
    return getattr(function, "__code__", None)


def cache_entries(code: Any) -> list[tuple[str, Callable[[dict[str, Any]], bool]]] | None:
    """``[(compile_id, check)]`` for a code object, in lookup order; None if torch hides them."""
    getter = getattr(torch._dynamo.eval_frame, "_debug_get_cache_entry_list", None)
    if getter is None or code is None:
        return None
    try:
        entries = getter(code)
    except Exception:  # pragma: no cover - defensive: a torch build without the debug hook
        return None
    result = []
    for entry in entries:
        manager = getattr(entry, "guard_manager", None)
        check = getattr(manager, "check", None)
        if check is None:
            return None
        result.append((str(entry.compile_id), check))
    return result


def entries_by_age(code: Any) -> list[tuple[str, Callable[[dict[str, Any]], bool]]]:
    """The cache entries of ``code``, earliest-compiled first."""
    return sorted(cache_entries(code) or [], key=lambda entry: compile_order(entry[0]))


def _accepts(check: Callable[[dict[str, Any]], bool], f_locals: dict[str, Any]) -> bool:
    try:
        return bool(check(f_locals))
    except Exception:
        return False


def first_accepting(entries: list[tuple[str, Callable[[dict[str, Any]], bool]]], f_locals: dict[str, Any]) -> str | None:
    """Compile id of the first entry whose guards accept these frame locals, or None.

    Given :func:`entries_by_age`, that is the earliest-compiled accepting graph: Dynamo itself
    tries entries most-recently-used first, so which of two accepting graphs runs depends on
    history, and the earliest-compiled one is the stable answer (None: the call would compile).
    :class:`LookupOrder` answers the other question: which graph a call really runs.
    """
    for compile_id, check in entries:
        if _accepts(check, f_locals):
            return compile_id
    return None


class LookupOrder:
    """Dynamo's lookup order of one code object's cache entries, emulated call by call.

    Dynamo keeps a frame's cache entries in a list it searches front to back: a hit is moved to
    the front, a new compile is put at the front (``lookup`` and ``create_cache_entry`` in
    ``torch/csrc/dynamo/extra_state.cpp``, ``use_lru`` on by default, torch 2.1 - 2.14;
    ``_debug_get_cache_entry_list`` returns that live order). So of two graphs accepting a
    call, the one used last runs. The replay follows that order itself instead of reading it,
    so a guard-only replay, whose skipped samples never reach Dynamo, still knows which graph
    each would have run. ``order`` is the compile ids, most recently used first.
    """

    def __init__(self, order: list[str] | None = None) -> None:
        self.order: list[str] = list(order or [])

    def call(self, entries: list[tuple[str, Callable[[dict[str, Any]], bool]]], f_locals: dict[str, Any]) -> str | None:
        """The graph a call with these frame locals ran (None: none did), after that call.

        ``entries`` are the frame's cache entries once the call is over, earliest-compiled
        first: an entry not seen before was compiled by this call, which then ran it.
        """
        checks = dict(entries)
        self.order = [cid for cid in self.order if cid in checks]
        new = [cid for cid, _ in entries if cid not in self.order]
        if new:
            self.order[:0] = reversed(new)
            return self.order[0]
        for position, compile_id in enumerate(self.order):
            if _accepts(checks[compile_id], f_locals):
                self.order.insert(0, self.order.pop(position))
                return compile_id
        return None


def _code_map() -> tuple[dict[int, Any], dict[int, Any]] | None:
    """``torch._dynamo.utils.orig_code_map`` as its ``(refs, values)`` dicts keyed by id (an
    ExactWeakKeyDictionary, torch 2.1 - 2.14; ``convert_frame`` adds every transformed code object
    it makes, resume functions and callees that broke the graph included), or None."""
    mapping = getattr(torch._dynamo.utils, "orig_code_map", None)
    refs, values = getattr(mapping, "refs", None), getattr(mapping, "values", None)
    if not isinstance(refs, dict) or not isinstance(values, dict):
        return None
    return refs, values


def _transformed_codes() -> dict[int, tuple[Any, Any]] | None:
    """Every code object Dynamo produced, by id, with the code it was compiled from: ``{id:
    (transformed, original)}`` (None where torch hides it). Keyed by id because a code object's
    hash hashes its constants, and Dynamo's can hold unhashable ones (slices)."""
    found = _code_map()
    if found is None:
        return None
    refs, values = found
    codes = {}
    for key, ref in list(refs.items()):
        transformed, original = ref(), values.get(key)
        if isinstance(transformed, types.CodeType) and isinstance(original, types.CodeType):
            codes[id(transformed)] = (transformed, original)
    return codes


def _compile_callbacks() -> Any:
    """``torch._dynamo.callback.callback_handler`` (compile start/end callbacks; torch 2.5+), or
    None."""
    try:
        from torch._dynamo.callback import callback_handler
    except ImportError:  # pragma: no cover - torch < 2.5
        return None
    if not callable(getattr(callback_handler, "register_start_callback", None)):
        return None  # pragma: no cover
    return callback_handler


@contextlib.contextmanager
def compile_start_callback(callback: Callable[[Any], None]) -> Iterator[None]:
    """``callback`` called as each Dynamo compile starts, in any frame, while the block runs
    (torch 2.5+'s compile callbacks; ``torch._dynamo.reset()`` inside the block would drop it)."""
    handler = _compile_callbacks()
    if handler is None:  # pragma: no cover - torch < 2.5
        raise RuntimeError("this torch has no compile callbacks (torch 2.5+): compiles cannot be counted")
    handler.register_start_callback(callback)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            handler.remove_start_callback(callback)


def skip_recursively(code: Any) -> bool:
    """Tell Dynamo never to compile ``code`` nor anything it calls (a profile hook runs inside
    compiled calls, where Dynamo would otherwise try to compile the hook and its guard checks).
    ``set_code_exec_strategy`` with ``FrameAction.SKIP`` for the frame and its callees (torch 2.6+;
    what ``torch._dynamo.skip`` does for one frame); False where torch lacks it."""
    try:
        from torch._C._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
    except ImportError:  # pragma: no cover - torch < 2.6
        return False
    set_code_exec_strategy(code, FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))
    return True


class FrameRecorder:
    """Which compiled graph of which frame every call runs through, frames after graph breaks
    included.

    A model with graph breaks runs as several frames: its ``forward``, a resume function after each
    break, and each callee that broke its own graph; each frame has its own cache entries and
    recompiles on its own. Dynamo runs a cache entry by entering that entry's transformed code
    object, so a profile hook (``sys.setprofile``) that sees those code objects being entered knows
    the frame and, from the frame's locals at entry, which cache entries accept it. For each such
    call :attr:`graphs` gets ``(original code, compile id)``: the *earliest-compiled* entry
    accepting the locals (the stable choice, as for the first frame; see :func:`first_accepting`),
    else the entry that ran.

    The hook runs only inside :meth:`recording` and is paused while Dynamo compiles (compile
    start/end callbacks), so compiling costs nothing extra; it costs about a microsecond per Python
    call in the forward and a guard check per compiled-frame call. ``available`` is False where
    torch hides the map from transformed to original code.
    """

    def __init__(self) -> None:
        found = _code_map()
        self.available = found is not None
        # Dynamo's own map grows with every compile: a changed size means the view is stale.
        self._values: dict[int, Any] = found[1] if found is not None else {}
        self._known = -1
        self.graphs: list[tuple[Any, str]] = []
        # Keyed by id(code): see _transformed_codes.
        self._codes: dict[int, tuple[Any, Any]] = {}
        self._entries: dict[int, list[tuple[str, Callable[[dict[str, Any]], bool]]]] = {}
        self._ran: dict[int, str] = {}
        self._active = False
        self._callbacks = _compile_callbacks()

    def __enter__(self) -> FrameRecorder:
        return self

    def _register(self) -> None:
        # torch._dynamo.reset() clears every compile callback: register again when they are gone.
        handler = self._callbacks
        if handler is not None and self._compile_started not in getattr(handler, "start_callbacks", ()):
            handler.register_start_callback(self._compile_started)
            handler.register_end_callback(self._compile_ended)

    def __exit__(self, *exc_info: Any) -> None:
        if self._callbacks is not None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove_start_callback(self._compile_started)
            with contextlib.suppress(ValueError):
                self._callbacks.remove_end_callback(self._compile_ended)

    def _compile_started(self, _: Any) -> None:
        if self._active:
            import sys

            sys.setprofile(None)

    def _compile_ended(self, _: Any) -> None:
        if self._active:
            import sys

            sys.setprofile(self._hook)

    def _refresh(self) -> None:
        self._codes = _transformed_codes() or {}
        self._entries = {}
        self._ran = {}
        getter = getattr(torch._dynamo.eval_frame, "_debug_get_cache_entry_list", None)
        originals = {id(original): original for _, original in self._codes.values()}
        for original in originals.values() if getter is not None else ():
            for entry in getter(original) or []:
                code = getattr(entry, "code", None)
                if code is not None:
                    self._ran[id(code)] = str(entry.compile_id)
        self._known = len(self._values)

    def _hook(self, frame: Any, event: str, _: Any) -> None:
        if event != "call":
            return
        if len(self._values) != self._known:
            self._refresh()
        known = self._codes.get(id(frame.f_code))
        if known is None:
            return
        original = known[1]
        entries = self._entries.get(id(original))
        if entries is None:
            entries = self._entries[id(original)] = entries_by_age(original)
        chosen = first_accepting(entries, dict(frame.f_locals)) or self._ran.get(id(frame.f_code))
        if chosen is not None:
            self.graphs.append((original, chosen))

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[tuple[Any, str]]]:
        """Record the compiled frames one call runs through; yields the list that fills."""
        import sys

        self.graphs = []
        self._register()
        if not skip_recursively(FrameRecorder._hook.__code__):  # pragma: no cover - torch < 2.6
            self.available = False
            yield self.graphs
            return
        previous = sys.getprofile()
        self._active = True
        sys.setprofile(self._hook)
        try:
            yield self.graphs
        finally:
            sys.setprofile(previous)
            self._active = False


def cache_entry_total() -> int:
    """Graphs compiled so far in every frame: the cache entries of every code object Dynamo
    compiled (the model's forward, resume functions after graph breaks, callees that broke)."""
    codes = _transformed_codes() or {}
    originals = {id(original): original for _, original in codes.values()}
    return sum(len(cache_entries(original) or []) for original in originals.values())


def fail_on_recompile() -> contextlib.AbstractContextManager[Any]:
    """``torch.compiler.set_stance("fail_on_recompile")`` (public, torch 2.6+): a call that would
    compile a graph in any frame raises instead, so nothing is compiled."""
    return torch.compiler.set_stance("fail_on_recompile")


def warn_once(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=2)


def supports_unbacked_sources() -> bool:
    """``torch.compiler.config.unbacked_sources`` (env ``TORCH_COMPILE_UNBACKED_SOURCES``) with
    per-dim ``:N`` entries; present in torch 2.13, absent in older releases."""
    config = getattr(torch.compiler, "config", None)
    if config is None or not hasattr(config, "unbacked_sources"):
        return False
    from torch._dynamo.variables import builder

    return hasattr(builder, "_parse_source_entry")


def is_recompile_limit_error(exc: BaseException) -> bool:
    """Dynamo's "recompile limit reached" under fullgraph=True (FailOnRecompileLimitHit in 2.9+;
    older releases raise RecompileLimitExceeded / CacheLimitExceeded)."""
    names = {"FailOnRecompileLimitHit", "RecompileLimitExceeded", "CacheLimitExceeded"}
    return any(cls.__name__ in names for cls in type(exc).__mro__)


# --- serving: recompiles fall back to eager ------------------------------------------------------


def supports_eager_on_recompile() -> bool:
    """``torch.compiler.set_stance("eager_on_recompile")``: added with ``set_stance`` in torch 2.6
    (present in 2.11 and 2.13). Under it a call that no cached graph accepts runs eagerly
    instead of compiling; a graph that accepts still runs."""
    return callable(getattr(torch.compiler, "set_stance", None))


class _EagerOnRecompile:
    """The ``eager_on_recompile`` stance while at least one guarded call is in flight.

    torch keeps the stance in one process-wide variable (``torch._dynamo.eval_frame._stance``,
    read when a compiled function is entered), so calls from several threads share one holder:
    the first to enter sets the stance, the last to leave restores the previous one.
    """

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self._depth = 0
        self._active: Any = None

    @contextlib.contextmanager
    def held(self) -> Iterator[bool]:
        """Hold the stance for the body; yields whether it is held. Setting it can fail (torch
        refuses inside a compiled region): the body then runs without it, never raises."""
        with self._lock:
            if self._depth == 0:
                try:
                    # Constructing it sets the stance; __exit__ restores the one before.
                    self._active = torch.compiler.set_stance("eager_on_recompile")
                except Exception:
                    self._active = None
            held = self._active is not None
            if held:
                self._depth += 1
        try:
            yield held
        finally:
            if held:
                with self._lock:
                    self._depth -= 1
                    if self._depth == 0:
                        active, self._active = self._active, None
                        try:
                            active.__exit__(None, None, None)
                        except Exception:  # pragma: no cover - restoring is a plain assignment
                            pass


_EAGER_ON_RECOMPILE = _EagerOnRecompile()


def eager_on_recompile() -> contextlib.AbstractContextManager[bool]:
    """A context manager holding the ``eager_on_recompile`` stance (shared by all threads, see
    :class:`_EagerOnRecompile`); a no-op yielding False on a torch without ``set_stance``."""
    if not supports_eager_on_recompile():
        return contextlib.nullcontext(False)
    return _EAGER_ON_RECOMPILE.held()


# FX symbolic tracing is one process-wide flag (``torch.fx._symbolic_trace._is_fx_tracing_flag``,
# set by any thread's ``Tracer.trace``: make_fx inside an inductor compile on a background
# thread too). While ``is_fx_symbolic_tracing()`` (the flag and not ``torch.compiler.is_compiling()``,
# 2.11 and 2.13) holds, Dynamo's compile_wrapper refuses, on entry and before running anything,
# to call a compiled function on every thread, with this RuntimeError.
_NESTED_FX_TRACE = "Detected that you are using FX to symbolically trace a dynamo-optimized function"


def fx_symbolic_tracing() -> bool:
    """Whether Dynamo refuses to enter compiled functions now because an FX trace is on somewhere in
    the process (False on a torch without the flag)."""
    module = getattr(torch.fx, "_symbolic_trace", None)
    check = getattr(module, "is_fx_symbolic_tracing", None)
    if callable(check):
        return bool(check())
    return bool(getattr(module, "_is_fx_tracing_flag", False))  # pragma: no cover - older torch


def refused_for_fx_trace(exc: BaseException) -> bool:
    """Whether ``exc`` is that refusal raised on entering the compiled function itself (the one
    ``compile_wrapper`` frame of its traceback, innermost): nothing of the call ran."""
    if not isinstance(exc, RuntimeError) or not str(exc).startswith(_NESTED_FX_TRACE):
        return False
    import traceback

    names = [frame.f_code.co_name for frame, _ in traceback.walk_tb(exc.__traceback__)]
    return names.count("compile_wrapper") == 1 and names[-1] == "compile_wrapper"


# --- CUDA Graph Trees --------------------------------------------------------------------------

# Modules whose ``cudagraphs`` artifact logger reports recordings and skips (torch 2.2 - 2.14).
CUDAGRAPH_LOG_MODULES = ("torch._inductor.cudagraph_trees", "torch._inductor.cudagraph_utils")
CUDAGRAPH_ARTIFACT = "cudagraphs"


def cudagraph_loggers() -> list[logging.Logger]:
    """The ``cudagraphs`` artifact loggers, including ones not created yet.

    ``torch._logging.getArtifactLogger(module, "cudagraphs")`` names its logger
    ``<module>.__cudagraphs``; ``logging.getLogger`` returns the same object whether torch has
    imported the module yet or not, so a handler attached now sees its records later.
    """
    from torch._logging import _internal

    suffix = f".__{CUDAGRAPH_ARTIFACT}"
    names = {module + suffix for module in CUDAGRAPH_LOG_MODULES}
    registry = getattr(_internal, "log_registry", None)
    qnames = getattr(registry, "get_artifact_log_qnames", None)
    if callable(qnames):
        names |= {name for name in qnames() if name.endswith(suffix)}
    return [logging.getLogger(name) for name in sorted(names)]


def cudagraph_skip_count() -> int:
    """Inductor's running count of "skipping cudagraphs" decisions (0 where torch lacks it)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover - every supported torch has it
        return 0
    inductor = counters.get("inductor")
    return int(inductor.get("cudagraph_skips", 0)) if inductor is not None else 0


def partitions_dynamic_shapes() -> bool:
    """Whether ``cudagraph_skip_dynamic_graphs`` partitions a graph rather than skipping it.

    With inductor graph partitioning on (``torch._inductor.config.graph_partition``, env
    ``TORCHINDUCTOR_GRAPH_PARTITION``, on by default outside fbcode) and a torch whose scheduler
    partitions around ops that use symbolic sizes (pytorch PR 170884, torch 2.11+:
    ``scheduler.get_scheduler_node_symbol_uses``, and ``compile_fx`` no longer disables CUDA
    graphs for a graph with symbolic inputs), only the static-shape partitions are CUDA-graphed.
    Otherwise the whole graph is skipped ("skipping cudagraphs due to graph with symbolic
    shapes inputs and config.triton.cudagraph_skip_dynamic_graphs=True").
    """
    from torch._inductor import config

    if not getattr(config, "graph_partition", False):
        return False
    # torch 2.11 on an H200 showed the behaviour (no skip logged, static partitions recorded once
    # per graph); an earlier build has it when it has the PR's function (importing the
    # scheduler costs ~0.6 s, so only then).
    if version_tuple() >= (2, 11):
        return True
    from torch._inductor import scheduler

    return hasattr(scheduler, "get_scheduler_node_symbol_uses")


def cudagraph_config() -> dict[str, bool]:
    """The inductor settings that decide what CUDA Graph Trees record, read now:
    ``skip_dynamic_graphs`` (``config.triton.cudagraph_skip_dynamic_graphs``) and
    ``graph_partition`` (see :func:`partitions_dynamic_shapes`)."""
    from torch._inductor import config

    return {
        "skip_dynamic_graphs": bool(config.triton.cudagraph_skip_dynamic_graphs),
        "graph_partition": partitions_dynamic_shapes(),
    }


def mode_uses_cudagraphs(mode: str | None) -> bool:
    """Whether ``torch.compile(mode=mode)`` turns CUDA graphs on ("reduce-overhead",
    "max-autotune"), as torch's own ``list_mode_options`` says."""
    if not mode:
        return False
    try:
        from torch._inductor import list_mode_options

        options = list_mode_options(mode)
    except Exception:  # an unknown mode: torch.compile itself will say so
        return mode in ("reduce-overhead", "max-autotune")
    return bool(options.get("triton.cudagraphs"))
# --- serving measurements (guardscope bench) ----------------------------------------------------


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device``, so a request's wall time includes its kernels."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def graphs_compiled() -> int:
    """Graphs Dynamo has compiled in this process so far (``counters["stats"]["unique_graphs"]``,
    as the seed article counts them): read before and after a call, it tells whether the call
    compiled, without the structured trace, whose payloads add to a compile's time."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def device_name(device: torch.device) -> str | None:
    """The accelerator's name (``NVIDIA H200``), None on the CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return None


def aoti_compile_and_load(program: Any, package_path: str) -> Callable[..., Any]:
    """Compile an ``ExportedProgram`` with AOTInductor into a ``.pt2`` package and load it.

    ``torch._inductor.aoti_compile_and_package(program, package_path=...)`` and
    ``aoti_load_package(path)`` have these signatures from torch 2.6 on (2.11 and 2.13 included);
    the loaded model takes the exported call's ``(*args, **kwargs)``.
    """
    import torch._inductor

    path = torch._inductor.aoti_compile_and_package(program, package_path=package_path)
    return torch._inductor.aoti_load_package(path)


def export_input_checker(program: Any) -> Callable[[tuple, dict], str | None]:
    """``check(args, kwargs)``: None when ``program`` accepts the call, else why not.

    An AOTInductor model does not check its inputs (unless AOTI_RUNTIME_CHECK_INPUTS=1 was set
    when it was compiled): a call outside the exported bounds must be caught before it runs.
    This uses the exported program's own check (``ExportedProgram._check_input_constraints``:
    ranges of the Dims, dims that share a Dim, static sizes; torch 2.3+) after flattening the call
    as ``torch.export`` does (``reorder_kwargs`` + ``tree_flatten_with_path``), plus each
    tensor's dtype and device, which that check leaves out, and then the guards
    ``program.module()`` runs before its graph (its ``_guards_fn``, torch 2.9+): a guard torch
    keeps beside the Dims' ranges (``1 + (images.size()[3] - 1) // 32 != 1`` under a derived Dim
    whose range still says 32) refuses calls the ranges accept.
    """
    import torch.utils._pytree as pytree
    from torch.export._tree_utils import reorder_kwargs
    from torch.export.graph_signature import InputKind

    in_spec = program.call_spec.in_spec
    # Resolved now, so a torch without it fails the set-up instead of sending every call to eager.
    check_constraints = program._check_input_constraints
    guards = getattr(program.module(), "_guards_fn", None)  # called with the flattened user inputs
    placeholders = [node for node in program.graph.nodes if node.op == "placeholder"]
    examples = [
        node.meta.get("val")
        for node, spec in zip(placeholders, program.graph_signature.input_specs)
        if spec.kind == InputKind.USER_INPUT
    ]

    def check(args: tuple, kwargs: dict) -> str | None:
        try:
            flat, spec = pytree.tree_flatten_with_path((tuple(args), reorder_kwargs(kwargs, in_spec)))
        except Exception as exc:
            return message_line(exc, 300)
        if spec != in_spec:
            return "the call's arguments are structured unlike the exported example's"
        for (path, value), example in zip(flat, examples):
            if isinstance(value, torch.Tensor) and isinstance(example, torch.Tensor):
                if value.dtype != example.dtype or value.device.type != example.device.type:
                    return (f"{pytree.keystr(path)} is {value.dtype} on {value.device}, exported for "
                            f"{example.dtype} on {example.device}")
        try:
            check_constraints(flat)
            if guards is not None:
                guards(*(value for _, value in flat))
        except Exception as exc:
            return message_line(exc, 300)
        return None

    return check
# --- compile-cache bundles ---------------------------------------------------------------------


def _cache_api(name: str) -> Callable[..., Any]:
    function = getattr(torch.compiler, name, None)
    if function is None:  # pragma: no cover - torch < 2.7
        from .errors import CompileOptionsError

        raise CompileOptionsError(
            f"torch {torch_version()} has no torch.compiler.{name}; compile-cache bundles need torch >= 2.7"
        )
    return function


def _artifact_counts(info: Any) -> dict[str, int]:
    artifacts = getattr(info, "artifacts", None) or {}
    return {str(kind): len(keys) for kind, keys in sorted(artifacts.items()) if keys}


def save_compile_cache() -> tuple[bytes, dict[str, int]] | None:
    """Every compile-cache artifact this process created (inductor graphs, AOTAutograd entries,
    autotuning, PGO...) as bytes, with a count per kind; None when nothing was recorded (a
    backend without caches, or caches disabled)."""
    saved = _cache_api("save_cache_artifacts")()
    if saved is None:
        return None
    data, info = saved
    return bytes(data), _artifact_counts(info)


def load_compile_cache(data: bytes) -> dict[str, int] | None:
    """Write the artifacts of :func:`save_compile_cache` into this process's cache folders
    (``TORCHINDUCTOR_CACHE_DIR``...); the count per kind, or None when torch cannot read them."""
    info = _cache_api("load_cache_artifacts")(data)
    return None if info is None else _artifact_counts(info)


CACHE_COUNTERS = {
    "fxgraph_hits": ("inductor", "fxgraph_cache_hit"),
    "fxgraph_misses": ("inductor", "fxgraph_cache_miss"),
    "aot_autograd_hits": ("aot_autograd", "autograd_cache_hit"),
    "aot_autograd_misses": ("aot_autograd", "autograd_cache_miss"),
}


def compile_cache_counters() -> dict[str, int]:
    """Inductor FX-graph and AOTAutograd cache hits and misses so far in this process: a graph
    compiled from a cache is a hit, one generated from scratch a miss."""
    counters = torch._dynamo.utils.counters
    return {name: int(counters[group][key]) for name, (group, key) in CACHE_COUNTERS.items()}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    return repr(value)


def compiled_settings(compiled: Any) -> dict[str, Any] | None:
    """``{"backend", "dynamic", "options"}`` of a ``torch.compile``d module, as far as torch
    exposes them (``options``: inductor's config changes from ``mode=``/``options=``); None
    for a compiled function or an object torch does not describe."""
    context = getattr(compiled, "dynamo_ctx", None)
    backend = getattr(context, "callback", None)
    for _ in range(16):  # unwrap convert_frame's wrappers down to torch.compile's own object
        inner = getattr(backend, "_torchdynamo_orig_backend", None)
        if inner is None:
            break
        backend = inner
    name = getattr(backend, "compiler_name", None)
    if not isinstance(name, str):
        return None
    options = getattr(backend, "config", None)
    if options is None:
        options = getattr(backend, "kwargs", {})
    return {"backend": name, "dynamic": getattr(backend, "dynamic", None), "options": _plain(options)}


def cache_device_name(device: Any) -> str:
    """What a compile cache depends on of a device: the GPU's name, or the CPU architecture
    (:func:`device_name` is the accelerator's name alone, None on the CPU)."""
    target = torch.device(device)
    if target.type == "cuda":
        return str(torch.cuda.get_device_name(target))
    import platform

    return f"{target.type} ({platform.machine() or 'unknown'})"


# --- torch.export ------------------------------------------------------------------------------


def is_constraint_violation(exc: BaseException) -> bool:
    """Whether torch.export rejected the Dims and said how to fix them: a
    ``torch._dynamo.exc.UserError`` (torch 2.1 - 2.14) whose message lists ``Suggested fixes:``
    (``ShapeEnv``'s ``prettify_results``, torch 2.3+)."""
    from torch._dynamo.exc import UserError

    return isinstance(exc, UserError) and "Suggested fixes:" in str(exc)
