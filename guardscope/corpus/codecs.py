"""The codec registry behind :mod:`guardscope.corpus.structured`: a :class:`Codec` per stored type,
found by the name a corpus stores and by the live type, and the attributes codec (an object's
``__dict__`` in, ``cls.__new__`` with those attributes out) that user classes and library caches
use."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

# The attribute a tensor carries once torch._dynamo.mark_static_address marked it (a static
# cache's keys and values): kept, since Dynamo treats such a tensor otherwise.
STATIC_ADDRESS = "_dynamo_static_input_type"


@dataclasses.dataclass(frozen=True)
class Codec:
    """How one type is stored: ``to_state(value)`` gives its state, ``from_state(state)`` the
    value again. ``parts(state)`` names what a reader of the catalog recognises in a state, as
    ``(suffix, value)`` pairs (``".keys"``, ``"[0]"``) appended to the argument's path."""

    name: str
    cls: type | None
    to_state: Callable[[Any], Any]
    from_state: Callable[[Any], Any]
    parts: Callable[[Any], Iterator[tuple[str, Any]]]


_lock = threading.Lock()
BY_NAME: dict[str, Codec] = {}
BY_TYPE: dict[type, Codec] = {}


def type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def add_codec(codec: Codec) -> None:
    with _lock:
        known = BY_NAME.get(codec.name)
        if known is not None and known.cls is not codec.cls:
            raise ValueError(f"{codec.name!r} is registered for {known.cls!r} already; pass another name=")
        BY_NAME[codec.name] = codec
        if codec.cls is not None:
            BY_TYPE[codec.cls] = codec


def attributes_codec(cls: type, name: str, after: Callable[[Any], None] | None = None) -> Codec:
    """A codec whose state is the object's attributes, in order, and which tensors among them
    were marked with a static address; ``after(value)`` finishes a rebuilt value."""

    def to_state(value: Any) -> Any:
        attributes = dict(vars(value))
        static = {key: item.__dict__[STATIC_ADDRESS] for key, item in attributes.items()
                  if isinstance(item, torch.Tensor) and STATIC_ADDRESS in item.__dict__}
        return [attributes, static] if static else [attributes]

    def from_state(state: Any) -> Any:
        if type(state) is not list or not 1 <= len(state) <= 2 or type(state[0]) is not dict:
            raise ValueError("an attributes state is [attributes] or [attributes, static addresses]")
        value = cls.__new__(cls)
        value.__dict__.update(state[0])
        for key, kind in (state[1] if len(state) == 2 else {}).items():
            torch._dynamo.mark_static_address(state[0][key], guard=kind == "guarded")
        if after is not None:
            after(value)
        return value

    def parts(state: Any) -> Iterator[tuple[str, Any]]:
        for key, item in state[0].items():
            yield f".{key}", item

    return Codec(name, cls, to_state, from_state, parts)


def library_installed(package: str) -> bool:
    """Whether ``package`` can be imported here (without importing it)."""
    return package in sys.modules or importlib.util.find_spec(package) is not None
