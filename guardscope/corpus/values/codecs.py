"""The codec registry behind :mod:`guardscope.corpus.values.structured`: a :class:`Codec` per stored type,
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


def module_label(module: Any) -> str:
    """A module's name as a corpus writes it: its file's stem (``models`` for ``myapp/models.py``,
    the package's last name for an ``__init__.py``), not its import name, which differs between a
    server that imports ``myapp.models`` and guardscope loading the model spec's file."""
    namespace = getattr(module, "__dict__", None)  # read, never a module __getattr__ (lazy imports)
    namespace = namespace if isinstance(namespace, dict) else {}
    name = namespace.get("__name__") or ""
    name = name if isinstance(name, str) else ""
    file = namespace.get("__file__")
    stem = file.replace("\\", "/").rsplit("/", 1)[-1].rsplit(".", 1)[0] if isinstance(file, str) else ""
    return name.rpartition(".")[2] if stem in ("", "__init__") else stem


def type_name(cls: type) -> str:
    """``models.Request``: the defining module's label and the class's qualified name."""
    return f"{module_label(sys.modules.get(cls.__module__))}.{cls.__qualname__}" if cls.__module__ in sys.modules \
        else f"{cls.__module__.rpartition('.')[2]}.{cls.__qualname__}"


def add_codec(codec: Codec) -> None:
    """Register ``codec``. The same file imported a second time (a server's ``myapp.models`` and
    guardscope's load of the model spec's file) defines its classes anew: a class of the same
    label and qualified name takes the name over (loading then builds the class the model
    uses), and both classes stay storable. Another class under a taken name is a ValueError."""
    with _lock:
        known = BY_NAME.get(codec.name)
        if known is not None and known.cls is not codec.cls and (
                known.cls is None or codec.cls is None or type_name(known.cls) != type_name(codec.cls)):
            raise ValueError(f"{codec.name!r} is registered for {known.cls!r} already; pass another name=")
        BY_NAME[codec.name] = codec
        if codec.cls is not None:
            BY_TYPE[codec.cls] = codec


def attributes_codec(cls: type, name: str) -> Codec:
    """A codec whose state is the object's attributes, in order, and which tensors among them
    were marked with a static address."""

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
        return value

    def parts(state: Any) -> Iterator[tuple[str, Any]]:
        for key, item in state[0].items():
            yield f".{key}", item

    return Codec(name, cls, to_state, from_state, parts)


def library_installed(package: str) -> bool:
    """Whether ``package`` can be imported here (without importing it)."""
    return package in sys.modules or importlib.util.find_spec(package) is not None
