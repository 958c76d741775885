"""Models nobody here wrote, as users compile them: tiny random-init configs of Hugging Face
transformers and PyTorch Geometric models, a vision CNN with mixed layouts and dtypes, and a model
with a data-dependent branch — each with a generator of a realistic request mix.

Nothing is downloaded: configs are built here, weights are random (seeded). Each model is a
zero-argument factory, so a corpus names it as ``tests/real_models.py:gpt2``. Each request
generator ``<name>_requests(count, seed)`` returns ``[(args, kwargs), ...]``.

The request mixes follow what serving sees: batch sizes 1..8, sequence lengths 1..500 with a
long tail, graph batches holding one graph or several and sometimes no edges, images in
channels-last, uint8 or half, optional arguments present or absent.
"""

from __future__ import annotations

import random

import torch

VOCAB = 1000


def _quiet_transformers() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()


# --- Hugging Face: a decoder and an encoder, called directly ------------------------------------


def gpt2() -> torch.nn.Module:
    """GPT2LMHeadModel, 2 layers, hidden 64: forward is wrapped by transformers' decorators, so
    Dynamo's frame is ``wrapper(self, *args, **kwargs)``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    _quiet_transformers()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=512,
                        bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config).eval()


def bert() -> torch.nn.Module:
    """BertModel, 2 layers, hidden 64."""
    from transformers import BertConfig, BertModel

    _quiet_transformers()
    torch.manual_seed(0)
    config = BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                        vocab_size=VOCAB, max_position_embeddings=512)
    return BertModel(config).eval()


def _length(rng: random.Random, longest: int = 500) -> int:
    """Sequence lengths 1..longest, most of them short (a long tail)."""
    if rng.random() < 0.06:
        return 1
    return min(longest, max(2, int(rng.paretovariate(1.2) * 12)))


def _padded_batch(rng: random.Random) -> tuple[torch.Tensor, torch.Tensor]:
    batch = rng.choice([1, 1, 2, 4, 8])
    length = _length(rng)
    generator = torch.Generator().manual_seed(rng.randrange(1 << 30))
    ids = torch.randint(0, VOCAB, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    for row in range(1, batch):  # left rows full, later rows padded at the end
        mask[row, rng.randint(1, length):] = 0
    return ids, mask


def gpt2_requests(count: int, seed: int = 0) -> list[tuple[tuple, dict]]:
    rng = random.Random(seed)
    calls = []
    for _ in range(count):
        ids, mask = _padded_batch(rng)
        calls.append(((), {"input_ids": ids, "attention_mask": mask}))
    return calls


def bert_requests(count: int, seed: int = 0) -> list[tuple[tuple, dict]]:
    """Optional arguments as clients send them: the mask and token types present or absent."""
    rng = random.Random(seed)
    calls = []
    for _ in range(count):
        ids, mask = _padded_batch(rng)
        kwargs: dict = {"input_ids": ids}
        if rng.random() < 0.8:
            kwargs["attention_mask"] = mask
        if rng.random() < 0.3:
            kwargs["token_type_ids"] = torch.zeros_like(ids)
        calls.append(((), kwargs))
    return calls


# --- PyTorch Geometric: GCNConv x2 + global_mean_pool -------------------------------------------


class GraphClassifier(torch.nn.Module):
    """Two GCN layers and a mean pool per graph. PyG's scatter does ``int(index.max())``: a graph
    break, so the model compiles to several frames."""

    def __init__(self, features: int = 8, hidden: int = 16, classes: int = 3) -> None:
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.conv1 = GCNConv(features, hidden)
        self.conv2 = GCNConv(hidden, hidden)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x, edge_index, batch):
        from torch_geometric.nn import global_mean_pool

        h = self.conv1(x, edge_index).relu()
        h = self.conv2(h, edge_index).relu()
        return self.head(global_mean_pool(h, batch))


def gcn() -> torch.nn.Module:
    torch.manual_seed(0)
    return GraphClassifier().eval()


def gcn_requests(count: int, seed: int = 0, features: int = 8) -> list[tuple[tuple, dict]]:
    """Batches of 1..8 graphs of 2..30 nodes; some batches hold one graph, some no edges."""
    rng = random.Random(seed)
    calls = []
    for _ in range(count):
        graphs = 1 if rng.random() < 0.2 else rng.randint(2, 8)
        sizes = [rng.randint(2, 30) for _ in range(graphs)]
        nodes = sum(sizes)
        generator = torch.Generator().manual_seed(rng.randrange(1 << 30))
        x = torch.randn(nodes, features, generator=generator)
        batch = torch.repeat_interleave(torch.arange(graphs), torch.tensor(sizes))
        edges = []
        if rng.random() >= 0.1:  # one batch in ten has no edges at all
            start = 0
            for size in sizes:
                count_edges = rng.randint(1, 3 * size)
                src = torch.randint(start, start + size, (count_edges,), generator=generator)
                dst = torch.randint(start, start + size, (count_edges,), generator=generator)
                edges.append(torch.stack([src, dst]))
                start += size
        edge_index = torch.cat(edges, dim=1) if edges else torch.empty(2, 0, dtype=torch.long)
        calls.append(((x, edge_index, batch), {}))
    return calls


# --- Vision: a small CNN, written here (torchvision's wheels do not load with the CPU torch) ----


class SmallCNN(torch.nn.Module):
    """conv-bn-relu x3, global average pool, linear. Accepts float32, half and uint8 images in
    either memory layout; uint8 pixels are scaled to [0, 1]."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        layers = []
        channels = [3, 8, 16, 16]
        for inner, outer in zip(channels, channels[1:]):
            layers += [torch.nn.Conv2d(inner, outer, 3, stride=2, padding=1), torch.nn.BatchNorm2d(outer),
                       torch.nn.ReLU()]
        self.features = torch.nn.Sequential(*layers)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.head = torch.nn.Linear(channels[-1], classes)

    def forward(self, images):
        if images.dtype == torch.uint8:
            images = images.float() / 255.0
        else:
            images = images.float()
        return self.head(self.pool(self.features(images)).flatten(1))


def cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    return SmallCNN().eval()


def cnn_requests(count: int, seed: int = 0) -> list[tuple[tuple, dict]]:
    """Batches 1..8 of 32..200-pixel images; a quarter channels-last, some uint8, some half."""
    rng = random.Random(seed)
    calls = []
    for _ in range(count):
        batch = rng.choice([1, 2, 4, 8])
        side = rng.choice([32, 64, 64, 96, 128, 200]) if rng.random() < 0.7 else rng.randint(32, 200)
        height, width = side, side if rng.random() < 0.7 else rng.randint(32, 200)
        generator = torch.Generator().manual_seed(rng.randrange(1 << 30))
        kind = rng.random()
        if kind < 0.15:
            images = torch.randint(0, 256, (batch, 3, height, width), dtype=torch.uint8, generator=generator)
        elif kind < 0.25:
            images = torch.rand(batch, 3, height, width, generator=generator).half()
        else:
            images = torch.rand(batch, 3, height, width, generator=generator)
        if rng.random() < 0.25:
            images = images.contiguous(memory_format=torch.channels_last)
        calls.append(((images,), {}))
    return calls


# --- A data-dependent branch and optional arguments ---------------------------------------------


class Gated(torch.nn.Module):
    """``.item()`` on an activation decides a branch (a graph break: the rest of forward is a
    frame of its own), an optional mask may be None, and an optional list of extra features may
    be empty."""

    def __init__(self, features: int = 16) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(features, features)
        self.outer = torch.nn.Linear(features, features)

    def forward(self, x, mask=None, extras=()):
        h = self.inner(x).tanh()
        if mask is not None:
            h = h * mask.unsqueeze(-1)
        for extra in extras:
            h = h + extra
        if h.abs().mean().item() > 0.45:
            h = h * 0.5
        return self.outer(h)


def gated() -> torch.nn.Module:
    torch.manual_seed(0)
    return Gated().eval()


def gated_requests(count: int, seed: int = 0, features: int = 16) -> list[tuple[tuple, dict]]:
    rng = random.Random(seed)
    calls = []
    for _ in range(count):
        rows = 1 if rng.random() < 0.1 else rng.randint(2, 64)
        generator = torch.Generator().manual_seed(rng.randrange(1 << 30))
        scale = rng.choice([0.5, 1.0, 3.0])
        x = torch.randn(rows, features, generator=generator) * scale
        kwargs: dict = {}
        if rng.random() < 0.5:
            kwargs["mask"] = (torch.rand(rows, generator=generator) > 0.2).float()
        if rng.random() < 0.4:
            kwargs["extras"] = [torch.randn(rows, features, generator=generator) for _ in range(rng.randint(0, 2))]
        calls.append(((x,), kwargs))
    return calls


MODELS = {
    "gpt2": (gpt2, gpt2_requests),
    "bert": (bert, bert_requests),
    "gcn": (gcn, gcn_requests),
    "cnn": (cnn, cnn_requests),
    "gated": (gated, gated_requests),
}


def write_corpus(name: str, directory: str, count: int, dynamic: bool | None = None, seed: int = 1) -> str:
    """Record ``count`` requests of model ``name`` into a guardscope corpus at ``directory``."""
    import os

    from guardscope import CorpusWriter

    _, requests = MODELS[name]
    spec = f"{os.path.abspath(__file__)}:{name}"
    with CorpusWriter(directory, model=spec, compile={"dynamic": dynamic}, overwrite=True) as writer:
        for args, kwargs in requests(count, seed=seed):
            writer.add(*args, **kwargs)
    return directory


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.real_models",
                                     description="Record a corpus of one of these models' request mixes.")
    parser.add_argument("name", choices=sorted(MODELS))
    parser.add_argument("directory")
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--dynamic", choices=["none", "true", "false"], default="none")
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args()
    print(write_corpus(options.name, options.directory, options.count,
                       {"none": None, "true": True, "false": False}[options.dynamic], options.seed))
