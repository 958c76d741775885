"""bench/suite_phases.py's report: the pipeline steps' seconds over a run, and the tests that
spent the most in each (the plugin's timing runs in the whole suite; docs/benchmarks.md §19)."""

from __future__ import annotations

from bench.suite_phases import summarise


def test_steps_are_summed_largest_first_with_their_share_and_heaviest_tests():
    records = [
        {"step": "verify", "test": "t1", "seconds": 3.0},
        {"step": "analyze", "test": "t1", "seconds": 1.0},
        {"step": "analyze", "test": "t2", "seconds": 4.5},
        {"step": "verify", "test": "t2", "seconds": 1.0},
        {"step": "analyze", "test": "t2", "seconds": 0.5},
    ]
    lines = summarise(records, test_seconds=20.0, top=1)
    assert lines[0] == "pipeline steps: 10.0 s in all (50% of 20 s of test time)"
    assert [line.split()[0] for line in lines[1:3]] == ["analyze", "verify"]
    assert "6.0 s" in lines[1] and "3 calls" in lines[1] and "4.0 s" in lines[2] and "2 calls" in lines[2]
    # one test per step (top=1): t2's two analyses summed, t1's verify
    assert lines[3:] == ["analyze, the most:", "      5.0 s  t2", "verify, the most:", "      3.0 s  t1"]


def test_no_records_and_no_test_time_say_nothing_was_timed():
    assert summarise([], test_seconds=0.0) == ["pipeline steps: 0.0 s in all"]
