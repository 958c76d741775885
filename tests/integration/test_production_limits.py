"""What production lives through under its recompile limits (catalog.json's ``production``), each
claim checked against plain ``torch.compile`` with torch's defaults in the same test: which calls
raise ``FailOnRecompileLimitHit``, which compile, which run without a compiled graph. The pure
model of the limits is in tests/unit/test_limits.py."""

from __future__ import annotations

import json

import pytest
import torch

import guardscope
from guardscope import CorpusWriter, torch_compat
from guardscope.runtime import TrafficRecorder
from guardscope.corpus.reader import load_corpus
from guardscope.terminal import format_summary

from ..conftest import SEED_CORPUS, read_catalog
from ..paths import REPO, model_spec

SEED_MODEL = f"{REPO / 'samples' / 'gnn' / 'model.py'}:small"


def plain_run(model, calls, *, dynamic, fullgraph, settings=None) -> dict[str, list[int]]:
    """Plain torch.compile (eager backend, torch's default limits unless ``settings`` says) over
    ``calls``, under inference mode as the analysis replays: the calls that raised at the limit,
    that compiled, and that ran no compiled graph."""
    ran, compiled_at, current = [0], [], [0]

    def backend(graph, example_inputs):
        def run(*args):
            ran[0] += 1
            return graph(*args)
        return run

    found: dict[str, list[int]] = {"failed": [], "compiled": [], "eager": []}
    torch._dynamo.reset()
    defaults = torch_compat.dynamo_defaults()
    with torch._dynamo.config.patch({**{k: defaults[k] for k in torch_compat.LIMIT_SETTINGS}, **(settings or {})}):
        torch._dynamo.callback.on_compile_end(lambda args: compiled_at.append(current[0]))
        function = torch.compile(model, backend=backend, dynamic=dynamic, fullgraph=fullgraph)
        with torch.inference_mode():
            for index, (args, kwargs) in enumerate(calls):
                current[0], before = index, ran[0]
                try:
                    function(*args, **kwargs)
                except Exception as exc:
                    assert torch_compat.is_recompile_limit_error(exc), exc
                    found["failed"].append(index)
                    continue
                if ran[0] == before:
                    found["eager"].append(index)
    torch._dynamo.reset()
    found["compiled"] = sorted(set(compiled_at))
    return found


def record(path, spec, calls, compile_options, settings=None):
    """A corpus of ``calls`` recorded the way production serves them, under its Dynamo ``settings``."""
    with torch._dynamo.config.patch(settings or {}), CorpusWriter(path, model=spec, compile=compile_options) as writer:
        for args, kwargs in calls:
            writer.add(*args, **kwargs)
    return path


def crops(count: int = 16):
    """Lists of 1..12 crops of 2-5 rows, then some lengths again: a graph per list length."""
    generator = torch.Generator().manual_seed(0)
    lengths = [*range(1, 13), 3, 10, 5, 12][:count]
    return [(([torch.randn(2 + (i + n) % 4, generator=generator) for i in range(n)],), {}) for n in lengths]


def seed_calls():
    return [(sample.args, sample.kwargs) for sample in load_corpus(SEED_CORPUS)]


# --- the seed corpus ---------------------------------------------------------------------------


def test_the_shipped_seed_corpus_fails_three_requests_under_torchs_default_limit(seed_analysis):
    production = read_catalog(seed_analysis.out_dir)["production"]
    assert production["recompile_limit"] == 8 and production["source"] == "torch default"
    assert production["failed_samples"] == [112, 144, 180] and production["eager_samples"] == []
    (frame,) = production["frames"]
    assert frame["reached_at"] == {"sample": 112} and frame["graphs_needed"] == 11
    from samples.gnn.model import small

    plain = plain_run(small().eval(), seed_calls(), dynamic=True, fullgraph=True)
    assert plain["failed"] == production["failed_samples"] and plain["eager"] == []
    assert plain["compiled"] == [0, 1, 4, 12, 24, 40, 60, 84]


def test_the_seed_calls_without_fullgraph_run_eagerly_where_they_would_fail(tmp_path):
    corpus = record(tmp_path / "corpus", SEED_MODEL, seed_calls(), {"dynamic": True, "fullgraph": False})
    production = read_catalog(guardscope.analyze(corpus, tmp_path / "out").out_dir)["production"]
    assert production["failed_samples"] == [] and production["on_limit"] == "eager"
    assert set(production["eager_samples"]) >= {112, 144, 180}
    from samples.gnn.model import small

    plain = plain_run(small().eval(), seed_calls(), dynamic=True, fullgraph=False)
    assert plain["failed"] == [] and plain["eager"] == production["eager_samples"]


def test_a_recorded_limit_is_production_s_limit(tmp_path):
    corpus = record(tmp_path / "corpus", SEED_MODEL, seed_calls()[:200], {"dynamic": True, "fullgraph": True},
                    settings={"recompile_limit": 16})
    assert json.loads((corpus / "corpus.json").read_text())["dynamo_config"] == {"recompile_limit": 16}
    production = read_catalog(guardscope.analyze(corpus, tmp_path / "out").out_dir)["production"]
    assert production["recompile_limit"] == 16 and production["source"] == "recorded"
    assert production["failed_samples"] == production["eager_samples"] == []
    assert production["frames"][0]["margin"] == 16 - production["frames"][0]["graphs_needed"]
    from samples.gnn.model import small

    plain = plain_run(small().eval(), seed_calls()[:200], dynamic=True, fullgraph=True, settings={"recompile_limit": 16})
    assert plain["failed"] == plain["eager"] == []


# --- a list of crops: a graph per list length --------------------------------------------------


@pytest.mark.parametrize("dynamic", [None, True], ids=["dynamic-none", "dynamic-true"])
@pytest.mark.parametrize("fullgraph", [True, False], ids=["fullgraph", "graph-breaks-allowed"])
def test_every_production_claim_matches_plain_torch_compile(tmp_path, dynamic, fullgraph):
    calls = crops()
    corpus = record(tmp_path / "corpus", model_spec("ListSum"), calls, {"dynamic": dynamic, "fullgraph": fullgraph})
    analysis = guardscope.analyze(corpus, tmp_path / "out")
    production = read_catalog(analysis.out_dir)["production"]
    from ..models import ListSum

    plain = plain_run(ListSum(), calls, dynamic=dynamic, fullgraph=fullgraph)
    assert production["failed_samples"] == plain["failed"]
    assert production["eager_samples"] == plain["eager"]
    assert (plain["failed"] if fullgraph else plain["eager"]) == [8, 9, 10, 11, 13, 15]  # lists of 9-12 crops
    (frame,) = production["frames"]
    assert frame["reached_at"] == {"sample": 8} and frame["share"] == 6 / 16
    reached = "reaches the limit at sample 8 (12 graphs needed); 6 samples (37.5% of traffic) would "
    summary = format_summary(analysis).splitlines()
    assert summary[0].startswith("production  recompile_limit 8 (torch default): forward") and reached in summary[0]
    assert ("FAIL with FailOnRecompileLimitHit" if fullgraph else "without a compiled graph") in summary[0]


# --- recorded settings that change guards --------------------------------------------------------


def test_a_recorded_setting_that_changes_guards_is_replayed(tmp_path):
    """automatic_dynamic_shapes=False: every new size compiles a graph of its own under dynamic=None."""
    calls = [((torch.randn(rows),), {}) for rows in (2, 3, 4, 5, 6, 7, 3)]
    from ..models import Elementwise

    plain_default = plain_run(Elementwise(), calls, dynamic=None, fullgraph=True)
    setting = {"automatic_dynamic_shapes": False}
    plain_static = plain_run(Elementwise(), calls, dynamic=None, fullgraph=True, settings=setting)
    assert plain_default["compiled"] == [0, 1] and plain_static["compiled"] == [0, 1, 2, 3, 4, 5]

    default = record(tmp_path / "default", model_spec("Elementwise"), calls, {"dynamic": None, "fullgraph": True})
    static = record(tmp_path / "static", model_spec("Elementwise"), calls, {"dynamic": None, "fullgraph": True},
                    settings=setting)
    assert json.loads((static / "corpus.json").read_text())["dynamo_config"] == setting
    assert "dynamo_config" not in json.loads((default / "corpus.json").read_text())
    analysed = read_catalog(guardscope.analyze(static, tmp_path / "out-static").out_dir)
    assert analysed["summary"]["compile_samples"] == plain_static["compiled"]
    assert analysed["compile"]["dynamo_config"] == setting
    assert read_catalog(guardscope.analyze(default, tmp_path / "out-default").out_dir)["summary"]["compile_samples"] \
        == plain_default["compiled"]


# --- generation traffic: the limit reached in the middle of a request ----------------------------


def generation_calls(prompts=(3, 2, 4, 2, 5), steps=4):
    """Per request: a prefill of its prompt, then one-token decode steps, each given the cache the
    step before returned (as generate() does); ``[(request, step, args)]``."""
    from ..models import CacheDecoder

    model, generator = CacheDecoder().eval(), torch.Generator().manual_seed(0)
    calls = []
    with torch.no_grad():
        for request, length in enumerate(prompts):
            cache, ids = torch.zeros(1, 0, 4), torch.randint(0, 32, (1, length), generator=generator)
            for step in range(steps + 1):
                calls.append((f"r{request}", step, (ids, cache)))
                _, cache = model(ids, cache)
                ids = torch.randint(0, 32, (1, 1), generator=generator)
    return calls


def test_generation_traffic_that_reaches_the_limit_mid_request_names_the_request_and_step(tmp_path):
    """Static shapes (dynamic=False): every new cache length is a graph, so production's ninth graph
    falls inside a request, at a decode step; the catalog names that request and step, and which
    calls fail, as plain torch.compile with torch's defaults does on the same calls."""
    from ..models import CacheDecoder

    calls = generation_calls()
    traffic = TrafficRecorder(tmp_path / "traffic", model=model_spec("CacheDecoder"),
                              compile={"dynamic": False, "fullgraph": True})
    with torch.inference_mode():  # as plain_run serves them
        for request in dict.fromkeys(tag for tag, _, _ in calls):
            with traffic.request(request):  # its calls are steps 0, 1, 2...
                for _, _, args in (call for call in calls if call[0] == request):
                    traffic.offer(args, {})
    traffic.close()
    production = read_catalog(guardscope.analyze(tmp_path / "traffic", tmp_path / "out").out_dir)["production"]
    plain = plain_run(CacheDecoder().eval(), [(args, {}) for _, _, args in calls], dynamic=False, fullgraph=True)
    assert production["failed_samples"] == plain["failed"] and plain["failed"]
    first = plain["failed"][0]
    (frame,) = production["frames"]
    assert frame["reached_at"] == {"sample": first, "request": calls[first][0], "step": calls[first][1]}
    assert calls[first][1] > 0  # a decode step: the request had started compiled


# --- fixes that need more graphs than the limit ---------------------------------------------------


@pytest.mark.slow  # the usage line compiles with torch.compile's default backend, inductor
def test_a_warmup_that_needs_more_graphs_than_the_limit_runs_as_its_usage_line_says(tmp_path, monkeypatch):
    """Lists of 1..12 crops need 12 graphs, production allows 8. The generated module's usage line,
    run exactly as shown, compiles with torch 2.13's per-call recompile_limit=12 (no global setting
    changes), and serving every recorded call afterwards compiles nothing and fails nothing."""
    import sys

    from guardscope import pipeline
    from guardscope.report.recommendation import usage_code

    from ..models import ListSum

    calls = crops()
    corpus = record(tmp_path / "corpus", model_spec("ListSum"), calls, {"fullgraph": True})
    out = guardscope.analyze(corpus, tmp_path / "out").out_dir
    pipeline.emit_warmup(out)
    code = usage_code((out / "warmup.py").read_text())
    per_call = torch_compat.supports_per_call_recompile_limit()
    graphs = read_catalog(out)["production"]["frames"][0]["graphs_needed"]
    assert ("recompile_limit=" in code) == per_call and graphs > 8
    monkeypatch.syspath_prepend(str(out))
    sys.modules.pop("warmup", None)
    torch._dynamo.reset()
    limit_before = torch._dynamo.config.recompile_limit
    namespace = {"model": ListSum()}
    exec(code, namespace)  # the usage block as the module and the report show it
    assert (torch._dynamo.config.recompile_limit == limit_before) == per_call  # else raised globally
    compiled = []
    torch._dynamo.callback.on_compile_start(lambda _: compiled.append(1))
    with torch.inference_mode():
        for args, kwargs in calls:
            namespace["compiled"](*args, **kwargs)
    torch._dynamo.reset()
    torch._dynamo.config.recompile_limit = limit_before
    sys.modules.pop("warmup", None)
    assert compiled == []
