"""emit-warmup and verify on the seed corpus: fixes generated from the catalog, proven on it.

This file holds the tests that compile in this process; the others are in
tests/unit/test_emit_verify.py, tests/subprocess/test_emit_verify.py.
"""

from __future__ import annotations

import json

import pytest

from guardscope import pipeline, store, torch_compat
from guardscope.corpus.reader import load_corpus
from guardscope.proving.isolation import import_file
from guardscope.proving.setup import check_spec

from ..sessions import copy_analysis

MARKS = (("x", 0), ("local_edge_index", 1), ("cross_edge_index", 1), ("local_edge_scale", 0),
         ("cross_edge_scale", 0), ("context", 0))


def test_warmup_compiles_fewer_graphs_than_one_per_topology(seed_fixes):
    out, fixes = seed_fixes
    plan = fixes.warmup
    assert plan.topologies == 11 and plan.one_per_topology == 11
    assert plan.graphs == 10 and [s.sample for s in plan.steps] == [1, 4, 12, 24, 40, 60, 84, 112, 144, 180]
    assert plan.steps[0].covers == (0,)
    assert len(load_corpus(out / "warmup")) == 10
    code = (out / "warmup.py").read_text()
    assert "also serves T0" in code and "(1, 1, '0/1')" in code
    assert (out / "warmup.py").read_text() == code  # deterministic: re-emitting below compares


def test_unbacked_plan(seed_fixes):
    out, fixes = seed_fixes
    plan = fixes.unbacked
    assert [(d.argument, d.axis) for d in plan.dims] == list(MARKS)
    assert plan.duck_shape is False and plan.residual == (0,) and plan.graphs == 1
    code = (out / "unbacked.py").read_text()
    assert "DUCK_SHAPE = False" in code and "def mark(*args, **kwargs):" in code


@pytest.mark.skipif(not torch_compat.supports_shapes_spec(), reason="torch without dynamic_spec")
def test_the_unbacked_plan_has_a_shapes_spec_form_replayed_on_its_own(seed_fixes):
    """Issue 35: the same dims as torch's declarative spec, with its own residual (every other dim
    static under a spec; the seed's other dims never vary, so the residual is the marks'). Issue
    52: written for the keyword this torch's torch.compile takes (dynamic_shapes= on 2.14,
    shapes_spec= on 2.13)."""
    keyword = torch_compat.spec_keyword()
    out, _ = seed_fixes
    unbacked = next(a for a in json.loads((out / store.FIXES).read_text())["artifacts"] if a["name"] == "unbacked")
    spec = unbacked["details"]["shapes_spec"]
    assert spec == {"status": "ok", "reason": None, "keyword": keyword, "dims": [f"{a}:{d}" for a, d in MARKS],
                    "residual_samples": [0], "graphs": 1, "costs_more": None}  # no more graphs than the warmup
    assert (f"as a shapes_spec (torch.compile({keyword}=), every other dim static): 1 residual warmup samples, "
            "1 graphs") in unbacked["summary"]
    module = import_file(out / "unbacked.py")
    assert module.SPEC_DIMS == tuple((a, d, 2) for a, d in MARKS) and module.SPEC_RESIDUAL == [0]
    check_spec(module.shapes_spec(), module.SPEC_DIMS)  # the module's own builder: the spec replayed
    assert len(load_corpus(out / "unbacked_spec_warmup")) == 1
    assert module.SPEC_KEYWORD == keyword
    assert f", {keyword}=unbacked.shapes_spec())" in (out / "unbacked.py").read_text()


def test_export_dims_share_equal_dims(seed_fixes):
    out, fixes = seed_fixes
    dims = {d.name: d for d in fixes.export.dims}
    assert sorted(dims) == ["context_0", "cross_edge_index_1", "local_edge_index_1", "x_0"]
    assert dims["local_edge_index_1"].members == (("local_edge_index", 1), ("local_edge_scale", 0))
    assert dims["x_0"].min == 0 and dims["x_0"].max == 60
    # torch.export takes the corpus's Dims as they are, and every topology's call
    assert fixes.export.feasible and fixes.export.fixes == () and fixes.export.outside == ()
    code = (out / "export_dims.py").read_text()
    assert "'local_edge_scale': {0: local_edge_index_1}" in code


def test_emitted_files_are_deterministic(seed_fixes, tmp_path):
    out = copy_analysis(seed_fixes[0], tmp_path / "out")
    before = {name: (out / name).read_bytes() for name in ("warmup.py", "unbacked.py", "export_dims.py", "fixes.json")}
    pipeline.emit_warmup(out)
    assert {name: (out / name).read_bytes() for name in before} == before
