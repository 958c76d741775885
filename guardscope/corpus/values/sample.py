"""What a sample may hold: the check that refuses anything else (naming where it is) and the
private copy a writer keeps of one call (see :mod:`guardscope.corpus.storage.format` for the list).

Objects a codec stores (:mod:`guardscope.corpus.values.structured`: a transformers cache, a PyG batch,
a named tuple, a registered class) are accepted everywhere here; :func:`snapshot` gives them
lowered, as the :class:`~guardscope.corpus.values.structured.Structured` s a shard stores."""

from __future__ import annotations

import copy
from typing import Any

import torch

from ...errors import SampleError
from .structured import PLAIN_TYPES as _SCALAR_TYPES
from .structured import Structured, codec_for, lower, needs_lowering


def storage_bytes(value: Any) -> int:
    """Bytes a corpus stores for the tensors in ``value``: each distinct storage once, whole
    (a view is stored with its base)."""
    seen: set[tuple[str, int]] = set()
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            try:
                storage = item.untyped_storage()
            except Exception:  # sparse, quantized...: no storage; the corpus refuses them anyway
                continue
            key = (str(item.device), storage.data_ptr())
            if key not in seen:
                seen.add(key)
                total += storage.nbytes()
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif type(item) is Structured:
            stack.append(item.state)
        elif type(item) not in _SCALAR_TYPES:
            codec = codec_for(item)
            if codec is not None:
                stack.append(codec.to_state(item))
    return total


def check_sample(args: tuple, kwargs: dict) -> set[str]:
    """Raise ``SampleError`` unless a corpus can store this call's arguments (naming the first
    value it cannot, e.g. ``kwargs['d'][2]``); returns the device types of its tensors. Copies
    nothing."""
    devices: set[str] = set()
    _check_value(tuple(args), "args", devices, set())
    _check_value(dict(kwargs), "kwargs", devices, set())
    return devices


def snapshot(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A private copy of one call's arguments, exactly as :meth:`CorpusWriter.add` records them
    (aliasing kept, autograd history and tensor attributes dropped), for a caller that must
    let the caller's buffers go before the sample is written (a background recorder).

    Raises ``SampleError`` naming the first value the format cannot store.
    """
    args, kwargs, _ = _snapshot(tuple(args), dict(kwargs))
    return args, kwargs


def _snapshot(args: tuple, kwargs: dict) -> tuple[tuple, dict, set[str]]:
    args, kwargs = lowered(args, kwargs)
    devices = check_sample(args, kwargs)
    args, kwargs = _copy_call(args, kwargs)
    return args, kwargs, devices


def lowered(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call with every object a codec stores lowered to a ``Structured`` (the call itself
    when it holds none: the common case costs one walk, no copy). ``SampleError`` when a
    codec's ``to_state`` fails."""
    if not (needs_lowering(args) or needs_lowering(kwargs)):
        return args, kwargs
    return lower(tuple(args), "args"), lower(dict(kwargs), "kwargs")


def _copy_call(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """One deep copy of the whole (checked) call: it keeps aliasing between its tensors."""
    return copy.deepcopy(_plain((args, kwargs)))


def _check_value(value: Any, path: str, devices: set[str], active: set[int]) -> None:
    """Raise SampleError unless ``value`` is storable; collect tensor device types."""
    kind = type(value)
    if kind is torch.Tensor:
        if value.layout != torch.strided:
            raise SampleError(
                f"{path} is a {value.layout} tensor; a corpus stores strided (dense) tensors "
                "only: pass value.to_dense()"
            )
        if value.is_quantized:
            raise SampleError(
                f"{path} is a quantized tensor; a corpus stores plain tensors only: pass "
                "value.dequantize()"
            )
        if value.device.type == "meta":
            raise SampleError(
                f"{path} is a meta tensor, which holds no data; a corpus stores real tensors"
            )
        devices.add(value.device.type)
        return
    if kind in _SCALAR_TYPES:
        return
    if kind is Structured:
        if type(value.name) is not str:
            raise SampleError(f"{path} is a stored object without a type name")
        _check_value(value.state, f"{path}.<{value.name}>", devices, active)
        return
    if kind in (list, tuple, dict):
        if id(value) in active:
            raise SampleError(f"{path} contains itself; a corpus cannot store cyclic structures")
        active.add(id(value))
        if kind is dict:
            for key, item in value.items():
                if type(key) not in (str, int):
                    raise SampleError(
                        f"{path} has a key {key!r} of type {type(key).__qualname__}; "
                        "dict keys must be str or int"
                    )
                _check_value(item, f"{path}[{key!r}]", devices, active)
        else:
            for position, item in enumerate(value):
                _check_value(item, f"{path}[{position}]", devices, active)
        active.discard(id(value))
        return
    codec = None if isinstance(value, torch.Tensor) else codec_for(value)
    if codec is not None:
        if id(value) in active:
            raise SampleError(f"{path} contains itself; a corpus cannot store cyclic structures")
        active.add(id(value))
        try:
            state = codec.to_state(value)
        except Exception as exc:
            raise SampleError(f"{path} ({codec.name}) cannot be stored: its to_state raised "
                              f"{type(exc).__name__}: {exc}") from None
        _check_value(state, f"{path}.<{codec.name}>", devices, active)
        active.discard(id(value))
        return
    if isinstance(value, torch.Tensor):
        hint = "pass value.as_subclass(torch.Tensor) if a plain tensor will do"
    elif isinstance(value, (set, frozenset)):
        hint = "pass a sorted list or a tuple (set order is not reproducible)"
    elif isinstance(value, torch.Size):
        hint = "pass tuple(value)"
    else:
        hint = (
            "a sample holds tensors, None, bool, int, float, complex, str, torch.dtype, "
            "torch.device, lists, tuples and dicts of these, named tuples, dataclasses, "
            "transformers caches, torch_geometric data and batches, and the classes registered "
            f"with guardscope.register_type({kind.__qualname__}, to_state, from_state)"
        )
    raise SampleError(
        f"{path} is of type {kind.__module__}.{kind.__qualname__}, which a corpus cannot "
        f"store; {hint}"
    )


def _plain(value: Any) -> Any:
    """The call's structure with each tensor replaced by a plain alias of its storage.

    ``detach()`` keeps storage, offset, shape and strides but drops the ``grad_fn`` (a tensor
    with one cannot be deep-copied) and Python attributes such as Dynamo's ``mark_dynamic`` /
    ``mark_unbacked`` marks, which ``torch.save`` would otherwise record and replay would obey.
    """
    if type(value) is torch.Tensor:
        plain = value.detach()
        if plain.is_conj() or plain.is_neg():
            plain = plain.resolve_conj().resolve_neg()
        return plain.requires_grad_(value.requires_grad)
    if type(value) is list:
        return [_plain(item) for item in value]
    if type(value) is tuple:
        return tuple(_plain(item) for item in value)
    if type(value) is dict:
        return {key: _plain(item) for key, item in value.items()}
    if type(value) is Structured:
        return Structured(value.name, _plain(value.state))
    return value
