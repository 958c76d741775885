"""Compiles as they happen, in every frame: Dynamo's compile callbacks, its map from transformed to
original code, and the :class:`FrameRecorder` built on both, which tells the graph of each frame
a call runs through (the frames after graph breaks included).

* ``torch._dynamo.callback.callback_handler`` (torch 2.5+): compile start and end callbacks.
* ``torch._dynamo.utils.orig_code_map``: every code object Dynamo made, with the code it was
  compiled from.
* ``torch._C._dynamo.eval_frame.set_code_exec_strategy`` (torch 2.6+): a frame, and what it
  calls, that Dynamo must never compile.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any, Callable, Iterator

import torch

from .guards import cache_entries, entries_by_age, first_accepting


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
    return _callbacks_or_cause()[0]


def _callbacks_or_cause() -> tuple[Any, str | None]:
    """(``callback_handler``, None), or (None, the cause detected: the import failing, or the
    handler without ``register_start_callback``)."""
    try:
        from torch._dynamo.callback import callback_handler
    except ImportError as exc:  # pragma: no cover - torch < 2.5
        return None, f"torch {torch.__version__} has no torch._dynamo.callback.callback_handler ({exc})"
    if not callable(getattr(callback_handler, "register_start_callback", None)):
        return None, (f"torch {torch.__version__}'s torch._dynamo.callback.callback_handler has no "
                      "register_start_callback")  # pragma: no cover
    return callback_handler, None


@contextlib.contextmanager
def compile_start_callback(callback: Callable[[Any], None]) -> Iterator[None]:
    """``callback`` called as each Dynamo compile starts, in any frame, while the block runs
    (torch 2.5+'s compile callbacks; ``torch._dynamo.reset()`` inside the block would drop it)."""
    handler, cause = _callbacks_or_cause()
    if handler is None:  # pragma: no cover - torch < 2.5
        raise RuntimeError(f"{cause}: compiles cannot be counted")
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
