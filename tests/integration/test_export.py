"""torch.export Dims: torch's suggested fixes read into guardscope's spec, the module rendered from
it, refinement and the corpus check with real torch.export, and real models end to end (analyze,
emit-warmup, verify): BERT, a CNN, GPT-2 (infeasible), and models with data-dependent code.

This file holds the tests that compile in this process; the others are in tests/unit/test_export.py,
tests/subprocess/test_export.py.
"""

from __future__ import annotations

import pytest
import torch

import guardscope
from guardscope import pipeline, store
from guardscope.corpus.reader import SignatureRecord, load_corpus
from guardscope.fixes.emit.export_dims import render_export_dims
from guardscope.fixes.exporting import load_rendered, plan_export, refine
from guardscope.fixes.plan import choose_export_dims
from guardscope.model import Sample

from .. import real_models
from ..builders import CATALOG, refined_plan, write_image_corpus
from ..models import NormalisedCNN
from ..sessions import EXPORT_SAMPLES, copy_analysis

# --- real torch.export, no corpus ------------------------------------------------------------------


class Pairs(torch.nn.Module):
    """Sums rows in pairs (the row count must be even) and adds ``y`` without its first row to
    ``x`` twice (``y`` has ``2 * len(x) + 1`` rows)."""

    def forward(self, x, y):
        return x.reshape(-1, 2, x.shape[1]).sum() + (torch.cat([x, x]) + y[1:]).sum()


class Threshold(torch.nn.Module):
    """Branches on the row count: one program takes more than 10 rows only."""

    def forward(self, x):
        return x * 2 if x.shape[0] > 10 else x


def spec_catalog(dimensions, topologies, arguments):
    return {**CATALOG, "arguments": arguments, "topologies": topologies, "dimensions": [
        {"dim": name, "min": low, "max": high, "dynamic": True, "ever_zero": False, "ever_one": low <= 1,
         "equal_to": []} for name, low, high in dimensions]}


def test_refinement_derives_dims_torch_proves_related():
    catalog = spec_catalog([("x.size()[0]", 2, 100), ("y.size()[0]", 5, 201)],
                           [{"id": 0, "first_sample": 0, "count": 1}], ["x", "y"])
    samples = [Sample(0, (torch.randn(6, 3), torch.randn(13, 3)), {})]
    plan = plan_export(Pairs(), catalog, lambda index: samples[index])
    assert plan.feasible, plan.reason
    assert plan.fixes == ("round 1: _x_0 = Dim('_x_0', min=1, max=50)", "round 1: x_0 = 2*_x_0",
                          "round 1: y_0 = 4*_x_0 + 1")
    assert [d.describe() for d in plan.dims] == ["_x_0[1..50]", "x_0=2*_x_0[2..100]", "y_0=4*_x_0+1[5..201]"]
    assert plan.outside == ()


def test_refinement_narrows_a_range_and_lists_what_falls_outside():
    catalog = spec_catalog([("x.size()[0]", 4, 80)], [{"id": 0, "first_sample": 0, "count": 5},
                                                      {"id": 1, "first_sample": 1, "count": 2}], ["x"])
    samples = [Sample(0, (torch.randn(40, 3),), {}), Sample(1, (torch.randn(5, 3),), {})]
    plan = plan_export(Threshold(), catalog, lambda index: samples[index])
    assert plan.feasible and [d.describe() for d in plan.dims] == ["x_0[11..80]"]
    (outside,) = plan.outside
    assert (outside.topology, outside.samples) == (1, 2) and "11" in outside.reason


def test_refinement_gives_up_with_torchs_message():
    """A model whose guards torch cannot turn into a fix (a size that must not be 1 after strided
    halvings, from a range that starts at 0) is infeasible, not a crash."""
    catalog = spec_catalog([("images.size()[2]", 0, 200)], [{"id": 0, "first_sample": 0, "count": 1}], ["images"])
    model = real_models.cnn()
    samples = [Sample(0, (torch.randn(2, 3, 64, 64),), {})]
    plan, program = refine(model, samples[0], choose_export_dims(catalog), catalog)
    assert program is None and plan.status == "infeasible"
    assert plan.reason.startswith("torch.export rejects the Dims and suggests no fix (Constraints violated")
    assert "Not all values of images_2" in plan.torch_message


def test_every_member_of_a_topology_the_plan_claims_runs_on_the_program(tmp_path):
    """torch derives the CNN's sizes as 32 * n (its feature-pyramid merge) and keeps the guard
    ``1 + (size - 1) // 32 != 1`` beside the Dims, whose range still starts at 32: the program
    refuses 32-px images the Dims' ranges take. A topology is claimed only when every call
    signature among its members passes the program's own guards, whether the members are
    streamed from the corpus (a repeated signature is a signature record) or loaded one by one."""
    requests = [(4, 128, 128), (3, 32, 32), (3, 32, 32), (2, 64, 64), (2, 120, 120), (3, 96, 96), (2, 64, 128),
                (3, 96, 96)]
    corpus = load_corpus(write_image_corpus(tmp_path / "corpus", [(*r, "float32", "nchw") for r in requests],
                                            keep="signatures"))
    assert any(isinstance(record, SignatureRecord) for record in corpus.iter_records())
    members = {0: [0, 2], 1: [3, 4], 2: [1], 3: [5, 6, 7]}
    catalog = spec_catalog([("images.size()[0]", 2, 4), ("images.size()[2]", 32, 128), ("images.size()[3]", 32, 128)],
                           [{"id": t, "first_sample": m[0], "count": len(m), "samples": m} for t, m in members.items()],
                           ["images"])
    model = NormalisedCNN()
    for records in (corpus.iter_records(), None):
        plan = plan_export(model, catalog, corpus.sample, records=records)
        assert plan.feasible, plan.reason
        assert [d.describe() for d in plan.dims if d.kind == "derived"] == [
            "images_2=32*_images_2[32..128]", "images_3=32*_images_3[32..128]"]
        reasons = {o.topology: o.reason for o in plan.outside}
        assert sorted(reasons) == [0, 1, 2]
        assert reasons[0].startswith("its sample 2 (images [3, 3, 32, 32]): Guard failed: 1 + (-1 + images.size()")
        assert reasons[1].startswith("its sample 4 (images [2, 3, 120, 120]): ") and "32*" in reasons[1]
        assert reasons[2].startswith("Guard failed: 1 + (-1 + images.size()")
    program = load_rendered(render_export_dims(catalog, plan)).export(model, *corpus.sample(0).args).module()
    with torch.no_grad():
        for index in members[3]:  # the claimed topology: every member runs
            program(*corpus.sample(index).args)
        with pytest.raises(AssertionError, match="Guard failed"):  # and the refusal is the program's
            program(*corpus.sample(2).args)


# --- real models, end to end ---------------------------------------------------------------------

SAMPLES = EXPORT_SAMPLES


@pytest.mark.slow
def test_emitting_again_after_infeasible_leaves_no_stale_module(emitted, tmp_path):
    source, plan = emitted("gated")  # data-dependent control flow: torch.export cannot take it
    assert plan.status == "infeasible"
    out = copy_analysis(source, tmp_path / "out")
    # an earlier emit's module, written as guardscope writes (a file it did not write is never replaced)
    store.write_text(out / "export_dims.py", render_export_dims(CATALOG, refined_plan()))
    pipeline.emit_warmup(out)
    assert not (out / "export_dims.py").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name, where", [
    ("gated", "real_models.py:222 in forward (`if h.abs().mean().item() > 0.45:`)"),
    ("gcn", "torch_geometric/utils/_scatter.py:48 in scatter"),
], ids=["gated", "gcn"])
def test_data_dependent_code_is_infeasible_at_its_line(tmp_path, name, where):
    guardscope.analyze(real_models.write_corpus(name, tmp_path / "corpus", SAMPLES, dynamic=True), tmp_path / "out")
    out, catalog, corpus, model = store.load_inputs(tmp_path / "out")
    plan = plan_export(model, catalog, corpus.sample)
    assert plan.status == "infeasible"
    assert plan.reason.startswith("torch.export met data-dependent control flow at ")
    assert where in plan.reason
    assert "torch._check" in plan.reason and "data-dependent" in plan.torch_message
