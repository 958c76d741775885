"""guardscope bench: serving latency per strategy, each in a fresh process, with the recommendation.

The statistics, targets, recommendation, table and report section are checked on hand-made
results; the processes on the CPU with tiny models: a crash and a timeout each become a failed
row, and one real run of all five strategies with inductor (slow: every strategy compiles from
empty caches, AOTInductor included).

This file holds the tests that start child processes, compile with inductor or drive the browser;
the others are in tests/unit/test_bench.py, tests/integration/test_bench.py.
"""

from __future__ import annotations

import json
import textwrap

import pytest
import torch
from click.testing import CliRunner

import guardscope
from guardscope import CorpusWriter, pipeline
from guardscope.cli import main

from ..conftest import model_spec


def _analysed(tmp_path, spec, inputs, name, compile_options):
    corpus = tmp_path / name
    with CorpusWriter(corpus, model=spec, compile=compile_options) as writer:
        for tensor in inputs:
            writer.add(tensor)
    out = tmp_path / f"{name}-out"
    guardscope.analyze(corpus, out)
    return corpus, out


def _large_input_corpus(tmp_path, spec, name):
    """One request of 8 elements: the models below misbehave above 3."""
    corpus = tmp_path / name
    with CorpusWriter(corpus, model=spec, compile={"dynamic": True}) as writer:
        writer.add(torch.ones(8))
    return corpus


def test_a_crash_and_a_timeout_are_failed_rows(tmp_path):
    # Segfaults dies on inputs of more than 3 elements: analysed on small ones, benched on a large one
    spec = model_spec("Segfaults")
    _, out = _analysed(tmp_path, spec, [torch.ones(2), torch.ones(3)], "crash", {"dynamic": True})
    large = _large_input_corpus(tmp_path, spec, "crash-large")
    document = pipeline.bench(out, device="cpu", corpus=large, strategies=("eager", "warmup"))
    eager, warmup = document["strategies"]
    assert eager["status"] == "failed" and eager["reason"].startswith("the benchmark process died of SIGSEGV")
    assert warmup["status"] == "skipped" and "guardscope emit-warmup" in warmup["reason"]
    assert document["corpus"] == {"path": "../crash-large", "samples": 1}
    assert json.loads((out / "bench.json").read_text()) == document

    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text(textwrap.dedent("""
        import time, torch

        @torch._dynamo.disable
        def _sleep_on_large(x):
            if x.numel() > 3:
                time.sleep(120)

        class Sleeps(torch.nn.Module):
            def forward(self, x):
                _sleep_on_large(x)
                return x.sin()
    """))
    spec = f"{sleeper}:Sleeps"
    _, out = _analysed(tmp_path, spec, [torch.ones(2)], "sleep", {"dynamic": True})
    large = _large_input_corpus(tmp_path, spec, "sleep-large")
    document = pipeline.bench(out, device="cpu", corpus=large, strategies=("eager",), timeout=5)
    assert document["strategies"][0]["status"] == "failed"
    assert document["strategies"][0]["reason"] == "timed out after 5 s"


@pytest.mark.slow
def test_all_five_strategies_with_inductor_on_the_cpu(tmp_path):
    """Slow: each strategy's row is a fresh child process compiling with inductor (the bench's
    subject is production's backend), five of them, on a six-request corpus."""
    # x.sin() * 2 over rows of 8: a row count of 1 recompiles (0/1 specialization)
    sizes = (3, 1, 4, 5, 1, 6)
    inputs = [torch.randn(n, 8, generator=torch.Generator().manual_seed(n)) for n in sizes]
    _, out = _analysed(tmp_path, model_spec("Elementwise"), inputs, "corpus", {"dynamic": True, "fullgraph": True})
    pipeline.emit_warmup(out)
    # The bench replays the analysed requests plus one beyond the export bounds (x_0 in 1..6).
    served = tmp_path / "served"
    with CorpusWriter(served, model=model_spec("Elementwise"), compile={"dynamic": True, "fullgraph": True}) as writer:
        for tensor in inputs + [torch.randn(9, 8)]:
            writer.add(tensor)
    result = CliRunner().invoke(main, ["bench", str(out), "--device", "cpu", "--corpus", str(served)])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "bench.json").read_text())
    rows = {r["name"]: r for r in document["strategies"]}
    assert list(rows) == ["eager", "compile", "warmup", "unbacked", "export", "precompiled"]
    # no 'guardscope precompile' was run: its row says how to make one, and is no failure
    assert rows.pop("precompiled")["status"] == "skipped" and "guardscope precompile" in result.output
    assert all(r["status"] == "ok" and r["requests"] == 7 and r["errors"] == 0 for r in rows.values()), rows
    assert rows["eager"]["setup_graphs"] == 0 and rows["eager"]["replay_compiles"] == 0
    assert rows["eager"]["steady"]["count"] == 7 and rows["eager"]["speedup"] == 1.0
    compiled = rows["compile"]
    assert compiled["first_compile"]["sample"] == 0 and compiled["recompiles"] == 1
    assert [e["sample"] for e in compiled["recompile_requests"]] == [1]
    assert compiled["steady"]["count"] == 5
    slowest_compile = max(e["latency_s"] for e in [compiled["first_compile"], *compiled["recompile_requests"]])
    assert compiled["worst_ms"] == pytest.approx(1e3 * slowest_compile, rel=1e-3)
    assert rows["warmup"]["setup_graphs"] == 2 and rows["warmup"]["recompiles"] == 0
    assert rows["unbacked"]["setup_graphs"] == 1 and rows["unbacked"]["recompiles"] == 0
    export = rows["export"]
    assert export["setup_graphs"] == 1 and export["recompiles"] == 0
    assert export["fallbacks"] == 1 and export["fallback_requests"][0]["sample"] == 6
    for row in rows.values():
        assert row["setup_seconds"] >= 0 and row["speedup"] > 0 and row["worst_ms"] >= row["steady"]["max_ms"]
    # No bundle was made: the plans' warmups found none to load
    assert rows["warmup"]["bundle"]["status"] == rows["unbacked"]["bundle"]["status"] == "absent"
    assert rows["eager"]["bundle"] is None and rows["export"]["bundle"] is None
    # Every compiled strategy timed eager beside it on the same 7 requests (one paired pass)
    assert rows["eager"]["paired"] is None
    for name in ("compile", "warmup", "unbacked", "export"):
        assert rows[name]["paired"]["requests"] == 7 and rows[name]["paired"]["speedup"] > 0, name
        assert rows[name]["targets"]["speedup"]["basis"] == "paired"
    assert document["compile"] == {"backend": "inductor", "dynamic": True, "fullgraph": True, "mode": None,
                                   "grad_mode": "inference_mode", "inference_mode": True}
    # The plain compile ran under production's limits (torch's 8 per function), which it never reached.
    assert compiled["limits"]["recompile_limit"] == 8 and compiled["limits"]["source"] == "torch default"
    assert (compiled["limit_failed"], compiled["uncompiled"]) == (0, 0)
    assert "under production's limits (recompile_limit 8, torch default): no request reached them" in result.output
    assert document["recommendation"]["strategy"] in ("warmup", "unbacked", "export")
    lines = result.output.splitlines()
    assert "strategy set-up graphs recompiles mean p50 p99 max worst speedup paired".split() in [line.split() for line in lines]
    assert lines[-2].startswith("recommended ") and lines[-1] == f"wrote       {out / 'bench.json'}, {out / 'report.html'}"
    assert 'id="bench-export"' in (out / "report.html").read_text()


def _recorded_generate(tmp_path, requests, cache="dynamic"):
    """generate() of a tiny GPT-2 over ``requests``, its forward wrapped by the traffic recorder
    with each request tagged, into ``tmp_path / "c"``; the count of recorded forward calls."""
    from guardscope.runtime import TrafficRecorder

    from .. import object_models as om

    model = om.gpt2()
    traffic = TrafficRecorder(tmp_path / "c", model=f"{om.__file__}:gpt2", compile={"dynamic": None})
    model.forward = traffic.wrap(model.forward)
    for position, request in enumerate(requests):
        with traffic.request(f"req-{position}"):
            om.generate_all(model, [request], cache=cache)
    traffic.close()
    return traffic.counts()["recorded"]


def test_a_recorded_generate_workload_gets_time_to_first_token_and_per_output_token(tmp_path):
    """generate() of a tiny GPT-2, its forward wrapped by the traffic recorder with each request
    tagged: guardscope bench groups the replayed forward calls by request (prefill, decode steps)."""
    from .. import object_models as om

    requests = om.prompts(4, seed=3, longest=24, max_batch=2, max_new=4)
    calls = _recorded_generate(tmp_path, requests)
    out = tmp_path / "out"
    guardscope.analyze(tmp_path / "c", out)
    result = CliRunner().invoke(main, ["bench", str(out), "--device", "cpu", "--backend", "eager", "--paired", "0",
                                       "--strategy", "eager", "--strategy", "compile"])
    assert result.exit_code == 0, result.output
    eager, compiled = json.loads((out / "bench.json").read_text())["strategies"]
    for row in (eager, compiled):
        generation = row["generation"]
        assert generation["requests"] == len(requests) and generation["calls"] == calls == row["requests"]
        assert generation["ttft"]["count"] + (generation["compiling_requests"] if row is compiled else 0) >= len(requests)
        # every request makes one decode call per new token after the first
        assert generation["tpot"]["count"] + (row["replay_compiles"] or 0) >= sum(new - 1 for _, new in requests)
    assert eager["generation"]["compiling_requests"] == 0
    compiling = compiled["generation"]
    assert compiling["compiling_requests"] >= 1 and compiling["compile_calls_seconds"] > 0
    assert compiling["worst_request"]["graphs"] >= 1  # the first request compiles its prefill
    assert "  generation: 4 requests" in result.output and "time per output token" in result.output


def test_the_paired_pass_gives_each_half_its_own_static_cache(tmp_path):
    """A static cache is written in place and counts its length: the eager half of a pair must not
    hand the served half a cache one step further on. Run twice on one cache, a request's last
    decode step writes past the cache's end (IndexError eagerly, an inductor CPU kernel's bounds
    check aborts the process), and the pair is lost: every replayed call must give a pair."""
    from .. import object_models as om

    requests = om.prompts(3, seed=3, longest=16, max_batch=2, max_new=3)
    calls = _recorded_generate(tmp_path, requests, cache="static")
    assert calls > len(requests)  # decode steps, each the last one of a full cache at its request's end
    out = tmp_path / "out"
    guardscope.analyze(tmp_path / "c", out)
    result = CliRunner().invoke(main, ["bench", str(out), "--device", "cpu", "--backend", "eager", "--paired", "1",
                                       "--strategy", "compile"])
    assert result.exit_code == 0, result.output
    (compiled,) = json.loads((out / "bench.json").read_text())["strategies"]
    assert compiled["status"] == "ok" and compiled["errors"] == 0, compiled
    assert compiled["paired"]["requests"] == calls, compiled["paired"]


@pytest.mark.parametrize("fullgraph", [True, False])
def test_the_plain_compile_row_runs_under_productions_limits_as_plain_torch_compile_does(tmp_path, fullgraph):
    """Lists of 1..12 crops compile a graph per length: past torch's 8 graphs the plain compile row's
    requests fail (fullgraph) or run without a compiled graph, the same requests as plain
    torch.compile's and as the catalog's ``production`` says."""
    from ..integration.test_production_limits import crops, plain_run
    from ..models import ListSum

    calls = crops()
    corpus = tmp_path / "crops"
    with CorpusWriter(corpus, model=model_spec("ListSum"), compile={"fullgraph": fullgraph}) as writer:
        for args, kwargs in calls:
            writer.add(*args, **kwargs)
    out = tmp_path / "out"
    guardscope.analyze(corpus, out)
    catalog = json.loads((out / "catalog.json").read_text())
    plain = plain_run(ListSum(), calls, dynamic=None, fullgraph=fullgraph)
    result = CliRunner().invoke(main, ["bench", str(out), "--device", "cpu", "--backend", "eager",
                                       "--strategy", "eager", "--strategy", "compile"])
    assert result.exit_code == 0, result.output
    row = {r["name"]: r for r in json.loads((out / "bench.json").read_text())["strategies"]}["compile"]
    failed = [e["sample"] for e in row["error_requests"] if "RecompileLimit" in e["error"]]
    eager = [e["sample"] for e in row["uncompiled_requests"]]
    production = catalog["production"]
    assert (failed, eager) == (plain["failed"], plain["eager"]) == (production["failed_samples"], production["eager_samples"])
    assert (row["limit_failed"], row["uncompiled"]) == (len(failed), len(eager)) and (failed or eager)
    words = (f"{len(failed)} requests FAILED with FailOnRecompileLimitHit" if fullgraph
             else f"{len(eager)} ran without a compiled graph")
    assert f"under production's limits (recompile_limit 8, torch default): {words}" in result.output
