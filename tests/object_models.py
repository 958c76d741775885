"""Models called with objects, as their users call them: a decoder's ``generate()`` (its compiled
forward receives a ``DynamicCache`` or ``StaticCache``), a PyG model called as ``model(batch)`` with
a ``torch_geometric.data.Batch``, and a model taking a named tuple and a class of the user's own
registered with ``guardscope.register_type``.

Nothing is downloaded: tiny configs, random weights. Factories return what production compiles:
``gpt2_forward`` / ``llama_forward`` return the model's bound ``forward`` (users compile
``model.forward`` for ``generate()``), the others a module.

:func:`record_generation` runs ``generate()`` over prompts with the compiled forward wrapped by a
recorder, and reports which calls compiled, as plain ``torch.compile`` did it.
"""

from __future__ import annotations

import collections
import functools
import random
from typing import Any

import torch

import guardscope
from guardscope import torch_compat

VOCAB = 100


def _quiet() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()


def gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    _quiet()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=1024,
                        bos_token_id=0, eos_token_id=1, pad_token_id=0)
    return GPT2LMHeadModel(config).eval()


def llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    _quiet()
    torch.manual_seed(0)
    config = LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                         num_key_value_heads=1, vocab_size=VOCAB, max_position_embeddings=1024,
                         bos_token_id=0, eos_token_id=1, pad_token_id=0)
    return LlamaForCausalLM(config).eval()


def gpt2_forward() -> Any:
    return gpt2().forward


def llama_forward() -> Any:
    return llama().forward


def prompts(count: int, seed: int = 0, longest: int = 512, max_batch: int = 8,
            max_new: int = 64) -> list[tuple[torch.Tensor, int]]:
    """``(input_ids, new_tokens)`` requests: batches 1..max_batch, long-tailed prompt lengths
    1..longest, 1..max_new new tokens."""
    rng = random.Random(seed)
    requests = []
    for _ in range(count):
        batch = rng.choice([1, 1, 2, 4, max_batch])
        length = 1 if rng.random() < 0.1 else min(longest, max(2, int(rng.paretovariate(1.2) * 8)))
        new = rng.choice([1, 2, 3, max_new])
        generator = torch.Generator().manual_seed(rng.randrange(1 << 30))
        requests.append((torch.randint(2, VOCAB, (batch, length), generator=generator), new))
    return requests


def generate_all(model: torch.nn.Module, requests: list[tuple[torch.Tensor, int]], cache: str = "dynamic",
                 **options: Any) -> None:
    """Run ``model.generate`` (greedy, exactly ``new`` tokens) over ``requests``; ``options`` go to
    every call (a ``compile_config``)."""
    extra = {"cache_implementation": "static", **options} if cache == "static" else dict(options)
    with torch.no_grad():
        for ids, new in requests:
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                           do_sample=False, **extra)


def record_generation(directory: str, factory: str, requests: list[tuple[torch.Tensor, int]],
                      dynamic: bool | None = None, cache: str = "dynamic", **writer_options: Any) -> list[int]:
    """Record every forward call ``generate()`` makes into a corpus, through the compiled forward,
    as production runs it; returns the indices of the calls that compiled (in any frame)."""
    model = {"gpt2_forward": gpt2, "llama_forward": llama}[factory]()
    compiled = torch.compile(model.forward, backend="eager", dynamic=dynamic)
    compiling: list[int] = []
    spec = f"{__file__}:{factory}"
    with torch_compat.raised_recompile_limit(4096), CompileCounter() as counter, \
            guardscope.CorpusWriter(directory, model=spec, compile={"dynamic": dynamic}, overwrite=True,
                                    **writer_options) as writer:
        @functools.wraps(compiled)  # generate() reads forward's signature to choose what it passes
        def forward(*args: Any, **kwargs: Any) -> Any:
            index = writer.add(*args, **kwargs)
            before = counter.count
            result = compiled(*args, **kwargs)
            if counter.count != before:
                compiling.append(index)
            return result

        model.forward = forward
        generate_all(model, requests, cache)
    return compiling


class CompileCounter:
    """Counts Dynamo's compiles (every frame) through its compile-start callback."""

    def __init__(self) -> None:
        self.count = 0

    def _started(self, _: Any) -> None:
        self.count += 1

    def __enter__(self) -> CompileCounter:
        from torch._dynamo.callback import callback_handler

        callback_handler.register_start_callback(self._started)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        from torch._dynamo.callback import callback_handler

        callback_handler.remove_start_callback(self._started)


# --- PyG: model(batch) --------------------------------------------------------------------------


class BatchClassifier(torch.nn.Module):
    """Two GCN layers and a mean pool, called as PyG users call it: ``model(batch)``."""

    def __init__(self, features: int = 8, hidden: int = 16, classes: int = 3) -> None:
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.conv1 = GCNConv(features, hidden)
        self.conv2 = GCNConv(hidden, hidden)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, data):
        from torch_geometric.nn import global_mean_pool

        h = self.conv1(data.x, data.edge_index).relu()
        h = self.conv2(h, data.edge_index).relu()
        return self.head(global_mean_pool(h, data.batch, size=data.num_graphs))


def pyg_batches() -> torch.nn.Module:
    torch.manual_seed(0)
    return BatchClassifier().eval()


def pyg_batch_requests(count: int, seed: int = 0, features: int = 8) -> list[tuple[tuple, dict]]:
    """``Batch`` es of 1..16 graphs of 1..20 nodes; single-node graphs and edge-less ones among
    them."""
    from torch_geometric.data import Batch, Data

    rng = random.Random(seed)
    calls = []
    for _ in range(count):
        graphs = 1 if rng.random() < 0.2 else rng.randint(2, 16)
        generator = torch.Generator().manual_seed(rng.randrange(1 << 30))
        items = []
        for _ in range(graphs):
            nodes = 1 if rng.random() < 0.15 else rng.randint(2, 20)
            edges = 0 if rng.random() < 0.15 else rng.randint(1, 3 * nodes)
            items.append(Data(x=torch.randn(nodes, features, generator=generator),
                              edge_index=torch.randint(0, nodes, (2, edges), generator=generator)))
        calls.append(((Batch.from_data_list(items),), {}))
    return calls


# --- a named tuple and a class of the user's own ------------------------------------------------

Features = collections.namedtuple("Features", ["values", "weights"])


class Request:
    """A user's own input class: a token tensor, an optional mask and a temperature."""

    def __init__(self, tokens: torch.Tensor, mask: torch.Tensor | None, temperature: float) -> None:
        self.tokens, self.mask, self.temperature = tokens, mask, temperature


guardscope.register_type(Request)


class ObjectModel(torch.nn.Module):
    def __init__(self, features: int = 8) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, features)
        self.mix = torch.nn.Linear(features, features)

    def forward(self, request: Request, extra: Features):
        h = self.embed(request.tokens)
        if request.mask is not None:
            h = h * request.mask.unsqueeze(-1)
        h = self.mix(h).mean(dim=1) / request.temperature
        return h + (extra.values * extra.weights).sum(dim=-1, keepdim=True)


def objects() -> torch.nn.Module:
    torch.manual_seed(0)
    return ObjectModel().eval()


def object_requests(count: int, seed: int = 0) -> list[tuple[tuple, dict]]:
    rng = random.Random(seed)
    calls = []
    for _ in range(count):
        batch, length = rng.choice([1, 2, 4]), rng.choice([1, 5, 9, 30])
        generator = torch.Generator().manual_seed(rng.randrange(1 << 30))
        tokens = torch.randint(0, 50, (batch, length), generator=generator)
        mask = torch.ones(batch, length) if rng.random() < 0.5 else None
        extra = Features(torch.randn(batch, rng.choice([3, 4])), torch.ones(1))
        calls.append(((Request(tokens, mask, rng.choice([0.5, 1.0])), extra), {}))
    return calls
