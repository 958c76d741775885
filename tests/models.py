"""Small models for the integration tests, each built to trigger one kind of guard failure."""

from __future__ import annotations

import torch


class SizeBranch(torch.nn.Module):
    """A Python ``if`` on a tensor's size: a guard from the user's own shape logic."""

    def forward(self, x):
        if x.shape[0] > 16:
            return x * 2
        return x + 1


class ListSum(torch.nn.Module):
    """A list argument whose length changes between calls."""

    def forward(self, xs):
        return sum(t.sum() for t in xs)


class Elementwise(torch.nn.Module):
    """Elementwise work: dtype and layout changes recompile."""

    def forward(self, x):
        return x.sin() * 2


class Fails(torch.nn.Module):
    """Raises on negative inputs, to show a failing sample is recorded, not fatal."""

    def forward(self, x):
        if (x < 0).any():
            raise ValueError("negative input")
        return x.sum()


class Segfaults(torch.nn.Module):
    """Dies of SIGSEGV on its second call, as a crashing compiler backend would."""

    calls = 0

    def forward(self, x):
        Segfaults.calls += 1
        if Segfaults.calls > 1:
            import ctypes

            ctypes.string_at(0)  # reads address 0
        return x.sin()
