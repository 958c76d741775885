"""fidelity: the eager analysis checked against a real inductor re-analysis of the same corpus.

This file holds the tests that start child processes, compile with inductor or drive the browser;
the others are in tests/integration/test_fidelity.py.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from guardscope import pipeline
from guardscope.cli import main

from ..conftest import read_catalog


@pytest.mark.slow
def test_inductor_on_the_cpu_gives_the_same_compiles_and_topologies(elementwise_analysis):
    out = elementwise_analysis
    document = pipeline.fidelity(out, backend="inductor", device="cpu")
    assert document["identical"] is True and document["backend"] == "inductor"
    assert json.loads((out / "fidelity.json").read_text()) == document
    checked = read_catalog(out / "fidelity")
    assert checked["compile"]["backend"] == "inductor"
    assert checked["summary"]["compile_samples"] == read_catalog(out)["summary"]["compile_samples"] == [0, 2, 4]
    page = (out / "report.html").read_text()
    assert 'id="fidelity"' in page and "Fidelity: default analysis (eager, cpu) vs inductor on cpu" in page
    assert "Identical" in page


@pytest.mark.slow
def test_exit_code_fails_only_on_a_production_difference(elementwise_analysis):
    """Issue 23, end to end through a real re-analysis (eager on the CPU, so no GPU is needed):
    a fact only one analysis states (as a guard inductor adds) is wording, reported apart, and
    passes ``--exit-code``; a re-analysis that really compiles at other samples (x's rows
    marked unbacked: no recompile for 1 and 0 rows) is DIFFERENT and fails it."""
    out = elementwise_analysis
    catalog = read_catalog(out)
    guard = "guard: ((96*___stack1.size()[0]) / (96 + 35*___stack1.size()[0])) > 0.0034722222222222222"
    catalog["topologies"][0]["facts"].append(guard)
    (out / "catalog.json").write_text(json.dumps(catalog))
    args = ["fidelity", str(out), "--backend", "eager", "--device", "cpu", "--exit-code"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    verdict = "fidelity    SAME IN PRODUCTION (wording differs): default analysis (eager, cpu) vs eager on cpu"
    assert verdict in result.output
    assert f"wording     only default analysis (eager, cpu): {guard} (T0)" in result.output
    assert "vanished" not in result.output and "moves" not in result.output
    document = json.loads((out / "fidelity.json").read_text())
    assert (document["verdict"], document["same_in_production"], document["identical"]) == ("wording", True, False)
    assert [item["text"] for item in document["wording_only"]] == [guard]
    assert "Same in production (wording differs)" in (out / "report.html").read_text()

    catalog["compile"].update(mark_unbacked=["x:0"], mark_samples="all")  # the re-analysis marks them
    (out / "catalog.json").write_text(json.dumps(catalog))
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert "fidelity    DIFFERENT: default analysis (eager, cpu) vs eager on cpu" in result.output
    assert "  - sample 2 (0/1): no longer compiles: zero_one_specialization ×1" in result.output
    document = json.loads((out / "fidelity.json").read_text())
    assert (document["verdict"], document["same_in_production"]) == ("different", False)


def test_a_relative_analysis_folder_is_re_analysed_in_it_never_inside_the_corpus(elementwise_analysis, monkeypatch):
    """Issue 36, item 4: with DIR given relative, the re-analysis (run in the corpus folder) went to
    CORPUS/DIR/fidelity/ and fidelity then failed with "(exit 0)"."""
    from guardscope import store

    out = elementwise_analysis
    corpus = store.corpus_dir_of(out, read_catalog(out)).resolve()
    before = sorted(path.relative_to(corpus) for path in corpus.rglob("*"))
    monkeypatch.chdir(out.parent)
    result = CliRunner().invoke(main, ["fidelity", out.name, "--backend", "eager", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert (out / "fidelity" / "catalog.json").is_file() and (out / "fidelity.json").is_file()
    assert sorted(path.relative_to(corpus) for path in corpus.rglob("*")) == before
