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
