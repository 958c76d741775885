"""fidelity: the eager analysis checked against a real inductor re-analysis of the same corpus."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

import guardscope
from guardscope import pipeline
from guardscope.cli import main
from guardscope.errors import CompileOptionsError

from .conftest import read_catalog


@pytest.fixture(scope="module")
def elementwise_analysis(tmp_path_factory):
    root = tmp_path_factory.mktemp("fidelity")
    from .conftest import model_spec

    with guardscope.CorpusWriter(root / "corpus", model=model_spec("Elementwise"),
                                 compile={"dynamic": True, "fullgraph": True}) as writer:
        for rows in (5, 7, 1, 9, 0, 6):
            writer.add(torch.randn(rows, 4))
    out = root / "out"
    guardscope.analyze(root / "corpus", out)
    return out


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


def test_a_difference_is_shown_not_hidden(elementwise_analysis, tmp_path):
    # A fidelity catalog that lost a topology (as a backend that specialised differently would):
    # the report says "Different" and names it.
    import shutil

    from guardscope.report import write_report

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
