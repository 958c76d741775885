"""The fixes on inputs that are objects: a decoder's generate() calls (KV caches), a PyG model
called with Batch objects, a model taking a registered class and a named tuple. emit-warmup writes
the plans, verify proves them in child processes, and for generate() a plain ``model.generate()``
on prompts the corpus never held compiles nothing once the plan is set up."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

import guardscope
from guardscope import pipeline, store
from guardscope.proving.generation import check_generate

from .. import object_models as om
from ..object_models import CompileCounter

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
    """The warmup and unbacked plans of a recorded generate() corpus pass verify, and a plain
    generate() on new prompts compiles nothing after each. Slow: every prefill and decode step is a
    compiled call, and the plans are proved in two child processes and checked in two more (the
    static-cache unbacked plan compiles about 70 graphs)."""
    om.record_generation(str(tmp_path / "c"), factory, _recorded_prompts(), dynamic=dynamic, cache=cache)
    analysis = guardscope.analyze(tmp_path / "c", tmp_path / "out")
    pipeline.emit_warmup(analysis.out_dir, only=("warmup", "unbacked"))  # the plans verified
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
    pipeline.emit_warmup(analysis.out_dir, only=("warmup", "unbacked"))  # the plans verified
    document = pipeline.verify(analysis.out_dir, artifacts=("warmup", "unbacked"), bundle=False, backend="eager")
    statuses = {r["name"]: r["status"] for r in document["artifacts"]}
    assert statuses["warmup"] == "passed", document
    assert statuses["unbacked"] in ("passed", "infeasible"), document


def test_a_generate_warmup_applied_as_the_report_says_compiles_nothing_under_inductor(tmp_path, monkeypatch):
    """Production compiles the forward with inductor; the traffic was recorded through an eager
    compile, so the recorded KV caches carry eager strides. The warmup runs each decode step on the
    cache its request's earlier steps extended through the compiled forward (untagged traffic: read
    in recorded order), so generate() under inductor compiles nothing after it, on the recorded
    prompts and on new ones. verify and check_generate prove it under inductor, check_generate
    fails where generate() needs a graph, and the report's code is what was run. Slow: its subject
    is inductor, which compiles the warmup's GPT-2 graphs cold once (verify's child) and from the
    run's cache twice more (this process, and check_generate's set-up)."""
    import html
    import re

    recorded = _recorded_prompts()[:6]  # batch 1 and 2, prompts of 3, 17 and 60 tokens, 5 new
    # generate()'s grad mode, as TrafficRecorder records it (a CorpusWriter is told).
    om.record_generation(str(tmp_path / "c"), "gpt2_forward", recorded, dynamic=None, grad_mode="no_grad")
    analysis = guardscope.analyze(tmp_path / "c", tmp_path / "out")
    # The plan verified, alone: one sample per topology, in the analysis's order (the cover
    # measured between them is the subject of the eager generate() tests above).
    pipeline.emit_warmup(analysis.out_dir, only=("warmup",))
    assert store.read_catalog(analysis.out_dir)["production"]["backend"] == "inductor"  # not recorded: the default
    assert "on the KV cache the steps before extended" in (analysis.out_dir / "warmup.py").read_text()

    document = pipeline.verify(analysis.out_dir, artifacts=("warmup",), bundle=False)  # production's backend
    result = next(r for r in document["artifacts"] if r["name"] == "warmup")
    assert (result["status"], result["backend"]) == ("passed", "inductor"), result
    assert result["carried_state"]["carried"] > 0

    # The report's recommended code, run as shown (on a fresh model, in this process).
    page = (analysis.out_dir / "report.html").read_text()
    code = html.unescape(re.search(r'<pre class="code" aria-label="how to apply warmup.py"><code>(.*?)</code></pre>',
                                   page, re.S).group(1))
    assert code == "import torch, warmup\nmodel.forward = torch.compile(model.forward)\nwarmup.warmup(model.forward)"
    monkeypatch.syspath_prepend(str(analysis.out_dir))
    monkeypatch.delitem(sys.modules, "warmup", raising=False)  # this analysis's warmup.py, not another's
    torch._dynamo.reset()
    model = om.gpt2()
    limit = torch._dynamo.config.recompile_limit
    namespace = {"model": model}
    with CompileCounter() as counter:
        exec(code, namespace)
    warmup = namespace["warmup"]
    sys.modules.pop("warmup")
    assert Path(warmup.__file__).parent == analysis.out_dir

    # Every warmup call compiled what it needed, and the limit keeps those graphs compilable.
    assert torch._dynamo.config.recompile_limit == max(limit, counter.count, warmup.GRAPHS)
    rng = random.Random(3)
    held_out = [(torch.randint(2, om.VOCAB, (batch, length), generator=torch.Generator().manual_seed(length)),
                 rng.choice([2, 3, 5])) for batch in (1, 2) for length in (5, 23, 41)]
    # Any graph these requests needed would raise: a compile, and a call past the recompile limit
    # (which would otherwise run eagerly without a word).
    with torch.compiler.set_stance("fail_on_recompile"):
        om.generate_all(model, recorded + held_out)
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            om.generate_all(model, [(torch.randint(2, om.VOCAB, (1, 1)), 2)])  # a 1-token prompt: no graph has it
    torch._dynamo.reset()

    # One check (one set-up): three new prompts the warmup covers, then a 1-token prompt it does not.
    checked = check_generate(analysis.out_dir, [*((ids, {"max_new_tokens": new, "min_new_tokens": new,
                                                          "do_sample": False}) for ids, new in held_out[:3]),
                                                (torch.randint(2, om.VOCAB, (1, 1)), {"max_new_tokens": 2})])
    assert checked.backend == "inductor" and checked.requests == 4 and checked.calls > 4 and not checked.passed
    # Only the 1-token prompt needed graphs, from its prefill on: compiles, or (the warmup used the
    # frame's limit up) calls past it; the three covered prompts none.
    needed = checked.compiles + checked.limit_hits
    assert {hit["request"] for hit in needed} == {3} and min(hit["call"] for hit in needed) == 0, needed
