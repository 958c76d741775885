"""Many signatures of one call structure (a replay's fast path): :class:`CallTemplate` matches a
signature's JSON array or its text to a key, without converting it, and gives arguments with
exactly that signature, their tensors built once per argument and size and then shared.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any, Callable, Iterable, Iterator

import torch

from ...torch_compat import DTYPES
from .materialising import (
    build_node,
    checked_tensor,
    dict_key,
    placer,
    probe_device,
    rebuild_object,
    storage_extent,
    tensor_on_storage,
)
from .signature import signature_to_json
from ..values.structured import codec_named

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
    signature (:func:`~.materialising.materialise` accepts it).
    """

    def __init__(self, sig: tuple, device: Any = None) -> None:
        if type(sig) is not tuple or len(sig) != 3 or sig[0] != "call":
            raise NoTemplate("not a call signature")
        _, args, kwargs = sig
        self.arity = len(args) - 2
        self.key_texts = [text for text, _ in kwargs[1:]]
        self.keywords = [dict_key(text) for text in self.key_texts]
        self._place_of = placer(device)
        self._devices: set[torch.device] = set()  # where its tensors are built
        slots: list[tuple] = []
        # The arguments' containers, fixed: each top-level argument is a leaf (a slot) or a
        # list, tuple or dict node over further nodes; flat when every argument is a leaf.
        self._nodes = [self._node(leaf, slots) for leaf in (*args[2:], *(value for _, value in kwargs[1:]))]
        self.flat = all(node is None for node in self._nodes)
        for device_of in self._devices:  # an error now, not at the first guard check, when there is none
            probe_device(device_of)
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
            _, _, shape, _, _, dtype, place, _, requires_grad, inference, alias = checked_tensor(value)
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
            slots.append((_CONSTANT, signature_to_json(value), build_node(value, iter(()))))
            return None
        if kind in ("list", "tuple"):
            return (kind, value[1], [self._node(item, slots) for item in value[2:]])
        if kind == "dict":
            return ("dict", [(text, dict_key(text), self._node(item, slots)) for text, item in value[1:]])
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

    def column_key(self, sizes: list, strides: list, offsets: list, ints: list) -> tuple:
        """The key of the signature whose tensors have these sizes, strides and offsets and whose
        int arguments these values, in walk order (a traffic log's columns,
        :mod:`guardscope.corpus.traffic_log.parquet`); ``ValueError`` when they do not fit this template."""
        tensors = iter(zip(sizes, strides, offsets))
        values = iter(ints)
        key: list[Any] = []
        try:
            for slot in self.slots:
                if slot[0] == _TENSOR:
                    shape, stride, offset = next(tensors)
                    if len(shape) != slot[1] or len(stride) != slot[1]:
                        raise ValueError(f"a tensor of {len(shape)} sizes and {len(stride)} strides where the "
                                         f"call template has {slot[1]} dims")
                    numbers = (*shape, *stride, offset)
                    _check_numbers(numbers)
                    key.append(numbers)
                elif slot[0] == _INT:
                    value = next(values)
                    if type(value) is not int:
                        raise ValueError(f"an int argument of {value!r}")
                    key.append(value)
                else:
                    key.append(None)
        except StopIteration:
            raise ValueError("fewer tensors or ints than the call template has") from None
        if next(tensors, None) is not None or next(values, None) is not None:
            raise ValueError("more tensors or ints than the call template has")
        return tuple(key)

    def signature_of(self, key: tuple) -> tuple:
        """The signature this template's ``key`` stands for (:meth:`match`'s inverse)."""
        parts = iter(key[position] for position, slot in enumerate(self.slots) if slot[0] != _CONSTANT)

        def fill(node: Any) -> Any:
            if type(node) is not tuple:
                return node
            kind = node[0] if node else None
            if kind == "tensor" and len(node) == 11:
                numbers, ndim = next(parts), len(node[2])
                return ("tensor", node[1], tuple(numbers[:ndim]), tuple(numbers[ndim:2 * ndim]), numbers[-1],
                        *node[5:])
            if kind == "int" and len(node) == 2:
                return ("int", next(parts))
            return tuple(fill(item) for item in node)

        return fill(self._sig)

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
        needed = storage_extent(shape, stride, offset) * dtype.itemsize
        pool = self._pools[position]
        if pool is None or pool.nbytes() < needed:
            size = needed if pool is None else max(needed, pool.nbytes() * 3 // 2)
            pool = self._pools[position] = torch.zeros(size, dtype=torch.uint8, device=device).untyped_storage()
            self._bytes += size
        return tensor_on_storage(pool, offset, shape, stride, dtype, requires_grad, inference)


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
        return rebuild_object(node[1], next(leaves) if child is None else _assemble(child, leaves))
    items = [next(leaves) if child is None else _assemble(child, leaves) for child in node[2]]
    return items if node[0] == "list" else tuple(items)


def _check_numbers(numbers: tuple) -> None:
    for n in numbers:
        if type(n) is not int or not 0 <= n < 2**62:
            raise ValueError(f"sizes, strides and offset must be non-negative ints: {list(numbers)}")
