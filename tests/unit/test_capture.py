"""The structured-trace parser, on traces recorded by two torch versions (see each README).

This file holds the pure tests (no torch.compile, no child process); the others are in
tests/integration/test_capture.py.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardscope import torch_compat
from guardscope.catalog.classify import classify_reasons
from guardscope.replay.capture import TraceCapture
from guardscope.replay.events import events_from_records, guard_lines, parse_reasons
from guardscope.replay.trace import read_trace

FIXTURES = Path(__file__).parents[1] / "fixtures" / "traces"
VERSIONS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def test_fixtures_cover_two_torch_versions():
    assert len(VERSIONS) >= 2, VERSIONS


def _scenarios() -> list[tuple[str, str]]:
    found = []
    for version in VERSIONS:
        scenarios = json.loads((FIXTURES / version / "expected.json").read_text())["scenarios"]
        found += [(version, name) for name in sorted(scenarios)]
    return found


def _expected(version: str, scenario: str) -> dict:
    recorded = json.loads((FIXTURES / version / "expected.json").read_text())["scenarios"][scenario]
    return recorded if isinstance(recorded, dict) else {"events": recorded, "graph_breaks": []}


@pytest.mark.parametrize("version,scenario", _scenarios())
def test_parser_reproduces_recorded_events(version, scenario):
    folder = FIXTURES / version
    expected = _expected(version, scenario)
    with open(folder / f"{scenario}.log", encoding="utf-8") as handle:
        records, unreadable = read_trace(handle)
    assert unreadable == 0
    parsed = events_from_records(records)
    assert parsed.unparsed == {}
    got = [
        {
            "compile_id": e.compile_id,
            "sample": e.sample,
            "reasons": len(e.reasons),
            "kinds": sorted({c.value for f in classify_reasons(e.reasons) for c in f.causes}),
        }
        for e in parsed.events
    ]
    assert got == expected["events"]
    breaks = sorted({(b.location or "", b.reason) for b in parsed.graph_breaks})
    assert [list(b) for b in breaks] == [list(b) for b in expected["graph_breaks"]]
    assert all(e.seconds is not None and e.seconds > 0 for e in parsed.events)
    assert all(e.guards for e in parsed.events), "every compile carries its guard lines"
    assert all(e.location for e in parsed.events), "every compile names its code's location"
    assert "other" not in {k for item in got for k in item["kinds"]}


@pytest.mark.parametrize("version", VERSIONS)
def test_real_model_fixtures_show_frames_and_graph_breaks(version):
    scenarios = json.loads((FIXTURES / version / "expected.json").read_text())["scenarios"]
    if "real_gcn" not in scenarios:
        pytest.skip(f"the torch {version} fixture predates the real-model scenarios")
    gcn, gated = _expected(version, "real_gcn"), _expected(version, "real_gated")
    assert len({e["compile_id"].split("/")[0] for e in gcn["events"]}) > 2  # PyG breaks into frames
    assert gcn["graph_breaks"] and gated["graph_breaks"]
    assert any("item()" in reason for _, reason in gated["graph_breaks"])
    bert = _expected(version, "real_bert")
    assert {k for e in bert["events"] for k in e["kinds"]} >= {"optional_argument"}


def test_gnn_fixture_kinds_are_the_seed_articles():
    for version in VERSIONS:
        expected = _expected(version, "gnn")["events"]
        assert [e["sample"] for e in expected] == [0, 1, 3, 4]
        assert expected[1]["kinds"] == ["duck_sizing"]
        assert "zero_one_specialization" in expected[2]["kinds"]


def test_recompile_reasons_payload_forms():
    assert parse_reasons("0/0: a == b") == ["0/0: a == b"]
    assert parse_reasons('[\n"0/1: x",\n"0/0: y"\n]') == ["0/1: x", "0/0: y"]
    assert parse_reasons('"0/0: quoted"') == ["0/0: quoted"]
    assert parse_reasons("[not json") is None
    assert parse_reasons(None) is None


def test_guard_lines_keep_inputs_not_parameters():
    payload = "\n".join(
        [
            "TREE_GUARD_MANAGER:",
            "+- RootGuardManager",
            "| +- GuardManager: source=L['x']",
            "| | +- TENSOR_MATCH: check_tensor(L['x'], Tensor, DispatchKeySet(CPU), torch.float32, device=None, requires_grad=False, size=[None, 4], stride=[4, 1])",
            "| | | +- TENSOR_MATCH: check_tensor(L['self']._modules['a']._parameters['weight'], Parameter, DispatchKeySet(CPU), torch.float32, device=None, requires_grad=True, size=[8, 4], stride=[4, 1])",
            "+- LAMBDA_GUARD: 2 <= L['x'].size()[0]  # comment",
        ]
    )
    lines = guard_lines(payload)
    assert len(lines) == 2
    assert lines[0].startswith("TENSOR_MATCH: check_tensor(L['x']")
    assert lines[1].startswith("LAMBDA_GUARD: 2 <= L['x'].size()[0]")


def test_capture_restores_the_trace_logger():
    logger = torch_compat.trace_logger()
    handlers, level = list(logger.handlers), logger.level
    with TraceCapture():
        assert len(logger.handlers) == len(handlers) + 1
    assert logger.handlers == handlers and logger.level == level


_line = st.one_of(
    st.text(max_size=80),
    st.builds(lambda body: f"V1129 15:37:41.123456 42 torch/_dynamo/x.py:1] {body}", st.text(max_size=80)),
    st.builds(
        lambda meta, payload: f"V1129 15:37:41.123456 42 x.py:1] {json.dumps(meta)}\n\t{payload}",
        st.dictionaries(
            st.sampled_from(["compilation_metrics", "artifact", "dynamo_cpp_guards_str", "frame_id",
                             "frame_compile_id", "dynamo_start", "recompile_reasons"]),
            st.recursive(st.none() | st.integers() | st.text(max_size=10),
                         lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                         max_leaves=6),
            max_size=4,
        ),
        st.text(max_size=60),
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_line, max_size=12))
def test_mangled_traces_never_raise(lines):
    records, _ = read_trace("\n".join(lines).splitlines())
    parsed = events_from_records(records)
    for event in parsed.events:
        classify_reasons(event.reasons)


def test_mangled_fixture_lines_never_raise():
    folder = FIXTURES / VERSIONS[0]
    lines = (folder / "gnn.log").read_text().splitlines()
    # Drop every third line and truncate others: payloads lose their heads, JSON breaks.
    mangled = [line[: len(line) // 2] if i % 5 == 0 else line for i, line in enumerate(lines) if i % 3]
    records, unreadable = read_trace(mangled)
    events_from_records(records)
    assert unreadable > 0


def test_trace_logger_level_is_debug_inside_capture():
    with TraceCapture():
        assert torch_compat.trace_logger().isEnabledFor(logging.DEBUG)
