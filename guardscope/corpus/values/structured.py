"""Values that are not tensors or plain containers: stored as a registered type name and a state.

A forward call often receives objects: a transformers ``DynamicCache`` during ``generate()``, a
PyG ``Batch``, a named tuple, a dataclass, a ``ModelOutput``, a class of the user's own. A corpus
stores each as ``(name, state)``: ``name`` says which *codec* rebuilds it, ``state`` is made of
storable values (tensors, scalars, lists, tuples, dicts, and further such objects). Recording
*lowers* a call (:func:`lower`: every such object becomes a :class:`Structured` holding its name
and state) and loading *raises* it back (:func:`rebuild`: each name looked up, its codec's
``from_state`` called on the rebuilt state).

Names are resolved only through the registry, never by importing what a shard says:

* ``register_type(cls, to_state, from_state, name=...)``: a user's own class, under ``name``
  (default ``"label.QualName"``, the label being the stem of the file that defines ``cls``, so
  that the name is the same however that file was imported). Without ``to_state``/``from_state`` the object's attributes
  (its ``__dict__``) are its state and it is rebuilt with ``cls.__new__`` and those attributes,
  so that Dynamo sees the same object structure and guards.
* transformers caches and cache layers (``transformers.DynamicCache``, ``transformers.StaticLayer``
  ...) and torch_geometric ``Data``, ``HeteroData`` and ``Batch``: built in, in
  :mod:`guardscope.corpus.values.library_types`, registered the first time a value or name of that
  library is met, and only when the library is installed.
* named tuples (``namedtuple:label.QualName``), dataclasses (``dataclass:...``) and classes
  registered with ``torch.utils._pytree`` (``pytree:...``: transformers' ``ModelOutput`` s):
  the class is looked up among the modules already imported (the model's module, imported
  before the corpus is read, defines it), in their namespaces only: nothing is imported and no
  module ``__getattr__`` runs; what is found must be a class of that kind, so a name such as
  ``namedtuple:os.system`` is refused.

A name no codec answers for is a ``ValueError`` naming ``register_type``; the corpus reader turns
it into a ``ShardError`` naming the shard and the sample.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ...errors import SampleError
from . import library_types
from .codecs import BY_NAME, BY_TYPE, Codec, add_codec, attributes_codec, module_label, type_name

# The values a sample holds as they are (see corpus.storage.format).
PLAIN_TYPES = (type(None), bool, int, float, complex, str, torch.dtype, torch.device)
# Name prefixes of the codecs resolved from the modules already imported.
NAMEDTUPLE, DATACLASS, PYTREE, CLASS = "namedtuple:", "dataclass:", "pytree:", "class:"
class Structured:
    """A value lowered for the corpus: its codec's ``name`` and its ``state`` (storable values,
    further :class:`Structured` s among them)."""

    __slots__ = ("name", "state")

    def __init__(self, name: str, state: Any) -> None:
        self.name, self.state = name, state

    def __repr__(self) -> str:
        return f"Structured({self.name!r}, {self.state!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is Structured and other.name == self.name and other.state == self.state

    __hash__ = None  # type: ignore[assignment]

    def __deepcopy__(self, memo: dict) -> Structured:
        import copy

        return Structured(self.name, copy.deepcopy(self.state, memo))


def register_type(cls: type, to_state: Callable[[Any], Any] | None = None,
                  from_state: Callable[[Any], Any] | None = None, *, name: str | None = None) -> str:
    """Let a corpus store values of ``cls``: recorded as ``to_state(value)`` (storable values:
    tensors, scalars, lists, tuples, dicts, registered objects), rebuilt with
    ``from_state(state)``. Without either, the value's attributes (``vars(value)``) are its
    state and ``cls.__new__(cls)`` with those attributes set is the value again, exactly as
    Dynamo saw it. Returns the name a corpus stores (``name``, default ``"label.QualName"``: the defining
    file's stem and the qualified name, the same however the file is imported).

    Register before recording and before loading (in the module that defines the model, which
    guardscope imports before it reads the corpus). Registering a name again for another class
    is a ``ValueError``; for the same class it replaces the codec.

    Example::

        class Request:                       # the user's own input class
            def __init__(self, ids, mask):
                self.ids, self.mask = ids, mask

        guardscope.register_type(Request)    # attributes in, attributes out
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_type takes a class, got {type(cls).__qualname__}")
    if (to_state is None) != (from_state is None):
        raise TypeError("give both to_state and from_state, or neither (the object's attributes)")
    name = type_name(cls) if name is None else name
    if type(name) is not str or not name or name.startswith((NAMEDTUPLE, DATACLASS, PYTREE, CLASS)):
        raise ValueError(f"a codec name is a non-empty str not starting with a reserved prefix, got {name!r}")
    if to_state is None:
        codec = attributes_codec(cls, name)
    else:
        codec = Codec(name, cls, to_state, from_state, _walk_parts)  # type: ignore[arg-type]
    add_codec(codec)
    return name


def _walk_parts(state: Any) -> Iterator[tuple[str, Any]]:
    """The parts of a state that is a container: ``[i]`` / ``['key']``; else the state itself."""
    if isinstance(state, (list, tuple)):
        for position, item in enumerate(state):
            yield f"[{position}]", item
    elif isinstance(state, dict):
        for key, item in state.items():
            yield f"[{key!r}]", item
    else:
        yield "", state


# --- finding a codec -----------------------------------------------------------------------------


def _known(registry: dict, key: Any, register_library: Callable[[Any], bool]) -> Codec | None:
    """A registered codec, after letting a library's built-in codecs register when ``key``
    belongs to one (they load on first use only)."""
    codec = registry.get(key)
    if codec is None and register_library(key):
        codec = registry.get(key)
    return codec


def codec_for(value: Any) -> Codec | None:
    """The codec that stores ``value`` (None: none does). Registers what it derives (a named
    tuple's, a dataclass's, a library's), so loading in this process finds it by name."""
    cls = type(value)
    codec = _known(BY_TYPE, cls, library_types.register_for_type)
    if codec is not None:
        return codec
    if isinstance(value, type):
        target = BY_TYPE.get(value)
        return None if target is None else _class_codec(target)
    codec = _derived(cls)
    if codec is not None:
        add_codec(codec)
    return codec


def codec_named(name: str) -> Codec:
    """The codec a corpus names: registered, a library's (registered now when the library is
    installed), or a named tuple, dataclass or pytree class among the modules already imported.
    ``ValueError`` naming ``register_type`` otherwise; nothing is imported but guardscope's own
    codecs for an installed library."""
    if type(name) is not str:
        raise ValueError(f"a type name is a str, not {name!r}")
    codec = _known(BY_NAME, name, library_types.register_for_name)
    if codec is not None:
        return codec
    if name.startswith(CLASS):
        return _class_codec(codec_named(name[len(CLASS):]))
    for prefix in (NAMEDTUPLE, DATACLASS, PYTREE):
        if name.startswith(prefix):
            for cls in imported_classes(name[len(prefix):]):
                codec = _derived(cls)
                if codec is not None and codec.name == name:
                    add_codec(codec)
                    return codec
            raise ValueError(
                f"type {name!r} is not a {prefix[:-1]} of any module imported now: import the module "
                "that defines it before loading (the model's module does when it defines it), or "
                "register it with guardscope.register_type"
            )
    raise ValueError(
        f"type {name!r} is not registered: call guardscope.register_type(cls, to_state, from_state, "
        f"name={name!r}) before loading the corpus (nothing was imported or run)"
    )


def imported_classes(path: str) -> Iterator[type]:
    """The classes ``label.QualName`` (:func:`~guardscope.corpus.values.codecs.module_label`) among the
    modules imported now, found through their namespaces only: nothing is imported and no module
    ``__getattr__`` runs."""
    label, _, qualname = path.partition(".")
    if not qualname:
        return
    for module in list(sys.modules.values()):
        if module is None or module_label(module) != label:
            continue
        value: Any = module
        for attribute in qualname.split("."):
            namespace = getattr(value, "__dict__", None)
            if not isinstance(namespace, (dict, type(type.__dict__))) or attribute not in namespace:
                value = None
                break
            value = namespace[attribute]
        if isinstance(value, type):
            yield value


def _derived(cls: type) -> Codec | None:
    """A codec for a class torch or Python already describes: registered with pytree (not a
    plain container), a named tuple, or a dataclass."""
    from torch.utils import _pytree

    if cls in _NOT_DERIVED:
        return None
    node = _pytree.SUPPORTED_NODES.get(cls)
    if node is not None and not _is_namedtuple(cls):
        def pytree_to_state(value: Any) -> Any:
            children, context = node.flatten_fn(value)
            return [list(children), context]

        def pytree_from_state(state: Any) -> Any:
            if type(state) is not list or len(state) != 2 or type(state[0]) is not list:
                raise ValueError("a pytree state is [children, context]")
            return node.unflatten_fn(state[0], state[1])

        def pytree_parts(state: Any) -> Iterator[tuple[str, Any]]:
            children, context = state
            if type(context) in (list, tuple) and len(context) == len(children) and all(
                    type(key) is str and key.isidentifier() for key in context):
                yield from ((f".{key}", child) for key, child in zip(context, children))
            else:
                yield from ((f"[{position}]", child) for position, child in enumerate(children))

        return Codec(PYTREE + type_name(cls), cls, pytree_to_state, pytree_from_state, pytree_parts)
    if _is_namedtuple(cls):
        def tuple_parts(state: Any) -> Iterator[tuple[str, Any]]:
            yield from ((f".{field}", item) for field, item in zip(cls._fields, state))  # type: ignore[attr-defined]

        def tuple_from_state(state: Any) -> Any:
            if type(state) is not list:
                raise ValueError("a named tuple's state is the list of its fields")
            return cls._make(state)  # type: ignore[attr-defined]

        return Codec(NAMEDTUPLE + type_name(cls), cls, list, tuple_from_state, tuple_parts)
    if dataclasses.is_dataclass(cls):
        def fields_to_state(value: Any) -> Any:
            return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}

        def fields_from_state(state: Any) -> Any:
            if type(state) is not dict:
                raise ValueError("a dataclass's state is the dict of its fields")
            value = cls.__new__(cls)
            for key, item in state.items():  # as recorded, __post_init__ not run again
                object.__setattr__(value, key, item)
            return value

        return Codec(DATACLASS + type_name(cls), cls, fields_to_state, fields_from_state, _dict_parts)
    return None


# Plain containers, and torch.Size (a tuple pytree knows, which the corpus asks to pass as one).
_NOT_DERIVED = frozenset({list, tuple, dict, torch.Size})


def _dict_parts(state: Any) -> Iterator[tuple[str, Any]]:
    yield from ((f".{key}", item) for key, item in state.items())


def _is_namedtuple(cls: type) -> bool:
    return issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple)


def _class_codec(target: Codec) -> Codec:
    """A registered class passed as a value (a cache's ``layer_class_to_replicate``)."""
    return Codec(CLASS + target.name, type, lambda _value: None, lambda _state: target.cls,
                 lambda _state: iter(()))


# --- lowering and raising ------------------------------------------------------------------------


def lower(value: Any, path: str, _active: set[int] | None = None) -> Any:
    """``value`` with every object a codec stores replaced by a :class:`Structured` (lists,
    tuples and dicts rebuilt around them; anything else returned as it is, for the corpus's own
    check to accept or refuse; a container holding itself too). ``SampleError`` when a codec's
    ``to_state`` fails, naming the path and the type."""
    kind = type(value)
    if kind is torch.Tensor or kind in PLAIN_TYPES:
        return value
    active = set() if _active is None else _active
    if id(value) in active:
        return value  # a cycle: the corpus's check refuses it, naming where
    active.add(id(value))
    try:
        if kind is list:
            return [lower(item, f"{path}[{position}]", active) for position, item in enumerate(value)]
        if kind is tuple:
            return tuple(lower(item, f"{path}[{position}]", active) for position, item in enumerate(value))
        if kind is dict:
            return {key: lower(item, f"{path}[{key!r}]", active) for key, item in value.items()}
        if isinstance(value, torch.Tensor):
            return value
        codec = codec_for(value)
        if codec is None:
            return value
        try:
            state = codec.to_state(value)
        except Exception as exc:
            raise SampleError(f"{path} ({codec.name}) cannot be stored: its to_state raised "
                              f"{type(exc).__name__}: {exc}") from None
        return Structured(codec.name, lower(state, f"{path}.<{codec.name}>", active))
    finally:
        active.discard(id(value))


def needs_lowering(value: Any, _active: set[int] | None = None) -> bool:
    """Whether ``value`` holds anything but tensors, plain values and plain containers (a
    container holding itself does not count: the corpus's check refuses it)."""
    kind = type(value)
    if kind is torch.Tensor or kind in PLAIN_TYPES:
        return False
    if kind is list or kind is tuple or kind is dict:
        active = set() if _active is None else _active
        if id(value) in active:
            return False
        active.add(id(value))
        items = value.values() if kind is dict else value
        found = any(needs_lowering(item, active) for item in items)
        active.discard(id(value))
        return found
    return True


def rebuild(value: Any) -> Any:
    """The objects a lowered value stands for: each :class:`Structured` rebuilt by its codec
    (its state first). ``ValueError`` naming the type when a codec is missing or its
    ``from_state`` raises."""
    kind = type(value)
    if kind is Structured:
        codec = codec_named(value.name)
        state = rebuild(value.state)
        try:
            return codec.from_state(state)
        except Exception as exc:
            raise ValueError(f"the codec of {value.name!r} could not rebuild it: from_state raised "
                             f"{type(exc).__name__}: {exc}") from None
    if kind is list:
        return [rebuild(item) for item in value]
    if kind is tuple:
        return tuple(rebuild(item) for item in value)
    if kind is dict:
        return {key: rebuild(item) for key, item in value.items()}
    return value


def parts(value: Any) -> Iterator[tuple[str, Any]] | None:
    """For a live object a codec stores: ``(suffix, part)`` pairs a description walks (a cache's
    ``.layers``, a batch's ``.x``); None for anything else."""
    kind = type(value)
    if kind is torch.Tensor or kind in PLAIN_TYPES or kind in (list, tuple, dict):
        return None
    codec = codec_for(value)
    if codec is None:
        return None
    return codec.parts(codec.to_state(value))


def type_label(value: Any) -> str:
    """The name a corpus stores a live object under (a description's deterministic word for its
    type: ``transformers.DynamicCache``, ``torch_geometric.Batch``)."""
    codec = codec_for(value)
    return codec.name if codec is not None else type_name(type(value))


def to_device_structured(value: Any, device: torch.device, move: Callable[[Any, torch.device], Any]) -> Any:
    """An object a codec stores with its tensors moved by ``move`` (the caller's walker), rebuilt
    only when one of them was on another device; anything else as it is."""
    kind = type(value)
    if kind in PLAIN_TYPES:
        return value
    codec = codec_for(value)
    if codec is None:
        return value
    state = codec.to_state(value)
    moved = move(state, device)
    return value if _same(state, moved) else codec.from_state(moved)


def _same(before: Any, after: Any) -> bool:
    if before is after:
        return True
    if type(before) is not type(after):
        return False
    if type(before) in (list, tuple):
        return len(before) == len(after) and all(map(_same, before, after))
    if type(before) is dict:
        return before.keys() == after.keys() and all(_same(before[key], after[key]) for key in before)
    return False

