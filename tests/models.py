"""Small models for the integration tests, each built to trigger one kind of guard failure."""

from __future__ import annotations

import itertools

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


class CountsCalls(torch.nn.Module):
    """A buffer reassigned on every call (a call counter, as running statistics are kept): under
    inference mode the new buffer is an inference tensor, whose dispatch keys the first graph's
    guards do not accept, so the second call compiles again; under no_grad it never does."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls = self.calls + 1
        return self.linear(x)


class CacheDecoder(torch.nn.Module):
    """One step of a decoder: the new tokens are embedded and appended to the cache it is given,
    the way generate() hands a KV cache back to the forward at every step."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(32, 4)

    def forward(self, ids, cache):
        cache = torch.cat([cache, self.embed(ids)], dim=1)
        return cache.sum(dim=1), cache


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


class RaisesOnLargeBatches(torch.nn.Module):
    """A model that refuses batches over 4 (a validation a service keeps in its forward): those
    requests raise as recorded, the others are served."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x):
        if x.shape[0] > 4:
            raise ValueError(f"batch {x.shape[0]} is over 4")
        return self.linear(x).relu()


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


# torch before 2.13 has no fake (meta) kernel for the encoder layer's fast path,
# aten._transformer_encoder_layer_fwd (2.13 adds one to torch/_meta_registrations.py; read in 2.11.0,
# 2.12.1 and 2.13.0): Dynamo then runs the real kernel on static shapes but cannot under dynamic
# ones, so the first dynamic graph breaks there ("Operator does not support running with fake
# tensors"), or raises under fullgraph=True, in inference mode where the fast path is taken.
LAYER_FAST_PATH_TRACES = torch._C._dispatch_has_kernel_for_dispatch_key("aten::_transformer_encoder_layer_fwd", "Meta")


def _relu(x):
    """ReLU through a function of its own: not ``F.relu``, so the encoder layer's fast path is off."""
    return torch.nn.functional.relu(x)


class TextClassifier(torch.nn.Module):
    """Embedding, a 2-layer ``nn.TransformerEncoder`` with a key padding mask, mean pool, a linear
    head; an optional temperature. The tests that use it are about guardscope's analysis, not the
    encoder's fast path: where torch cannot trace that fast path under dynamic shapes (before
    2.13, :data:`LAYER_FAST_PATH_TRACES`) the layers take the slow path (the same ReLU, numbers
    and sizes), so the model compiles the same graphs on every torch of the range."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(100, 16)
        if LAYER_FAST_PATH_TRACES:
            layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, 2)
        else:
            layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, activation=_relu)
            self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(16, 3)
        self.eval()

    def forward(self, token_ids, padding_mask, temperature=None):
        h = self.encoder(self.embed(token_ids), src_key_padding_mask=padding_mask)
        out = self.head(h.mean(dim=1))
        return out if temperature is None else out / temperature



class NormalisedCNN(torch.nn.Module):
    """An image model behind an input-normalisation front, as timm's are served: ``forward(images)``
    takes NCHW or HWC-permuted (NHWC) images, uint8 (scaled to [0, 1]) or floating point, and
    normalises them by the ImageNet mean and std; five stride-2 conv-bn-relu blocks (a stride of
    32: guards on ``1 + (size - 1) // 32``), a feature-pyramid merge of the last two levels (the
    stride-32 map upsampled onto the stride-16 one: torch.export derives the sizes as
    ``32 * n``), a global average pool and a linear head."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        channels = [3, 8, 16, 16, 32, 32]
        self.stages = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Conv2d(inner, outer, 3, stride=2, padding=1), torch.nn.BatchNorm2d(outer),
                                torch.nn.ReLU())
            for inner, outer in itertools.pairwise(channels)
        )
        self.head = torch.nn.Linear(channels[-1], classes)
        self.eval()

    def forward(self, images):
        if images.shape[-1] == 3 and images.shape[1] != 3:  # HWC-permuted
            images = images.permute(0, 3, 1, 2)
        images = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
        x = (images - self.mean) / self.std
        levels = []
        for stage in self.stages:
            x = stage(x)
            levels.append(x)
        merged = levels[-2] + torch.nn.functional.interpolate(levels[-1], scale_factor=2.0, mode="nearest")
        return self.head(merged.mean((2, 3)))


class SizeDivisibleCNN(NormalisedCNN):
    """NormalisedCNN that takes images of any side, as detection and segmentation models do
    (detectron2's ``size_divisibility``, mmdet's ``size_divisor``): after the normalisation it
    zero-pads the bottom and right sides to a multiple of 32 itself when one is not. The ``if``
    guards on ``size % 32``: sides that are multiples of 32 and sides that are not take different
    graphs. Padding the raw images to a multiple of 32 before the call merges them, but changes the
    answers: the pad value 0 is normalised to ``-mean / std``, where the model's own pad is 0."""

    def forward(self, images):
        if images.shape[-1] == 3 and images.shape[1] != 3:  # HWC-permuted
            images = images.permute(0, 3, 1, 2)
        images = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
        x = (images - self.mean) / self.std
        height, width = x.shape[-2:]
        if height % 32 or width % 32:
            x = torch.nn.functional.pad(x, (0, (-width) % 32, 0, (-height) % 32))
        levels = []
        for stage in self.stages:
            x = stage(x)
            levels.append(x)
        merged = levels[-2] + torch.nn.functional.interpolate(levels[-1], scale_factor=2.0, mode="nearest")
        return self.head(merged.mean((2, 3)))


class TokenTagger(torch.nn.Module):
    """A tiny per-token classifier, trained as a language model's head is: an embedding, a
    two-layer MLP, logits for every token of a ``(batch, length)`` batch of token ids."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(50, 16)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 50))

    def forward(self, tokens):
        return self.mlp(self.embed(tokens))
