"""Advice from the catalog (guardscope.fixes.advice): the input transforms its failure kinds
suggest, in chain order, and the ones that do not apply, in words. Pure: catalogs in, advice out."""

from __future__ import annotations

import json

from guardscope.fixes.advice import advise, suggested_chain
from guardscope.fixes.transforms import parse_transforms

from ..paths import REPO


def _failure(kind: str, argument: str, dims: list[str] = (), expected: str | None = None,
             actual: str | None = None) -> dict:
    return {"kind": kind, "inputs": [argument], "dims": list(dims), "expected": expected, "actual": actual,
            "against": "0/0"}


def _dim(argument: str, axis: int, low: int, high: int, *equal_to: str) -> dict:
    return {"dim": f"{argument}.size()[{axis}]", "input": argument, "axis": axis, "min": low, "max": high,
            "dynamic": low != high, "ever_zero": low == 0, "ever_one": low <= 1 <= high, "equal_to": list(equal_to)}


def _catalog(arguments: list[str], failures: list[dict], dimensions: list[dict],
             topologies: list[tuple[int, list[str]]] = ()) -> dict:
    return {"arguments": arguments, "compiles": [{"compile_id": "0/0", "failures": []},
                                                 {"compile_id": "0/1", "failures": failures}],
            "dimensions": dimensions,
            "topologies": [{"id": i, "count": count, "facts": facts} for i, (count, facts) in enumerate(topologies)]}


def test_on_the_seed_corpus_nothing_applies_and_the_edge_lists_say_why():
    catalog = json.loads((REPO / "tests" / "golden" / "seed_catalog.json").read_text())
    advice = {a.subject: a for a in advise(catalog)}
    assert suggested_chain(list(advice.values())) == ()
    assert sorted(advice) == ["context dim 0", "cross_edge_index dim 1", "local_edge_index dim 1", "x dim 0"]
    for name in ("local_edge_index", "cross_edge_index"):
        assert advice[f"{name} dim 1"].text == ("edges cannot be padded without a mask: a padded edge would "
                                                "connect real nodes")
    assert "cannot be padded without a mask" in advice["x dim 0"].text  # the nodes the edges point into
    assert not any(a.applies for a in advice.values())


def test_an_image_model_gets_the_cast_the_layout_and_batch_buckets_in_that_order():
    """A NormalisedCNN-like catalog: float32 most often among uint8, float16; a channels-last
    stride; a batch of 1 specialised. The sides never recompiled: no padding of them is advised."""
    failures = [_failure("size_mismatch", "images", ["images.size()[0]"], "4", "2"),
                _failure("dtype_mismatch", "images", [], "Float", "Byte"),
                _failure("stride_mismatch", "images", ["images.stride()[1]"], "16384", "1"),
                _failure("zero_one_specialization", "images", ["images.size()[0]"], ">= 2", "1")]
    dimensions = [_dim("images", 0, 1, 8), _dim("images", 1, 3, 3), _dim("images", 2, 64, 128)]
    topologies = [(5, ["images dim 0 is at least 2", "images is float32"]), (2, ["images is uint8"]),
                  (1, ["images is float16"]), (1, ["images is float32"])]
    advice = advise(_catalog(["images"], failures, dimensions, topologies))
    chain = suggested_chain(advice)
    assert chain == ("cast:images:float32:scale", "contiguous:images", "pad:images:0:buckets=2,4,8")
    parse_transforms(chain)  # every suggestion is a spec whatif accepts
    assert "float16, uint8 besides float32 (6 of 9 samples)" in advice[0].text


def test_a_length_with_a_mask_is_padded_with_it_and_the_mask_is_not_advised_alone():
    dimensions = [_dim("input_ids", 0, 2, 2), _dim("input_ids", 1, 1, 60, "attention_mask.size()[1]"),
                  _dim("attention_mask", 1, 1, 60, "input_ids.size()[1]")]
    failures = [_failure("size_mismatch", "input_ids", ["input_ids.size()[1]"]),
                _failure("zero_one_specialization", "attention_mask", ["attention_mask.size()[1]"])]
    advice = advise(_catalog(["input_ids", "attention_mask"], failures, dimensions))
    assert [a.spec for a in advice] == ["pad:input_ids:1:multiple=64:with=attention_mask"]


def test_a_dim_with_no_mask_is_not_padded_and_the_dtype_falls_back_on_the_guards():
    dimensions = [_dim("tokens", 1, 3, 40)]
    failures = [_failure("size_mismatch", "tokens", ["tokens.size()[1]"]),
                _failure("dtype_mismatch", "scores", [], "Half", "Float"),
                _failure("dtype_mismatch", "scores", [], "Double", "Float")]
    advice = {a.subject: a for a in advise(_catalog(["tokens", "scores"], failures, dimensions))}
    assert advice["scores"].spec == "cast:scores:float32"
    assert advice["tokens dim 1"].spec is None and advice["tokens dim 1"].text.startswith("no mask says")
