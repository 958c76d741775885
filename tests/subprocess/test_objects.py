"""The fixes on inputs that are objects: a decoder's generate() calls (KV caches), a PyG model
called with Batch objects, a model taking a registered class and a named tuple. emit-warmup writes
the plans, verify proves them in child processes, and for generate() a plain ``model.generate()``
on prompts the corpus never held compiles nothing once the plan is set up."""

from __future__ import annotations

import random

import pytest
import torch

import guardscope
from guardscope import pipeline, store
from guardscope.proving.generation import check_generate

from .. import object_models as om

pytestmark = pytest.mark.slow


def _held_out(seed: int, lengths: tuple[int, ...]) -> list[tuple[torch.Tensor, dict]]:
    """Prompts of the corpus's batch sizes and other lengths, 2..5 new tokens."""
    rng = random.Random(seed)
    requests = []
    for _ in range(5):
        batch, length, new = rng.choice([1, 2, 4]), rng.choice(lengths), rng.choice([2, 3, 5])
        ids = torch.randint(2, om.VOCAB, (batch, length), generator=torch.Generator().manual_seed(rng.randrange(99)))
        requests.append((ids, {"attention_mask": torch.ones_like(ids), "max_new_tokens": new,
                               "min_new_tokens": new, "do_sample": False}))
    return requests


def _recorded_prompts() -> list[tuple[torch.Tensor, int]]:
    requests = []
    for batch in (1, 2, 4):
        for length in (3, 17, 60):
            requests.append((torch.randint(2, om.VOCAB, (batch, length), generator=torch.Generator().manual_seed(length)),
                             5))
    return requests


@pytest.mark.parametrize(("factory", "dynamic", "cache"), [
    ("gpt2_forward", None, "dynamic"),
    ("llama_forward", None, "static"),
])
def test_generate_plans_pass_verify_and_a_plain_generate_on_new_prompts(tmp_path, factory, dynamic, cache):
    om.record_generation(str(tmp_path / "c"), factory, _recorded_prompts(), dynamic=dynamic, cache=cache)
    analysis = guardscope.analyze(tmp_path / "c", tmp_path / "out")
    pipeline.emit_warmup(analysis.out_dir)
    document = pipeline.verify(analysis.out_dir, artifacts=("warmup", "unbacked"), bundle=False, backend="eager")
    statuses = {r["name"]: r["status"] for r in document["artifacts"]}
    assert statuses["warmup"] == "passed" and statuses["unbacked"] in ("passed", "infeasible")
    # The cache's batch dim (1 in some calls) is marked through its path, or left out with why.
    fixes = store.read_document(analysis.out_dir, store.FIXES, required=True)
    unbacked = next(f for f in fixes["artifacts"] if f["name"] == "unbacked")["details"]
    cache_dims = [d for d in unbacked["dims"] if ".layers[0].keys:0" in d]
    assert cache_dims or any(".layers[0].keys.size()[0]" in dim for dim in unbacked["not_marked"]), unbacked
    extra = {"cache_implementation": "static"} if cache == "static" else {}
    held_out = [(ids, {**kwargs, **extra}) for ids, kwargs in _held_out(7, (5, 23, 41))]
    for plan in [name for name, status in statuses.items() if status == "passed"]:
        result = check_generate(analysis.out_dir, held_out, plan=plan, backend="eager")
        assert result.calls > len(held_out)  # prefills and decode steps
        assert result.compiles == (), (plan, result.compiles)


@pytest.mark.parametrize(("factory", "requests"), [
    ("pyg_batches", om.pyg_batch_requests),
    ("objects", om.object_requests),
])
def test_plans_for_object_inputs_pass_verify(tmp_path, factory, requests):
    with guardscope.CorpusWriter(tmp_path / "c", model=f"{om.__file__}:{factory}", compile={"dynamic": None}) as writer:
        for args, kwargs in requests(30, seed=2):
            writer.add(*args, **kwargs)
    analysis = guardscope.analyze(tmp_path / "c", tmp_path / "out")
    pipeline.emit_warmup(analysis.out_dir)
    document = pipeline.verify(analysis.out_dir, artifacts=("warmup", "unbacked"), bundle=False, backend="eager")
    statuses = {r["name"]: r["status"] for r in document["artifacts"]}
    assert statuses["warmup"] == "passed", document
    assert statuses["unbacked"] in ("passed", "infeasible"), document


def test_check_generate_proves_under_productions_backend_and_fails_where_inductor_would_compile(tmp_path):
    """The KV cache a decode step receives is the compiled prefill's output, with the backend's
    strides: a warmup built from recorded (eager-produced) caches serves generate() under the eager
    backend, yet under inductor, production's default, the first decode step compiles again. The
    check runs under production's backend unless told, and says which."""
    om.record_generation(str(tmp_path / "c"), "gpt2_forward", _recorded_prompts()[:6], dynamic=None)
    analysis = guardscope.analyze(tmp_path / "c", tmp_path / "out")
    pipeline.emit_warmup(analysis.out_dir)
    assert store.read_catalog(analysis.out_dir)["production"]["backend"] == "inductor"  # not recorded: the default
    held_out = _held_out(7, (5, 23, 41))[:3]
    eager = check_generate(analysis.out_dir, held_out, plan="warmup", backend="eager")
    assert (eager.backend, eager.compiles) == ("eager", ())
    production = check_generate(analysis.out_dir, held_out, plan="warmup")
    assert production.backend == "inductor" and not production.passed
    assert {(c["call"]) for c in production.compiles} == {1}  # each request's first decode step
