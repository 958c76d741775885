"""Autograd's mode around a call: which one a thread is in, and a block in a given one.

Dynamo guards on the grad mode (``GLOBAL_STATE``) and on each tensor's dispatch keys: a graph
compiled under ``torch.no_grad()`` does not serve a call under ``torch.inference_mode()`` (and
tensors created under inference mode are "inference tensors", with other dispatch keys). So a
replay must run under production's mode, which a recorder reads on the serving thread.

Public torch only: ``torch.is_inference_mode_enabled``, ``torch.is_grad_enabled``, the three
context managers, and for :func:`backpropagate` ``torch.autograd.grad`` and the autograd graph's
``grad_fn.next_functions`` and ``AccumulateGrad.variable``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

from ..model import GRAD, GRAD_MODES, INFERENCE_MODE, NO_GRAD


def current_grad_mode() -> str:
    """The grad mode of this thread now (what a recorder reads where the call is served)."""
    if torch.is_inference_mode_enabled():
        return INFERENCE_MODE
    return GRAD if torch.is_grad_enabled() else NO_GRAD


def grad_context(mode: str) -> Any:
    """A block in ``mode`` (one of :data:`GRAD_MODES`), a context manager that can be entered
    again after each exit, as torch's own are (a replay enters one record after record);
    ValueError for another name."""
    if mode == INFERENCE_MODE:
        return torch.inference_mode()
    if mode == NO_GRAD:
        # Inference mode off as well: no_grad inside an inference-mode block is still inference mode.
        return _Block(lambda: torch.inference_mode(False), torch.no_grad)
    if mode == GRAD:
        return _Block(lambda: torch.inference_mode(False), torch.enable_grad)
    raise ValueError(f"grad mode {mode!r} is not one of {', '.join(GRAD_MODES)}")


def backpropagate(outputs: Any) -> bool:
    """Backpropagate through a call's ``outputs`` (tensors in tuples, lists and dicts), as a
    training step's ``.backward()`` would, so that each compiled graph they came through has its
    backward compiled now: AOTAutograd compiles a graph's backward with its forward only when the
    backward needs sizes of a dynamic graph, else lazily on the first backward through it (torch
    2.13, ``_aot_stage2b_bw_compile``). The gradient is the sum's, taken with
    ``torch.autograd.grad`` onto the leaves the outputs come from: no parameter's ``.grad`` changes
    and no hook on it runs. Whether anything needed gradients (False: nothing to run)."""
    tensors = [t for t in _tensors(outputs) if t.grad_fn is not None]
    leaves = _leaves(tensors)
    if not leaves:
        return False
    torch.autograd.grad(tensors, leaves, grad_outputs=[torch.ones_like(t) for t in tensors], allow_unused=True)
    return True


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def _leaves(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors gradients would accumulate into (each ``AccumulateGrad`` node's), found by
    walking the autograd graph back from ``tensors``."""
    leaves: dict[int, torch.Tensor] = {}
    seen: set[int] = set()
    todo = [t.grad_fn for t in tensors]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            leaves[id(variable)] = variable
        todo.extend(following for following, _ in node.next_functions)
    return list(leaves.values())


class _Block:
    """Fresh context managers from ``factories``, entered in order on each entry."""

    def __init__(self, *factories: Callable[[], Any]) -> None:
        self._factories = factories
        self._open: list[contextlib.ExitStack] = []

    def __enter__(self) -> None:
        stack = contextlib.ExitStack()
        for make in self._factories:
            stack.enter_context(make())
        self._open.append(stack)

    def __exit__(self, *exc_info: Any) -> bool | None:
        return self._open.pop().__exit__(*exc_info)
