"""Classification of real recompile reasons, as torch 2.11/2.13 print them."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardscope.catalog.classify import classify_reason, classify_reasons, normalize_reason
from guardscope.model import FailureKind as K

DUCK = (
    "0/0: cross_edge_index.size()[1] == local_edge_index.size()[1]  # duck sizing added this "
    "equality because these variables had the same size 3888 (to avoid this specialization, set "
    "torch.fx.experimental._config.use_duck_shape = False)"
)
ZERO_ONE = (
    "0/1: 2 <= local_edge_index.size()[1]  # message_projection(state[local_edge_index[0]])  # "
    "gnn/model.py:58 in forward (user code shown is first use of this value--the guard itself is "
    "not due user code but due to 0/1 specialization in the framework; to avoid specialization try "
    "torch._dynamo.decorators.mark_unbacked(tensor, dim))"
)
# The article's console form (an older/newer printer keeps the int64/int32 upper bound).
ZERO_ONE_BOUNDED = ZERO_ONE.replace("2 <= local_edge_index.size()[1]", "2 <= local_edge_index.size()[1] <= 2147483647")
BRANCH = (
    "0/0: 2 <= x.size()[0] <= 16  # if x.shape[0] > 16:  # app/model.py:16 in forward (user code "
    "shown is first use of this value--the guard itself is not due user code but due to 0/1 "
    "specialization in the framework; to avoid specialization try "
    "torch._dynamo.decorators.mark_unbacked(tensor, dim)) and if x.shape[0] > 16:  # "
    "app/model.py:16 in forward (_dynamo/variables/tensor.py:2606 in evaluate_expr)"
)


def test_duck_sizing_names_both_dims_and_the_hint():
    failure = classify_reason(DUCK)
    assert failure.kind is K.DUCK_SIZING
    assert failure.against == "0/0"
    assert failure.dims == ("cross_edge_index.size()[1]", "local_edge_index.size()[1]")
    assert failure.inputs == ("cross_edge_index", "local_edge_index")
    assert failure.hint.endswith("use_duck_shape = False")
    assert failure.raw == DUCK


@pytest.mark.parametrize("reason", [ZERO_ONE, ZERO_ONE_BOUNDED])
def test_zero_one_specialization(reason):
    failure = classify_reason(reason)
    assert failure.kind is K.ZERO_ONE_SPECIALIZATION
    assert failure.causes == (K.ZERO_ONE_SPECIALIZATION,)
    assert failure.dims == ("local_edge_index.size()[1]",)
    assert failure.user_source == "gnn/model.py:58 in forward: message_projection(state[local_edge_index[0]])"
    assert "mark_unbacked" in failure.hint


def test_user_branch_carries_both_causes():
    failure = classify_reason(BRANCH)
    assert failure.kind is K.SHAPE_RELATION
    assert set(failure.causes) == {K.SHAPE_RELATION, K.ZERO_ONE_SPECIALIZATION}
    assert failure.user_source == "app/model.py:16 in forward: if x.shape[0] > 16:"
    assert failure.hint == "to avoid specialization try torch._dynamo.decorators.mark_unbacked(tensor, dim)"


@pytest.mark.parametrize(
    "reason, kind, dims, expected, actual",
    [
        ("0/0: tensor 'cross_edge_index' stride mismatch at index 0. expected 0, actual 3888",
         K.STRIDE_MISMATCH, ("cross_edge_index.stride()[0]",), "0", "3888"),
        ("0/3: tensor 'x' size mismatch at index 0. expected 0, actual 1311",
         K.SIZE_MISMATCH, ("x.size()[0]",), "0", "1311"),
        ("0/0: tensor 'x' dtype mismatch. expected Float, actual Double", K.DTYPE_MISMATCH, (), "Float", "Double"),
        ("0/0: tensor 'x' rank mismatch. expected 2, actual 3", K.NDIM_MISMATCH, (), "2", "3"),
        ("0/0: tensor 'x' requires_grad mismatch. expected requires_grad=0", K.REQUIRES_GRAD_MISMATCH, (), "0", None),
        ("0/0: tensor 'x' Tensor device index mismatch. Expected device index to be 0, actual 1",
         K.DEVICE_MISMATCH, (), "0", "1"),
        ("0/0: tensor 'x' dispatch key set mismatch. expected DispatchKeySet(CPU), actual DispatchKeySet(CUDA)",
         K.DEVICE_MISMATCH, (), "DispatchKeySet(CPU)", "DispatchKeySet(CUDA)"),
        # Real (a PyG GCN): an inference tensor against a normal one, both on the CPU.
        ("1/0: tensor 'x' dispatch key set mismatch. expected DispatchKeySet(CPU, BackendSelect, ADInplaceOrView), "
         "actual DispatchKeySet(CPU, BackendSelect)", K.DISPATCH_KEY_MISMATCH, (),
         "DispatchKeySet(CPU, BackendSelect, ADInplaceOrView)", "DispatchKeySet(CPU, BackendSelect)"),
        ("1/1: tensor 'x' dispatch key set mismatch. expected DispatchKeySet(CPU, BackendSelect), "
         "actual DispatchKeySet(CPU, BackendSelect, ADInplaceOrView)", K.DISPATCH_KEY_MISMATCH, (),
         "DispatchKeySet(CPU, BackendSelect)", "DispatchKeySet(CPU, BackendSelect, ADInplaceOrView)"),
    ],
)
def test_tensor_checks(reason, kind, dims, expected, actual):
    failure = classify_reason(reason)
    assert failure.kind is kind
    assert failure.dims == dims
    assert failure.expected == expected
    assert failure.actual == actual


@pytest.mark.parametrize(
    "reason, name, dim",
    [
        ("0/0: tensor 'kwargs['input_ids']' size mismatch at index 0. expected 1, actual 8",
         "kwargs['input_ids']", "kwargs['input_ids'].size()[0]"),
        ("5/0: tensor '___stack0[0]' size mismatch at index 1. expected 92, actual 76",
         "___stack0[0]", "___stack0[0].size()[1]"),
        ("0/1: tensor 'xs[0]' stride mismatch at index 3. expected 1, actual 3", "xs[0]", "xs[0].stride()[3]"),
    ],
)
def test_tensor_names_may_hold_quotes_and_subscripts(reason, name, dim):
    failure = classify_reason(reason)
    assert failure.inputs == (name,)
    assert failure.dims == (dim,)
    assert failure.kind in {K.SIZE_MISMATCH, K.STRIDE_MISMATCH}


@pytest.mark.parametrize(
    "reason, dim, expected",
    [
        # Real (a PyG GCN, dynamic=True; the second in a frame after a graph break).
        ("0/0: edge_index.stride()[0] == edge_index.size()[1]  # (unknown source edge_index.stride()[0], please "
         "file a bug)", "edge_index.stride()[0]", "edge_index.size()[1]"),
        ("4/0: ___stack0.stride()[0] == ___stack0.size()[1]  # (unknown source ___stack0.stride()[0], please file "
         "a bug)", "___stack0.stride()[0]", "___stack0.size()[1]"),
        ("0/0: images.stride()[0] == 3*images.size()[2]*images.size()[3]", "images.stride()[0]",
         "3*images.size()[2]*images.size()[3]"),
    ],
)
def test_stride_equality_is_layout(reason, dim, expected):
    failure = classify_reason(reason)
    assert failure.kind is K.STRIDE_MISMATCH
    assert failure.causes == (K.STRIDE_MISMATCH,)
    assert failure.dims == (dim,)
    assert failure.inputs == (dim.partition(".")[0],)
    assert failure.expected == expected


def test_list_length_constant_type_and_global_state():
    length = classify_reason(
        "0/0: len(xs) == 2                                             # return sum(xs)  # m.py:3 in forward"
        "\nUser stack trace:\n  File \"m.py\", line 3, in forward\n    return sum(xs)"
    )
    assert (length.kind, length.inputs, length.expected) == (K.LIST_LENGTH, ("xs",), "2")
    assert length.user_source == "m.py:3 in forward: return sum(xs)"
    constant = classify_reason("0/0: flag == True  # return x if flag else y  # m.py:4 in forward")
    assert (constant.kind, constant.inputs, constant.expected) == (K.CONSTANT_VALUE, ("flag",), "True")
    typed = classify_reason("0/0: ___check_type_id(n, 139879732575456), type=<class 'int'>  # x * n  # m.py:5 in forward")
    assert typed.kind is K.TYPE_MISMATCH and typed.inputs == ("n",)
    assert "139879732575456" not in typed.raw  # addresses never reach the catalog
    assert classify_reason("0/0: GLOBAL_STATE changed: grad_mode ").kind is K.GLOBAL_STATE


# Real (torch 2.13, tests.models.TextClassifier, forward(token_ids, padding_mask, temperature=None),
# dynamic=None): a graph specialised to temperature 0.5 (0/0), one for any float after a second
# value made it dynamic (0/1), and the same model called with temperature=None.
TEMPERATURE_CONSTANT = (
    "0/0: temperature == 0.5                                       # return out if temperature is None else "
    "out / temperature  # tests/models.py:107 in forward\nUser stack trace:\n  File "
    "\"/home/user/project/tests/models.py\", line 107, in forward\n    return out if temperature is None else out / temperature"
)
TEMPERATURE_FLOAT = (
    "0/1: ___check_type_id(temperature, 139881299137024), type=<class 'float'>  # return out if temperature is None "
    "else out / temperature  # tests/models.py:107 in forward (HINT: type float)\nUser stack trace:\n  File "
    "\"/home/user/project/tests/models.py\", line 107, in forward\n    return out if temperature is None else out / temperature"
)


@pytest.mark.parametrize("reason, expected", [(TEMPERATURE_CONSTANT, "0.5"), (TEMPERATURE_FLOAT, "float")])
def test_none_passed_for_a_compiled_float_is_an_optional_argument(reason, expected):
    """Issue 23 item 8: the sample passed temperature=None (``absent``) to graphs compiled for a
    float; the guard that failed checks the float's value or type, but the argument was absent."""
    failure = classify_reason(reason, absent={"temperature"})
    assert (failure.kind, failure.causes) == (K.OPTIONAL_ARGUMENT, (K.OPTIONAL_ARGUMENT,))
    assert (failure.inputs, failure.expected, failure.actual) == (("temperature",), expected, "None")
    assert failure.user_source == "tests/models.py:107 in forward: return out if temperature is None else out / temperature"
    # Another value, or another type, where the argument was passed: still a constant and a type.
    assert classify_reason(TEMPERATURE_CONSTANT).kind is K.CONSTANT_VALUE
    assert classify_reason(TEMPERATURE_FLOAT, absent={"token_ids"}).kind is K.TYPE_MISMATCH
    # Absent is the argument, not any path that starts with its name.
    assert classify_reason(TEMPERATURE_FLOAT, absent={"temp"}).kind is K.TYPE_MISMATCH


def test_an_absent_argument_leaves_tensor_and_shape_failures_alone():
    failure = classify_reason("0/2: tensor 'token_ids' size mismatch at index 0. expected 2, actual 3",
                              absent={"token_ids"})
    assert failure.kind is K.SIZE_MISMATCH
    assert classify_reason(ZERO_ONE, absent={"local_edge_index"}).kind is K.ZERO_ONE_SPECIALIZATION


# Real reasons (torch 2.13) of HF BERT called directly (transformers wraps forward as
# wrapper(self, *args, **kwargs)) and of a model with optional arguments
# forward(self, x, mask=None, extras=()).
KWARGS_LENGTH = (
    "0/0: len(kwargs) == 2                                         # kwargs[arg_name] = arg_value  # "
    "utils/generic.py:1160 in wrapper\nUser stack trace:\n  File \"utils/generic.py\", line 1160, in wrapper\n"
    "    kwargs[arg_name] = arg_value"
)
MASK_IS_NONE = (
    "0/5: mask is None                                             # if mask is not None:  # "
    "tests/real_models.py:218 in forward\nUser stack trace:\n  File \"tests/real_models.py\", line 218, in "
    "forward\n    if mask is not None:"
)
NOT_EXTRAS = (
    "0/6: not extras                                               # for extra in extras:  # "
    "tests/real_models.py:220 in forward\nUser stack trace:\n  File \"tests/real_models.py\", line 220, in "
    "forward\n    for extra in extras:"
)


@pytest.mark.parametrize(
    "reason, inputs, expected",
    [
        (KWARGS_LENGTH, ("kwargs",), "2"),
        ("0/2: KeyError on kwargs['attention_mask']", ("kwargs['attention_mask']",), None),
        ("0/2: KeyError on attention_mask", ("attention_mask",), None),  # as the caller renames it
        ("0/1: expected type of 'mask' to be a tensor type, ' but found <class 'NoneType'>", ("mask",), None),
        ("0/1: expected type of 'kwargs['attention_mask']' to be a tensor type, ' but found <class 'NoneType'>",
         ("kwargs['attention_mask']",), None),
        (MASK_IS_NONE, ("mask",), None),
        (NOT_EXTRAS, ("extras",), None),
        ("0/6: extras", ("extras",), None),
    ],
)
def test_optional_argument(reason, inputs, expected):
    failure = classify_reason(reason)
    assert failure.kind is K.OPTIONAL_ARGUMENT
    assert failure.causes == (K.OPTIONAL_ARGUMENT,)
    assert failure.inputs == inputs
    assert failure.expected == expected


def test_optional_argument_is_not_every_type_or_length_change():
    # A user's own list keeps list_length; a tensor type against a non-None value stays a type.
    extras = classify_reason(NOT_EXTRAS.replace("not extras", "len(extras) == 2"))
    assert (extras.kind, extras.inputs, extras.expected) == (K.LIST_LENGTH, ("extras",), "2")
    user_source = classify_reason(KWARGS_LENGTH).user_source
    assert user_source == "utils/generic.py:1160 in wrapper: kwargs[arg_name] = arg_value"
    typed = classify_reason("0/1: expected type of 'mask' to be a tensor type, ' but found <class 'int'>")
    assert typed.kind is K.TYPE_MISMATCH


# Real (the model above): ``if h.abs().mean().item() > 0.45`` after the graph break at .item().
ITEM_BRANCH = (
    "1/1: ___stack0 <= 0.45  # if h.abs().mean().item() > 0.45:  # tests/real_models.py:222 in "
    "torch_dynamo_resume_in_forward_at_222 (variables/tensor.py:2606 in evaluate_expr)"
)


@pytest.mark.parametrize(
    "reason, inputs",
    [
        (ITEM_BRANCH, ("___stack0",)),
        (ITEM_BRANCH.replace("1/1: ___stack0 <= 0.45", "1/2: ___stack0 > 0.45"), ("___stack0",)),
        ("2/0: 0 <= num_nodes <= 1  # if num_nodes is not None:  # utils/num_nodes.py:16 in maybe_num_nodes",
         ("num_nodes",)),
        ("2/0: num_nodes != 1  # if num_nodes is not None:  # utils/num_nodes.py:16 in maybe_num_nodes",
         ("num_nodes",)),
        ("11/1: 1 <= ___stack0", ("___stack0",)),
    ],
)
def test_scalar_value(reason, inputs):
    failure = classify_reason(reason)
    assert failure.kind is K.SCALAR_VALUE
    assert failure.inputs == inputs
    assert failure.dims == ()


def test_scalar_equality_stays_a_constant_and_sizes_stay_shapes():
    constant = classify_reason(
        "2/0: num_nodes == 29                                          # if num_nodes is not None:  # "
        "utils/num_nodes.py:16 in maybe_num_nodes\nUser stack trace:\n  File \"conv/gcn_conv.py\", line 96, "
        "in gcn_norm\n    num_nodes = maybe_num_nodes(edge_index, num_nodes)\n  File \"utils/num_nodes.py\", "
        "line 16, in maybe_num_nodes\n    if num_nodes is not None:"
    )
    assert (constant.kind, constant.inputs, constant.expected) == (K.CONSTANT_VALUE, ("num_nodes",), "29")
    assert classify_reason("0/0: x.size()[0] != 1  # m.py:3 in forward").kind is K.SHAPE_RELATION
    assert classify_reason("0/0: x.numel() <= 64  # m.py:3 in forward").kind is K.SHAPE_RELATION


# Real (a small CNN, dynamic=True): conv's fake kernel picks a path by size.
CONV = (
    "0/2: 3*images.size()[2]*images.size()[3] <= 20480  # return F.conv2d(  # modules/conv.py:560 in "
    "_conv_forward (_subclasses/fake_impls.py:1811 in conv)"
)
# Real (BERT): a 0/1 guard whose upper bound, the 512 positions, a slice in bert's code added.
SEQUENCE_BOUND = (
    "0/1: 2 <= kwargs['input_ids'].size()[1] <= 512  # recordable_keys = {  # utils/output_capturing.py:332 in "
    "wrapper (user code shown is first use of this value--the guard itself is not due user code but due to 0/1 "
    "specialization in the framework; to avoid specialization try torch._dynamo.decorators.mark_unbacked(tensor, "
    "dim)) and position_ids = self.position_ids[:, cache_length : seq_length + cache_length]  # "
    "bert/modeling_bert.py:85 in forward (_subclasses/fake_impls.py:1344 in _compute_slice_index)"
)


@pytest.mark.parametrize(
    "reason, operator, inputs, expected",
    [
        (CONV, "conv (_subclasses/fake_impls.py:1811)", ("images",), None),
        ("0/12: 16 + 16*(((-1) + images.size()[2]) // 4) + 16*(((-1) + images.size()[3]) // 4) + "
         "16*(((-1) + images.size()[2]) // 4)*(((-1) + images.size()[3]) // 4) > 20480  # return F.conv2d(  # "
         "modules/conv.py:560 in _conv_forward (_subclasses/fake_impls.py:1811 in conv)",
         "conv (_subclasses/fake_impls.py:1811)", ("images",), None),
        # batch norm in training mode (the same CNN, train()).
        ("0/0: (1 + (((-1) + images.size()[2]) // 2)) != 1  # return F.batch_norm(  # "
         "nn/modules/batchnorm.py:210 in forward (_subclasses/fake_impls.py:1961 in infer_size)",
         "infer_size (_subclasses/fake_impls.py:1961)", ("images",), None),
        # A PyG GCN after graph breaks: torch's refs and prims, on a Python number.
        ("11/1: 1 <= ___stack0  # return src.view(size).expand_as(ref)  # utils/_scatter.py:144 in broadcast "
         "(_prims_common/__init__.py:322 in is_contiguous)",
         "is_contiguous (_prims_common/__init__.py:322)", ("___stack0",), None),
        ("11/0: ___stack0 == 0  # count = count.clamp(min=1)  # utils/_scatter.py:75 in "
         "torch_dynamo_resume_in_scatter_at_48 (_refs/__init__.py:448 in _broadcast_shapes)",
         "_broadcast_shapes (_refs/__init__.py:448)", ("___stack0",), "0"),
    ],
)
def test_operator_guard(reason, operator, inputs, expected):
    failure = classify_reason(reason)
    assert failure.kind is K.OPERATOR_GUARD
    assert failure.causes == (K.OPERATOR_GUARD,)
    assert failure.operator == operator
    assert failure.inputs == inputs
    assert failure.expected == expected
    assert failure.user_source is not None and "fake_impls" not in failure.user_source


def test_operator_guard_keeps_the_calling_line_and_serialises_after_hint():
    failure = classify_reason(CONV)
    assert failure.user_source == "modules/conv.py:560 in _conv_forward: return F.conv2d("
    assert failure.dims == ("images.size()[2]", "images.size()[3]")
    keys = list(failure.to_json())
    assert keys[keys.index("hint") + 1] == "operator"
    assert failure.to_json()["operator"] == "conv (_subclasses/fake_impls.py:1811)"


def test_a_deep_torch_path_is_read_before_normalisation():
    failure = classify_reason(
        "0/0: 2*x.size()[1] <= 64  # return F.pad(x, p)  # m.py:3 in forward "
        "(_refs/nn/functional/__init__.py:120 in pad)"
    )
    assert failure.operator == "pad (_refs/nn/functional/__init__.py:120)"
    assert "(functional/__init__.py:120 in pad)" in failure.raw


def test_not_operators_dynamo_frames_and_notes():
    assert classify_reason(ITEM_BRANCH).operator is None  # evaluate_expr: the user's branch
    sdpa = classify_reason(
        "0/5: 2 <= input_ids.size()[1] <= 512  # if isinstance(attention_mask, (torch.Tensor, BlockMask)) and "
        "len(attention_mask.shape) == 4:  # transformers/masking_utils.py:818 in _preprocess_mask_arguments "
        "(user code shown is first use of this value--the guard itself is not due user code but due to 0/1 "
        "specialization in the framework; to avoid specialization try "
        "torch._dynamo.decorators.mark_unbacked(tensor, dim)) and attn_output = "
        "torch.nn.functional.scaled_dot_product_attention(  # integrations/sdpa_attention.py:182 in "
        "sdpa_attention_forward (_dynamo/utils.py:4231 in run_node)"
    )
    assert sdpa.operator is None  # run_node: Dynamo running a node
    # A 0/1 note keeps its kinds; the operator that set the other bound is still named.
    bounded = classify_reason(SEQUENCE_BOUND)
    assert bounded.causes == (K.SHAPE_RELATION, K.ZERO_ONE_SPECIALIZATION)
    assert bounded.operator == "_compute_slice_index (_subclasses/fake_impls.py:1344)"


RENAMED_SEQUENCE_BOUND = SEQUENCE_BOUND.replace("kwargs['input_ids']", "input_ids")


@pytest.mark.parametrize(
    "value, causes, expected",
    [
        (1, (K.ZERO_ONE_SPECIALIZATION, K.SHAPE_RELATION), ">= 2"),  # a single token: the 0/1 bound
        (0, (K.ZERO_ONE_SPECIALIZATION, K.SHAPE_RELATION), ">= 2"),
        (600, (K.SHAPE_RELATION, K.ZERO_ONE_SPECIALIZATION), "<= 512"),  # past the model's 512 positions
    ],
)
def test_a_multi_bound_guard_is_judged_by_the_bound_the_sample_broke(value, causes, expected):
    failure = classify_reason(RENAMED_SEQUENCE_BOUND, values={"input_ids.size()[1]": value})
    assert failure.kind is causes[0]
    assert failure.causes == causes
    assert (failure.expected, failure.actual) == (expected, str(value))
    assert failure.dims == ("input_ids.size()[1]",)


def test_without_the_samples_value_the_users_bound_comes_first():
    for values in (None, {}, {"attention_mask.size()[1]": 1}, {"input_ids.size()[1]": 100}):
        failure = classify_reason(RENAMED_SEQUENCE_BOUND, values=values)
        assert failure.causes == (K.SHAPE_RELATION, K.ZERO_ONE_SPECIALIZATION)
        assert (failure.expected, failure.actual) == (None, None)
    # The un-renamed text is judged by its own spelling.
    failure = classify_reason(SEQUENCE_BOUND, values={"kwargs['input_ids'].size()[1]": 1})
    assert failure.kind is K.ZERO_ONE_SPECIALIZATION


def test_values_judge_single_bounds_too():
    lower = classify_reason(ZERO_ONE, values={"local_edge_index.size()[1]": 1})
    assert (lower.causes, lower.expected, lower.actual) == ((K.ZERO_ONE_SPECIALIZATION,), ">= 2", "1")
    unbounded = classify_reason(ZERO_ONE_BOUNDED, values={"local_edge_index.size()[1]": 0})
    assert (unbounded.kind, unbounded.expected, unbounded.actual) == (K.ZERO_ONE_SPECIALIZATION, ">= 2", "0")
    branch = classify_reason(BRANCH, values={"x.size()[0]": 20})
    assert (branch.causes, branch.expected, branch.actual) == (
        (K.SHAPE_RELATION, K.ZERO_ONE_SPECIALIZATION), "<= 16", "20")
    scalar = classify_reason("2/0: 0 <= num_nodes <= 1  # m.py:3 in forward", values={"num_nodes": 29})
    assert (scalar.kind, scalar.expected, scalar.actual) == (K.SCALAR_VALUE, "<= 1", "29")


def test_classify_reasons_passes_the_values_on():
    failures = classify_reasons([RENAMED_SEQUENCE_BOUND, "", ZERO_ONE], values={"input_ids.size()[1]": 1})
    assert [f.kind for f in failures] == [K.ZERO_ONE_SPECIALIZATION, K.ZERO_ONE_SPECIALIZATION]
    assert failures[0].actual == "1" and failures[1].actual is None


# Every recompile reason torch 2.13 printed for five real models, as (kind, raw): the kind is
# that of the reason as the caller passes it, frame 0's argument sources renamed (_renamed).
REAL_REASONS = (
    # HF BERT, dynamic=None
    (K.OPTIONAL_ARGUMENT,
     "0/0: len(kwargs) == 2                                         # kwargs[arg_name] = "
     "arg_value  # utils/generic.py:1160 in wrapper\nUser stack trace:\n  File \"utils/generic.py\", "
     "line 1160, in wrapper\n    kwargs[arg_name] = arg_value"),
    (K.SIZE_MISMATCH, "0/0: tensor 'kwargs['input_ids']' size mismatch at index 0. expected 1, actual 8"),
    (K.ZERO_ONE_SPECIALIZATION,
     "0/1: 2 <= kwargs['input_ids'].size()[0]  # recordable_keys = {  # "
     "utils/output_capturing.py:332 in wrapper (user code shown is first use of this value--the "
     "guard itself is not due user code but due to 0/1 specialization in the framework; to avoid "
     "specialization try torch._dynamo.decorators.mark_unbacked(tensor, dim))"),
    (K.SHAPE_RELATION,
     "0/1: 2 <= kwargs['input_ids'].size()[1] <= 512  # recordable_keys = {  # "
     "utils/output_capturing.py:332 in wrapper (user code shown is first use of this value--the "
     "guard itself is not due user code but due to 0/1 specialization in the framework; to avoid "
     "specialization try torch._dynamo.decorators.mark_unbacked(tensor, dim)) and position_ids = "
     "self.position_ids[:, cache_length : seq_length + cache_length]  # bert/modeling_bert.py:85 "
     "in forward (_subclasses/fake_impls.py:1344 in _compute_slice_index)"),
    (K.SHAPE_RELATION,
     "0/5: 2 <= kwargs['input_ids'].size()[1] <= 512  # if isinstance(attention_mask, "
     "(torch.Tensor, BlockMask)) and len(attention_mask.shape) == 4:  # "
     "transformers/masking_utils.py:818 in _preprocess_mask_arguments (user code shown is first "
     "use of this value--the guard itself is not due user code but due to 0/1 specialization in "
     "the framework; to avoid specialization try torch._dynamo.decorators.mark_unbacked(tensor, "
     "dim)) and attn_output = torch.nn.functional.scaled_dot_product_attention(  # "
     "integrations/sdpa_attention.py:182 in sdpa_attention_forward (_dynamo/utils.py:4231 in "
     "run_node)"),
    (K.OPTIONAL_ARGUMENT, "0/2: KeyError on kwargs['attention_mask']"),
    (K.ZERO_ONE_SPECIALIZATION,
     "0/8: 2 <= kwargs['input_ids'].size()[0]  # if token_type_ids is None:  # "
     "bert/modeling_bert.py:90 in forward (user code shown is first use of this value--the guard "
     "itself is not due user code but due to 0/1 specialization in the framework; to avoid "
     "specialization try torch._dynamo.decorators.mark_unbacked(tensor, dim))"),
    # the small CNN, dynamic=None
    (K.SIZE_MISMATCH, "0/0: tensor 'images' size mismatch at index 0. expected 2, actual 8"),
    (K.STRIDE_MISMATCH, "0/1: tensor 'images' stride mismatch at index 3. expected 1, actual 3"),
    (K.ZERO_ONE_SPECIALIZATION,
     "0/1: 2 <= images.size()[0]  # if images.dtype == torch.uint8:  # tests/real_models.py:169 "
     "in forward (user code shown is first use of this value--the guard itself is not due user "
     "code but due to 0/1 specialization in the framework; to avoid specialization try "
     "torch._dynamo.decorators.mark_unbacked(tensor, dim))"),
    (K.DTYPE_MISMATCH, "0/0: tensor 'images' dtype mismatch. expected Float, actual Half"),
    (K.DTYPE_MISMATCH, "0/4: tensor 'images' dtype mismatch. expected Half, actual Float"),
    (K.DTYPE_MISMATCH, "0/0: tensor 'images' dtype mismatch. expected Float, actual Byte"),
    (K.DTYPE_MISMATCH, "0/4: tensor 'images' dtype mismatch. expected Half, actual Byte"),
    (K.OPERATOR_GUARD,
     "0/2: 3*images.size()[2]*images.size()[3] <= 20480  # return F.conv2d(  # "
     "modules/conv.py:560 in _conv_forward (_subclasses/fake_impls.py:1811 in conv)"),
    (K.DTYPE_MISMATCH, "0/7: tensor 'images' dtype mismatch. expected Byte, actual Float"),
    (K.OPERATOR_GUARD,
     "0/10: 8 + 8*(((-1) + images.size()[2]) // 2) + 8*(((-1) + images.size()[3]) // 2) + "
     "8*(((-1) + images.size()[2]) // 2)*(((-1) + images.size()[3]) // 2) <= 20480  # return "
     "F.conv2d(  # modules/conv.py:560 in _conv_forward (_subclasses/fake_impls.py:1811 in conv)"),
    (K.OPERATOR_GUARD,
     "0/7: 3*images.size()[2]*images.size()[3] > 20480  # return F.conv2d(  # modules/conv.py:560 "
     "in _conv_forward (_subclasses/fake_impls.py:1811 in conv)"),
    (K.OPERATOR_GUARD,
     "0/12: 16 + 16*(((-1) + images.size()[2]) // 4) + 16*(((-1) + images.size()[3]) // 4) + "
     "16*(((-1) + images.size()[2]) // 4)*(((-1) + images.size()[3]) // 4) > 20480  # return "
     "F.conv2d(  # modules/conv.py:560 in _conv_forward (_subclasses/fake_impls.py:1811 in conv)"),
    (K.DTYPE_MISMATCH, "0/7: tensor 'images' dtype mismatch. expected Byte, actual Half"),
    # the small CNN, dynamic=True
    (K.DUCK_SIZING,
     "0/0: images.size()[3] == images.size()[2]  # duck sizing added this equality because these "
     "variables had the same size 32 (to avoid this specialization, set "
     "torch.fx.experimental._config.use_duck_shape = False)"),
    # the gated model (.item() branch, optional arguments), dynamic=None
    (K.SIZE_MISMATCH, "0/0: tensor 'x' size mismatch at index 0. expected 56, actual 26"),
    (K.TYPE_MISMATCH,
     "0/1: ___check_type_id(extras, <id>), type=<class 'tuple'>  # for extra in extras:  # "
     "tests/real_models.py:220 in forward (HINT: type tuple)\nUser stack trace:\n  File "
     "\"tests/real_models.py\", line 220, in forward\n    for extra in extras:"),
    (K.ZERO_ONE_SPECIALIZATION,
     "0/1: 2 <= x.size()[0]  # if mask is not None:  # tests/real_models.py:218 in forward (user "
     "code shown is first use of this value--the guard itself is not due user code but due to 0/1 "
     "specialization in the framework; to avoid specialization try "
     "torch._dynamo.decorators.mark_unbacked(tensor, dim))"),
    (K.OPTIONAL_ARGUMENT, "0/1: expected type of 'mask' to be a tensor type, ' but found <class 'NoneType'>"),
    (K.SIZE_MISMATCH, "0/3: tensor 'mask' size mismatch at index 0. expected 1, actual 35"),
    (K.OPTIONAL_ARGUMENT,
     "0/5: mask is None                                             # if mask is not None:  # "
     "tests/real_models.py:218 in forward\nUser stack trace:\n  File \"tests/real_models.py\", line "
     "218, in forward\n    if mask is not None:"),
    (K.OPTIONAL_ARGUMENT,
     "0/6: not extras                                               # for extra in extras:  # "
     "tests/real_models.py:220 in forward\nUser stack trace:\n  File \"tests/real_models.py\", line "
     "220, in forward\n    for extra in extras:"),
    (K.LIST_LENGTH,
     "0/8: len(extras) == 2                                         # for extra in extras:  # "
     "tests/real_models.py:220 in forward\nUser stack trace:\n  File \"tests/real_models.py\", line "
     "220, in forward\n    for extra in extras:"),
    (K.SIZE_MISMATCH, "1/0: tensor 'h' size mismatch at index 0. expected 56, actual 26"),
    (K.SCALAR_VALUE,
     "1/1: ___stack0 <= 0.45  # if h.abs().mean().item() > 0.45:  # tests/real_models.py:222 in "
     "torch_dynamo_resume_in_forward_at_222 (variables/tensor.py:2606 in evaluate_expr)"),
    (K.ZERO_ONE_SPECIALIZATION,
     "1/2: 2 <= h.size()[0]  # h = h * 0.5  # tests/real_models.py:223 in "
     "torch_dynamo_resume_in_forward_at_222 (user code shown is first use of this value--the "
     "guard itself is not due user code but due to 0/1 specialization in the framework; to avoid "
     "specialization try torch._dynamo.decorators.mark_unbacked(tensor, dim))"),
    (K.ZERO_ONE_SPECIALIZATION,
     "1/1: 2 <= h.size()[0]  # return F.linear(input, self.weight, self.bias)  # "
     "modules/linear.py:134 in forward (user code shown is first use of this value--the guard "
     "itself is not due user code but due to 0/1 specialization in the framework; to avoid "
     "specialization try torch._dynamo.decorators.mark_unbacked(tensor, dim))"),
    (K.SCALAR_VALUE,
     "1/2: ___stack0 > 0.45  # if h.abs().mean().item() > 0.45:  # tests/real_models.py:222 in "
     "torch_dynamo_resume_in_forward_at_222 (variables/tensor.py:2606 in evaluate_expr)"),
    # the gated model (.item() branch, optional arguments), dynamic=True
    (K.ZERO_ONE_SPECIALIZATION,
     "0/0: 2 <= x.size()[0]  # return F.linear(input, self.weight, self.bias)  # "
     "modules/linear.py:134 in forward (user code shown is first use of this value--the guard "
     "itself is not due user code but due to 0/1 specialization in the framework; to avoid "
     "specialization try torch._dynamo.decorators.mark_unbacked(tensor, dim))"),
    (K.TYPE_MISMATCH,
     "0/1: ___check_type_id(extras, <id>), type=<class 'list'>  # for extra in extras:  # "
     "tests/real_models.py:220 in forward (HINT: type list)\nUser stack trace:\n  File "
     "\"tests/real_models.py\", line 220, in forward\n    for extra in extras:"),
    # a PyG GCN (graph breaks: frames 1/ and up), dynamic=None
    (K.SIZE_MISMATCH, "0/1: tensor 'edge_index' size mismatch at index 1. expected 0, actual 200"),
    (K.DISPATCH_KEY_MISMATCH,
     "1/0: tensor 'x' dispatch key set mismatch. expected DispatchKeySet(CPU, BackendSelect, "
     "ADInplaceOrView), actual DispatchKeySet(CPU, BackendSelect)"),
    (K.DISPATCH_KEY_MISMATCH,
     "1/1: tensor 'x' dispatch key set mismatch. expected DispatchKeySet(CPU, BackendSelect), "
     "actual DispatchKeySet(CPU, BackendSelect, ADInplaceOrView)"),
    (K.CONSTANT_VALUE,
     "2/0: num_nodes == 29                                          # if num_nodes is not None:  "
     "# utils/num_nodes.py:16 in maybe_num_nodes\nUser stack trace:\n  File \"conv/gcn_conv.py\", "
     "line 96, in gcn_norm\n    num_nodes = maybe_num_nodes(edge_index, num_nodes)\n  File "
     "\"utils/num_nodes.py\", line 16, in maybe_num_nodes\n    if num_nodes is not None:"),
    (K.CONSTANT_VALUE,
     "3/0: num_nodes == 29                                          # if num_nodes is not None:  "
     "# utils/num_nodes.py:16 in maybe_num_nodes\nUser stack trace:\n  File \"utils/loop.py\", line "
     "623, in add_remaining_self_loops\n    N = maybe_num_nodes(edge_index, num_nodes)\n  File "
     "\"utils/num_nodes.py\", line 16, in maybe_num_nodes\n    if num_nodes is not None:"),
    (K.SIZE_MISMATCH, "4/0: tensor '___stack0' size mismatch at index 1. expected 63, actual 0"),
    (K.SIZE_MISMATCH, "5/0: tensor '___stack0[0]' size mismatch at index 1. expected 92, actual 76"),
    (K.SIZE_MISMATCH, "8/0: tensor 'batch' size mismatch at index 0. expected 29, actual 76"),
    (K.SIZE_MISMATCH, "10/0: tensor 'src' size mismatch at index 0. expected 29, actual 76"),
    (K.OPERATOR_GUARD,
     "11/1: 1 <= ___stack0  # return src.view(size).expand_as(ref)  # utils/_scatter.py:144 in "
     "broadcast (_prims_common/__init__.py:322 in is_contiguous)"),
    # a PyG GCN (graph breaks: frames 1/ and up), dynamic=True
    (K.STRIDE_MISMATCH,
     "0/0: edge_index.stride()[0] == edge_index.size()[1]  # (unknown source "
     "edge_index.stride()[0], please file a bug)"),
    (K.STRIDE_MISMATCH,
     "4/0: ___stack0.stride()[0] == ___stack0.size()[1]  # (unknown source ___stack0.stride()[0], "
     "please file a bug)"),
    (K.OPERATOR_GUARD,
     "11/0: ___stack0 == 0  # count = count.clamp(min=1)  # utils/_scatter.py:75 in "
     "torch_dynamo_resume_in_scatter_at_48 (_refs/__init__.py:448 in _broadcast_shapes)"),
    # HF GPT-2, dynamic=None
    (K.ZERO_ONE_SPECIALIZATION,
     "0/1: 2 <= kwargs['attention_mask'].size()[0]  # if input_ids is not None and inputs_embeds "
     "is not None:  # gpt2/modeling_gpt2.py:544 in forward (user code shown is first use of this "
     "value--the guard itself is not due user code but due to 0/1 specialization in the "
     "framework; to avoid specialization try torch._dynamo.decorators.mark_unbacked(tensor, dim))"),
    (K.ZERO_ONE_SPECIALIZATION,
     "0/1: 2 <= kwargs['attention_mask'].size()[1]  # recordable_keys = {  # "
     "utils/output_capturing.py:332 in wrapper (user code shown is first use of this value--the "
     "guard itself is not due user code but due to 0/1 specialization in the framework; to avoid "
     "specialization try torch._dynamo.decorators.mark_unbacked(tensor, dim))"),
)


def _renamed(reason: str) -> str:
    """As the caller renames frame 0's sources: transformers wraps forward as
    ``wrapper(self, *args, **kwargs)``, so ``kwargs['input_ids']`` is the argument ``input_ids``."""
    return re.sub(r"kwargs\['(\w+)'\]", r"\1", reason) if reason.startswith("0/") else reason


def _as_printed(reason: str) -> str:
    return reason


@pytest.mark.parametrize("rename", [_renamed, _as_printed])
def test_real_reasons_kinds(rename):
    assert len(REAL_REASONS) == 51
    assert [classify_reason(rename(raw)).kind for _, raw in REAL_REASONS] == [kind for kind, _ in REAL_REASONS]


@pytest.mark.parametrize("rename", [_renamed, _as_printed])
def test_at_most_5_percent_of_real_reasons_are_other(rename):
    others = [raw for _, raw in REAL_REASONS if classify_reason(rename(raw)).kind is K.OTHER]
    assert len(others) <= 0.05 * len(REAL_REASONS), others


def test_unknown_text_is_kept_as_other():
    failure = classify_reason("0/2: something torch 3.0 says")
    assert failure.kind is K.OTHER
    assert failure.raw == "0/2: something torch 3.0 says"
    assert failure.against == "0/2"


def test_normalize_reason_is_idempotent():
    text = "0/0: ___check_obj_id(x, 1234)"
    assert normalize_reason(normalize_reason(text)) == normalize_reason(text) == "0/0: ___check_obj_id(x, <id>)"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_classifies_without_raising(text):
    failure = classify_reason(text)
    assert isinstance(failure.kind, K)
