"""Bad input gets a clear answer, crashes stay contained, nothing finished is lost.

This file holds the tests that compile in this process; the others are in
tests/unit/test_reliability.py, tests/subprocess/test_reliability.py.
"""

from __future__ import annotations

import shutil

import torch
from click.testing import CliRunner

import guardscope
from guardscope.cli import main

from ..conftest import SEED_CORPUS, read_catalog
from ..models import RaisesOnThreeRows
from ..pages import parse, words
from ..paths import MODELS


def run_cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# --- 2, 3: corrupt shards, malicious pickles ----------------------------------------------------


def test_corrupt_shard_is_named_and_can_be_skipped(sharded_seed, tmp_path):
    corpus = tmp_path / "c"
    shutil.copytree(sharded_seed, corpus)
    shard = corpus / "shard-00002.pt"
    shard.write_bytes(shard.read_bytes()[:1000])  # truncated
    result = run_cli("analyze", str(corpus), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "shard-00002.pt" in result.output
    assert not (tmp_path / "out" / "catalog.json").exists()  # never a silent partial result

    analysis = guardscope.analyze(corpus, tmp_path / "out2", skip_bad_shards=True)
    catalog = read_catalog(analysis.out_dir)
    assert [s["file"] for s in catalog["skipped_shards"]] == ["shard-00002.pt"]
    assert catalog["corpus"]["samples"] == 260 and catalog["summary"]["skipped_shards"] == 1
    assert "shard-00002.pt" in (analysis.out_dir / "report.html").read_text()


# --- 8: the recompile limit ------------------------------------------------------------------------


def test_samples_past_the_recompile_limit_are_listed_as_not_analysed(tmp_path):
    analysis = guardscope.analyze(SEED_CORPUS, tmp_path / "out", recompile_limit=1)
    catalog = read_catalog(analysis.out_dir)
    # With the limit below Dynamo's default, torch's own default (8) applies: max(limit, default).
    assert catalog["summary"]["compiles"] == 8
    assert catalog["not_analysed"] == [112, 144, 180]
    assert any("recompile limit" in w for w in analysis.warnings)
    assert "112" in (analysis.out_dir / "report.html").read_text()



def graph_runs(model, inputs) -> list[int]:
    """The inputs a compiled graph ran for, under plain ``torch.compile`` (eager backend)."""
    ran: list[int] = []

    def backend(graph, _):
        def run(*args):
            ran.append(current)
            return graph(*args)
        return run

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend)
    for current, x in enumerate(inputs):
        try:
            compiled(x)
        except ValueError:
            pass
    torch._dynamo.reset()
    return ran


def test_a_failed_compile_is_named_and_the_eager_calls_after_it_are_counted(make_corpus, tmp_path):
    """A forward that raises for 3-row inputs: the compile for sample 1 fails while tracing the
    raise and Dynamo skips the forward from then on, even for the 2-row inputs graph 0/0 accepts.
    The summary, the catalog and the report say so, not "recompile limit reached"."""
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(2 + index % 5, 4, generator=generator) for index in range(40)]
    assert graph_runs(RaisesOnThreeRows(), inputs) == [0]  # what Dynamo does: sample 0 ran a graph, no other
    corpus = make_corpus("RaisesOnThreeRows", [((x,), {}) for x in inputs], {"dynamic": None, "fullgraph": False})

    result = run_cli("analyze", str(corpus), "--out", str(tmp_path / "out"), "--accept-errors", "-q")
    assert result.exit_code == 0, result.output
    assert "limit reached" not in result.output and "recompile limit (" not in result.output
    eager = [i for i in range(2, 40) if i % 5 != 1]  # every later call that did not raise
    lines = MODELS.read_text().splitlines()
    model = lines.index("class RaisesOnThreeRows(torch.nn.Module):")
    forward = next(n for n in range(model, len(lines)) if "def forward" in lines[n]) + 1  # 1-based
    assert (f"compile failed 0/1 of forward (tests/models.py:{forward}) at sample 1: ValueError: three rows, "
            f"raised at tests/models.py:{forward + 2} while Dynamo traced it") in result.output
    assert f"every later call ran it eagerly, {len(eager)} samples, first {eager[:10]}" in result.output
    assert "warning: compile 0/1 of forward" in result.output and "turns torch.compile off" in result.output

    catalog = read_catalog(tmp_path / "out")
    (failed,) = [c for c in catalog["compiles"] if c["fail_type"]]
    assert (failed["compile_id"], failed["sample"], failed["fail_type"]) == ("0/1", 1, "Unsupported")
    (skipped,) = catalog["skipped_frames"]
    assert (skipped["frame"], skipped["compile_id"], skipped["sample"]) == (0, "0/1", 1)
    assert skipped["error"] == "ValueError: three rows" and skipped["eager_samples"] == eager
    assert [t["samples"] for t in catalog["topologies"]] == [[0]]  # the 2-row calls after sample 1 ran eagerly
    raised = [f["sample"] for f in catalog["failed_samples"]]
    assert raised == list(range(1, 40, 5)) and catalog["not_analysed"] == []
    assert sum(t["count"] for t in catalog["topologies"]) + len(raised) + len(eager) == 40

    page = parse((tmp_path / "out" / "report.html").read_text())
    lead = words(page.find("section", id="compile-failed"))
    assert f"Compile 0/1 of forward (tests/models.py:{forward}) failed at sample 1: ValueError: three rows" in lead
    assert f"every later call ran eagerly, {len(eager)} samples" in lead
    assert "Compile 0/1 failed at sample 1 and every later call ran eagerly." in words(page.find("p", class_="lede"))
