"""fidelity: the eager analysis checked against a real inductor re-analysis of the same corpus.

This file holds the tests that start child processes, compile with inductor or drive the browser;
the others are in tests/integration/test_fidelity.py.
"""

from __future__ import annotations

import json

import pytest

from guardscope import pipeline

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
