"""fidelity: the eager analysis checked against a real inductor re-analysis of the same corpus.

This file holds the tests that compile in this process; the others are in
tests/subprocess/test_fidelity.py.
"""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from guardscope import pipeline
from guardscope.catalog.diff import DIFFERENT, diff_catalogs
from guardscope.cli import main
from guardscope.errors import CompileOptionsError
from guardscope.model import GUARD_TEXT
from guardscope.proving.fidelity import compare

from ..conftest import read_catalog


def test_a_difference_is_shown_not_hidden(elementwise_analysis, tmp_path):
    # A fidelity catalog that lost a topology (as a backend that specialised differently would):
    # the report says "Different" and names it.
    import shutil

    from guardscope.report.page import write_report

    out = tmp_path / "out"
    shutil.copytree(elementwise_analysis, out)
    catalog = read_catalog(out)
    changed = json.loads(json.dumps(catalog))
    changed["compile"]["backend"] = "inductor"
    dropped = changed["topologies"].pop()
    changed["compiles"] = [c for c in changed["compiles"] if c["sample"] != dropped["first_sample"]]
    changed["topologies"][0]["samples"] += dropped["samples"]
    changed["topologies"][0]["count"] += dropped["count"]
    (out / "fidelity").mkdir(exist_ok=True)
    (out / "fidelity" / "catalog.json").write_text(json.dumps(changed))
    (out / "fidelity.json").write_text(json.dumps({
        "schema": 1, "backend": "inductor", "device": "cuda", "mode": None, "ignore": ["guard", "raw"],
        "identical": False, "labels": ["default analysis (eager, cpu)", "inductor on cuda"], "summary": []}))
    page = write_report(out).read_text()
    assert 'id="fidelity"' in page and "Different" in page and "vanished" in page


def test_cuda_on_a_cpu_only_machine_is_a_clear_error(elementwise_analysis):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(CompileOptionsError, match="cuda"):
        pipeline.fidelity(elementwise_analysis, device="cuda")
    result = CliRunner().invoke(main, ["fidelity", str(elementwise_analysis)])
    assert result.exit_code == 2 and "torch.cuda.is_available() is False" in result.output


def test_a_real_compile_at_another_sample_stays_different(pair):
    """Two real analyses that compile at other samples (duck sizing on and off): the fidelity
    verdict is DIFFERENT, not wording, although the guard texts are ignored."""
    old, new = (read_catalog(path) for path in pair)
    document = compare(old, new, backend="inductor", device="cpu", mode=None)
    assert (document["verdict"], document["same_in_production"], document["identical"]) == ("different", False, False)
    assert document["wording_only"] == []
    assert "  - sample 1 (0/1): no longer compiles: duck_sizing ×1" in document["summary"]
    result = diff_catalogs(old, new, ignore=GUARD_TEXT)
    assert result.verdict == DIFFERENT and result.differs
