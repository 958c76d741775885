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
Its JSON form (:func:`signature_to_json`) is how a corpus holds it; arguments are built back from
one by :mod:`.materialising`, and from many of one call structure by :mod:`.call_template`.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from ...torch_compat import dtype_name
from ..values.structured import Structured, codec_for

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
        if type(value) is list or type(value) is tuple:
            return (type(value).__name__, len(value), *map(walk, value))
        if type(value) is dict:
            return ("dict", *((repr(key), walk(item)) for key, item in value.items()))
        if type(value) is Structured:  # lowered already (a snapshot)
            return ("value", value.name, walk(value.state))
        codec = codec_for(value)
        if codec is not None:  # a cache, a batch, a named tuple...: its codec's name and state
            return ("value", codec.name, walk(codec.to_state(value)))
        if isinstance(value, dict):
            return ("dict", *((repr(key), walk(item)) for key, item in value.items()))
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


_SCALARS = (type(None), bool, int, str)


def call_key(args: tuple, kwargs: dict[str, Any]) -> tuple | None:
    """A key of the call, cheap enough for a serving thread, that determines its
    ``signature(args, kwargs, inference=False)``: two calls with equal keys have equal signatures.
    Only for flat calls (each argument a plain strided tensor, None, a bool, int, str or float);
    None for any other call (a list, a cache object, a tensor subclass...), whose signature is
    taken in full.

    It keeps the signature's fields as torch gives them (the ``torch.Size``, the dtype and device
    objects) and finds storage sharing from each tensor's data pointer less its offset, which is
    its storage's pointer, so nothing is converted to text or walked."""
    parts: list[Any] = []
    bases: dict[tuple, int] = {}
    position = 0
    try:
        for value in (*args, *kwargs.values()):
            kind = type(value)
            if kind is torch.Tensor:
                # As few reads as a tensor allows (each is a call into torch): a sparse, mkldnn or
                # nested tensor has no data pointer (RuntimeError below), a meta one a null one.
                offset = value.storage_offset()
                base = value.data_ptr()
                device = value.device
                if base and offset:
                    base -= offset * value.element_size()
                elif not base:
                    if value.is_meta or value.layout is not torch.strided:
                        return None
                    if not value.numel():  # an empty view may still hold storage, as signature() reads it
                        storage = value.untyped_storage()
                        base = storage.data_ptr() if storage.nbytes() else 0
                alias = None
                if base:
                    alias = bases.setdefault((device, base), position)
                    if alias == position:
                        alias = None
                position += 1
                parts.append((value.shape, value.stride(), offset, value.dtype, device, value.requires_grad, alias))
            elif kind in _SCALARS:
                parts.append((kind, value))
            elif kind is float:
                parts.append((kind, repr(value)))  # repr: -0.0 is not 0.0, nan is nan
            else:
                return None
    except (RuntimeError, NotImplementedError):  # a tensor without strides or a data pointer
        return None
    return (len(args), tuple(kwargs), tuple(parts))


def holds_objects(sig: tuple) -> bool:
    """Whether a signature holds an object a codec stores (a ``("value", name, state)`` node)."""
    return any(type(item) is tuple and (item[:1] == ("value",) or holds_objects(item)) for item in sig)


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
    return _tuples(value)


_LEAVES = frozenset({int, str, bool, type(None)})


def _tuples(items: list) -> tuple:
    converted = tuple([_tuples(item) if type(item) is list else item for item in items])
    for item in converted:
        if type(item) not in _LEAVES and type(item) is not tuple:
            raise ValueError(f"a signature holds arrays, ints, strings, bools and null, not {item!r}")
    return converted
