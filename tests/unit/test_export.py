"""torch.export Dims: torch's suggested fixes read into guardscope's spec, the module rendered from
it, refinement and the corpus check with real torch.export, and real models end to end (analyze,
emit-warmup, verify): BERT, a CNN, GPT-2 (infeasible), and models with data-dependent code.

This file holds the pure tests (no torch.compile, no child process); the others are in
tests/integration/test_export.py, tests/subprocess/test_export.py.
"""

from __future__ import annotations

import pytest
import torch

from guardscope.fixes.emit.export_dims import render_export_dims
from guardscope.fixes.exporting import explain, location_from_message, torch_error
from guardscope.fixes.plan import apply_suggested_fixes, call_difference, choose_example, parse_suggested_fixes

from ..builders import CATALOG, dim, refined_plan

# Messages as torch 2.13 wrote them (tests below export the models that produce them).
DERIVED_MESSAGE = """Constraints violated (x_0)! For more information, run with TORCH_LOGS="+dynamic".
  - Not all values of x_0 = L['x'].size()[0] in the specified range x_0 <= 100 satisfy the generated guard ((3*L['x'].size()[0]) % 6) == 0.
Suggested fixes:
  _x_0 = Dim('_x_0', min=1, max=50)
  x_0 = 2*_x_0
  y_0 = x_0 + 1
  z_1 = 4
  w_0 = Dim('w_0', max=100)

The error above occurred when calling torch.export.export. If you would like to view some more information about this error, and get a list of all other errors that may occur in your export call, you can replace your `export()` call with `draft_export()`."""

CACHE_MESSAGE = ("Found <class 'transformers.cache_utils.DynamicCache'> in output, which is not a known type. "
                 "If this type holds tensors, you need to register a pytree for it.")

SCATTER_MESSAGE = """Could not extract specialized integer from data-dependent expression u2 (unhinted: u2).  (Size-like symbols: none)


Caused by: (_export/non_strict_utils.py:1205 in __torch_function__)
For more information, run with TORCH_LOGS="dynamic"
For C++ stack trace, run with TORCHDYNAMO_EXTENDED_DEBUG_CPP=1

The following call raised this error:
  File "/venv/lib/python3.11/site-packages/torch_geometric/utils/_scatter.py", line 48, in scatter
    dim_size = int(index.max()) + 1 if index.numel() > 0 else 0


The error above occurred when calling torch.export.export."""


# --- pure: torch's suggested fixes -> the spec ---------------------------------------------------


def test_parse_suggested_fixes_reads_every_form():
    fixes = {fix.name: fix for fix in parse_suggested_fixes(DERIVED_MESSAGE)}
    assert list(fixes) == ["_x_0", "x_0", "y_0", "z_1", "w_0"]  # the trailing paragraph is not a fix
    assert (fixes["_x_0"].kind, fixes["_x_0"].min, fixes["_x_0"].max) == ("dim", 1, 50)
    assert (fixes["x_0"].kind, fixes["x_0"].root, fixes["x_0"].coefficient, fixes["x_0"].offset) == ("derived", "_x_0", 2, 0)
    assert (fixes["y_0"].root, fixes["y_0"].coefficient, fixes["y_0"].offset) == ("x_0", 1, 1)
    assert (fixes["z_1"].kind, fixes["z_1"].value) == ("static", 4)
    assert (fixes["w_0"].min, fixes["w_0"].max) == (None, 100)  # torch leaves out a minimum of 2
    assert fixes["x_0"].text == "x_0 = 2*_x_0"


@pytest.mark.parametrize("line", ["x_0 = Dim('y_0', max=4)", "x_0 = x_1 // 2", "x_0 = __import__('os')"])
def test_parse_suggested_fixes_refuses_what_it_cannot_read(line):
    with pytest.raises(ValueError):
        parse_suggested_fixes(f"Constraints violated (x_0)!\nSuggested fixes:\n  {line}\n")


def test_apply_suggested_fixes_derives_specialises_and_refines():
    dims = (dim("x_0", 2, 120), dim("y_0", 3, 121), dim("z_1", 3, 9), dim("w_0", 0, 500))
    fixed = apply_suggested_fixes(dims, parse_suggested_fixes(DERIVED_MESSAGE), 1)
    by_name = {d.name: d for d in fixed}
    assert [d.name for d in fixed] == ["_x_0", "x_0", "y_0", "z_1", "w_0"]  # a root before its derived dims
    assert by_name["_x_0"].members == () and (by_name["_x_0"].min, by_name["_x_0"].max) == (1, 50)
    assert by_name["x_0"].expression == "2 * _x_0" and (by_name["x_0"].min, by_name["x_0"].max) == (2, 100)
    # y_0 = x_0 + 1 over a derived x_0 is composed onto the root, as torch's _DerivedDim does
    assert by_name["y_0"].expression == "2 * _x_0 + 1" and (by_name["y_0"].min, by_name["y_0"].max) == (3, 101)
    assert by_name["z_1"].kind == "static" and by_name["z_1"].expression == "4"
    assert (by_name["w_0"].min, by_name["w_0"].max) == (0, 100)  # the corpus's minimum stays
    assert "torch's suggested fix (round 1): x_0 = 2*_x_0" in by_name["x_0"].note
    assert by_name["x_0"].note.startswith("corpus range 2..120")
    assert [d.describe() for d in fixed][:3] == ["_x_0[1..50]", "x_0=2*_x_0[2..100]", "y_0=2*_x_0+1[3..101]"]


def test_a_refined_dim_without_a_minimum_takes_torchs_default_only_when_nothing_else_changes():
    keep = apply_suggested_fixes((dim("w_0", 1, 500),), parse_suggested_fixes("Suggested fixes:\n  w_0 = Dim('w_0', max=100)\n"), 1)
    assert [(d.min, d.max) for d in keep] == [(1, 100)]
    again = apply_suggested_fixes(keep, parse_suggested_fixes("Suggested fixes:\n  w_0 = Dim('w_0', max=100)\n"), 2)
    assert [(d.min, d.max) for d in again] == [(2, 100)]


def test_a_new_root_without_bounds_covers_the_corpus_range():
    fixes = parse_suggested_fixes("Suggested fixes:\n  _h = Dim('_h')\n  h = 2*_h + 1\n")
    root, derived = apply_suggested_fixes((dim("h", 33, 201),), fixes, 2)
    assert (root.name, root.min, root.max) == ("_h", 16, 100)
    assert (derived.min, derived.max) == (33, 201)


def test_a_static_root_makes_its_derived_dims_static():
    spec = apply_suggested_fixes((dim("a_0", 2, 50), dim("b_0", 3, 51)),
                                 parse_suggested_fixes("Suggested fixes:\n  b_0 = a_0 + 1\n"), 1)
    spec = apply_suggested_fixes(spec, parse_suggested_fixes("Suggested fixes:\n  a_0 = 7\n"), 2)
    assert [(d.name, d.kind, d.min) for d in spec] == [("a_0", "static", 7), ("b_0", "static", 8)]


def test_apply_suggested_fixes_refuses_unknown_names():
    with pytest.raises(ValueError, match="did not declare"):
        apply_suggested_fixes((dim("x_0", 2, 9),), parse_suggested_fixes("Suggested fixes:\n  q_0 = 3\n"), 1)


# --- pure: the example and the calls it covers ---------------------------------------------------


def test_choose_example_takes_the_most_common_call_structure():
    topologies = [{"id": 0, "count": 4}, {"id": 1, "count": 5}, {"id": 2, "count": 3}, {"id": 3, "count": 1}]
    structures = {0: "ids+mask", 1: "ids", 2: "ids+mask", 3: "ids+mask"}
    assert choose_example(topologies, structures, unsuited=set())["id"] == 0
    # a representative with a dynamic size of 0 or 1 is a poor example: torch specialises it
    assert choose_example(topologies, structures, unsuited={0})["id"] == 2


def test_call_difference_says_which_arguments_differ():
    example = {"input_ids": "a 2-d int64 tensor on cpu", "attention_mask": "a 2-d int64 tensor on cpu"}
    assert call_difference(example, dict(example)) is None
    assert call_difference(example, {"input_ids": example["input_ids"]}) == \
        "does not pass attention_mask, which the exported example passes"
    assert call_difference(example, {**example, "token_type_ids": "x"}) == \
        "passes token_type_ids, which the exported example does not"
    assert call_difference({"images": "a 4-d float32 tensor on cpu"}, {"images": "a 4-d uint8 tensor on cpu"}) == \
        "images is a 4-d uint8 tensor on cpu (in the exported example: a 4-d float32 tensor on cpu)"


# --- pure: the rendered module ---------------------------------------------------------------------


def test_rendered_module_is_plain_python_and_deterministic():
    plan = refined_plan()
    text = render_export_dims(CATALOG, plan)
    assert text == render_export_dims(CATALOG, refined_plan())
    compile(text, "export_dims.py", "exec")
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines.index("_x_0 = Dim('_x_0', min=1, max=60)") < lines.index("x_0 = 2 * _x_0") < lines.index("z_1 = 4")
    assert "# corpus range 2..120; torch's suggested fix (round 1): x_0 = 2*_x_0" in text
    assert "    'x': {0: x_0},\n    'y': {0: x_0},\n    'z': {1: z_1},\n    'extras': None,  # static" in text
    assert "#   T2 (3 samples, first 9): z is None (in the exported example: a tensor)" in text
    assert "corpus sample 7 (topology T1" in text and "1 of 3 topologies (3 samples) are outside" in text


def test_rendered_export_passes_only_the_arguments_of_the_call(monkeypatch):
    """Static arguments get a structure of Nones (torch.export wants one per list element), and an
    argument the call leaves out is not in dynamic_shapes."""
    namespace: dict = {}
    exec(compile(render_export_dims(CATALOG, refined_plan()), "export_dims.py", "exec"), namespace)
    seen = {}

    class Model(torch.nn.Module):
        def forward(self, x, y=None, z=None, extras=()):
            return x

    monkeypatch.setattr(torch.export, "export",
                        lambda model, args, kwargs, dynamic_shapes: seen.update(dynamic_shapes))
    namespace["export"](Model(), torch.ones(4, 2), z=None, extras=[torch.ones(1), torch.ones(1)])
    assert seen == {"x": {0: namespace["x_0"]}, "z": None, "extras": [None, None]}


# --- pure: why torch.export failed -------------------------------------------------------------------


def test_explain_names_dynamic_cache_and_the_remedy():
    reason = explain("RuntimeError", CACHE_MESSAGE, None)
    assert reason.startswith("the model returns a transformers DynamicCache, which torch.export cannot flatten")
    assert "use_cache=False (config.use_cache = False)" in reason and "torch.utils._pytree" in reason
    other = explain("RuntimeError", CACHE_MESSAGE.replace("transformers.cache_utils.DynamicCache", "mylib.Box"), None)
    assert other.startswith("the model returns a mylib.Box") and "register_pytree_node" in other


def test_explain_data_dependent_code_names_the_user_call():
    location = location_from_message(SCATTER_MESSAGE)
    assert location == ("torch_geometric/utils/_scatter.py:48 in scatter "
                        "(`dim_size = int(index.max()) + 1 if index.numel() > 0 else 0`)")
    reason = explain("GuardOnDataDependentSymNode", SCATTER_MESSAGE, location)
    assert f"data-dependent control flow at {location}" in reason
    assert "torch._check" in reason and "torch.cond" in reason
    # torch's own frames are not the user's code
    assert location_from_message("Caused by: (_export/non_strict_utils.py:1205 in __torch_function__)") is None
    assert location_from_message("Caused by: (models/gate.py:12 in forward)") == "models/gate.py:12 in forward"


def test_torch_error_keeps_the_explanation_and_drops_the_pointers():
    text = torch_error(RuntimeError(SCATTER_MESSAGE))
    assert text.startswith("RuntimeError: Could not extract specialized integer")
    assert "The following call raised this error:" in text and "dim_size = int(index.max())" in text
    assert "TORCH_LOGS" not in text and "\n\n\n" not in text
    assert len(torch_error(RuntimeError("x" * 5000))) == 2000
