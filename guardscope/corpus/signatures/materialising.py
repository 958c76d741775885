"""Arguments built back from a call's signature (:mod:`.signature`): zero-filled tensors of the
recorded sizes, strides, storage offset, dtype, device, requires_grad, inference state and
aliasing; scalars, None, containers and stored objects as recorded. Also the reading of a
signature's nodes that :mod:`.call_template` shares: a tensor record checked, a node's value, a
dict key, a device placement.
"""

from __future__ import annotations

import ast
import functools
from typing import Any

import torch

from ...text import message_line
from ...torch_compat import DTYPES
from ..values.structured import codec_named


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
    place_of = placer(device)
    records: list[tuple] = []
    _tensor_records(sig, records)
    # One storage per alias group (a tensor and the later ones naming its position), as many
    # bytes as its furthest element needs.
    needed: dict[int, int] = {}
    for position, record in enumerate(records):
        _, _, shape, stride, offset, dtype, _, _, _, _, owner = checked_tensor(record)
        if owner is None:
            owner = position
        elif not 0 <= owner < position or records[owner][10] is not None:
            raise ValueError(f"tensor {position} aliases {owner!r}, not an earlier unaliased tensor")
        extent = storage_extent(shape, stride, offset)
        needed[owner] = max(needed.get(owner, 0), extent * DTYPES[dtype].itemsize)
    storages: dict[int, Any] = {}
    built: list[torch.Tensor] = []
    for position, record in enumerate(records):
        _, _, shape, stride, offset, dtype, place, _, requires_grad, inference, owner = record
        owner = position if owner is None else owner
        storage = storages.get(owner)
        if storage is None:
            if place_of is not None:
                place = place_of(place)
            storage = storages[owner] = torch.zeros(needed[owner], dtype=torch.uint8, device=place).untyped_storage()
        built.append(tensor_on_storage(storage, offset, shape, stride, DTYPES[dtype], requires_grad, inference))
    made = iter(built)
    args, kwargs = build_node(sig[1], made), build_node(sig[2], made)
    if type(args) is not tuple or type(kwargs) is not dict:
        raise ValueError("a call signature holds a tuple and a dict")
    return args, kwargs


def tensor_on_storage(storage: Any, offset: int, shape: Any, stride: Any, dtype: torch.dtype, requires_grad: bool,
                      inference: bool) -> torch.Tensor:
    if inference:
        with torch.inference_mode():
            tensor = torch.empty(0, dtype=dtype, device=storage.device).set_(storage, offset, shape, stride)
    else:
        tensor = torch.empty(0, dtype=dtype, device=storage.device).set_(storage, offset, shape, stride)
    return tensor.requires_grad_() if requires_grad else tensor


def storage_extent(shape: Any, stride: Any, offset: int) -> int:
    """Elements a storage needs for a tensor of these sizes, strides and offset."""
    return 0 if 0 in shape else offset + 1 + sum((n - 1) * s for n, s in zip(shape, stride))


def placer(device: Any) -> Any:
    """``materialise``'s ``device`` as a function from the recorded device's name to the device
    to use (None: the recorded one)."""
    if device is None or callable(device):
        return device
    fixed = torch.device(device)

    def place_of(_recorded: str) -> torch.device:
        return fixed

    return place_of


def check_devices(sig: tuple, device: Any = None) -> None:
    """``ValueError`` unless every tensor of ``sig`` can be built on its device here (placed as
    :func:`materialise`'s ``device`` says): a corpus recorded on a GPU, read on a machine
    without one and without ``map_location``."""
    records: list[tuple] = []
    _tensor_records(sig, records)
    places = {record[6] for record in records if len(record) == 11 and type(record[6]) is str}
    place_of = placer(device)
    for place in places:
        probe_device(torch.device(place if place_of is None else place_of(place)))


def probe_device(device: torch.device) -> None:
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as exc:  # a CPU-only build asserts for CUDA
        raise ValueError(f"tensors recorded on {device} cannot be built here: {message_line(exc)}") from None


def _tensor_records(node: Any, found: list[tuple]) -> None:
    """Every tensor record of a signature, in walk order."""
    if type(node) is tuple and node:
        kind = node[0]
        if kind == "tensor":
            found.append(node)
        elif kind == "dict":
            for pair in node[1:]:
                if type(pair) is tuple and len(pair) == 2:
                    _tensor_records(pair[1], found)
        elif kind in ("call", "list", "tuple"):
            for item in node[1:]:
                _tensor_records(item, found)
        elif kind == "value" and len(node) == 3:
            _tensor_records(node[2], found)


def build_node(node: Any, made: Any) -> Any:
    """The value a signature node stands for, taking tensors from ``made`` in walk order."""
    if type(node) is not tuple or not node or type(node[0]) is not str:
        raise ValueError(f"not a signature node: {node!r}")
    kind = node[0]
    if kind == "tensor":
        return next(made)
    if kind == "none":
        return None
    if kind == "dict":
        result = {}
        for pair in node[1:]:
            if type(pair) is not tuple or len(pair) != 2 or type(pair[0]) is not str:
                raise ValueError(f"not a dict entry: {pair!r}")
            result[dict_key(pair[0])] = build_node(pair[1], made)
        return result
    if kind in ("list", "tuple") and len(node) >= 2 and node[1] == len(node) - 2:
        items = [build_node(item, made) for item in node[2:]]
        return items if kind == "list" else tuple(items)
    if kind == "value" and len(node) == 3:
        return rebuild_object(node[1], build_node(node[2], made))
    if len(node) == 2:
        value = node[1]
        if kind in ("bool", "int", "str") and type(value).__name__ == kind:
            return value
        if kind in ("float", "complex") and type(value) is str:
            return float(value) if kind == "float" else complex(value)
        if kind == "dtype":
            return _dtype(value)
        if kind == "device":
            return torch.device(value)
    raise ValueError(f"a {kind!r} value cannot be rebuilt from its signature")


def rebuild_object(name: Any, state: Any) -> Any:
    """A stored object (``("value", name, state)``) rebuilt by its codec; ``ValueError`` naming
    the type when no codec answers for the name or its ``from_state`` raises."""
    codec = codec_named(name)
    try:
        return codec.from_state(state)
    except Exception as exc:
        raise ValueError(f"the codec of {name!r} could not rebuild it: from_state raised "
                         f"{type(exc).__name__}: {exc}") from None


@functools.lru_cache(maxsize=4096)
def dict_key(text: str) -> str | int:
    """A dict key from its ``repr`` (str or int only)."""
    try:
        key = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        key = None
    if type(key) not in (str, int):
        raise ValueError(f"a dict key is a str or int, not {text}")
    return key


def _dtype(name: Any) -> torch.dtype:
    if type(name) is not str or name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}")
    return DTYPES[name]


def checked_tensor(record: tuple) -> tuple:
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
