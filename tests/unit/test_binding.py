"""Binding a call the way Dynamo's frame holds it, and naming its sources the way the user does.
Pure: no torch.compile."""

from __future__ import annotations

import functools
import inspect

import torch

from guardscope.replay.arguments import CallBinder, describe, lookup
from guardscope.sources import FrameArguments


def reference(function, *args, **kwargs):
    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    return dict(bound.arguments)


def test_a_plain_function_binds_with_its_defaults():
    def forward(x, y, scale=2.0, mask=None):
        return x

    binder = CallBinder(forward)
    assert not binder.wrapped
    calls = [((1, 2), {}), ((1,), {"y": 2}), ((), {"y": 2, "x": 1, "mask": 3}), ((1, 2, 3, 4), {}),
             ((1,), {}), ((1, 2), {"x": 1}), ((1, 2), {"other": 1}), ((1, 2, 3, 4, 5), {})]
    for args, kwargs in calls:
        expected = reference(forward, *args, **kwargs)
        assert binder.arguments(args, kwargs) == expected, (args, kwargs)
        assert binder.frame_locals(args, kwargs) == (expected or {}), (args, kwargs)

    def variadic(x, *rest, key=0, **extra):
        return x

    binder = CallBinder(variadic)
    assert binder.frame_locals((1, 2, 3), {"key": 4, "z": 5}) == {"x": 1, "rest": (2, 3), "key": 4, "extra": {"z": 5}}
    # Not wrapped: the user sees the same containers the frame does.
    assert binder.arguments((1, 2, 3), {"key": 4, "z": 5}) == {"x": 1, "rest": (2, 3), "key": 4, "extra": {"z": 5}}


def _decorate(function):
    # transformers 5 decorates every forward like this: the frame Dynamo compiles is the wrapper.
    @functools.wraps(function)
    def wrapper(self, *args, **kwargs):
        return function(self, *args, **kwargs)

    return wrapper


class Wrapped(torch.nn.Module):
    @_decorate
    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **extra):
        return input_ids


def test_a_decorated_forward_binds_as_the_wrapper_frame_and_names_as_forward():
    model = Wrapped()
    binder = CallBinder(model)
    assert binder.wrapped and binder.code.co_name == "wrapper"
    ids, mask = torch.zeros(2, 3), torch.ones(2, 3)
    frame = binder.frame_locals((ids,), {"attention_mask": mask, "flag": True})
    # The wrapper's locals, and the closure cell it reads the wrapped function from.
    assert set(frame) == {"self", "args", "kwargs", "function"}
    assert frame["args"] == (ids,) and frame["kwargs"] == {"attention_mask": mask, "flag": True}
    assert frame["self"] is model
    # The user's names: only what was passed (the wrapper never sees forward's defaults), with
    # forward's own **extra flattened.
    assert binder.arguments((ids,), {"attention_mask": mask, "flag": True}) == {
        "input_ids": ids, "attention_mask": mask, "flag": True}
    assert binder.argument_names() == ("input_ids", "attention_mask", "token_type_ids", "extra")
    names = binder.frame_arguments()
    assert names == FrameArguments(frame=("self",), varargs="args", varkw="kwargs",
                                   user=("input_ids", "attention_mask", "token_type_ids"), wrapped=True)


def test_wrapper_sources_are_renamed_to_forward_parameters():
    names = FrameArguments(frame=("self",), varargs="args", varkw="kwargs",
                           user=("input_ids", "attention_mask"), wrapped=True)
    assert names.user_path("kwargs['input_ids']") == "input_ids"
    assert names.user_path("L['kwargs']['attention_mask']") == "attention_mask"
    assert names.user_path("args[1]") == "attention_mask"
    assert names.user_path("args[0][2]") == "input_ids[2]"
    assert names.user_path("args[5]") == "args[5]"  # beyond forward's positional parameters
    assert names.rename("0/0: tensor 'kwargs['input_ids']' size mismatch at index 1. expected 5, actual 7") == (
        "0/0: tensor 'input_ids' size mismatch at index 1. expected 5, actual 7")
    assert names.rename("2 <= L['kwargs']['attention_mask'].size()[1]  # x  # m.py:3 in f") == (
        "2 <= attention_mask.size()[1]  # x  # m.py:3 in f")
    # The container itself (its length: which keywords were passed) keeps its name.
    assert names.rename("len(L['kwargs']) == 2") == "len(kwargs) == 2"
    assert names.rename("___check_obj_id(L['self'].training, 1)") == "___check_obj_id(self.training, 1)"
    plain = FrameArguments(frame=("self", "x"), varargs=None, varkw=None, user=("x",), wrapped=False)
    assert plain.rename("2 <= L['x'].size()[0]") == "2 <= x.size()[0]"
    assert plain.rename("len(kwargs['a']) == 1") == "len(kwargs['a']) == 1"  # not a wrapper's container
    assert FrameArguments.from_json(names.to_json()) == names


def test_describe_walks_nested_arguments_and_lookup_finds_them():
    arguments = {"x": torch.zeros(2, 3), "xs": [torch.zeros(4), (torch.zeros(1, 1), 3)], "d": {"k": None}}
    meta = describe(arguments, 7, None, None)
    assert [path for path, _ in meta.tensors] == ["x", "xs[0]", "xs[1][0]"]
    assert meta.lengths == (("xs", 2), ("xs[1]", 2), ("d", 1))
    assert meta.scalars == (("xs[1][1]", "int:3"), ("d['k']", "NoneType:None"))
    assert lookup(arguments, "xs[1][0]") is arguments["xs"][1][0]
    assert lookup(arguments, "d['k']") is None
