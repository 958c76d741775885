"""Topology facts and failures the catalog builder makes from a replay's guards and samples."""

from __future__ import annotations

from guardscope.catalog.builder import CatalogBuilder
from guardscope.catalog.facts import guard_atoms, render_facts
from guardscope.model import CompileEvent, FailureKind, SampleMeta, TensorMeta

from .test_classify import TEMPERATURE_CONSTANT, TEMPERATURE_FLOAT

# Real guard lines (torch 2.13, eager backend, dynamic=None) of tests.models.TextClassifier
# forward(token_ids, padding_mask, temperature=None), as guardscope keeps them: called with
# temperature 0.5 (0/0), then 0.7 (0/1: any float), then None (0/2).
TOKENS = ("TENSOR_MATCH: check_tensor(L['token_ids'], Tensor, DispatchKeySet(CPU, BackendSelect, ADInplaceOrView), "
          "torch.int64, device=None, requires_grad=False, size=[2, 8], stride=[8, 1])  # return F.embedding(  # "
          "nn/modules/sparse.py:189 in forward")
MASK = ("TENSOR_MATCH: check_tensor(L['padding_mask'], Tensor, DispatchKeySet(CPU, BackendSelect, ADInplaceOrView), "
        "torch.bool, device=None, requires_grad=False, size=[2, 8], stride=[8, 1])  # if mask is not None:  # "
        "nn/functional.py:6593 in _canonical_mask")
HALF = ("EQUALS_MATCH: L['temperature'] == 0.5                                       # return out if temperature is "
        "None else out / temperature  # tests/models.py:107 in forward")
FLOAT_TYPE = ("TYPE_MATCH: ___check_type_id(L['temperature'], 139881299137024), type=<class 'float'>  # return out if "
              "temperature is None else out / temperature  # tests/models.py:107 in forward (HINT: type float)")
ANY_FLOAT = ("LAMBDA_GUARD: not math.isnan(L['temperature'])  # implicit guard for float input due to NaN "
             "specialization in the framework")
ANY_FLOAT_2_11 = ("LAMBDA_GUARD: not math.isnan(___as_tensor(L['temperature']).item())  # implicit guard for float "
                  "input due to NaN specialization in the framework",
                  "LAMBDA_GUARD: L['temperature'] == ___as_tensor(L['temperature']).item()  # (unknown var zf72, "
                  "please file a bug)")
# Guards on torch's own module globals, which every graph of the forward has.
GLOBAL = ("EQUALS_MATCH: G['__import_torch_dot_nn_dot_functional'].torch.bool == torch.bool  # if _mask_dtype != "
          "torch.bool and not _mask_is_float:  # nn/functional.py:6596 in _canonical_mask")
RENAME = {"L['token_ids']": "token_ids", "L['padding_mask']": "padding_mask", "L['temperature']": "temperature"}


def rename(text: str) -> str:
    for source, name in RENAME.items():
        text = text.replace(source, name)
    return text


def test_a_scalar_baked_into_a_graph_is_a_fact_of_its_topology():
    """Issue 23 item 8: the graph specialised to temperature 0.5 says so in its facts."""
    assert ("value", "temperature", "0.5") in guard_atoms((TOKENS, HALF, MASK, GLOBAL), rename)
    assert ("any_float", "temperature") in guard_atoms((TOKENS, FLOAT_TYPE, MASK, ANY_FLOAT), rename)
    assert render_facts({("value", "temperature", "0.5"), ("size", "token_ids.size()[0]", 2)}, set(), {}, {}) == (
        "temperature is 0.5", "token_ids dim 0 is 2")
    assert render_facts({("any_float", "temperature")}, set(), {}, {}) == ("temperature is any float but NaN",)
    # torch 2.11.0 writes the implicit guard on the float passed as a tensor, beside a round trip
    assert guard_atoms((TOKENS, FLOAT_TYPE, MASK, *ANY_FLOAT_2_11), rename) == guard_atoms(
        (TOKENS, FLOAT_TYPE, MASK, ANY_FLOAT), rename)
    # torch's own globals are no topology's
    assert not [a for a in guard_atoms((GLOBAL,), rename) if a[0] == "value"]


def sample(index: int, temperature: float | None, serving: str) -> SampleMeta:
    tensor = TensorMeta((2, 8), (8, 1), "int64", "cpu", False)
    mask = TensorMeta((2, 8), (8, 1), "bool", "cpu", False)
    return SampleMeta(index, (("token_ids", tensor), ("padding_mask", mask)), (),
                      (("temperature", f"{type(temperature).__name__}:{temperature!r}"),), serving=serving)


def text_classifier_catalog():
    builder = CatalogBuilder()
    for meta in (sample(0, 0.5, "0/0"), sample(1, 0.7, "0/1"), sample(2, 0.9, "0/1"), sample(3, None, "0/2")):
        builder.add_sample(meta)
    events = [
        CompileEvent("0/0", 0, 0, 0, "forward", 0.5, guards=(TOKENS, HALF, MASK, GLOBAL)),
        CompileEvent("0/1", 0, 1, 1, "forward", 0.5, reasons=(TEMPERATURE_CONSTANT,),
                     guards=(TOKENS, FLOAT_TYPE, MASK, ANY_FLOAT, GLOBAL)),
        CompileEvent("0/2", 0, 2, 3, "forward", 0.5, reasons=(TEMPERATURE_FLOAT, TEMPERATURE_CONSTANT),
                     guards=(TOKENS, MASK, GLOBAL)),
    ]
    return builder.build(events=events, torch_version="2.13.0", corpus_path="../corpus", model="tests.models:TextClassifier",
                         compile_options={"backend": "eager", "device": "cpu", "dynamic": None, "fullgraph": False})


def test_the_catalog_names_each_graphs_temperature_and_none_as_an_optional_argument():
    catalog = text_classifier_catalog()
    assert [t.facts for t in catalog.topologies] == [
        ("temperature is 0.5",), ("temperature is any float but NaN",),
        ("without temperature", "the graph every other input shares")]
    second, third = catalog.compiles[1].failures, catalog.compiles[2].failures
    # 0.7 against the graph for 0.5: another value of a constant
    assert [(f.kind, f.expected, f.actual) for f in second] == [(FailureKind.CONSTANT_VALUE, "0.5", None)]
    # None against both: the argument was left out
    assert [(f.against, f.kind, f.expected, f.actual) for f in third] == [
        ("0/0", FailureKind.OPTIONAL_ARGUMENT, "0.5", "None"), ("0/1", FailureKind.OPTIONAL_ARGUMENT, "float", "None")]
    assert catalog.failure_counts() == {"constant_value": 1, "optional_argument": 2}
