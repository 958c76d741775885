"""Production's recorded compile stalls matched to the analysis's compiles (catalog.stalls) and
said in the summary (terminal.stall_lines): pure, no compile."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from guardscope.catalog.stalls import production_stalls, stall_seconds
from guardscope.corpus.storage.compile_log import append_compiles, compile_record, merge_compile_logs, read_compiles
from guardscope.model import CompileEvent
from guardscope.terminal import stall_lines


def event(compile_id: str, sample: int, co_name: str = "forward", location: str = "app/model.py:12",
          seconds: float = 0.1) -> CompileEvent:
    frame, order = map(int, compile_id.split("/"))
    return CompileEvent(compile_id=compile_id, frame_id=frame, frame_compile_id=order, sample=sample,
                        co_name=co_name, seconds=seconds, location=location)


def record(compile_id: str, seconds: float, *, replica: str = "web-a:1", trigger: str = "dynamo",
           co_name: str = "forward", location: str = "app/model.py:12") -> dict:
    return {"compile_id": compile_id, "seconds": seconds, "trigger": trigger, "co_name": co_name,
            "location": location, "replica": replica, "backend": "inductor", "start_ns": 0}


ANALYSIS = [event("0/0", 0), event("0/1", 4), event("1/0", 4, co_name="torch_dynamo_resume_in_forward_at_20",
                                                        location="app/model.py:20"), event("0/2", 9)]


def test_each_analysis_compile_gets_the_recorded_compile_of_the_same_frame_code_and_order():
    # Production numbered its frames differently: another compiled function came first (frame 0),
    # and the model's resume function is frame 7 there.
    records = [record("0/0", 5.0, co_name="helper", location="app/util.py:3"),
               record("1/0", 9.5), record("1/1", 12.25),
               record("7/0", 2.0, co_name="torch_dynamo_resume_in_forward_at_20", location="app/model.py:20"),
               record("1/1", 3.5, trigger="lazy_backward"), record("1/2", 8.0)]
    stalls = production_stalls(records, ANALYSIS)
    assert [(c["compile_id"], c["production_compile_id"], c["seconds"]) for c in stalls["compiles"]] == [
        ("0/0", "1/0", 9.5), ("0/1", "1/1", 12.25), ("0/2", "1/2", 8.0), ("1/0", "7/0", 2.0)]
    assert stalls["compiles"][1]["backward_seconds"] == 3.5
    assert stall_seconds(stalls) == {"0/0": 9.5, "0/1": 15.75, "0/2": 8.0, "1/0": 2.0}
    assert stalls["unmatched"] == [] and stalls["backend"] == "inductor"
    assert stalls["replicas"] == {"web-a:1": {"compiles": 4, "seconds": 35.25, "startup_compiles": 0,
                                              "startup_seconds": 0.0, "other_compiles": 1}}


def test_compiles_made_before_the_recorder_opened_are_unmatched_not_guessed():
    stalls = production_stalls([record("0/1", 12.0), record("0/2", 8.0)], ANALYSIS)
    assert [c["compile_id"] for c in stalls["compiles"]] == ["0/1", "0/2"]
    assert stalls["unmatched"] == ["0/0", "1/0"]


def test_a_fleet_gets_each_replica_s_own_stalls_and_no_per_compile_guess():
    records = [record("0/0", 9.0), record("0/1", 4.0), record("0/0", 7.0, replica="web-b:2")]
    stalls = production_stalls(records, ANALYSIS)
    assert stalls["compiles"] == []
    assert stalls["replicas"] == {
        "web-a:1": {"compiles": 2, "seconds": 13.0, "startup_compiles": 0, "startup_seconds": 0.0, "other_compiles": 0},
        "web-b:2": {"compiles": 1, "seconds": 7.0, "startup_compiles": 0, "startup_seconds": 0.0, "other_compiles": 0}}


def test_a_warmup_s_compiles_before_serving_are_start_up_not_a_call_s_stall():
    records = [dict(record("0/0", 9.0), in_call=False), dict(record("0/1", 4.0), in_call=False),
               dict(record("0/2", 6.0), in_call=True)]
    stalls = production_stalls(records, ANALYSIS)
    assert stalls["replicas"]["web-a:1"] == {"compiles": 1, "seconds": 6.0, "startup_compiles": 2,
                                             "startup_seconds": 13.0, "other_compiles": 0}
    # the warmup shifted the process's numbering off the analysis's: no per-compile guess
    assert stalls["compiles"] == [] and stalls["unmatched"] == ["0/0", "0/1", "0/2", "1/0"]
    assert stall_lines(summary_catalog(stalls))[0] == (
        "stalls      production's process compiled 1 graphs while serving in 6.00 s and 2 before serving in "
        "13.00 s (inductor, as its recorder timed them; a warmup's graphs shift its compile numbers, so none is "
        "matched to the analysis's)")


def test_a_corpus_without_a_compile_log_says_nothing_of_production_s_stalls():
    assert production_stalls(None, ANALYSIS) is None
    assert stall_seconds(None) == {}


def summary_catalog(production_compiles, replicas=None):
    compiles = [SimpleNamespace(event=e) for e in ANALYSIS]
    return SimpleNamespace(production_compiles=production_compiles, compiles=compiles, compile={"backend": "eager"},
                           replicas=replicas)


def test_the_summary_says_which_seconds_are_production_s_and_which_the_analysis_s():
    stalls = production_stalls([record("0/0", 9.5), record("0/1", 12.25), record("0/2", 8.0)], ANALYSIS)
    lines = stall_lines(summary_catalog(stalls))
    assert lines[0] == ("stalls      production compiled these graphs in 29.75 s in all (inductor, as its recorder "
                        "timed them); slowest 12.25 s (compile 0/1, sample 4)")
    assert lines[1].startswith("  unmatched 1 of the analysis's compiles have no recorded compile (first 1/0)")
    assert lines[2] == ("analysis    compiling took 0.40 s in all, slowest 0.10 s (compile 0/0): the analysis's own "
                        "cost with backend=eager on this machine")


def test_without_a_record_the_analysis_seconds_say_they_are_not_production_s():
    assert stall_lines(summary_catalog(None)) == [
        "analysis    compiling took 0.40 s in all, slowest 0.10 s (compile 0/0): the analysis's own cost with "
        "backend=eager on this machine, not production's stall (a TrafficRecorder records that)"]


def test_the_compile_log_survives_a_torn_last_line_and_merges_a_fleet(tmp_path):
    a, b, merged = tmp_path / "a", tmp_path / "b", tmp_path / "merged"
    for folder in (a, b, merged):
        folder.mkdir()
    observed = {"compile_id": "0/0", "trigger": "dynamo", "start_ns": 1, "seconds": 2.5, "co_name": "forward",
                "co_filename": "/srv/app/venv/lib/site-packages/app/model.py", "co_firstlineno": 12}
    line = compile_record(observed, replica="web-a:1", backend="inductor")
    assert line["location"] == "app/model.py:12" and "co_filename" not in line  # no machine path kept
    append_compiles(a, [line])
    with open(a / "compiles.jsonl", "a") as log:
        log.write('{"compile_id": "0/1", "seco')  # a process killed mid-line
    append_compiles(b, [dict(line, replica="web-b:2")])
    assert read_compiles(a) == [line]
    assert read_compiles(tmp_path) is None
    assert merge_compile_logs([a, b], merged) == 2
    assert [r["replica"] for r in read_compiles(merged)] == ["web-a:1", "web-b:2"]


def test_without_a_record_the_report_takes_the_stalls_bench_measured_with_production_s_backend():
    from guardscope.proving.bench_results import summarize
    from guardscope.report.common import compile_costs

    # The plain compile's requests as bench's child reports them: [sample, seconds, graphs compiled];
    # sample 4 compiled two graphs (two frames): the request's latency goes to the first.
    raw = {"requests": [[0, 3.2, 1], [1, 0.001, 0], [4, 2.5, 2], [5, 0.001, 0], [9, 1.8, 1]],
           "errors": [], "fallbacks": [], "setup_graphs": 0, "setup_seconds": 0.0, "device_name": "cpu"}
    bench = {"device": "cpu", "compile": {"backend": "inductor"}, "strategies": [summarize("compile", raw)]}
    catalog = {"compile": {"backend": "eager"},
               "compiles": [{"compile_id": e.compile_id, "sample": e.sample, "fail_type": None} for e in ANALYSIS]}
    timings = {"compiles": [{"compile_id": e.compile_id, "seconds": e.seconds} for e in ANALYSIS]}
    costs = compile_costs(catalog, timings, bench)
    assert costs["source"] == "bench" and costs["backend"] == "inductor"
    assert costs["seconds"] == {"0/0": 3.2, "0/1": 2.5, "0/2": 1.8}
    assert costs["analysis_seconds"] == pytest.approx(0.4)
    assert "guardscope bench measured (inductor on cpu" in costs["label"]
    # production's own record wins over bench's measurement; neither: the analysis's, labelled so
    catalog["production_compiles"] = production_stalls([record("0/0", 9.5)], ANALYSIS)
    assert compile_costs(catalog, timings, bench)["source"] == "production"
    del catalog["production_compiles"]
    plain = compile_costs(catalog, timings, None)
    assert plain["source"] == "analysis" and "not production's stall" in plain["label"]
