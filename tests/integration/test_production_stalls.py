"""Issue 51, item 1: production's compile seconds, not the analysis's. A service compiles with
inductor (torch.compile's default) and records its traffic with a TrafficRecorder, which also
times each of the process's compiles (compiles.jsonl); the analysis replays with the eager
backend, and its catalog, summary and report give production's recorded seconds as the stall,
the analysis's eager seconds only as the analysis's own cost."""

from __future__ import annotations

import json

import pytest
import torch

import guardscope
from guardscope.corpus.storage.compile_log import COMPILE_LOG
from guardscope.corpus.writer import default_replica
from guardscope.text import format_seconds
from guardscope.runtime import TrafficRecorder
from guardscope.terminal import format_summary

from ..conftest import read_catalog
from ..models import Elementwise
from ..paths import model_spec
from .test_report import parse, stats, words

pytestmark = pytest.mark.slow  # the service compiles with inductor

# A first static graph, a dynamic one for the second batch size, a batch of 1 (0/1
# specialisation), then a call the dynamic graph serves.
BATCHES = (3, 5, 1, 6)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A service's traffic and its analysis: the model compiled with torch.compile's defaults,
    served under no_grad, recorded through TrafficRecorder.wrap."""
    folder = tmp_path_factory.mktemp("stalls")
    torch._dynamo.reset()
    model = Elementwise()
    traffic = TrafficRecorder(folder / "traffic", model=model_spec("Elementwise"))
    forward = traffic.wrap(torch.compile(model))
    with torch.no_grad():
        for batch in BATCHES:
            forward(torch.randn(batch, 4))
    traffic.close()
    torch._dynamo.reset()
    analysis = guardscope.analyze(folder / "traffic", folder / "out")
    return folder, analysis


def test_the_recorder_times_each_compile_of_the_process_it_serves_in(served):
    folder, _ = served
    lines = [json.loads(line) for line in (folder / "traffic" / COMPILE_LOG).read_text().splitlines()]
    assert [line["compile_id"] for line in lines] == ["0/0", "0/1", "0/2"]
    assert {line["trigger"] for line in lines} == {"dynamo"}
    assert {line["in_call"] for line in lines} == {True}  # each compiled inside a wrapped call
    assert {line["backend"] for line in lines} == {"inductor"}
    assert all(line["seconds"] > 0 and line.get("co_name") and line.get("location") for line in lines)
    assert {line["replica"] for line in lines} == {default_replica()}


def test_the_catalog_summary_and_report_give_production_s_recorded_seconds_not_the_analysis_s(served):
    folder, analysis = served
    recorded = {line["compile_id"]: line["seconds"] for line in
                map(json.loads, (folder / "traffic" / COMPILE_LOG).read_text().splitlines())}
    catalog = read_catalog(analysis.out_dir)
    assert catalog["compile"]["backend"] == "eager"  # the analysis's own backend
    stalls = catalog["production_compiles"]
    assert stalls["source"] == "recorded" and stalls["backend"] == "inductor" and stalls["unmatched"] == []
    assert {c["compile_id"]: c["seconds"] for c in stalls["compiles"]} == recorded
    assert [c["sample"] for c in stalls["compiles"]] == [c["sample"] for c in catalog["compiles"]] == [0, 1, 2]

    timings = json.loads((analysis.out_dir / "timings.json").read_text())
    eager = {c["compile_id"]: c["seconds"] for c in timings["compiles"]}
    assert eager != recorded  # two measurements of two backends, never one passed off as the other

    summary = format_summary(analysis)
    slowest = max(recorded, key=recorded.get)
    assert (f"stalls      production compiled these graphs in {sum(recorded.values()):.2f} s in all (inductor, "
            f"as its recorder timed them); slowest {recorded[slowest]:.2f} s (compile {slowest}") in summary
    assert "the analysis's own cost with backend=eager on this machine" in summary
    assert "compile time" not in summary

    page = parse((analysis.out_dir / "report.html").read_text())
    shown = stats(page)
    assert shown["production's compile stall"] == format_seconds(sum(recorded.values()))
    assert shown["slowest in production"] == format_seconds(recorded[slowest])
    assert shown["the analysis's compile time"] == format_seconds(sum(eager.values()))
    rows = page.find("section", id="timeline").find("tbody").find_all("tr")
    assert [words(row.find_all("td")[3]) for row in rows] == [format_seconds(recorded[c]) for c in ("0/0", "0/1", "0/2")]
    header = words(page.find("section", id="timeline").find("thead"))
    assert "stall in production" in header
