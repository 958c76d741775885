"""A training loop recorded, analysed and warmed up (docs/training.md): the recorder reads the
grad mode ("grad") on the training thread, the analysis replays under it, and after the generated
warmup a fresh training loop (AdamW, new batch shapes) compiles no forward graph.

Compiles are counted with AOTAutograd's own compiler hooks (``aot_autograd(fw_compiler=,
bw_compiler=)``, the path inductor takes without its code generation): a forward compiler call
per forward graph and a backward compiler call per backward graph, whenever AOTAutograd compiles
it — with the forward when the backward saves sizes of a dynamic graph, else lazily on the first
``.backward()`` through that graph (torch 2.13, ``_aot_stage2b_bw_compile``)."""

from __future__ import annotations

import json

import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

import guardscope
from guardscope import pipeline
from guardscope.proving.isolation import import_file
from guardscope.runtime import TrafficRecorder

from ..conftest import read_catalog
from ..models import TokenTagger
from ..paths import model_spec

# (batch, length) of each recorded step: padding-free batches of varying length, one of a single token.
RECORDED = ((4, 7), (4, 9), (2, 5), (4, 12), (3, 1), (4, 6), (1, 8), (4, 3))
# 40 steps the recording never saw, in shapes its topologies cover.
NEW = tuple((2 + step % 3, 1 if step % 7 == 0 else 2 + (step * 5) % 23) for step in range(40))


class CountingBackend:
    """A torch.compile backend through AOTAutograd that counts its forward and backward compiles."""

    def __init__(self) -> None:
        self.forward = self.backward = 0
        self.backend = aot_autograd(fw_compiler=self._forward, bw_compiler=self._backward)

    def _forward(self, gm, example_inputs):
        self.forward += 1
        return make_boxed_func(gm.forward)

    def _backward(self, gm, example_inputs):
        self.backward += 1
        return make_boxed_func(gm.forward)

    def counts(self) -> tuple[int, int]:
        return self.forward, self.backward


def train(module, forward, steps, seed: int) -> None:
    """AdamW steps on ``module``'s parameters, on random token batches of the given shapes, each
    step one call of ``forward`` (the module, compiled or recorded), a loss and ``.backward()``."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3)
    for batch, length in steps:
        tokens = torch.randint(0, 50, (batch, length), generator=generator)
        targets = torch.randint(0, 50, (batch, length), generator=generator)
        loss = torch.nn.functional.cross_entropy(forward(tokens).reshape(-1, 50), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def compiled_training(steps, warmup=None, dynamic=None, **options) -> tuple[tuple[int, int], tuple[int, int]]:
    """A fresh model compiled as production compiles it, warmed up with ``warmup`` (and
    ``options``) when given, then trained on ``steps``: the (forward, backward) compiles of the
    warmup, then of the training. The warmup leaves every parameter's ``.grad`` as it was."""
    torch._dynamo.reset()
    counting = CountingBackend()
    model = TokenTagger()
    compiled = torch.compile(model, backend=counting.backend, dynamic=dynamic)
    if warmup is not None:
        warmup.warmup(compiled, **options)
        assert all(parameter.grad is None for parameter in model.parameters())
    warmed = counting.counts()
    train(model, compiled, steps, seed=1)
    torch._dynamo.reset()
    return warmed, (counting.forward - warmed[0], counting.backward - warmed[1])


def recorded_warmup(tmp_path, dynamic, steps=RECORDED):
    """A training loop over ``steps`` recorded by the traffic recorder (on the training thread: grad
    enabled), analysed, and its warmup module; with the analysis's catalog."""
    model = TokenTagger()
    traffic = TrafficRecorder(tmp_path / "traffic", model=model_spec("TokenTagger"), compile={"dynamic": dynamic})
    train(model, traffic.wrap(model), steps, seed=0)
    traffic.close()
    assert json.loads((tmp_path / "traffic" / "corpus.json").read_text())["grad_mode"] == "grad"
    catalog = read_catalog(guardscope.analyze(tmp_path / "traffic", tmp_path / "out").out_dir)
    assert catalog["compile"]["grad_mode"] == "grad"
    pipeline.emit_warmup(tmp_path / "out")
    warmup = import_file(tmp_path / "out" / "warmup.py")
    assert warmup.GRAD_MODE == "grad"
    return warmup, catalog


def test_a_recorded_training_loop_is_analysed_under_grad_and_its_warmup_leaves_training_nothing_to_compile(tmp_path):
    warmup, catalog = recorded_warmup(tmp_path, dynamic=None)
    plain = compiled_training(NEW)
    warmed, training = compiled_training(NEW, warmup)
    print(f"graphs {catalog['summary']['compiles']}; plain compile: training compiles {plain[1]} "
          f"(forward, backward); warmup compiles {warmed}, then training {training}")
    assert plain[1][0] > 0  # without the warmup, training compiles forward graphs
    # The static first graph's backward is left to its first .backward(), which never comes: the
    # dynamic graphs compiled after it accept its calls first (Dynamo tries the latest used first).
    assert warmed == (warmup.GRAPHS, warmup.GRAPHS - 1)
    assert training == (0, 0)


def test_static_graphs_compile_their_backward_on_the_first_training_step_unless_the_warmup_backpropagates(tmp_path):
    """dynamic=False: no graph's backward needs a size, so AOTAutograd compiles each one lazily; a
    second epoch over the recorded shapes compiles every backward after a forward-only warmup, and
    none after warmup(backward=True)."""
    epoch = RECORDED[:4]
    warmup, _ = recorded_warmup(tmp_path, dynamic=False, steps=epoch)
    assert warmup.GRAPHS == len(set(epoch))
    forward_only = compiled_training(epoch, warmup, dynamic=False)
    backpropagated = compiled_training(epoch, warmup, dynamic=False, backward=True)
    print(f"forward-only warmup {forward_only}; warmup(backward=True) {backpropagated}")
    assert forward_only == ((warmup.GRAPHS, 0), (0, warmup.GRAPHS))
    assert backpropagated == ((warmup.GRAPHS, warmup.GRAPHS), (0, 0))
