"""torch.export Dims: torch's suggested fixes read into guardscope's spec, the module rendered from
it, refinement and the corpus check with real torch.export, and real models end to end (analyze,
emit-warmup, verify): BERT, CNNs, GPT-2 (infeasible), and models with data-dependent code.

This file holds the tests that start child processes, compile with inductor or drive the browser;
the others are in tests/unit/test_export.py, tests/integration/test_export.py.
"""

from __future__ import annotations

import json

import pytest
import torch

import guardscope
from guardscope import pipeline, store
from guardscope.fixes.exporting import load_rendered
from guardscope.fixes.plan import ExportDim

from ..builders import write_image_corpus
from ..pages import parse, words
from ..sessions import copy_analysis

# Messages as torch 2.13 wrote them (tests below export the models that produce them).


def dim(name: str, low: int, high: int, *members: tuple[str, int]) -> ExportDim:
    return ExportDim(name=name, min=low, max=high, members=members or ((name.rsplit("_", 1)[0], 0),),
                     note=f"corpus range {low}..{high}")


# --- real models, end to end ---------------------------------------------------------------------


def export_artifact(out):
    fixes = json.loads((out / "fixes.json").read_text())
    return next(a for a in fixes["artifacts"] if a["name"] == "export")


@pytest.mark.slow
def test_bert_shares_one_dim_for_ids_and_mask_and_passes(emitted, tmp_path):
    """Slow: it makes the BERT ``emitted`` analysis (torch.export of a transformer) and verifies
    the exported program on every topology in a child process."""
    source, plan = emitted("bert")
    out = copy_analysis(source, tmp_path / "out")  # verify writes into it
    assert plan.feasible
    length = next(d for d in plan.dims if ("input_ids", 1) in d.members)
    assert ("attention_mask", 1) in length.members and length.kind == "dim"
    # calls without the mask, or with token types, are structured unlike the example's
    reasons = {o.reason for o in plan.outside}
    assert reasons <= {"does not pass attention_mask, which the exported example passes",
                       "passes token_type_ids, which the exported example does not"}
    code = (out / "export_dims.py").read_text()
    assert "'attention_mask': {0: input_ids_0, 1: input_ids_1}" in code
    document = pipeline.verify(out, artifacts=("export",), backend="eager")
    (result,) = document["artifacts"]
    # it runs every topology it was planned for; those outside leave it partial, not passed
    assert result["status"] == ("partial" if plan.outside else "passed"), result["reason"]
    assert document["verdict"] == result["status"] and document["passed"] == (not plan.outside)
    statuses = {t["id"]: t["status"] for t in result["topologies"]}
    assert {t for t, s in statuses.items() if s == "outside"} == {o.topology for o in plan.outside}
    assert {s for t, s in statuses.items() if t not in {o.topology for o in plan.outside}} == {"passed"}
    # the report shows them as outside, with the reason
    page = parse((out / "report.html").read_text())
    rows = page.find("article", id="fix-export").find("tbody").find_all("tr")
    outside = [[words(td) for td in row.find_all("td")] for row in rows if "outside" in row.attrs.get("class", "")]
    assert len(outside) == len(plan.outside) and all(cells[1] == "outside" for cells in outside)
    assert any("does not pass attention_mask" in cells[2] for cells in outside)


@pytest.mark.slow
def test_cnn_exports_with_dims_torch_accepts_and_passes(emitted, tmp_path):
    source, plan = emitted("cnn")
    out = copy_analysis(source, tmp_path / "out")  # verify writes into it
    assert plan.feasible, plan.reason
    assert {member for d in plan.dims for member in d.members} == {("images", 0), ("images", 2), ("images", 3)}
    # a uint8 or half image is structured unlike the float32 example
    assert all("tensor on cpu (in the exported example: a 4-d float32 tensor on cpu)" in o.reason for o in plan.outside)
    document = pipeline.verify(out, artifacts=("export",), backend="eager")
    (result,) = document["artifacts"]
    assert result["status"] == ("partial" if plan.outside else "passed"), result["reason"]
    ran = [t for t in result["topologies"] if t["status"] != "outside"]
    assert ran and all(t["passed"] for t in ran)
    served = sum(t["count"] for t in json.loads((out / "catalog.json").read_text())["topologies"]
                 if t["id"] not in {o.topology for o in plan.outside})
    assert result["served_samples"] == served


@pytest.mark.slow
def test_normalised_cnn_export_claims_only_topologies_its_program_runs(tmp_path):
    """An image model behind an input-normalisation front (HWC-permuted and channels-last, uint8,
    float16 and bfloat16 images, batches 1-8, mostly 128 px), analysed with the default compile
    options: torch derives its sizes as 32 * n and keeps the guard ``1 + (size - 1) // 32 != 1``
    beside the Dims, whose range still starts at 32. verify runs every topology the plan claims
    (none fails), and every member of each, not only its representative, runs on the program."""
    out = tmp_path / "out"
    guardscope.analyze(write_image_corpus(tmp_path / "corpus"), out)
    plan = pipeline.emit_warmup(out, only=("export",)).export
    assert plan.feasible, plan.reason
    reasons = {o.topology: o.reason for o in plan.outside}
    # 32-px images, which the Dims' ranges take and the program's guard refuses
    assert any(reason.startswith("Guard failed: 1 + (-1 + images.size()") for reason in reasons.values())
    # a topology whose representative runs, and one of whose members (120 px, not 32 * n) does not
    assert any(reason.startswith("its sample ") and "(images [6, 3, 120, 120]): " in reason
               for reason in reasons.values())
    document = pipeline.verify(out, artifacts=("export",), backend="eager")
    (result,) = document["artifacts"]
    assert result["status"] == "partial", result["reason"]
    statuses = {t["id"]: t["status"] for t in result["topologies"]}
    assert {t for t, status in statuses.items() if status == "outside"} == set(reasons)
    assert {status for t, status in statuses.items() if t not in reasons} == {"passed"}
    _, catalog, corpus, model = store.load_inputs(out)
    module = load_rendered((out / "export_dims.py").read_text())
    program = module.export(model, *corpus.sample(plan.example_sample).args).module()
    with torch.no_grad():
        for topology in catalog["topologies"]:
            for index in topology["samples"] if topology["id"] not in reasons else ():
                program(*corpus.sample(index).args)


@pytest.mark.slow
def test_gpt2_dynamic_cache_is_infeasible_with_a_remedy(emitted, tmp_path):
    source, plan = emitted("gpt2")
    out = copy_analysis(source, tmp_path / "out")  # verify writes into it
    assert plan.status == "infeasible"
    assert "DynamicCache" in plan.reason and "use_cache=False" in plan.reason
    assert not (out / "export_dims.py").exists()
    artifact = export_artifact(out)
    assert artifact["status"] == "infeasible" and artifact["reason"] == plan.reason and artifact["file"] is None
    message = artifact["details"]["torch_message"]
    assert "DynamicCache" in message and "register a pytree" in message  # torch's whole message
    document = pipeline.verify(out, artifacts=("warmup", "export"), bundle=False, backend="eager")
    results = {r["name"]: r for r in document["artifacts"]}
    assert results["export"]["status"] == "infeasible" and results["export"]["reason"] == plan.reason
    assert results["warmup"]["status"] == "passed" and document["passed"]
