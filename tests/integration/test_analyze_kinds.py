"""Each kind of guard failure, produced by a model built for it, through the whole pipeline."""

from __future__ import annotations

import torch

import guardscope

from ..conftest import MODELS, read_catalog


def kinds_of(out):
    catalog = read_catalog(out)
    return catalog, [f for c in catalog["compiles"] for f in c["failures"]]


def test_size_branch_is_a_shape_relation_with_its_source_line(make_corpus, tmp_path):
    corpus = make_corpus("SizeBranch", [((torch.randn(8, 3),), {}), ((torch.randn(32, 3),), {}), ((torch.randn(9, 3),), {})])
    catalog, failures = kinds_of(guardscope.analyze(corpus, tmp_path / "out", strict=True).out_dir)
    assert catalog["summary"]["compile_samples"] == [0, 1]
    (failure,) = failures
    assert failure["kind"] == "shape_relation"
    assert "zero_one_specialization" in failure["causes"]
    line = next(n for n, text in enumerate(MODELS.read_text().splitlines(), 1) if "x.shape[0] > 16" in text)
    assert failure["user_source"] == f"tests/models.py:{line} in forward: if x.shape[0] > 16:"
    assert [t["samples"] for t in catalog["topologies"]] == [[0, 2], [1]]


def test_list_length(make_corpus, tmp_path):
    calls = [(([torch.randn(3)] * 2,), {}), (([torch.randn(3)] * 3,), {}), (([torch.randn(3)] * 2,), {})]
    catalog, failures = kinds_of(guardscope.analyze(make_corpus("ListSum", calls), tmp_path / "out", strict=True).out_dir)
    assert [f["kind"] for f in failures] == ["list_length"]
    assert failures[0]["inputs"] == ["xs"] and failures[0]["expected"] == "2"


def test_dtype_change(make_corpus, tmp_path):
    calls = [((torch.randn(4, 3),), {}), ((torch.randn(4, 3, dtype=torch.float64),), {})]
    _, failures = kinds_of(guardscope.analyze(make_corpus("Elementwise", calls), tmp_path / "out", strict=True).out_dir)
    assert [(f["kind"], f["expected"], f["actual"]) for f in failures] == [("dtype_mismatch", "Float", "Double")]


def test_transposed_input_is_a_stride_mismatch(make_corpus, tmp_path):
    calls = [((torch.randn(4, 3),), {}), ((torch.randn(3, 4).t(),), {})]
    catalog, failures = kinds_of(guardscope.analyze(make_corpus("Elementwise", calls), tmp_path / "out", strict=True).out_dir)
    assert [f["kind"] for f in failures] == ["stride_mismatch"]
    assert failures[0]["dims"] == ["x.stride()[1]"]
    assert any("stride" in fact for fact in catalog["topologies"][1]["facts"])


def test_failing_sample_is_recorded_and_the_replay_goes_on(make_corpus, tmp_path):
    calls = [((torch.ones(3),), {}), ((-torch.ones(3),), {}), ((torch.ones(5),), {})]
    catalog, _ = kinds_of(guardscope.analyze(make_corpus("Fails", calls), tmp_path / "out").out_dir)
    assert catalog["failed_samples"] == [{"sample": 1, "error": "ValueError: negative input"}]
    assert catalog["summary"]["failed_samples"] == 1
    assert sum(t["count"] for t in catalog["topologies"]) == 2


def test_torch_settings_are_restored(make_corpus, tmp_path):
    import torch.fx.experimental._config as fx_config

    limit = torch._dynamo.config.recompile_limit
    calls = [((torch.randn(4, 3),), {})]
    guardscope.analyze(make_corpus("Elementwise", calls), tmp_path / "out", duck_shape=False,
                       mark_unbacked=(("x", 0),))
    assert torch._dynamo.config.recompile_limit == limit
    assert fx_config.use_duck_shape is True
