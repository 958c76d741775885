"""When Dynamo may compile, or enter compiled code: the stances guardscope holds
(``fail_on_recompile`` for probes, ``eager_on_recompile`` for serving) and the process-wide FX
tracing flag under which Dynamo refuses compiled calls.

* ``torch.compiler.set_stance("eager_on_recompile")`` (public, torch 2.6+; 2.11 and 2.13 have
  it): the serving runtime's guarantee that a call runs eagerly rather than compiling. torch
  keeps the stance in one process-wide variable, so :func:`eager_on_recompile` shares it
  between threads.
* ``torch.fx._symbolic_trace.is_fx_symbolic_tracing`` / ``_is_fx_tracing_flag``: one process-wide
  flag; while another thread's compile traces, Dynamo refuses compiled calls on every thread
  (:func:`fx_symbolic_tracing`, :func:`refused_for_fx_trace`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from .versions import supports_eager_on_recompile


def fail_on_recompile() -> contextlib.AbstractContextManager[Any]:
    """``torch.compiler.set_stance("fail_on_recompile")`` (public, torch 2.6+): a call that would
    compile a graph in any frame raises instead, so nothing is compiled."""
    return torch.compiler.set_stance("fail_on_recompile")


# --- serving: recompiles fall back to eager ------------------------------------------------------


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
