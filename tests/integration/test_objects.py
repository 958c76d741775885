"""Models called with objects, analysed: every forward call of a decoder's ``generate()`` (KV caches
in its arguments), a PyG model called as ``model(batch)``, and a model taking a named tuple and a
registered class. The analysis compiles at exactly the calls plain ``torch.compile`` compiled at."""

from __future__ import annotations

import functools
import json

import pytest
import torch

import guardscope
from guardscope import torch_compat
from guardscope.corpus.reader import load_corpus
from guardscope.corpus.storage.weights import model_print
from tests import object_models as om


def _catalog(corpus, out):
    guardscope.analyze(corpus, out, strict=True)
    return json.loads((out / "catalog.json").read_text())


@pytest.mark.parametrize(("factory", "dynamic", "keep", "cache"), [
    ("gpt2_forward", None, "all", "dynamic"),
    ("gpt2_forward", None, "signatures", "dynamic"),
    ("llama_forward", True, "all", "dynamic"),
    ("llama_forward", None, "all", "static"),
])
def test_generate_calls_are_analysed_as_plain_compile_compiled_them(tmp_path, factory, dynamic, keep, cache):
    # Long-tailed prompts of 1..512 tokens, batches 1..8, 1..64 new tokens.
    requests = om.prompts(6, seed=3, longest=512, max_batch=8, max_new=64)
    # By signature, the first call of each kept in full: signature samples that must run run on it.
    options = {"keep": keep} if keep == "signatures" else {}
    production = om.record_generation(str(tmp_path / "c"), factory, requests, dynamic=dynamic, cache=cache,
                                      **options)
    corpus = load_corpus(tmp_path / "c")
    assert corpus.manifest.format_version == 4 and len(corpus) > len(requests)  # prefill and decode steps
    catalog = _catalog(tmp_path / "c", tmp_path / "out")
    assert sorted({c["sample"] for c in catalog["compiles"]}) == production
    assert catalog["summary"]["not_analysed"] == 0
    assert sum(t["count"] for t in catalog["topologies"]) == len(corpus)
    kinds = catalog["summary"]["failures_by_kind"]
    assert kinds.get("other", 0) <= 0.05 * max(1, sum(kinds.values()))
    facts = " ".join(f for t in catalog["topologies"] for f in t["facts"])
    if production[1:]:
        assert "cache" in facts


def _plain_compile_samples(model, calls, dynamic=None):
    compiled = torch.compile(model, backend="eager", dynamic=dynamic)
    compiling = []
    with torch_compat.raised_recompile_limit(4096), om.CompileCounter() as counter, torch.no_grad():
        for index, (args, kwargs) in enumerate(calls):
            before = counter.count
            compiled(*args, **kwargs)
            if counter.count != before:
                compiling.append(index)
    torch_compat.reset_dynamo()
    return compiling


@pytest.mark.parametrize(("factory", "requests", "count"), [
    ("pyg_batches", om.pyg_batch_requests, 40),
    ("objects", om.object_requests, 30),
])
def test_models_called_with_objects_are_analysed_as_plain_compile_compiled_them(tmp_path, factory, requests, count):
    calls = requests(count, seed=5)
    with guardscope.CorpusWriter(tmp_path / "c", model=f"{om.__file__}:{factory}", compile={"dynamic": None}) as writer:
        for args, kwargs in calls:
            writer.add(*args, **kwargs)
    expected = _plain_compile_samples(getattr(om, factory)(), calls)
    catalog = _catalog(tmp_path / "c", tmp_path / "out")
    assert sorted({c["sample"] for c in catalog["compiles"]}) == expected
    assert sum(t["count"] for t in catalog["topologies"]) + len(catalog.get("failed_samples", [])) == count
    kinds = catalog["summary"]["failures_by_kind"]
    assert kinds.get("other", 0) <= 0.05 * max(1, sum(kinds.values()))


def test_traffic_recorder_wrap_records_every_generate_call_by_signature(tmp_path):
    from guardscope.runtime import TrafficRecorder

    requests = om.prompts(4, seed=7, longest=40, max_batch=2, max_new=4)
    model = om.gpt2()
    # The spec gives the module; the corpus learns from the wrapped callable that production
    # compiles its forward, and the replay compiles that.
    traffic = TrafficRecorder(tmp_path / "c", model=f"{om.__file__}:gpt2", compile={"dynamic": None},
                              full_per_signature=0)
    with torch_compat.raised_recompile_limit(4096), om.CompileCounter() as counter:
        compiled = torch.compile(model.forward, backend="eager")
        calls = []

        @functools.wraps(compiled)
        def counted(*args, **kwargs):
            before = counter.count
            result = compiled(*args, **kwargs)
            calls.append((request_id, step.__next__(), counter.count != before))
            return result

        model.forward = traffic.wrap(counted)
        for request_id, request in enumerate(requests):
            step = iter(range(1000))
            with traffic.request(f"req-{request_id}"):
                om.generate_all(model, [request])
    traffic.close()
    torch_compat.reset_dynamo()
    production = [index for index, (*_, compiled_now) in enumerate(calls) if compiled_now]
    corpus = load_corpus(tmp_path / "c")
    assert len(corpus) == len(calls) and corpus.manifest.format_version == 5
    assert corpus.manifest.method == "forward"
    # and, through torch.compile's and functools.wraps' wrappers, the shape of the model's weights
    assert corpus.manifest.recorded_model == model_print(om.gpt2())
    analysis = guardscope.analyze(tmp_path / "c", tmp_path / "out", strict=True)
    assert not [w for w in analysis.warnings if "recorded from" in w]
    catalog = json.loads((tmp_path / "out" / "catalog.json").read_text())
    assert catalog["model"].endswith(":gpt2") and catalog["method"] == "forward"
    # Each call tagged with its request and step: the analysis says which request compiled.
    assert catalog["requests"]["requests"] == len(requests) and catalog["requests"]["calls"] == len(calls)
    assert [(c["request"], c["step"]) for c in catalog["requests"]["compiles"]] == [
        (f"req-{calls[i][0]}", calls[i][1]) for i in production]
    # Good-Turing over requests: topologies seen in one request only, over the requests
    singletons = catalog["requests"]["singleton_topologies"]
    assert catalog["requests"]["unseen_topology_probability"] == round(len(singletons) / len(requests), 6)
    assert sorted({c["sample"] for c in catalog["compiles"]}) == production
    assert catalog["summary"]["not_analysed"] == 0


def test_transformers_own_compile_path_is_recorded_and_analysed(tmp_path):
    """generate() with a static cache and a compile config compiles ``model.__call__`` itself and
    runs only the decode steps through it (the prefill runs eagerly). Recording that compiled call
    (the recipe in docs/generate.md) gives a corpus of the decode steps whose analysis compiles where
    transformers' compiled call compiled; the corpus names no method (``__call__`` is the module)."""
    from transformers import CompileConfig

    from guardscope.runtime import TrafficRecorder

    model = om.llama()
    config = CompileConfig(backend="eager", dynamic=None, mode=None, fullgraph=False)
    config._compile_all_devices = True  # transformers compiles on a GPU only, unless told
    traffic = TrafficRecorder(tmp_path / "c", model=f"{om.__file__}:llama",
                              compile={"dynamic": config.dynamic, "fullgraph": config.fullgraph})
    calls = []
    with torch_compat.raised_recompile_limit(4096), om.CompileCounter() as counter:
        compiled = model.get_compiled_call(config)  # transformers' torch.compile(model.__call__, ...)

        @functools.wraps(compiled)
        def counted(*args, **kwargs):
            before = counter.count
            result = compiled(*args, **kwargs)
            calls.append(counter.count != before)
            return result

        model._compiled_call = traffic.wrap(counted)  # what get_compiled_call(config) returns from now on
        requests = om.prompts(6, seed=3, longest=96, max_batch=4, max_new=6)
        om.generate_all(model, requests, cache="static", compile_config=config)
    traffic.close()
    torch_compat.reset_dynamo()
    production = [index for index, compiled_now in enumerate(calls) if compiled_now]
    corpus = load_corpus(tmp_path / "c")
    assert len(corpus) == len(calls) == sum(new - 1 for _, new in requests)  # decode steps only
    assert corpus.manifest.method is None and len(production) >= 2
    catalog = _catalog(tmp_path / "c", tmp_path / "out")
    assert sorted({c["sample"] for c in catalog["compiles"]}) == production
    assert catalog["summary"]["not_analysed"] == 0 and "method" not in catalog
