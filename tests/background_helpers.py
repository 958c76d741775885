"""Shared by the background-compile tests: which threads compile, eager outputs, and serving on
after a background compile failed."""

from __future__ import annotations

import threading

import torch

from guardscope import torch_compat


class CompileThreads:
    """The thread of every Dynamo compile started while it is on (Dynamo's compile-start callback)."""

    def __init__(self):
        self.threads: list[int] = []

    def __enter__(self):
        self._block = torch_compat.compile_start_callback(lambda _: self.threads.append(threading.get_ident()))
        self._block.__enter__()
        return self

    def __exit__(self, *exc_info):
        self._block.__exit__(*exc_info)


def eager(model, x):
    with torch.inference_mode():
        return model(x)


def serve_after_a_failed_compile(served, model, rounds: int) -> None:
    """A 3×4 matrix (the topology whose background compile failed) and a 5-vector (the plan's
    graph), ``rounds`` times each: both give eager's outputs."""
    for _ in range(rounds):
        x = torch.randn(3, 4)
        assert torch.equal(served(x), eager(model, x))  # eager, and not compiled again
        y = torch.randn(5)
        assert torch.equal(served(y), eager(model, y))  # the plan's graph still serves
