"""guardscope bench: serving latency per strategy, each in a fresh process, with the recommendation.

The statistics, targets, recommendation, table and report section are checked on hand-made
results; the processes on the CPU with tiny models: a crash and a timeout each become a failed
row, and one real run of all five strategies with inductor (slow: every strategy compiles from
empty caches, AOTInductor included).

This file holds the pure tests (no torch.compile, no child process); the others are in
tests/integration/test_bench.py, tests/subprocess/test_bench.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from guardscope.cli import main
from guardscope.proving.bench_results import (
    Criteria,
    apply_targets,
    build_document,
    empty_row,
    format_table,
    latency_stats,
    percentile,
    recommend,
    summarize,
)
from guardscope.report.page import write_report
from guardscope.text import format_ratio, missed_targets

GOLDEN_CATALOG = Path(__file__).parents[1] / "golden" / "seed_catalog.json"


def _raw(requests, setup_graphs=0, setup_seconds=0.0, fallbacks=(), errors=(), paired=()):
    """A strategy process's report; ``requests`` are (sample, seconds) or (sample, seconds, graphs)."""
    return {"requests": [[*r, 0][:3] for r in requests], "setup_graphs": setup_graphs,
            "setup_seconds": setup_seconds, "fallbacks": [list(f) for f in fallbacks],
            "errors": [list(e) for e in errors], "device_name": "Test GPU", "paired": [list(p) for p in paired]}


def _measured(name, mean_ms, *, setup=0.0, setup_graphs=None, recompiles=(), worst_ms=None, paired=()):
    """A row of two steady requests averaging ``mean_ms``, the slower ``worst_ms``; then one
    compiling request per entry of ``recompiles`` (seconds)."""
    worst = worst_ms if worst_ms is not None else mean_ms + 1
    requests = [(0, (2 * mean_ms - worst) / 1e3), (1, worst / 1e3)]
    requests += [(10 + position, seconds, 1) for position, seconds in enumerate(recompiles)]
    if setup_graphs is None:
        setup_graphs = 0 if name in ("eager", "compile") else 1
    return summarize(name, _raw(requests, setup_graphs=setup_graphs, setup_seconds=setup, paired=paired))


# --- pure --------------------------------------------------------------------------------------


def test_percentile_interpolates_like_numpy():
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.99) == pytest.approx(3.97)
    assert percentile([7.0], 0.99) == 7.0
    stats = latency_stats([0.003, 0.001, 0.002])
    assert stats == {"count": 3, "mean_ms": 2.0, "p50_ms": 2.0, "p99_ms": 2.98, "max_ms": 3.0}
    assert latency_stats([]) is None


def test_summarize_plain_compile():
    # request 0 compiles first (no graph before it), request 2 recompiles two graphs (a graph
    # break), request 3 raises
    raw = _raw([(0, 1.5, 1), (1, 0.002), (2, 0.8, 2), (3, 0.001), (0, 0.004)], errors=[(3, "ValueError: bad")])
    row = summarize("compile", raw, wall_seconds=9.87654)
    assert row["status"] == "ok" and row["setup_graphs"] == 0 and row["replay_compiles"] == 3
    assert row["first_compile"] == {"request": 0, "sample": 0, "latency_s": 1.5, "graphs": 1}
    assert row["recompiles"] == 1
    assert row["recompile_requests"] == [{"request": 2, "sample": 2, "latency_s": 0.8, "graphs": 2}]
    assert row["recompile_latency"] == {"mean_s": 0.8, "max_s": 0.8}
    assert row["steady"]["count"] == 2 and row["steady"]["mean_ms"] == 3.0  # requests 1 and 4
    assert row["worst_ms"] == 1500.0 and row["worst_sample"] == 0
    assert row["errors"] == 1 and row["error_requests"] == [{"request": 3, "sample": 3, "error": "ValueError: bad"}]
    assert row["fallbacks"] is None and row["wall_seconds"] == 9.877


def test_summarize_after_a_warmup_every_compile_is_a_recompile():
    row = summarize("warmup", _raw([(0, 0.001), (1, 0.9, 1), (2, 0.003)], setup_graphs=2, setup_seconds=12.3456789))
    assert row["first_compile"] is None and row["recompiles"] == 1
    assert [e["sample"] for e in row["recompile_requests"]] == [1]
    assert row["setup_seconds"] == 12.3457 and row["setup_graphs"] == 2


def test_summarize_export_counts_fallbacks_as_served_requests():
    row = summarize("export", _raw([(0, 0.002), (1, 0.004)], setup_graphs=1,
                                   fallbacks=[(1, "Expected input at x.shape[0] to be <= 6, but got 9")]))
    assert row["fallbacks"] == 1 and row["fallback_requests"][0]["sample"] == 1
    assert row["steady"]["count"] == 2 and row["recompiles"] == 0


def test_targets_and_recommendation_pick_the_fastest_plan_that_meets_them():
    rows = [
        _measured("eager", 6.0, worst_ms=10.0),
        _measured("compile", 4.0, recompiles=[14.0, 7.0]),
        _measured("warmup", 4.6, setup=58.0, setup_graphs=10),
        _measured("unbacked", 5.8, setup=14.0),
        empty_row("export", "failed", "the benchmark process died of SIGSEGV"),
    ]
    document = build_document(rows, criteria=Criteria(), torch_version="2.11.0", device="cuda",
                              options={"backend": "inductor"}, corpus_path="../c", samples=2, repeat=1)
    by_name = {r["name"]: r for r in document["strategies"]}
    assert by_name["eager"]["speedup"] == 1.0 and by_name["eager"]["targets"] is None
    assert by_name["compile"]["recompiles"] == 1 and by_name["compile"]["first_compile"]["latency_s"] == 14.0
    assert by_name["compile"]["targets"]["recompiles"]["met"] is False
    assert by_name["compile"]["targets"]["worst_ratio"]["value"] == 1400.0
    warmup = by_name["warmup"]["targets"]
    assert warmup["speedup"] == {"value": 1.3043, "limit": 1.25, "met": True, "basis": "processes"}
    assert all(t["met"] for t in warmup.values())
    assert by_name["unbacked"]["targets"]["speedup"]["met"] is False
    assert by_name["export"]["targets"] is None
    assert document["recommendation"]["strategy"] == "warmup" and document["recommendation"]["meets_targets"]
    assert document["device_name"] == "Test GPU"

    # a set-up over the limit leaves no plan meeting every target: the closest one, flagged
    rows[2] = _measured("warmup", 4.6, setup=80.0, setup_graphs=10)
    recommendation = recommend(apply_targets(rows, Criteria()))
    assert recommendation["strategy"] == "warmup" and not recommendation["meets_targets"]
    assert "set-up 80.0 s (at most 70 s)" in recommendation["reason"]
    assert "Eager serving stays the predictable choice" in recommendation["reason"]

    # looser criteria make it pass again
    assert recommend(apply_targets(rows, Criteria(max_setup_seconds=90)))["meets_targets"]


def test_the_speedup_target_is_judged_on_the_paired_ratio_when_measured():
    # The eager process measured 6 ms, the warmup's process 4.6 ms (1.30x across processes); in the
    # warmup's own process eager took 5.0 and 5.4 ms on the same requests against 4.4 and 4.8 ms:
    # 10.4 / 9.2 = 1.13x paired, which misses the 1.25x target.
    pairs = [(0, 0.0050, 0.0044), (1, 0.0054, 0.0048)]
    rows = apply_targets([_measured("eager", 6.0, worst_ms=10.0),
                          _measured("warmup", 4.6, setup=5.0, paired=pairs)], Criteria())
    warmup = rows[1]
    assert warmup["speedup"] == 1.3043
    assert warmup["paired"] == {"requests": 2, "eager_mean_ms": 5.2, "mean_ms": 4.6, "speedup": 1.1304}
    assert warmup["targets"]["speedup"] == {"value": 1.1304, "limit": 1.25, "met": False, "basis": "paired"}
    recommendation = recommend(rows)
    assert not recommendation["meets_targets"] and "speedup 1.13x paired (at least 1.25x)" in recommendation["reason"]
    document = build_document(rows, criteria=Criteria(), torch_version="2.11.0", device="cuda",
                              options={}, corpus_path="c", samples=2, repeat=1, paired=1)
    text = format_table(document)
    assert text.splitlines()[2].split()[-2:] == ["1.30x", "1.13x"]
    assert "paired with eager in its own process (2 requests): 4.60 ms against eager's 5.20 ms" in text
    # No pairs (eager, or --paired 0): the processes' ratio is judged
    assert summarize("warmup", _raw([(0, 0.004)], setup_graphs=1))["paired"] is None


def test_a_bench_that_compiles_torchs_bytecode_every_start_says_so(tmp_path):
    from guardscope.proving.bench_results import bytecode_note

    assert bytecode_note(dont_write_bytecode=False, torch_bytecode_cached=False) is None
    assert bytecode_note(dont_write_bytecode=True, torch_bytecode_cached=True) is None
    note = bytecode_note(dont_write_bytecode=True, torch_bytecode_cached=False)
    assert note.startswith("PYTHONDONTWRITEBYTECODE is set") and "PYTHONPYCACHEPREFIX" in note
    document = build_document([_measured("eager", 6.0)], criteria=Criteria(), torch_version="2.11.0",
                              device="cuda", options={}, corpus_path="c", samples=2, repeat=1, notes=(note,))
    assert document["notes"] == [note]
    assert f"note        {note}" in format_table(document).splitlines()
    shutil.copy(GOLDEN_CATALOG, tmp_path / "catalog.json")
    (tmp_path / "bench.json").write_text(json.dumps(document))
    page = write_report(tmp_path).read_text()
    assert "PYTHONDONTWRITEBYTECODE is set and torch has no cached bytecode here" in page


def test_without_an_eager_row_speedup_and_worst_are_unknown():
    rows = apply_targets([_measured("warmup", 4.6, setup=5.0)], Criteria())
    assert rows[0]["speedup"] is None and rows[0]["targets"]["speedup"]["met"] is None
    recommendation = recommend(rows)
    assert not recommendation["meets_targets"] and "speedup unknown (no eager row)" in recommendation["reason"]
    assert recommend([empty_row("warmup", "skipped", "warmup.py not found")])["reason"] == \
        "No plan ran to the end: warmup skipped"


def test_a_small_worst_ratio_keeps_its_digits():
    assert [format_ratio(v) for v in (957.8123, 1.0, 0.95, 0.04, 0.0412, 0.0001)] == [
        "957.8x", "1.0x", "0.95x", "0.04x", "0.041x", "0.0001x"]
    # eager's worst request was a slow first call the warmup's never had: 1.2 ms against 30 ms
    rows = apply_targets([_measured("eager", 6.0, worst_ms=30.0), _measured("warmup", 1.0, worst_ms=1.2)],
                         Criteria(min_speedup=1.0))
    assert rows[1]["targets"]["worst_ratio"] == {"value": 0.04, "limit": 3.0, "met": True, "unknown": None}
    assert "worst request 0.04x eager's worst" in recommend(rows)["reason"]
    strict = apply_targets(rows, Criteria(min_speedup=1.0, max_worst_ratio=0.01))
    assert "worst request 0.04x eager's worst (at most 0.01x)" in recommend(strict)["reason"]


def test_an_unknown_worst_ratio_says_why():
    warmup = _measured("warmup", 4.6)

    def why(*eager):
        [row] = [r for r in apply_targets([*eager, warmup], Criteria()) if r["name"] == "warmup"]
        assert row["targets"]["worst_ratio"]["value"] is None
        return next(m for m in missed_targets(row) if m.startswith("worst"))

    assert why() == "worst request unknown (no eager row)"
    assert why(empty_row("eager", "failed", "timed out after 300 s")) == "worst request unknown (eager failed)"
    assert why(dict(_measured("eager", 6.0), worst_ms=0.0)) == \
        "worst request unknown (eager's worst request measured 0 ms)"


def test_format_table():
    rows = [_measured("eager", 6.0, worst_ms=10.0), _measured("compile", 4.0, recompiles=[14.0, 7.0]),
            empty_row("export", "failed", "timed out after 300 s")]
    document = build_document(rows, criteria=Criteria(), torch_version="2.11.0", device="cuda",
                              options={}, corpus_path="c", samples=2, repeat=1)
    text = format_table(document)
    lines = text.splitlines()
    assert lines[0].split() == ["strategy", "set-up", "graphs", "recompiles", "mean", "p50", "p99", "max",
                                "worst", "speedup", "paired"]
    assert lines[1].split() == ["eager", "0", "s", "0", "0", "6.00", "ms", "6.00", "ms", "9.92", "ms", "10.00", "ms",
                                "10.00", "ms", "1.00x", "—"]
    assert "first compile 14.00 s (sample 10)" in text and "recompiles at samples [11]: mean 7.00 s" in text
    assert "export    FAILED: timed out after 300 s" in text
    assert text.splitlines()[-1].startswith("recommended none: No plan ran to the end: export failed")


# --- the report section ------------------------------------------------------------------------


def test_report_shows_the_bench_table_when_bench_json_exists(tmp_path):
    shutil.copy(GOLDEN_CATALOG, tmp_path / "catalog.json")
    page = write_report(tmp_path).read_text()
    assert 'id="latency"' not in page and 'href="#latency"' not in page
    warmup = _measured("warmup", 4.6, setup=58.0, setup_graphs=10, paired=[(0, 0.0062, 0.0046), (1, 0.0058, 0.0046)])
    warmup["bundle"] = {"status": "loaded", "file": "warmup.compile-cache.bin", "reason": None}
    rows = [_measured("eager", 6.0, worst_ms=10.0), warmup,
            empty_row("export", "failed", "the benchmark process died of SIGSEGV <during load>")]
    document = build_document(rows, criteria=Criteria(), torch_version="2.11.0", device="cuda",
                              options={"backend": "inductor", "dynamic": True}, corpus_path="../gnn-full",
                              samples=300, repeat=1)
    (tmp_path / "bench.json").write_text(json.dumps(document))
    page = write_report(tmp_path).read_text()
    section = page[page.index('<section id="latency">'):]
    section = section[:section.index("</section>")]
    assert 'href="#latency"' in page and 'href="bench.json"' in page
    assert "Test GPU" in section and "Recommended: warmup</strong>" in section
    assert 'id="bench-warmup"' in section and "58.00 s" in section and "1.30×" in section and "4.60 ms" in section
    assert "Paired with eager in its own process over 2 requests: 4.60 ms against eager's 6.00 ms" in section
    assert section.count("1.30×") == 2  # 6.0 / 4.6 across processes, 12.0 / 9.2 paired
    assert "warmup.compile-cache.bin</code>: loaded" in section
    text = format_table(document)
    assert "  compile-cache bundle warmup.compile-cache.bin: loaded" in text.splitlines()
    assert "&lt;during load&gt;" in section  # text from the JSON is escaped
    assert "backend=inductor, dynamic=True" in section
    assert write_report(tmp_path).read_text() == page  # deterministic


def _generation_row(name="compile"):
    """Two generate() requests of 3 forward calls each (a prefill and two decode steps), replayed
    twice: request "a" compiles at its prefill and its first decode step in the first pass, "b"
    raises at its second decode step in both passes."""
    calls = [(0, 2.0, 1), (1, 1.0, 1), (2, 0.010), (3, 0.050), (4, 0.012), (5, 0.020)]
    calls += [(0, 0.040), (1, 0.011), (2, 0.009), (3, 0.060), (4, 0.013), (5, 0.030)]
    tags = {0: ("a", 0), 1: ("a", 1), 2: ("a", 2), 3: ("b", 0), 4: ("b", 1), 5: ("b", 2)}
    raw = _raw(calls, errors=[(5, "RuntimeError: boom"), (11, "RuntimeError: boom")])
    return summarize(name, raw, tags=tags.get, per_pass=6)


def test_generation_figures_count_prefills_decode_steps_and_compiling_requests():
    generation = _generation_row()["generation"]
    assert generation["requests"] == 4 and generation["calls"] == 12  # two requests, two passes
    # the first token: the prefills that did not compile (b twice, a in the second pass)
    assert generation["ttft"] == latency_stats([0.050, 0.060, 0.040])
    # the decode steps that neither compiled nor raised
    assert generation["tpot"] == latency_stats([0.010, 0.012, 0.011, 0.009, 0.013])
    assert generation["compiling_requests"] == 1 and generation["compile_calls_seconds"] == 3.0
    worst = generation["worst_request"]
    assert worst == {"request": "a", "pass": 0, "first_sample": 0, "calls": 3, "graphs": 2, "seconds": 3.01,
                     "compile_seconds": 3.0}
    assert generation["longest_compile_request"] == worst
    assert generation["request_time"]["count"] == 4
    # untagged corpora have no generation figures; an untagged call is left out of them
    assert summarize("compile", _raw([(0, 0.1)]))["generation"] is None
    assert summarize("compile", _raw([(0, 0.1)]), tags={}.get, per_pass=1)["generation"] is None


def test_generation_figures_in_the_table_and_the_report(tmp_path):
    shutil.copy(GOLDEN_CATALOG, tmp_path / "catalog.json")
    rows = [_generation_row("eager"), _generation_row("compile")]
    document = build_document(rows, criteria=Criteria(), torch_version="2.11.0", device="cuda",
                              options={"backend": "inductor", "dynamic": None}, corpus_path="../gen",
                              samples=6, repeat=2)
    text = format_table(document).splitlines()
    assert ("  generation: 4 requests (12 forward calls); time to first token 50.00 ms mean, 60.00 ms max; "
            "time per output token 11.00 ms mean, 12.96 ms p99") in text
    assert "  1 requests compiled, 3.00 s in their compiling calls; the most in request 'a': 3.00 s" in text
    assert "  worst request 'a': 3.01 s over 3 calls, 2 compiled" in text
    (tmp_path / "bench.json").write_text(json.dumps(document))
    section = write_report(tmp_path).read_text()
    section = section[section.index('<section id="latency">'):]
    assert section.count("Generation: 4 requests (12 forward calls); time to first token 50.00 ms mean") == 2
    assert "Worst request &#39;a&#39;: 3.01 s over 3 calls, 2 compiled." in section


# --- the command -------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_bench_needs_cuda_unless_cpu_is_asked_for(tmp_path):
    shutil.copy(GOLDEN_CATALOG, tmp_path / "catalog.json")
    result = CliRunner().invoke(main, ["bench", str(tmp_path)])
    assert result.exit_code == 2
    assert "torch.cuda.is_available() is False" in result.output and "--device cpu" in result.output
    assert not (tmp_path / "bench.json").exists()


def test_bench_rejects_bad_options(tmp_path):
    shutil.copy(GOLDEN_CATALOG, tmp_path / "catalog.json")
    result = CliRunner().invoke(main, ["bench", str(tmp_path), "--device", "cpu", "--repeat", "0"])
    assert result.exit_code == 2 and "--repeat 0 must be at least 1" in result.output
    result = CliRunner().invoke(main, ["bench", str(tmp_path / "missing"), "--device", "cpu"])
    assert result.exit_code == 2 and "catalog.json not found" in result.output
    assert "Examples:" in CliRunner().invoke(main, ["bench", "--help"]).output


def test_a_crash_report_ends_with_the_crash_not_with_warnings():
    from guardscope.proving.isolation import output_tail

    stderr = "\n".join([
        "/usr/lib/python3.12/copyreg.py:99: FutureWarning: `isinstance(treespec, LeafSpec)` is deprecated",
        "  return cls.__new__(cls, *args)",
        "Fatal Python error: Segmentation fault",
        "",
        "Current thread 0x00007f (most recent call first):",
        "/opt/torch/site-packages/torch/_inductor/codecache.py:12: UserWarning: something else",
        "  warnings.warn(message)",
        '  File "/opt/torch/site-packages/torch/_inductor/package.py", line 40 in load',
    ])
    assert output_tail(stderr, lines=3) == [
        "Fatal Python error: Segmentation fault",
        "Current thread 0x00007f (most recent call first):",
        '  File "/opt/torch/site-packages/torch/_inductor/package.py", line 40 in load',
    ]
    assert output_tail("") == []
