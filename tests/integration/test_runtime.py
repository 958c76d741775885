"""guardscope.runtime: a plan applied in serving, new topologies run eagerly and are recorded.

This file holds the tests that compile in this process; the others are in
tests/unit/test_runtime.py.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch
import torch.fx.experimental._config as fx_config

import guardscope
from guardscope import CorpusWriter, load_corpus, pipeline, runtime, torch_compat
from guardscope.corpus.storage.compile_log import read_compiles
from guardscope.corpus.storage.weights import model_print
from guardscope.errors import ServeError
from guardscope.model import Catalog
from samples.gnn.model import small

from ..conftest import REPO, SEED_CORPUS, model_spec
from ..models import Elementwise
from ..sessions import made_once

GOLDEN = Path(__file__).parents[1] / "golden" / "seed_catalog.json"
PLAN_SAMPLES = 100


def graphs_compiled() -> int:
    """Graphs Dynamo compiled in this process so far: it counts every compile, whatever the
    backend (the test of the acceptance case shows it moving when a call does compile)."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def eager(model, *args, **kwargs):
    with torch.inference_mode():
        return model(*args, **kwargs)


@pytest.fixture(scope="module")
def seed_samples():
    return list(load_corpus(SEED_CORPUS))


@pytest.fixture(scope="module")
def seed_plan(tmp_path_factory, seed_samples):
    """analyze + emit-warmup on the seed corpus's first 100 samples, as recorded by a user."""
    def make(base):
        manifest = load_corpus(SEED_CORPUS).manifest
        spec = f"{REPO / 'samples' / 'gnn' / 'model.py'}:small"
        with CorpusWriter(base / "corpus", model=spec, compile=manifest.compile) as writer:
            for sample in seed_samples[:PLAN_SAMPLES]:
                writer.add(*sample.args, **sample.kwargs)
        guardscope.analyze(base / "corpus", base / "out", strict=True)
        pipeline.emit_warmup(base / "out", only=("warmup", "unbacked"))  # the plans served here
        return base / "out"

    return made_once(tmp_path_factory, "seed-plan", make)


def new_kinds():
    """One input per kind the tiny plan has no graph for: 0/1 sizes, dtype, rank."""
    return [torch.randn(1), torch.randn(0), torch.randn(3, dtype=torch.float64), torch.randn(2, 3)]


# --- the acceptance case -------------------------------------------------------------------------


def test_plan_from_100_samples_serves_all_300_and_records_the_new_topologies(seed_plan, seed_samples, tmp_path):
    golden = json.loads(GOLDEN.read_text())
    new_topologies = [t for t in golden["topologies"] if t["first_sample"] >= PLAN_SAMPLES]
    expected = sorted(s for t in new_topologies for s in t["samples"])
    assert expected == [112, 144, 180]  # what the golden catalog says appears after sample 99

    model = small()
    fallbacks = tmp_path / "fallbacks"
    with runtime.serve(model, seed_plan, plan="warmup", backend="eager", fallback_dir=fallbacks) as served:
        assert served.graphs == 7 and served.plan == "warmup"
        before = graphs_compiled()
        fell_back = []
        for sample in seed_samples:
            count = served.stats.fallbacks
            out = served(*sample.args, **sample.kwargs)
            if served.stats.fallbacks > count:
                fell_back.append(sample.index)
            assert torch.allclose(out, eager(model, *sample.args, **sample.kwargs), atol=1e-5), sample.index
        assert graphs_compiled() == before, "a call compiled while serving"
    stats = served.stats
    assert fell_back == expected
    assert (stats.calls, stats.compiled, stats.fallbacks) == (300, 297, 3)
    assert (stats.recorded, stats.pending, stats.dropped, stats.errors) == (3, 0, 0, 0)

    # The fallbacks were needed: the compiled model alone does compile for one of them (this
    # also shows the compile counter used above does move).
    with torch.inference_mode():
        served.compiled(*seed_samples[112].args, **seed_samples[112].kwargs)
    assert graphs_compiled() == before + 1

    # The recorded corpus holds exactly those calls, and the next analysis finds their topologies.
    corpus = load_corpus(fallbacks)
    assert corpus.manifest.compile == {"dynamic": True, "fullgraph": True}
    assert corpus.manifest.recorded_model == model_print(model)  # the served model's weights' shape
    recorded = list(corpus)
    assert len(recorded) == 3
    for sample, index in zip(recorded, expected):
        original = seed_samples[index].kwargs
        assert sample.kwargs.keys() == original.keys()
        for name, tensor in sample.kwargs.items():
            assert tensor.shape == original[name].shape and tensor.stride() == original[name].stride()
            assert torch.equal(tensor, original[name])
    analysis = guardscope.analyze(fallbacks, tmp_path / "reanalysis", strict=True)
    assert not [w for w in analysis.warnings if "recorded from" in w]  # the catalog's spec: the served model
    topologies = analysis.catalog.topologies
    assert [t.first_sample for t in topologies] == [0, 1, 2] and [t.count for t in topologies] == [1, 1, 1]
    if golden["torch_version"] == torch_compat.torch_version():  # fact words come from guard texts
        for topology, golden_topology in zip(topologies, new_topologies):
            # facts name what sets a graph apart from the others in its catalog: a subset here
            assert set(topology.facts) <= set(golden_topology["facts"])


def test_unbacked_plan_serves_the_seed_corpus_with_one_graph(seed_plan, seed_samples):
    model = small()
    # configure() turns duck sizing off for the process: restored after the test.
    with torch_compat.patched_config({torch_compat.DUCK_SHAPE_SETTING: fx_config.use_duck_shape}), \
            runtime.serve(model, seed_plan, plan="unbacked", backend="eager") as served:
        assert served.graphs == 1
        before = graphs_compiled()
        outputs = [served(*sample.args, **sample.kwargs) for sample in seed_samples]
        assert graphs_compiled() == before
        for index in (0, 1, 4, 144, 180, 299):  # marked calls give the eager results
            sample = seed_samples[index]
            assert torch.allclose(outputs[index], eager(model, *sample.args, **sample.kwargs), atol=1e-5)
        assert fx_config.use_duck_shape is False
    # No node at all (144, 180) is new after sample 99; x's rows were never marked unbacked.
    assert served.stats.fallbacks == 2


# --- eager instead of compiling ------------------------------------------------------------------


def test_the_stance_runs_a_misjudged_call_eagerly(tiny_plan, monkeypatch):
    model = Elementwise()
    with runtime.serve(model, tiny_plan, plan="warmup", backend="eager") as served:
        assert served.eager_on_recompile is torch_compat.supports_eager_on_recompile() is True
        monkeypatch.setattr(served, "accepts", lambda arguments: True)  # a check that says yes to all
        before = graphs_compiled()
        for x in new_kinds():
            assert torch.equal(served(x), eager(model, x))
        assert graphs_compiled() == before and served.stats.fallbacks == 0
    # Without the stance the same misjudged call compiles: the stance is what prevented it.
    with runtime.serve(model, tiny_plan, plan="warmup", backend="eager", eager_on_recompile=False) as served:
        monkeypatch.setattr(served, "accepts", lambda arguments: True)
        before = graphs_compiled()
        served(torch.randn(1))
        assert graphs_compiled() == before + 1


def test_without_the_stance_the_guard_check_alone_prevents_compiles(tiny_plan, monkeypatch, tmp_path):
    monkeypatch.setattr(torch_compat, "supports_eager_on_recompile", lambda: False)  # torch < 2.6
    model = Elementwise()
    with runtime.serve(model, tiny_plan, plan="warmup", backend="eager", fallback_dir=tmp_path / "fb") as served:
        assert served.eager_on_recompile is False
        before = graphs_compiled()
        for x in [torch.randn(4), *new_kinds(), torch.randn(7)]:
            assert torch.equal(served(x), eager(model, x))
        assert graphs_compiled() == before
    assert (served.stats.compiled, served.stats.fallbacks, served.stats.recorded) == (2, 4, 4)


# --- bounds and sampling -------------------------------------------------------------------------


def test_one_sample_per_signature_plus_an_even_repeat_rate(tiny_plan, tmp_path):
    model = Elementwise()
    with runtime.serve(model, tiny_plan, backend="eager", plan="warmup", fallback_dir=tmp_path / "fb",
                       repeat_rate=0.25) as served:
        for _ in range(9):
            served(torch.randn(1))  # one signature: the first, then every 4th repeat (2 of 8)
        served(torch.randn(0))  # a new signature is always recorded
    stats = served.stats
    assert (stats.fallbacks, stats.recorded, stats.signatures) == (10, 4, 2)
    assert dict(stats.dropped_by_reason) == {"sampled_out": 6}
    assert stats.fallbacks == stats.recorded + stats.dropped
    assert [tuple(s.args[0].shape) for s in load_corpus(tmp_path / "fb")] == [(1,), (1,), (1,), (0,)]


def test_flush_puts_the_recorded_samples_on_disk_while_serving(tiny_plan, tmp_path):
    model = Elementwise()
    fallbacks = tmp_path / "fb"
    with runtime.serve(model, tiny_plan, backend="eager", plan="warmup", fallback_dir=fallbacks) as served:
        served(torch.randn(1))
        served(torch.randn(0))
        assert served.flush(timeout=600)
        assert len(load_corpus(fallbacks)) == 2  # readable while the server runs
        assert (served.stats.recorded, served.stats.pending) == (2, 0)
        served(torch.randn(2, 3))
    corpus = load_corpus(fallbacks)
    assert len(corpus) == 3 and len(corpus.manifest.shards) == 2
    assert served.flush() is False  # closed


def test_max_samples_and_max_bytes_bound_the_corpus(tiny_plan, tmp_path):
    model = Elementwise()
    with runtime.serve(model, tiny_plan, backend="eager", plan="warmup", fallback_dir=tmp_path / "n",
                       max_samples=2) as served:
        for x in new_kinds():
            served(x)
    assert served.stats.recorded == 2 and dict(served.stats.dropped_by_reason) == {"max_samples": 2}
    assert len(load_corpus(tmp_path / "n")) == 2

    # float64 x3 and float32 2x3 take 24 bytes each; the view in between brings its base's 800.
    with runtime.serve(model, tiny_plan, backend="eager", plan="warmup", fallback_dir=tmp_path / "b",
                       max_bytes=64) as served:
        served(torch.randn(3, dtype=torch.float64))
        served(torch.randn(100, 2)[:, 0].unsqueeze(0))  # a view: its whole 800-byte storage counts
        served(torch.randn(2, 3))
    assert served.stats.recorded == 2 and dict(served.stats.dropped_by_reason) == {"max_bytes": 1}
    assert sum(runtime.storage_bytes(s.args) for s in load_corpus(tmp_path / "b")) <= 64


def test_serve_refuses_what_it_cannot_serve(tiny_plan, tmp_path):
    model = Elementwise()
    with pytest.warns(RuntimeWarning, match="not verified"):
        with runtime.serve(model, tiny_plan, backend="eager") as served:
            assert served.plan == "warmup"
    with pytest.raises(ServeError, match="already compiled"):
        runtime.serve(torch.compile(model, backend="eager"), tiny_plan, plan="warmup")
    taken = tmp_path / "taken"
    with CorpusWriter(taken, model=model_spec("Elementwise")) as writer:
        writer.add(torch.randn(2))
    with pytest.raises(ServeError, match="already holds a corpus"):
        runtime.serve(model, tiny_plan, plan="warmup", fallback_dir=taken)
    with pytest.raises(ServeError, match="repeat_rate"):
        runtime.serve(model, tiny_plan, plan="warmup", fallback_dir=tmp_path / "x", repeat_rate=2)
    with pytest.raises(guardscope.GuardscopeError, match="catalog.json"):
        runtime.serve(model, tmp_path, plan="warmup")


# --- never raise into the serving path -----------------------------------------------------------


def test_recording_failures_are_counted_never_raised(tiny_plan, tmp_path):
    model = Elementwise()
    fallbacks = tmp_path / "fb"
    with runtime.serve(model, tiny_plan, backend="eager", plan="warmup", fallback_dir=fallbacks) as served:
        # A tensor subclass: served eagerly, but a corpus cannot store it.
        parameter = torch.nn.Parameter(torch.randn(3))
        assert torch.equal(served(parameter), eager(model, parameter))
        # The fallback directory becomes unusable before the first sample is written.
        fallbacks.write_text("not a directory")
        for x in new_kinds():
            assert torch.equal(served(x), eager(model, x))
        with pytest.raises(TypeError):  # the model's own errors still reach the caller
            served(torch.randn(3), torch.randn(3))
    stats = served.stats
    assert stats.fallbacks == 5 and stats.recorded == 0 and stats.errors >= 1
    assert dict(stats.dropped_by_reason) == {"unstorable": 1, "error": 4}
    assert served(torch.randn(1)) is not None  # served after close(), nothing more recorded
    assert dict(served.stats.dropped_by_reason)["closed"] == 1


# --- threads -------------------------------------------------------------------------------------


def test_concurrent_calls_from_several_threads(tiny_plan, tmp_path):
    model = Elementwise()
    threads, rounds = 6, 20
    errors: list[BaseException] = []
    fallbacks = tmp_path / "fb"
    settings = {name: getattr(torch._dynamo.config, name) for name in torch_compat.DYNAMO_SETTINGS}
    with runtime.serve(model, tiny_plan, backend="eager", plan="warmup", fallback_dir=fallbacks,
                       repeat_rate=0.0, max_samples=3) as served:
        before = graphs_compiled()
        start = threading.Barrier(threads)

        def work(seed: int) -> None:
            try:
                start.wait()
                generator = torch.Generator().manual_seed(seed)
                for i in range(rounds):
                    inputs = [torch.randn(2 + (seed + i) % 8, generator=generator), *new_kinds()]
                    for x in inputs:
                        assert torch.equal(served(x), eager(model, x))
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(seed,)) for seed in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert not errors, errors[0]
        assert graphs_compiled() == before
    stats = served.stats
    calls = threads * rounds * 5
    assert (stats.calls, stats.compiled, stats.fallbacks) == (calls, calls // 5, calls * 4 // 5)
    # Four signatures raced for three places: exactly three recorded, each once.
    assert stats.recorded == 3 and stats.signatures == 3 and stats.pending == 0
    assert stats.fallbacks == stats.recorded + stats.dropped
    assert len({tuple(s.args[0].shape) + (s.args[0].dtype,) for s in load_corpus(fallbacks)}) == 3
    # The plan compiles with dynamic=True, whose calls set assume_static_by_default=False and put the
    # value before back: on torch 2.11 (one value for the process) six threads' calls interleaved
    # left it False for good, and every later dynamic=None compile in the process went dynamic.
    assert {name: getattr(torch._dynamo.config, name) for name in torch_compat.DYNAMO_SETTINGS} == settings


def test_traffic_dir_records_every_call_by_signature_for_an_audit(seed_plan, seed_samples, tmp_path):
    """serve(traffic_dir=...) records all calls, the first of each signature in full; analysing
    that corpus finds what analysing the calls themselves finds."""
    calls = seed_samples[:60] + seed_samples[:20]  # the first 20 requests' signatures again
    with runtime.serve(small(), seed_plan, plan="warmup", backend="eager", traffic_dir=tmp_path / "traffic") as served:
        for sample in calls:
            served(*sample.args, **sample.kwargs)
    stats = served.stats
    assert (stats.calls, stats.traffic_recorded, stats.traffic_pending, stats.traffic_dropped) == (80, 80, 0, 0)
    assert stats.traffic_full == 60 and stats.to_json()["traffic"]["full"] == 60
    corpus = load_corpus(tmp_path / "traffic")
    assert corpus.manifest.format_version == 5 and len(corpus) == 80
    assert [s.data_of for s in corpus][60:] == list(range(20))
    with CorpusWriter(tmp_path / "plain", model=f"{REPO / 'samples' / 'gnn' / 'model.py'}:small",
                      compile=corpus.manifest.compile) as writer:
        for sample in calls:
            writer.add(*sample.args, **sample.kwargs)
    audit = guardscope.analyze(tmp_path / "traffic", tmp_path / "audit", strict=True).catalog
    plain = guardscope.analyze(tmp_path / "plain", tmp_path / "plain-out", strict=True).catalog
    assert Catalog.samples_of(audit.graphs) == Catalog.samples_of(plain.graphs)
    assert [t.samples for t in audit.topologies] == [t.samples for t in plain.topologies]
    # The warmup's graphs compiled before serving: recorded as start-up, not as calls' stalls
    # (issue 51 item 1), so none is matched to the analysis's compiles at those calls.
    startup = read_compiles(tmp_path / "traffic")
    assert len(startup) == served.graphs and {c["in_call"] for c in startup} == {False}
    stalls = audit.production_compiles
    assert stalls["compiles"] == [] and len(stalls["unmatched"]) == len(audit.compiles)
    assert list(stalls["replicas"].values())[0]["startup_compiles"] == served.graphs
