"""Models called with objects, analysed: every forward call of a decoder's ``generate()`` (KV caches
in its arguments), a PyG model called as ``model(batch)``, and a model taking a named tuple and a
registered class. The analysis compiles at exactly the calls plain ``torch.compile`` compiled at."""

from __future__ import annotations

import json

import pytest
import torch

import guardscope
from guardscope import torch_compat
from guardscope.corpus.reader import load_corpus
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
    requests = om.prompts(6, seed=3, longest=96, max_batch=4, max_new=6)
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
    traffic = TrafficRecorder(tmp_path / "c", model=f"{om.__file__}:gpt2_forward", compile={"dynamic": None},
                              full_per_signature=0)
    with torch_compat.raised_recompile_limit(4096), om.CompileCounter() as counter:
        compiled = torch.compile(model.forward, backend="eager")
        calls = []

        def counted(*args, **kwargs):
            before = counter.count
            result = compiled(*args, **kwargs)
            calls.append(counter.count != before)
            return result

        model.forward = traffic.wrap(counted)
        om.generate_all(model, requests)
    traffic.close()
    torch_compat.reset_dynamo()
    production = [index for index, compiled_now in enumerate(calls) if compiled_now]
    corpus = load_corpus(tmp_path / "c")
    assert len(corpus) == len(calls) and corpus.manifest.format_version == 4
    catalog = _catalog(tmp_path / "c", tmp_path / "out")
    assert sorted({c["sample"] for c in catalog["compiles"]}) == production
    assert catalog["summary"]["not_analysed"] == 0
