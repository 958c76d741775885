"""probe: synthetic inputs at the sizes Dynamo specialises on, checked against real graphs; the
risk estimates in the catalog; emit-warmup --include-probed and verify over the probed set.

This file holds the tests that compile in this process; the others are in tests/unit/test_probe.py,
tests/subprocess/test_probe.py.
"""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

import guardscope
from guardscope import pipeline, store
from guardscope.cli import main
from guardscope.corpus.reader import load_corpus
from guardscope.errors import CatalogError

from ..conftest import SEED_CORPUS

# --- end to end on the seed corpus --------------------------------------------------------------


@pytest.mark.slow
def test_probe_finds_the_topologies_where_a_dim_is_one(probed):
    out, result = probed
    document = json.loads((out / "probe" / "probe.json").read_text())
    assert document == result.document
    explored = document["explored"]
    assert explored["checked"] == explored["accepted"] + explored["new_graph"]
    assert explored["model_error"] == 0 and explored["new_graph"] > 0
    found = document["new_topologies"]
    # each class at 1 is a topology of its own the corpus (only 0 and large sizes) never showed
    for words in ("context dim 0", "x dim 0", "local_edge_index dim 1", "cross_edge_index dim 1"):
        assert any(f"{words} is 1" in t["facts"] for t in found), words
    assert [t["id"] for t in found] == [f"P{i}" for i in range(len(found))]
    synthetic = load_corpus(out / "probe" / "corpus")
    assert len(synthetic) == len(found)
    report = (out / "report.html").read_text()
    assert 'id="risk"' in report and found[0]["found_by"] in report


@pytest.mark.slow
def test_stale_probe_results_are_refused(probed, tmp_path):
    out, _ = probed
    other = tmp_path / "other"
    guardscope.analyze(SEED_CORPUS, other, duck_shape=False)
    (other / "probe").mkdir()
    (other / "probe" / "probe.json").write_text((out / "probe" / "probe.json").read_text())
    with pytest.raises(CatalogError, match="earlier analysis"):
        store.load_probed(other, 300)


@pytest.mark.slow
def test_probe_keeps_equal_inputs_equal_unless_asked(make_corpus, tmp_path):
    calls = [((torch.randn(rows, 2),), {"mask": torch.ones(rows)}) for rows in (3, 4, 5, 6)]
    calls += [((torch.randn(rows, 2),), {}) for rows in (3, 5)]
    out = tmp_path / "out"
    guardscope.analyze(make_corpus("MaskedRows", calls), out)
    kept = pipeline.probe(out, pairwise="none").document["explored"]
    # every edit on the sample without a mask is valid too (x alone is the whole class there)
    assert kept["model_error"] == 0 and kept["invalid"] == 0 and kept["new_graph"] > 0
    assert "broken" not in kept["planned_by_kind"]

    result = CliRunner().invoke(main, ["probe", str(out), "--pairwise", "none", "--break-relations"])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "probe" / "probe.json").read_text())
    broken = document["explored"]
    assert document["bounds"]["break_relations"] and broken["planned_by_kind"]["broken"] == 6
    # mask rows 0, 1 or 2 against x's 3, and the other way round: torch.cat raises
    assert broken["model_error"] == broken["model_error_by_kind"]["broken"] == 6
    assert all("breaking" in e["found_by"] for e in document["model_errors"])
    assert "6 raised in the model (broken 6)" in result.output


def test_include_probed_says_what_it_adds_excludes_empty_sizes_and_any_raised_limit(tmp_path):
    """Issue 51, item 3: --include-probed lists each probed topology it adds and the warmup's
    samples and graphs with and without them; --exclude-probed-size 0 leaves out the ones probe
    found at size 0 (the plans and verify's replay alike); a warmup of more graphs than
    production's recompile limit (2 here) says in the output how it raises it."""
    from guardscope.corpus.writer import CorpusWriter

    from ..paths import model_spec

    with CorpusWriter(tmp_path / "corpus", model=model_spec("Elementwise"), compile={"dynamic": None},
                      dynamo_config={"recompile_limit": 2}) as writer:
        for rows in (3, 5, 7, 9):
            writer.add(torch.randn(rows, 4))
    out = tmp_path / "out"
    guardscope.analyze(tmp_path / "corpus", out)
    found = pipeline.probe(out, values=(0, 1), pairwise="none").document["new_topologies"]
    assert [(t["id"], t["found_by"]) for t in found] == [("P0", "x dim 0 = 0 (from sample 0)"),
                                                          ("P1", "x dim 0 = 1 (from sample 0)")]

    result = CliRunner().invoke(main, ["emit-warmup", str(out), "--include-probed"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert ("probed      --include-probed adds 2 topologies probe found: the warmup runs 4 samples that compile 4 "
            "graphs, against 2 samples and 2 graphs without them (set-up grows with the graphs; 'guardscope verify' "
            "measures its seconds)") in lines
    assert "              T2 = P0: x dim 0 = 0 (from sample 0)" in lines
    assert "              T3 = P1: x dim 0 = 1 (from sample 0)" in lines
    assert ("              P0 sets a dimension to 0 (an empty batch or sequence): if production never sends one, "
            "--exclude-probed-size 0 leaves it out") in lines
    limit = [line for line in lines if line.startswith("limit       warmup.py compiles 4 graphs")]
    # torch.compile(..., recompile_limit=4) where this torch has a per-call limit (2.12 on), else
    # the global setting the warmup raises
    raised = ("recompile_limit=4" if guardscope.torch_compat.supports_per_call_recompile_limit()
              else "torch._dynamo.config.recompile_limit to 4")
    assert limit and "more than production's recompile limit of 2" in limit[0] and raised in limit[0]

    result = CliRunner().invoke(main, ["emit-warmup", str(out), "--include-probed", "--exclude-probed-size", "0"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "probed      left out 1: P0 (x dim 0 = 0 (from sample 0)) sets a dimension to 0 (--exclude-probed-size 0)" \
        in lines
    assert any(line.startswith("probed      --include-probed adds 1 topology probe found: the warmup runs 3 samples "
                               "that compile 3 graphs, against 2 samples and 2 graphs") for line in lines)
    fixes = json.loads((out / "fixes.json").read_text())
    assert [t["id"] for t in fixes["probed"]["added"]] == ["P1"] and fixes["probed"]["exclude_sizes"] == [0]
    assert fixes["recompile_limit"]["production"] == 2 and "warmup" in fixes["recompile_limit"]["raised"]
    document, samples = store.probed_samples(out, 4)  # what verify replays: P1 alone, numbered as in probe/
    assert [t["id"] for t in document["new_topologies"]] == ["P1"] and [s.index for s in samples] == [5]
    assert samples[0].args[0].shape[0] == 1

    refused = CliRunner().invoke(main, ["emit-warmup", str(out), "--exclude-probed-size", "0"])
    assert refused.exit_code == 2 and "use it with --include-probed" in refused.output
