"""probe: synthetic inputs at the sizes Dynamo specialises on, checked against real graphs; the
risk estimates in the catalog; emit-warmup --include-probed and verify over the probed set.

This file holds the pure tests (no torch.compile, no child process); the others are in
tests/integration/test_probe.py, tests/subprocess/test_probe.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from guardscope import store
from guardscope.cli import main
from guardscope.corpus.reader import load_corpus
from guardscope.corpus.spec import load_model
from guardscope.errors import CatalogError
from guardscope.fixes.probe import raised_words
from guardscope.fixes.probe_plan import (
    Candidate,
    Edit,
    ScanResult,
    dim_classes,
    general_topology,
    plan_candidates,
    split_dim,
)
from guardscope.fixes.probe_scan import Scanner, stride_order
from guardscope.fixes.probe_synthesis import InvalidCandidate, synthesize
from guardscope.model import Sample
from guardscope.replay.arguments import CallBinder, tensors_of

from ..conftest import SEED_CORPUS
from ..models import MaskedRows

GOLDEN = json.loads((Path(__file__).parents[1] / "golden" / "seed_catalog.json").read_text())
EDGE_CLASSES = [
    ("cross_edge_index.size()[1]", "cross_edge_scale.size()[0]"),
    ("local_edge_index.size()[1]", "local_edge_scale.size()[0]"),
]


def bind(model, sample):
    """The sample's arguments bound to the model's signature, as the probe binds them."""
    return CallBinder(model).bound(sample.args, sample.kwargs)


def seed_model():
    corpus = load_corpus(SEED_CORPUS)
    return corpus, load_model(corpus.manifest.model, base_dir=corpus.path)


# --- pure planning ------------------------------------------------------------------------------


def test_dim_classes_group_dims_equal_in_every_sample():
    assert dim_classes(GOLDEN["dimensions"]) == [
        ("context.size()[0]",), *EDGE_CLASSES, ("x.size()[0]",)
    ]


def test_general_topology_is_the_most_common():
    assert general_topology(GOLDEN) == 1  # 284 of 300 samples


def _shapes(catalog):
    corpus, model = seed_model()
    shapes = {}
    for topology in catalog["topologies"]:
        bound = bind(model, corpus.sample(topology["first_sample"]))
        shapes[topology["first_sample"]] = {p: tuple(t.shape) for p, t in tensors_of(bound.arguments)}
    return shapes


def test_plan_is_bounded_pairwise_and_skips_edits_that_change_nothing():
    shapes = _shapes(GOLDEN)
    scan = ScanResult()
    none = plan_candidates(GOLDEN, shapes, scan, pairwise="none")
    general = plan_candidates(GOLDEN, shapes, scan, pairwise="general")
    every = plan_candidates(GOLDEN, shapes, scan, pairwise="all")
    assert {c.kind for c in none} == {"single", "equal"}
    pairs = [c for c in general if c.kind == "pair"]
    # 4 classes -> 6 pairs, 3 x 3 sizes each, all on the general topology's sample (sample 1,
    # where every class is >= 2, so no pair is a no-op)
    assert len(pairs) == 54 and {c.base_sample for c in pairs} == {1}
    assert len(every) > len(general) > len(none)
    for candidate in general:
        for edit in candidate.edits:
            if edit.kind == "size":
                path, axis = split_dim(edit.dims[0])
                assert shapes[candidate.base_sample][path][axis] != edit.value, candidate
    # sample 180 has every class at 0: setting one to 0 again is not planned
    singles_180 = {(c.edits[0].dims, c.edits[0].value) for c in none if c.base_sample == 180 and c.kind == "single"}
    assert (("x.size()[0]",), 0) not in singles_180 and (("x.size()[0]",), 1) in singles_180
    assert plan_candidates(GOLDEN, shapes, scan) == general  # deterministic
    with pytest.raises(ValueError):
        plan_candidates(GOLDEN, shapes, scan, pairwise="some")


def test_dtype_and_layout_edits_come_from_what_the_corpus_showed():
    shapes = _shapes(GOLDEN)
    scan = ScanResult(
        dtypes={"x": ("float16", "float32"), "local_edge_index": ("int32", "int64", "float32")},
        layouts={"x": (("order", (0, 1)), ("order", (1, 0)))},
    )
    dtypes = {s: {"x": "float32", "local_edge_index": "int64"} for s in shapes}
    layouts = {s: {"x": ("order", (0, 1))} for s in shapes}
    planned = plan_candidates(GOLDEN, shapes, scan, pairwise="none", base_dtypes=dtypes, base_layouts=layouts)
    kinds = {(c.edits[0].path, c.edits[0].value) for c in planned if c.kind in ("dtype", "layout")}
    # same family only: an index tensor is never cast to float
    assert kinds == {("x", "float16"), ("local_edge_index", "int32"), ("x", ("order", (1, 0)))}


# x's rows and mask's rows are equal in every sample that passes a mask; extras[0] and
# extras[1] too where passed. Sample 7 passes x and mask, sample 8 x alone.
ROWS = ("extras[0].size()[0]", "extras[1].size()[0]", "mask.size()[0]", "x.size()[0]")
MASKED = {
    "dimensions": [{"dim": d, "dynamic": True, "equal_to": [o for o in ROWS if o != d]} for d in ROWS]
    + [{"dim": "x.size()[1]", "dynamic": False, "equal_to": []}],
    "topologies": [{"id": 0, "first_sample": 7, "compile_id": "0/0", "count": 5},
                   {"id": 1, "first_sample": 8, "compile_id": "0/1", "count": 3}],
}
MASKED_SHAPES = {7: {"x": (5, 2), "mask": (5,)}, 8: {"x": (3, 2)}}


def test_size_edits_keep_the_relations_the_corpus_always_holds():
    planned = plan_candidates(MASKED, MASKED_SHAPES, ScanResult(), pairwise="all")
    assert planned and {c.kind for c in planned} == {"single"}
    assert all(c.edits[0].dims == ROWS and not c.edits[0].breaks for c in planned)


def test_break_relations_edits_each_present_member_alone_and_says_so():
    planned = plan_candidates(MASKED, MASKED_SHAPES, ScanResult(), pairwise="none",
                                      break_relations=True)
    broken = [c for c in planned if c.kind == "broken"]
    # only sample 7 has two members present; sample 8 has x alone: no relation to break there
    assert {(c.base_sample, c.edits[0].dims, c.edits[0].value, c.edits[0].breaks) for c in broken} == {
        (7, (dim,), value, (other,))
        for dim, other in (("mask.size()[0]", "x.size()[0]"), ("x.size()[0]", "mask.size()[0]"))
        for value in (0, 1, 2)
    }
    assert broken[0].describe() == "mask dim 0 = 0, breaking mask dim 0 = x dim 0 (from sample 7)"
    assert broken[0].edits[0].to_json()["breaks"] == ["x.size()[0]"]
    default = plan_candidates(MASKED, MASKED_SHAPES, ScanResult(), pairwise="none")
    assert [c for c in planned if c.kind != "broken"] == default


def test_a_class_edit_sets_the_members_a_sample_has():
    model = MaskedRows()
    for kwargs, present in (({}, ["x"]), ({"mask": torch.ones(3)}, ["x", "mask"]),
                            ({"extras": [torch.ones(3, 1)]}, ["x", "extras"])):
        base = Sample(0, (torch.ones(3, 2),), kwargs)
        bound = bind(model, base)
        edit = Candidate(0, 0, "single", (Edit("size", ROWS, 1),))
        sample = synthesize(base, bound, edit, {}, 9)
        arguments = bind(model, sample).arguments
        assert arguments["x"].shape == (1, 2) and (arguments["mask"] is None) == ("mask" not in present)
        assert [e.shape[0] for e in arguments["extras"]] == [1] * len(kwargs.get("extras", ()))
        model(*sample.args, **sample.kwargs)  # the relation holds: the model runs
    absent = Candidate(0, 0, "single", (Edit("size", ("mask.size()[0]",), 1),))
    with pytest.raises(InvalidCandidate, match="mask dim 0 not in this sample"):
        synthesize(base, bound, absent, {}, 10)


def test_raised_words_name_the_kinds_of_edit_that_raised():
    assert raised_words({"model_error": 0, "model_error_by_kind": {}}) == "0 raised in the model"
    assert raised_words({"model_error": 5, "model_error_by_kind": {"broken": 4, "pair": 1}}) == (
        "5 raised in the model (broken 4, pair 1)")


# --- reading and synthesising real samples ------------------------------------------------------


def test_scanner_finds_which_dim_the_edge_indexes_point_into():
    corpus, model = seed_model()
    scanner = Scanner()
    for sample in corpus:
        scanner.add(bind(model, sample).arguments)
    scanned = scanner.result()
    assert scanned.indexes == {"cross_edge_index": "x.size()[0]", "local_edge_index": "x.size()[0]"}
    assert scanned.dtypes["x"] == ("float32",) and scanned.dtypes["local_edge_index"] == ("int64",)
    assert scanned.samples == 300


def test_the_scanner_reads_no_index_relations_from_signature_samples():
    corpus, model = seed_model()
    scanner = Scanner()
    for sample in corpus:
        # zero-filled tensors, as materialised from a signature: every index would "fit"
        zeros = {path: torch.zeros_like(value) for path, value in bind(model, sample).arguments.items()}
        scanner.add(zeros, data=False, samples=2)
    scanned = scanner.result()
    assert scanned.indexes == {} and scanned.samples == 600
    assert scanned.dtypes["local_edge_index"] == ("int64",)


def test_synthesize_keeps_indexes_in_range_and_tensors_fresh():
    corpus, model = seed_model()
    base = corpus.sample(1)
    bound = bind(model, base)
    indexes = {"cross_edge_index": "x.size()[0]", "local_edge_index": "x.size()[0]"}
    x_class = ("x.size()[0]",)
    one_node = Candidate(1, 1, "single", (Edit("size", x_class, 1),))
    sample = synthesize(base, bound, one_node, indexes, 1000)
    arguments = bind(model, sample).arguments
    assert sample.index == 1000
    assert arguments["x"].shape[0] == 1
    assert int(arguments["local_edge_index"].max()) == 0 and int(arguments["cross_edge_index"].max()) == 0
    # a view would carry its base, which Dynamo guards as well
    assert all(t._base is None for _, t in tensors_of(arguments))
    # passed the way the corpus passed it (by keyword), so an exported program accepts it
    assert (len(sample.args), sorted(sample.kwargs)) == (len(base.args), sorted(base.kwargs))
    model(*sample.args, **sample.kwargs)  # a valid input: the model runs

    grow = Candidate(1, 1, "single", (Edit("size", EDGE_CLASSES[1], 75),))
    grown = bind(model, synthesize(base, bound, grow, indexes, 1001)).arguments
    assert grown["local_edge_index"].shape == (2, 75) and grown["local_edge_scale"].shape == (75, 1)

    no_nodes = Candidate(1, 1, "single", (Edit("size", x_class, 0),))
    with pytest.raises(InvalidCandidate, match="indexes x.size"):
        synthesize(base, bound, no_nodes, indexes, 1002)


def test_layout_edits_change_strides_not_values():
    corpus, model = seed_model()
    base = corpus.sample(1)
    bound = bind(model, base)
    transposed = Candidate(1, 1, "layout", (Edit("layout", path="x", value=("order", (1, 0))),))
    sample = synthesize(base, bound, transposed, {}, 5)
    x = bind(model, sample).arguments["x"]
    assert stride_order(x) == (1, 0) and torch.equal(x, bound.arguments["x"])
    empty_base = corpus.sample(180)  # every edge set empty
    empty_bound = bind(model, empty_base)
    strided = Candidate(10, 180, "layout",
                                (Edit("layout", path="local_edge_index", value=("empty", (1, 2))),))
    edited = bind(model, synthesize(empty_base, empty_bound, strided, {}, 6)).arguments
    assert edited["local_edge_index"].stride() == (1, 2) and edited["local_edge_index"].numel() == 0


# --- risk estimates (catalog) -------------------------------------------------------------------


def test_catalog_risk_good_turing_and_time_split():
    risk = GOLDEN["risk"]
    assert risk["samples"] == 300 and risk["singleton_topologies"] == 9
    assert risk["unseen_topology_probability"] == pytest.approx(9 / 300)
    half, most = risk["time_split"]
    assert half == {"fraction": 0.5, "plan_samples": 150, "replayed_samples": 150, "recompiles": 1,
                    "recompile_samples": [180], "new_topologies": [10]}
    assert most["recompiles"] == 0 and most["plan_samples"] == 240


def test_probe_cli_rejects_bad_values(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["probe", str(tmp_path), "--values", "one"])
    assert result.exit_code == 2 and "comma-separated" in result.output
    result = runner.invoke(main, ["probe", str(tmp_path)])
    assert result.exit_code == 2 and "catalog.json" in result.output


def test_include_probed_without_probe_says_what_to_run(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "catalog.json").write_text(json.dumps(GOLDEN))
    with pytest.raises(CatalogError, match="guardscope probe"):
        store.load_probed(out, 300)
