"""A code object's compiled graphs: Dynamo's cache entries, their guards evaluated on frame
locals, the order Dynamo tries them in, and the module or function a compiled wrapper stands for.

* ``torch._dynamo.eval_frame._debug_get_cache_entry_list``: the cache entries of a code object,
  each with its ``compile_id`` and ``guard_manager``; ``guard_manager.check(f_locals)`` evaluates
  an entry's guards without running anything (about 5-15 us).
* ``OptimizedModule._orig_mod`` and ``_torchdynamo_orig_callable``: what ``torch.compile`` wrapped.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..model import compile_order


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
