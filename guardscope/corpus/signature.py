"""A call's signature: what a frame-0 guard can read of the inputs without their data.

Dynamo's guards on a call's inputs look at structure and metadata, not tensor contents: which
arguments are passed and which are None, list lengths and dict keys, every tensor's sizes,
strides, storage offset, dtype, device, layout, requires_grad and dispatch keys (an inference
tensor differs from a normal one), which inputs share storage, and the values of Python scalars.
Two calls with equal signatures pass or fail the same frame-0 guards; values computed from tensor
data (after a graph break) are outside the signature.

:func:`signature` is the one definition (issue 17: signature records in the corpus build on it). It
is a nested tuple of ints, strings, bools and None only, so it is hashable, compares exactly, and
its ``repr`` (hence :func:`signature_digest`) is the same in every process and on every machine.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
from typing import Any

import torch

from ..torch_compat import DTYPES, dtype_name

SIGNATURE_VERSION = 1  # bump when what a signature holds changes: digests of older versions differ


def signature(args: tuple, kwargs: dict[str, Any], *, inference: bool = True) -> tuple:
    """The signature of one call ``forward(*args, **kwargs)``.

    Keyword arguments keep their order (Dynamo guards a dict's keys in order). A tensor that
    shares storage with an earlier tensor of the call records that tensor's position in the
    walk; a tensor with no storage bytes aliases nothing. With ``inference=False`` every tensor
    counts as a normal one: a corpus does not keep inference state (loaded tensors are normal),
    so the signatures it records are taken that way.
    """
    storages: dict[tuple[str, int], int] = {}
    tensors = [0]

    def walk(value: Any) -> tuple:
        if value is None:
            return ("none",)
        if isinstance(value, torch.Tensor):
            return tensor(value)
        if isinstance(value, bool):  # before int: True is an int
            return ("bool", value)
        if isinstance(value, (int, str)):
            return (type(value).__name__, value)
        if isinstance(value, (float, complex)):
            return (type(value).__name__, repr(value))  # repr: nan equals nan, -0.0 differs from 0.0
        if isinstance(value, torch.dtype):
            return ("dtype", dtype_name(value))
        if isinstance(value, torch.device):
            return ("device", str(value))
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, len(value), *map(walk, value))
        if isinstance(value, dict):
            return ("dict", *((repr(key), walk(item)) for key, item in value.items()))
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return ("dataclass", type(value).__qualname__,
                    *((field.name, walk(getattr(value, field.name))) for field in dataclasses.fields(value)))
        return ("object", f"{type(value).__module__}.{type(value).__qualname__}")

    def tensor(value: torch.Tensor) -> tuple:
        position = tensors[0]
        tensors[0] += 1
        alias = None
        if value.layout == torch.strided:
            storage = value.untyped_storage()
            if storage.nbytes() and storage.data_ptr():
                alias = storages.setdefault((str(value.device), storage.data_ptr()), position)
                alias = None if alias == position else alias
        strided = value.layout == torch.strided
        return (
            "tensor",
            type(value).__qualname__,
            tuple(value.shape),
            tuple(value.stride()) if strided else None,
            value.storage_offset() if strided else None,
            dtype_name(value.dtype),
            str(value.device),
            str(value.layout),
            bool(value.requires_grad),
            bool(value.is_inference()) if inference else False,
            alias,
        )

    return ("call", walk(tuple(args)), walk(dict(kwargs)))


def signature_digest(sig: tuple) -> str:
    """A short stable name for a signature: sha256 of its version and ``repr``, 16 hex digits."""
    return hashlib.sha256(f"{SIGNATURE_VERSION}:{sig!r}".encode()).hexdigest()[:16]


# --- signatures in a corpus (format 3) -------------------------------------------------------


def signature_to_json(sig: tuple) -> list:
    """A signature as JSON: each tuple becomes an array; ints, strings, bools and None stay.
    :func:`signature_from_json` gives the same tuple back."""
    return [signature_to_json(item) if type(item) is tuple else item for item in sig]


def signature_from_json(value: Any) -> tuple:
    """The signature a :func:`signature_to_json` array holds; ``ValueError`` when ``value`` is
    not one (a leaf that is not an int, str, bool or None; a float; a JSON object)."""
    if type(value) is not list:
        raise ValueError("a signature is a JSON array")
    items = []
    for item in value:
        if type(item) is list:
            items.append(signature_from_json(item))
        elif item is None or type(item) in (int, str, bool):
            items.append(item)
        else:
            raise ValueError(f"a signature holds arrays, ints, strings, bools and null, not {item!r}")
    return tuple(items)


def materialise(sig: tuple, device: Any = None) -> tuple[tuple, dict[str, Any]]:
    """Arguments with exactly the signature ``sig``: tensors of the recorded sizes, strides,
    storage offset, dtype, device, requires_grad, inference state and aliasing, filled with
    zeros; scalars, None and containers as recorded. ``signature(*materialise(s)) == s``.

    ``device``, when given, places the tensors elsewhere than on their recorded device (as
    ``map_location`` does when loading a corpus): a ``torch.device`` or str for all of them, or
    a function from the recorded device's name to the device to use.

    ``ValueError`` when ``sig`` is not a signature this version can rebuild (an ``object``
    leaf, a dataclass, a non-strided or subclass tensor).
    """
    if type(sig) is not tuple or len(sig) != 3 or sig[0] != "call":
        raise ValueError("not a call signature")
    if device is None or callable(device):
        place_of = device
    else:
        fixed = torch.device(device)

        def place_of(_recorded: str) -> torch.device:
            return fixed
    records: list[tuple] = []

    def tensors(node: Any) -> None:  # first pass: every tensor record in walk order
        if type(node) is not tuple or not node:
            return
        if node[0] == "tensor":
            records.append(node)
            return
        for item in node[1:]:
            tensors(item)

    tensors(sig)
    # One storage per alias group (a tensor and the later ones naming its position), as many
    # bytes as its furthest element needs.
    group = [position if record[-1] is None else record[-1] for position, record in enumerate(records)]
    for position, owner in enumerate(group):
        if type(owner) is not int or not 0 <= owner <= position or group[owner] != owner:
            raise ValueError(f"tensor {position} aliases {owner!r}, not an earlier unaliased tensor")
    needed: dict[int, int] = {}
    for position, record in enumerate(records):
        _, kind, shape, stride, offset, dtype, device, layout, _grad, _inference, _alias = _checked_tensor(record)
        itemsize = _dtype(dtype).itemsize
        extent = 0 if 0 in shape else offset + 1 + sum((n - 1) * s for n, s in zip(shape, stride))
        needed[group[position]] = max(needed.get(group[position], 0), extent * itemsize)
    storages: dict[int, torch.UntypedStorage] = {}
    built: list[torch.Tensor] = []
    for position, record in enumerate(records):
        _, _, shape, stride, offset, dtype, device, _, requires_grad, inference, _ = record
        owner = group[position]
        if owner not in storages:
            place = device if place_of is None else place_of(device)
            storages[owner] = torch.zeros(needed[owner], dtype=torch.uint8, device=place).untyped_storage()
        context = torch.inference_mode() if inference else contextlib.nullcontext()
        with context:
            storage = storages[owner]
            tensor = torch.empty(0, dtype=_dtype(dtype), device=storage.device).set_(storage, offset, shape, stride)
        built.append(tensor.requires_grad_() if requires_grad else tensor)
    made = iter(built)

    def build(node: Any) -> Any:
        if type(node) is not tuple or not node or type(node[0]) is not str:
            raise ValueError(f"not a signature node: {node!r}")
        kind = node[0]
        if kind == "none":
            return None
        if kind == "tensor":
            return next(made)
        if kind in ("bool", "int", "str") and len(node) == 2 and type(node[1]).__name__ == kind:
            return node[1]
        if kind in ("float", "complex") and len(node) == 2 and type(node[1]) is str:
            return float(node[1]) if kind == "float" else complex(node[1])
        if kind == "dtype" and len(node) == 2:
            return _dtype(node[1])
        if kind == "device" and len(node) == 2:
            return torch.device(node[1])
        if kind in ("list", "tuple") and len(node) >= 2 and node[1] == len(node) - 2:
            items = [build(item) for item in node[2:]]
            return items if kind == "list" else tuple(items)
        if kind == "dict":
            result = {}
            for pair in node[1:]:
                if type(pair) is not tuple or len(pair) != 2 or type(pair[0]) is not str:
                    raise ValueError(f"not a dict entry: {pair!r}")
                key = ast.literal_eval(pair[0])
                if type(key) not in (str, int):
                    raise ValueError(f"a dict key is a str or int, not {pair[0]}")
                result[key] = build(pair[1])
            return result
        raise ValueError(f"a {kind!r} value cannot be rebuilt from its signature")

    args, kwargs = build(sig[1]), build(sig[2])
    if type(args) is not tuple or type(kwargs) is not dict:
        raise ValueError("a call signature holds a tuple and a dict")
    return args, kwargs


def _dtype(name: Any) -> torch.dtype:
    if type(name) is not str or name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}")
    return DTYPES[name]


def _checked_tensor(record: tuple) -> tuple:
    if len(record) != 11:
        raise ValueError(f"a tensor signature has 11 fields: {record!r}")
    _, kind, shape, stride, offset, dtype, device, layout, grad, inference, alias = record
    if kind != "Tensor" or layout != "torch.strided":
        raise ValueError(f"only plain strided tensors can be rebuilt, not {kind} {layout}")
    numbers = (*shape, *stride, offset) if type(shape) is tuple and type(stride) is tuple else (None,)
    if len(shape) != len(stride) or not all(type(n) is int and 0 <= n < 2**62 for n in numbers):
        raise ValueError(f"sizes, strides and offset must be non-negative ints: {record!r}")
    if type(device) is not str or type(grad) is not bool or type(inference) is not bool:
        raise ValueError(f"malformed tensor signature: {record!r}")
    if alias is not None and type(alias) is not int:
        raise ValueError(f"malformed alias: {record!r}")
    _dtype(dtype)
    return record
