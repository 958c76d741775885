"""Rendering the generated modules is pure (plan and catalog in, text out): byte-stable, valid
Python, and every corpus-controlled string reaches the module as a literal or a flattened comment.
No torch.compile here: the plans are written by hand against the golden seed catalog."""

from __future__ import annotations

import ast
import copy
import json

import pytest

from guardscope.fixes.emit.unbacked import render_unbacked
from guardscope.fixes.emit.warmup import render_warmup
from guardscope.fixes.plan import UnbackedDim, UnbackedPlan
from guardscope.fixes.spec_plan import UNSUPPORTED, SpecPlan
from guardscope.fixes.warmup_plan import WarmupPlan, WarmupStep

from ..paths import REPO

CATALOG = json.loads((REPO / "tests" / "golden" / "seed_catalog.json").read_text())
WARMUP = WarmupPlan(steps=(WarmupStep(0, 0, "0/0", ()), WarmupStep(1, 1, "0/1", (3,))), graphs=2,
                    one_per_topology=11, topologies=11)
UNBACKED = UnbackedPlan(dims=(UnbackedDim("x", 0, "T1: x.size()[0] == 1"), UnbackedDim("context", 0, "corpus range 1..9")),
                        duck_shape=False, duck_reason="duck sizing tied cross and local edge counts", graphs=1)


def render_both(catalog: dict) -> dict[str, str]:
    return {
        "warmup": render_warmup(catalog, WARMUP),
        "unbacked": render_unbacked(catalog, UNBACKED, plain_graphs=10, supports_unbacked_sources=True),
    }


def constants(text: str) -> dict:
    """The module's top-level constants, evaluated as literals (nothing runs)."""
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:  # built from other constants: keep its literal entries
                if isinstance(node.value, ast.Dict):
                    found[node.targets[0].id] = {
                        ast.literal_eval(k): ast.literal_eval(v) for k, v in zip(node.value.keys, node.value.values)
                        if isinstance(v, ast.Constant)}
    return found


def test_rendering_is_byte_stable_and_valid_python():
    first, second = render_both(CATALOG), render_both(copy.deepcopy(CATALOG))
    assert first == second
    for name, text in first.items():
        compile(text, f"{name}.py", "exec")
        assert text.endswith("\n") and "\r" not in text


def test_the_warmup_module_holds_the_plan():
    values = constants(render_both(CATALOG)["warmup"])
    assert values["STEPS"] == ((0, 0, "0/0"), (1, 1, "0/1"))
    assert values["GRAPHS"] == 2
    assert values["COMPILE"] == {"dynamic": True, "fullgraph": True, "mode": None}
    assert values["PLAN"]["artifact"] == "warmup" and values["PLAN"]["model"] == CATALOG["model"]


def test_the_unbacked_module_holds_the_plan():
    text = render_both(CATALOG)["unbacked"]
    values = constants(text)
    assert values["UNBACKED_DIMS"] == (("x", 0), ("context", 0))
    assert values["DUCK_SHAPE"] is False and values["GRAPHS"] == 1 and values["RESIDUAL"] == []
    assert values["ENVIRONMENT"] == {"TORCH_COMPILE_UNBACKED_SOURCES": "L['x']:0,L['context']:0"}
    assert "1 graph(s) in all\nagainst 10 for the plain warmup set" in text


def test_torch_without_unbacked_sources_gets_no_environment_line():
    text = render_unbacked(CATALOG, UNBACKED, plain_graphs=10, supports_unbacked_sources=False)
    assert "TORCH_COMPILE_UNBACKED_SOURCES" not in text
    compile(text, "unbacked.py", "exec")


@pytest.mark.parametrize("keyword", ["dynamic_shapes", "shapes_spec"])
def test_the_spec_forms_usage_line_names_the_keyword_its_torch_takes(keyword):
    """Issue 52: torch 2.14 takes the spec as torch.compile(dynamic_shapes=), 2.13 as shapes_spec=;
    the usage line and SPEC_KEYWORD say the one the plan was made with."""
    spec = SpecPlan((("x", 0, 2), ("context", 0, 1)), residual=(3,), graphs=2, keyword=keyword)
    text = render_unbacked(CATALOG, UNBACKED, plain_graphs=10, supports_unbacked_sources=True, spec=spec)
    values = constants(text)
    assert values["SPEC_KEYWORD"] == keyword and values["SPEC_DIMS"] == (("x", 0, 2), ("context", 0, 1))
    assert f", {keyword}=unbacked.shapes_spec())" in text
    other = {"dynamic_shapes", "shapes_spec"} - {keyword}
    assert f"{other.pop()}=unbacked" not in text


def test_no_spec_form_says_the_cause_detected():
    reason = "torch 2.12.1 has no torch.fx.experimental.dynamic_spec (torch 2.13 and 2.14 have it)"
    spec = SpecPlan((("x", 0, 2),), status=UNSUPPORTED, reason=reason)
    text = render_unbacked(CATALOG, UNBACKED, plain_graphs=10, supports_unbacked_sources=True, spec=spec)
    values = constants(text)
    assert values["SPEC_DIMS"] is None and values["SPEC_KEYWORD"] is None
    assert f"# No declarative spec form of these dims: {reason}" in text


@pytest.mark.parametrize("model", ['m.py:x"""\nimport os; os.system("id")\n"""',
                                   "m.py:x'\n__import__('os')\n#",
                                   "m.py:x\\\n\x00\x1b[31m"])
def test_hostile_model_names_stay_text(model):
    catalog = copy.deepcopy(CATALOG)
    catalog["model"] = model
    for name, text in render_both(catalog).items():
        tree = ast.parse(text)  # still one valid module
        top = [type(node).__name__ for node in tree.body]
        assert top[0] == "Expr" and "os" not in {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}, name
        assert constants(text)["PLAN"]["model"] == model  # the literal is the exact string
        assert "\x00" not in text and "\x1b" not in text


NESTED = UnbackedPlan(dims=(UnbackedDim("input_ids", 0, "corpus range 1..4"),
                            UnbackedDim("cache.layers[1].keys", 0, "corpus range 1..4"),
                            UnbackedDim("extras['mask']", 1, "corpus range 1..9")),
                      duck_shape=True, duck_reason=None, graphs=1)


def test_mark_walks_into_the_objects_a_call_passes():
    """A KV cache's keys are marked through their path on the real object; a call whose cache is
    empty (no layers yet), or that passes no cache, is left alone."""
    import types

    import torch

    text = render_unbacked({**CATALOG, "arguments": ["input_ids", "cache", "extras"]}, NESTED, plain_graphs=2,
                           supports_unbacked_sources=True)
    assert constants(text)["UNBACKED_DIMS"] == (("input_ids", 0), ("cache.layers[1].keys", 0), ("extras['mask']", 1))
    assert "TORCH_COMPILE_UNBACKED_SOURCES" not in text  # a nested dim has no environment form
    namespace: dict = {"__file__": "unbacked.py"}
    exec(compile(text, "unbacked.py", "exec"), namespace)
    layers = [types.SimpleNamespace(keys=torch.zeros(2, 3, 4)) for _ in range(2)]
    ids, mask = torch.zeros(2, 5), torch.zeros(2, 7)
    namespace["mark"](ids, types.SimpleNamespace(layers=layers), extras={"mask": mask})
    assert ids._dynamo_unbacked_indices == {0} and mask._dynamo_unbacked_indices == {1}
    assert layers[1].keys._dynamo_unbacked_indices == {0}
    assert not hasattr(layers[0].keys, "_dynamo_unbacked_indices")
    namespace["mark"](torch.zeros(1, 5), types.SimpleNamespace(layers=[]))  # prefill: nothing cached yet
    namespace["mark"](torch.zeros(1, 5), None, extras={})


def test_the_unbacked_plan_marks_dims_inside_arguments_by_path():
    from guardscope.fixes.plan import choose_unbacked

    def stats(dim: str, low: int, high: int) -> dict:
        return {"dim": dim, "min": low, "max": high, "dynamic": low != high, "ever_zero": low == 0, "ever_one": low == 1}

    catalog = {"arguments": ["input_ids", "cache"], "topologies": [], "compiles": [], "frames": [],
               "dimensions": [stats("input_ids.size()[0]", 1, 4), stats("cache.layers[0].keys.size()[0]", 1, 4),
                              stats("cache.layers[0].keys.size()[2]", 3, 60), stats("cache.get_mask().size()[0]", 1, 4)]}
    plan = choose_unbacked(catalog)
    assert [(d.argument, d.axis, d.nested) for d in plan.dims] == [("input_ids", 0, False),
                                                                    ("cache.layers[0].keys", 0, True)]
    assert [dim for dim, _ in plan.skipped] == ["cache.get_mask().size()[0]"]  # read, never called


@pytest.mark.parametrize("grad_mode", ["grad", "no_grad"])
def test_a_training_warmups_usage_line_backpropagates(grad_mode):
    """Recorded under grad (a training loop), the usage line asks warmup() for the backward graphs too."""
    catalog = copy.deepcopy(CATALOG)
    catalog["compile"]["grad_mode"] = grad_mode
    text = render_warmup(catalog, WARMUP)
    assert constants(text)["GRAD_MODE"] == grad_mode
    assert ("warmup.warmup(compiled, backward=True)" in text) is (grad_mode == "grad")
