"""Autograd's mode around a call: which one a thread is in, and a block in a given one.

Dynamo guards on the grad mode (``GLOBAL_STATE``) and on each tensor's dispatch keys: a graph
compiled under ``torch.no_grad()`` does not serve a call under ``torch.inference_mode()`` (and
tensors created under inference mode are "inference tensors", with other dispatch keys). So a
replay must run under production's mode, which a recorder reads on the serving thread.

Public torch only: ``torch.is_inference_mode_enabled``, ``torch.is_grad_enabled`` and the three
context managers.
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
