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
import functools
import hashlib
import itertools
import json
import re
from typing import Any, Callable, Iterable, Iterator

import torch

from ..text import message_line
from ..torch_compat import DTYPES, dtype_name
from .structured import Structured, codec_for, codec_named

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
    place_of = _placer(device)
    records: list[tuple] = []
    _tensor_records(sig, records)
    # One storage per alias group (a tensor and the later ones naming its position), as many
    # bytes as its furthest element needs.
    needed: dict[int, int] = {}
    for position, record in enumerate(records):
        _, _, shape, stride, offset, dtype, _, _, _, _, owner = _checked_tensor(record)
        if owner is None:
            owner = position
        elif not 0 <= owner < position or records[owner][10] is not None:
            raise ValueError(f"tensor {position} aliases {owner!r}, not an earlier unaliased tensor")
        extent = _extent(shape, stride, offset)
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
        built.append(_on_storage(storage, offset, shape, stride, DTYPES[dtype], requires_grad, inference))
    made = iter(built)
    args, kwargs = _build(sig[1], made), _build(sig[2], made)
    if type(args) is not tuple or type(kwargs) is not dict:
        raise ValueError("a call signature holds a tuple and a dict")
    return args, kwargs


def _on_storage(storage: Any, offset: int, shape: Any, stride: Any, dtype: torch.dtype, requires_grad: bool,
                inference: bool) -> torch.Tensor:
    if inference:
        with torch.inference_mode():
            tensor = torch.empty(0, dtype=dtype, device=storage.device).set_(storage, offset, shape, stride)
    else:
        tensor = torch.empty(0, dtype=dtype, device=storage.device).set_(storage, offset, shape, stride)
    return tensor.requires_grad_() if requires_grad else tensor


def _extent(shape: Any, stride: Any, offset: int) -> int:
    """Elements a storage needs for a tensor of these sizes, strides and offset."""
    return 0 if 0 in shape else offset + 1 + sum((n - 1) * s for n, s in zip(shape, stride))


def _placer(device: Any) -> Any:
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
    place_of = _placer(device)
    for place in places:
        _probe(torch.device(place if place_of is None else place_of(place)))


def _probe(device: torch.device) -> None:
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


def _build(node: Any, made: Any) -> Any:
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
            result[_key(pair[0])] = _build(pair[1], made)
        return result
    if kind in ("list", "tuple") and len(node) >= 2 and node[1] == len(node) - 2:
        items = [_build(item, made) for item in node[2:]]
        return items if kind == "list" else tuple(items)
    if kind == "value" and len(node) == 3:
        return _from_state(node[1], _build(node[2], made))
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


def _from_state(name: Any, state: Any) -> Any:
    """A stored object (``("value", name, state)``) rebuilt by its codec; ``ValueError`` naming
    the type when no codec answers for the name or its ``from_state`` raises."""
    codec = codec_named(name)
    try:
        return codec.from_state(state)
    except Exception as exc:
        raise ValueError(f"the codec of {name!r} could not rebuild it: from_state raised "
                         f"{type(exc).__name__}: {exc}") from None


@functools.lru_cache(maxsize=4096)
def _key(text: str) -> str | int:
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


# --- many signatures of one call structure (a replay's fast path) ----------------------------

# The tensors a CallTemplate keeps built per argument, and their bytes in all, before it starts
# afresh (a vision model's zero-filled images are large).
TEMPLATE_TENSORS_KEPT = 4096
TEMPLATE_BYTES_KEPT = 256 * 2**20
_TENSOR, _INT, _CONSTANT = 0, 1, 2


class NoTemplate(ValueError):
    """The signature holds tensors that share storage, or a value that cannot be rebuilt: no
    :class:`CallTemplate`."""


class CallTemplate:
    """The signatures of one call structure: the same arguments and keywords, the same
    containers (lists, tuples and dicts of the same lengths and keys), leaves that are plain
    strided tensors sharing no storage (the same dims, dtypes, devices, requires_grad and
    inference state), ints, or the same constants (None, bool, str, float, complex, dtype,
    device). Such signatures differ only in tensor sizes, strides and offsets and in int
    values: their *key*. ``flat`` when every argument is a leaf (no container).

    A replay checking millions of signature records against the compiled graphs' guards uses
    it so as not to rebuild every call: :meth:`match` takes a signature as its JSON array
    (:func:`signature_to_json`; as a corpus shard holds it) and gives its key, every number
    checked, without converting the array; :meth:`arguments` gives arguments with exactly that
    signature (``signature(*arguments(key)[:2]) == signature_from_json(array)``), whose tensors
    are built once per argument and key and then shared by every call asking for them: they
    are zero-filled, for guard checks; they are never run (a mark the same for every call may
    be applied to them).

    ``NoTemplate`` (a ``ValueError``) when ``sig`` is not such a call; ``sig`` must be a valid
    signature (:func:`materialise` accepts it).
    """

    def __init__(self, sig: tuple, device: Any = None) -> None:
        if type(sig) is not tuple or len(sig) != 3 or sig[0] != "call":
            raise NoTemplate("not a call signature")
        _, args, kwargs = sig
        self.arity = len(args) - 2
        self.key_texts = [text for text, _ in kwargs[1:]]
        self.keywords = [_key(text) for text in self.key_texts]
        self._place_of = _placer(device)
        self._devices: set[torch.device] = set()  # where its tensors are built
        slots: list[tuple] = []
        # The arguments' containers, fixed: each top-level argument is a leaf (a slot) or a
        # list, tuple or dict node over further nodes; flat when every argument is a leaf.
        self._nodes = [self._node(leaf, slots) for leaf in (*args[2:], *(value for _, value in kwargs[1:]))]
        self.flat = all(node is None for node in self._nodes)
        for device_of in self._devices:  # an error now, not at the first guard check, when there is none
            _probe(device_of)
        self.devices = frozenset(self._devices)
        self.slots = slots
        # Where each tensor's part of a key is, in argument order; whether ints vary.
        self.tensor_parts = [position for position, slot in enumerate(slots) if slot[0] == _TENSOR]
        self.has_ints = any(slot[0] == _INT for slot in slots)
        self._tensors_only = all(slot[0] == _TENSOR for slot in slots)  # text_key's quick way
        self._built: list[dict[tuple, torch.Tensor]] = [{} for _ in slots]
        # One zero-filled storage per tensor argument that its tensors are views of, grown by half
        # again when a size needs more: a KV cache one token longer each decode step would
        # otherwise allocate (and zero) its whole storage at every step. A guard reads sizes,
        # strides, dtype, device and dispatch keys, never the storage's own size.
        self._pools: list[Any] = [None for _ in slots]
        self._bytes = 0  # storage bytes of the pools
        self.generation = 0  # counts the times every built tensor was dropped (a caller's cache of them is stale)
        self._sig = sig
        self._text: tuple[Any, list[int]] | None = None  # match_text's pattern, built on first use
        self._parts = _Parts()  # match_text's tensor parts by their text
        self._framed: dict[tuple[str, str], Any] = {}  # text_pattern's patterns by what surrounds them

    def _node(self, value: tuple, slots: list[tuple]) -> tuple | None:
        """The template of one argument (None: a leaf, its slot appended to ``slots``)."""
        kind = value[0]
        if kind == "tensor":
            _, _, shape, _, _, dtype, place, _, requires_grad, inference, alias = _checked_tensor(value)
            if alias is not None:
                raise NoTemplate("tensors of the call share storage")
            device_of = torch.device(place if self._place_of is None else self._place_of(place))
            self._devices.add(device_of)
            tail = signature_to_json(value[5:])
            slots.append((_TENSOR, len(shape), tail, DTYPES[dtype], device_of, requires_grad, inference))
            return None
        if kind == "int":
            slots.append((_INT,))
            return None
        if kind in ("none", "bool", "str", "float", "complex", "dtype", "device"):
            slots.append((_CONSTANT, signature_to_json(value), _build(value, iter(()))))
            return None
        if kind in ("list", "tuple"):
            return (kind, value[1], [self._node(item, slots) for item in value[2:]])
        if kind == "dict":
            return ("dict", [(text, _key(text), self._node(item, slots)) for text, item in value[1:]])
        if kind == "value":
            codec_named(value[1])  # a ValueError now for a name no codec answers for
            return ("value", value[1], self._node(value[2], slots))
        raise NoTemplate(f"a {kind} argument")

    def match(self, array: Any) -> tuple | None:
        """The key of a signature given as its JSON array, or None when it is not a signature
        of this call. ``ValueError`` when it is one with impossible sizes, strides or offset."""
        if type(array) is not list or len(array) != 3 or array[0] != "call":
            return None
        args, kwargs = array[1], array[2]
        if (type(args) is not list or type(kwargs) is not list or len(args) != self.arity + 2
                or len(kwargs) != len(self.key_texts) + 1 or args[0] != "tuple" or args[1] != self.arity
                or kwargs[0] != "dict"):
            return None
        leaves = args[2:]
        for pair, text in zip(kwargs[1:], self.key_texts):
            if type(pair) is not list or len(pair) != 2 or pair[0] != text:
                return None
            leaves.append(pair[1])
        if not self.flat:
            nested: list[Any] = []
            for node, value in zip(self._nodes, leaves):
                if not _gather(node, value, nested):
                    return None
            leaves = nested
        key: list[Any] = []
        for slot, leaf, built in zip(self.slots, leaves, self._built):
            kind = slot[0]
            if type(leaf) is not list:
                return None
            if kind == _TENSOR:
                if len(leaf) != 11 or leaf[0] != "tensor" or leaf[1] != "Tensor" or leaf[5:] != slot[2]:
                    return None
                shape, stride = leaf[2], leaf[3]
                if type(shape) is not list or type(stride) is not list or len(shape) != slot[1] or len(stride) != slot[1]:
                    return None
                numbers = (*shape, *stride, leaf[4])
                if numbers not in built:
                    _check_numbers(numbers)
                key.append(numbers)
            elif kind == _INT:
                if len(leaf) != 2 or leaf[0] != "int" or type(leaf[1]) is not int:
                    return None
                key.append(leaf[1])
            elif leaf != slot[1] or type(leaf[-1]) is not type(slot[1][-1]):
                return None
            else:
                key.append(None)  # a constant: one part per argument all the same
        return tuple(key)

    def match_text(self, text: str, position: int) -> tuple[tuple, int] | None:
        """:meth:`match` of the signature whose compact JSON text (as the corpus writer spells
        it: ``json.dumps(..., separators=(",", ":"))``) starts at ``text[position]``, without
        parsing it: ``(key, end)``, the text's end after it; None when the text there is not
        spelled exactly so (another spacing, a number out of a size's range...: parse it and
        :meth:`match` the array instead, which may still accept it). Whatever it accepts,
        ``match(json.loads(text[position:end]))`` gives the same key."""
        if self._text is None:
            self._text = _text_pattern(self._sig, self.slots)
        pattern, _ = self._text
        found = pattern.match(text, position) if pattern is not None else None
        if found is None:
            return None
        return self.text_key(found.groups()), found.end()

    def text_pattern(self, before: str, after: str) -> Any:
        """:meth:`match_text`'s pattern between the regular expressions ``before`` and ``after``
        (neither with groups of its own but those ``after`` adds at its end): group 1 the
        signature's text, then the groups :meth:`text_key` takes, then ``after``'s. None when the
        template has too many numbers for one (then :meth:`match` the parsed array)."""
        framed = self._framed.get((before, after), False)
        if framed is False:
            if self._text is None:
                self._text = _text_pattern(self._sig, self.slots)
            pattern = self._text[0]
            framed = None if pattern is None else re.compile(f"{before}({pattern.pattern}){after}")
            self._framed[(before, after)] = framed
        return framed

    def text_key(self, groups: Any) -> tuple:
        """The key of a signature from the groups of its text (:meth:`match_text`'s pattern, or
        those of :meth:`text_pattern` after its first): a tensor's sizes, strides and offset are
        one group, converted to its part of the key once per distinct text (sizes recur across
        signatures far more than whole signatures do), an int one group, a constant none."""
        if self._text is None:
            self._text = _text_pattern(self._sig, self.slots)
        parts = self._parts
        if len(parts) >= TEXT_PARTS_KEPT:
            parts.clear()
        widths = self._text[1]
        if self._tensors_only:
            return tuple(map(parts.__getitem__, groups))  # (_Parts converts a text not seen yet)
        groups = iter(groups)
        key: list[Any] = []
        for width in widths:
            if width < 0:
                key.append(None)  # a constant
            elif width == 0:
                key.append(int(next(groups)))  # an int
            else:
                key.append(parts[next(groups)])
        return tuple(key)

    def text_keys(self, column: Callable[[int], list[str]], first: int, count: int) -> list[tuple]:
        """:meth:`text_key` of ``count`` signatures at once: ``column(first + g)`` gives group ``g``
        (as :meth:`text_key` numbers them) of each of them, in order."""
        if self._text is None:
            self._text = _text_pattern(self._sig, self.slots)
        parts = self._parts
        if len(parts) >= TEXT_PARTS_KEPT:
            parts.clear()
        if not self.slots:
            return [()] * count
        columns: list[Iterable[Any]] = []
        group = first
        for width in self._text[1]:
            if width < 0:
                columns.append(itertools.repeat(None, count))  # a constant
                continue
            # An int, or a tensor's part (_Parts converts a text not seen yet).
            columns.append(map(int if width == 0 else parts.__getitem__, column(group)))
            group += 1
        return list(zip(*columns))

    def arguments(self, key: tuple) -> tuple[tuple, dict[str, Any], list[torch.Tensor]]:
        """``(args, kwargs, tensors)`` of the signature with this key (from :meth:`match`);
        ``tensors`` in argument order. The tensors are shared: read them only (containers are
        built afresh)."""
        values: list[Any] = []
        tensors: list[torch.Tensor] = []
        for position, (slot, part, built) in enumerate(zip(self.slots, key, self._built)):
            kind = slot[0]
            if kind == _TENSOR:
                tensor = built.get(part)
                if tensor is None:
                    tensor = self.tensor(position, part)
                values.append(tensor)
                tensors.append(tensor)
            elif kind == _INT:
                values.append(part)
            else:
                values.append(slot[2])
        if not self.flat:
            leaves = iter(values)
            values = [next(leaves) if node is None else _assemble(node, leaves) for node in self._nodes]
        arity = self.arity
        return tuple(values[:arity]), dict(zip(self.keywords, values[arity:])), tensors

    def tensor(self, slot: int, part: tuple) -> torch.Tensor:
        """The shared tensor of tensor slot ``slot`` (an index into :attr:`slots`) for its part
        ``part`` of a key, as :meth:`arguments` gives it: built once, then the same object until
        the tensors kept are dropped (:attr:`generation` then changes)."""
        built = self._built[slot]
        tensor = built.get(part)
        if tensor is None:
            if len(built) >= TEMPLATE_TENSORS_KEPT or self._bytes > TEMPLATE_BYTES_KEPT:
                self._forget()
            tensor = built[part] = self._tensor(slot, self.slots[slot], part)
        return tensor

    def _forget(self) -> None:
        """Drop every built tensor (the call being assembled keeps its own references)."""
        for built in self._built:
            built.clear()
        self._pools = [None for _ in self.slots]
        self._bytes = 0
        self.generation += 1

    def _tensor(self, position: int, slot: tuple, numbers: tuple) -> torch.Tensor:
        _check_numbers(numbers)
        _, ndim, _, dtype, device, requires_grad, inference = slot
        shape, stride, offset = numbers[:ndim], numbers[ndim: 2 * ndim], numbers[-1]
        needed = _extent(shape, stride, offset) * dtype.itemsize
        pool = self._pools[position]
        if pool is None or pool.nbytes() < needed:
            size = needed if pool is None else max(needed, pool.nbytes() * 3 // 2)
            pool = self._pools[position] = torch.zeros(size, dtype=torch.uint8, device=device).untyped_storage()
            self._bytes += size
        return _on_storage(pool, offset, shape, stride, dtype, requires_grad, inference)


# In a signature's text: a size, stride or offset (a JSON int, 0 <= n < 10**18 < 2**62, so
# _check_numbers accepts it), and an int argument (any JSON int).
# A tensor's sizes, strides and offset are one group (its text), an int argument one.
_SIZE_NUMBER = "(?:0|[1-9][0-9]{0,17})"
_INT_TEXT = "(-?(?:0|[1-9][0-9]*))"
# Patterns with more numbers than this are not built (a call of thousands of tensors).
_MAX_TEXT_GROUPS = 4096
# Tensor parts of keys a CallTemplate keeps by their text (match_text), before starting afresh.
TEXT_PARTS_KEPT = 65536
_DIGITS = re.compile("[0-9]+")


class _Parts(dict):
    """A tensor's part of a key (sizes, strides, offset) by its text, converted when first asked for."""

    def __missing__(self, spelled: str) -> tuple:
        part = self[spelled] = tuple(map(int, _DIGITS.findall(spelled)))
        return part


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _text_pattern(sig: tuple, slots: list[tuple]) -> tuple[Any, list[int]]:
    """The compiled pattern of a call template's signatures as compact JSON text, its groups
    the numbers of a key in slot order; with the number of groups each slot takes (a tensor's
    sizes, strides and offset; 0: an int, one group; -1: a constant, none)."""
    widths = [2 * slot[1] + 1 if slot[0] == _TENSOR else 0 if slot[0] == _INT else -1 for slot in slots]
    if sum(max(width, 1) for width in widths) > _MAX_TEXT_GROUPS:
        return None, widths

    def node(value: Any) -> str:
        if type(value) is not tuple:
            return re.escape(_compact(value))  # a str, int, bool or None of the structure
        if value[:1] == ("tensor",) and len(value) == 11:
            # One group: the sizes, strides and offset, as match_text reads them.
            sizes = ",".join([_SIZE_NUMBER] * len(value[2]))
            tail = re.escape(_compact(signature_to_json(value[5:]))[1:-1])
            return rf'\["tensor","Tensor",\[({sizes}\],\[{sizes}\],{_SIZE_NUMBER}),{tail}\]'
        if value[:1] == ("int",) and len(value) == 2:
            return rf'\["int",{_INT_TEXT}\]'
        return r"\[" + ",".join(map(node, value)) + r"\]"

    return re.compile(node(sig)), widths


def _gather(node: tuple | None, value: Any, leaves: list[Any]) -> bool:
    """Collect the leaves of ``value`` (a JSON array) in walk order; False when its containers
    are not those of ``node`` (None: ``value`` is a leaf)."""
    if node is None:
        leaves.append(value)
        return True
    if type(value) is not list or not value or value[0] != node[0]:
        return False
    if node[0] == "value":
        return len(value) == 3 and value[1] == node[1] and _gather(node[2], value[2], leaves)
    if node[0] == "dict":
        pairs = node[1]
        if len(value) != len(pairs) + 1:
            return False
        for (text, _, child), pair in zip(pairs, value[1:]):
            if type(pair) is not list or len(pair) != 2 or pair[0] != text or not _gather(child, pair[1], leaves):
                return False
        return True
    _, length, children = node
    if len(value) != length + 2 or value[1] != length:
        return False
    return all(_gather(child, item, leaves) for child, item in zip(children, value[2:]))


def _assemble(node: tuple, leaves: Iterator[Any]) -> Any:
    """The container ``node`` stands for, its leaves taken from ``leaves`` in walk order."""
    if node[0] == "dict":
        return {key: next(leaves) if child is None else _assemble(child, leaves) for _, key, child in node[1]}
    if node[0] == "value":
        child = node[2]
        return _from_state(node[1], next(leaves) if child is None else _assemble(child, leaves))
    items = [next(leaves) if child is None else _assemble(child, leaves) for child in node[2]]
    return items if node[0] == "list" else tuple(items)


def _check_numbers(numbers: tuple) -> None:
    for n in numbers:
        if type(n) is not int or not 0 <= n < 2**62:
            raise ValueError(f"sizes, strides and offset must be non-negative ints: {list(numbers)}")
