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

import dataclasses
import hashlib
from typing import Any

import torch

from ..torch_compat import dtype_name

SIGNATURE_VERSION = 1  # bump when what a signature holds changes: digests of older versions differ


def signature(args: tuple, kwargs: dict[str, Any]) -> tuple:
    """The signature of one call ``forward(*args, **kwargs)``.

    Keyword arguments keep their order (Dynamo guards a dict's keys in order). A tensor that
    shares storage with an earlier tensor of the call records that tensor's position in the
    walk; a tensor with no storage bytes aliases nothing.
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
            bool(value.is_inference()),
            alias,
        )

    return ("call", walk(tuple(args)), walk(dict(kwargs)))


def signature_digest(sig: tuple) -> str:
    """A short stable name for a signature: sha256 of its version and ``repr``, 16 hex digits."""
    return hashlib.sha256(f"{SIGNATURE_VERSION}:{sig!r}".encode()).hexdigest()[:16]
