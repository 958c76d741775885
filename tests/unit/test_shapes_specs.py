"""torch's declarative spec (ShapesSpec: torch.compile(shapes_spec=) in 2.13, dynamic_shapes= in
2.14) built from guardscope's argument paths (torch_compat.shapes_specs), the keyword detected,
and the ranks the spec plan takes from a catalog's dimension table (fixes.spec_plan). No compile."""

from __future__ import annotations

import importlib.util
import inspect
import re

import pytest
import torch

from guardscope import torch_compat
from guardscope.fixes.plan import UnbackedDim, UnbackedPlan
from guardscope.fixes.spec_plan import spec_dims
from guardscope.torch_compat.shapes_specs import path_steps

needs_spec = pytest.mark.skipif(not torch_compat.supports_shapes_spec(), reason="torch without dynamic_spec")


def plain(spec):
    return re.sub(r"#\d+", "", repr(spec))


def test_a_path_is_read_as_attributes_positions_and_keys():
    assert path_steps("cache.layers[0].keys") == ("cache", (("attribute", "layers"), ("index", 0),
                                                            ("attribute", "keys")))
    assert path_steps("batch['x']") == ("batch", (("key", "x"),))
    with pytest.raises(ValueError, match="not an argument path"):
        path_steps("x + 1")


@needs_spec
def test_nested_dims_become_one_tree_with_every_other_dim_static():
    from torch.fx.experimental.dynamic_spec import ObjectSpec, SeqSpec, ShapeVar, TensorSpec

    spec = torch_compat.shapes_spec_of([("input_ids", 1, 2), ("input_ids", 0, 2), ("cache.layers[1].keys", 2, 4)])
    params = spec._params._named_args
    ids = params["input_ids"]
    assert isinstance(ids, TensorSpec) and all(isinstance(d, ShapeVar) for d in ids)
    layers = params["cache"]._fields["layers"]
    assert isinstance(params["cache"], ObjectSpec) and isinstance(layers, SeqSpec)
    assert "[0]: None" in plain(layers)  # a position the plan does not name stays unspecified (static)
    keys = [d for d in layers._entries[1]._fields["keys"]]
    assert [d is None for d in keys] == [True, True, False, True]
    assert keys[2].name == "cache.layers[1].keys.size()[2]" and keys[2].min == 0


@needs_spec
def test_a_path_reached_two_ways_or_a_dim_outside_its_rank_is_refused():
    with pytest.raises(ValueError, match="both by attribute and by index"):
        torch_compat.shapes_spec_of([("cache.layers[0]", 0, 1), ("cache[0]", 0, 1)])
    with pytest.raises(ValueError, match="outside its 2 dims"):
        torch_compat.shapes_spec_of([("x", 2, 2)])


def test_the_spec_plan_takes_each_tensors_rank_from_the_dimension_table():
    catalog = {"dimensions": [{"input": "x", "axis": a} for a in range(3)]
               + [{"input": "cache.layers[0].keys", "axis": a} for a in range(4)]}
    plan = UnbackedPlan(dims=(UnbackedDim("x", 0, ""), UnbackedDim("cache.layers[0].keys", 2, "")),
                        duck_shape=True, duck_reason=None)
    assert spec_dims(catalog, plan) == (("x", 0, 3), ("cache.layers[0].keys", 2, 4))


def test_the_keyword_is_the_one_torch_compiles_signature_has():
    """Issue 52: detected from torch.compile's parameters (dynamic_shapes first, torch 2.14's;
    then shapes_spec, 2.13's), never from the version; where none, the cause is the one found."""
    support = torch_compat.spec_support()
    parameters = inspect.signature(torch.compile).parameters
    has_module = importlib.util.find_spec("torch.fx.experimental.dynamic_spec") is not None
    if not has_module:
        assert support.keyword is None and "has no torch.fx.experimental.dynamic_spec" in support.reason
    elif "dynamic_shapes" in parameters:
        assert support == torch_compat.SpecSupport("dynamic_shapes")
    elif "shapes_spec" in parameters:
        assert support == torch_compat.SpecSupport("shapes_spec")
    else:
        assert support.keyword is None and "torch.compile takes neither" in support.reason
        assert "has no torch.fx.experimental.dynamic_spec" not in support.reason
    assert torch_compat.spec_keyword() == support.keyword
    assert torch_compat.supports_shapes_spec() == (support.keyword is not None)


@needs_spec
def test_the_compile_arguments_carry_the_spec_under_the_detected_keyword():
    from torch.fx.experimental.dynamic_spec import ShapesSpec

    (keyword, spec), = torch_compat.spec_compile_kwargs([("x", 0, 2)]).items()
    assert keyword == torch_compat.spec_keyword() and isinstance(spec, ShapesSpec)
    assert keyword in inspect.signature(torch.compile).parameters


def test_verify_names_both_keywords_when_unbacked_py_was_written_for_another_torch():
    """An analysis emitted on torch 2.13 (shapes_spec=, or no keyword in fixes.json: written before
    torch 2.14) and verified on 2.14 (dynamic_shapes=), or the other way round."""
    from guardscope.proving.verify import spec_keyword_mismatch

    taken = torch_compat.spec_keyword()
    if taken is not None:
        assert spec_keyword_mismatch({"keyword": taken}) is None
    other = "shapes_spec" if taken == "dynamic_shapes" else "dynamic_shapes"
    said = spec_keyword_mismatch({"keyword": other})
    assert said.startswith(f"unbacked.py's usage line says torch.compile({other}=...)")
    if taken is not None:
        assert said.endswith(f"which torch {torch_compat.torch_version()} does not take (it takes {taken}=)")
    else:
        assert torch_compat.spec_support().reason.split(" (")[0] in said
    assert (spec_keyword_mismatch({}) is None) == (taken == "shapes_spec")
