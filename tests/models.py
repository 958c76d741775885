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


class RaisesOnThreeRows(torch.nn.Module):
    """Raises on a 3-row input: Dynamo traces the raise when it compiles for one, the compile fails,
    and Dynamo skips the forward for good (every later call runs eagerly)."""

    def forward(self, x):
        if x.shape[0] == 3:
            raise ValueError("three rows")
        return x.sin() * 2


@torch._dynamo.disable
def _crash_on_large(x):
    if x.numel() > 3:
        import ctypes

        ctypes.string_at(0)  # reads address 0: SIGSEGV


class Segfaults(torch.nn.Module):
    """Dies of SIGSEGV on an input of more than 3 elements, as a crashing compiler backend would
    (the crash sits in an eager-only helper, so it does not depend on how Dynamo traces it)."""

    def forward(self, x):
        _crash_on_large(x)
        return x.sin()


class MaskedRows(torch.nn.Module):
    """An optional mask with one entry per row of ``x`` (and optional extra rows of ``x``'s
    shape): inputs whose counts of rows differ raise, as a real model's would."""

    def forward(self, x, mask=None, extras=()):
        if mask is not None:
            x = torch.cat([x, mask.unsqueeze(-1)], dim=1)[:, :-1]
        for extra in extras:
            x = torch.cat([x, extra], dim=1)
        return x.sum(0)


class DataBranch(torch.nn.Module):
    """A branch on tensor data (``.item()``): a graph break, so the frame after it sees a value
    computed from the data."""

    def forward(self, x):
        y = x.sin()
        if y.sum().item() > 0:
            return y * 2
        return y - 1


class TextClassifier(torch.nn.Module):
    """Embedding, a 2-layer ``nn.TransformerEncoder`` with a key padding mask, mean pool, a linear
    head; an optional temperature. Under ``fullgraph=False`` its encoder's fast path breaks the
    graph."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(100, 16)
        layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2)
        self.head = torch.nn.Linear(16, 3)
        self.eval()

    def forward(self, token_ids, padding_mask, temperature=None):
        h = self.encoder(self.embed(token_ids), src_key_padding_mask=padding_mask)
        out = self.head(h.mean(dim=1))
        return out if temperature is None else out / temperature
