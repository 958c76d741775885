"""The record plan: how the signature records of one call template are described, and their
first frame's locals laid out, without walking their arguments record after record.

A guard-only replay of a corpus's signature records (:class:`~guardscope.replay.session.ReplaySession`)
makes one :class:`RecordPlan` per call template (:class:`~guardscope.corpus.signatures.call_template.CallTemplate`);
:func:`frame_layout` finds where each of the template's tensors sits among Dynamo's first-frame
locals.
"""

from __future__ import annotations

from typing import Any

from ..model import SampleMeta, TensorMeta
from .arguments import describe, tensor_meta, tensors_of
from .runner import Runner


class RecordPlan:
    """How the records of one call template (:class:`~guardscope.corpus.signatures.call_template.CallTemplate`) are
    described without walking their arguments: each tensor's path among forward's arguments
    and, since nothing but tensor sizes varies, the constant lengths and scalars.

    For a flat call template (every argument a tensor or a constant) whose tensors are each a
    local of Dynamo's first frame, the plan also holds that frame's layout: a record's frame
    locals are the example's with its own tensors put in (:meth:`frame`), and each tensor's
    description is made once per argument and size, with the tensor (:meth:`frame`'s
    batching: one lookup per argument and size, not an argument walk per record)."""

    # TensorMeta kept per tensor argument and size, before starting afresh.
    KEPT = 65536

    def __init__(self, paths: list[tuple[str, int]] | None, parts: list[int], lengths: tuple, scalars: tuple,
                 frame: tuple[tuple[str, ...], list, list[tuple[int, int]]] | None = None) -> None:
        self.paths = paths
        self.parts = parts
        self.lengths = lengths
        self.scalars = scalars
        self.metas: dict[tuple[int, tuple], TensorMeta] = {}
        # Each tensor's path with its position and the position of its part of a key.
        self._steps = None if paths is None else [(path, position, parts[position]) for path, position in paths]
        # The fields every description of this plan shares (SampleMeta's defaults, and these):
        # a description is this, its index, tensors and serving graph (SampleMeta.at's copy, not
        # a frozen dataclass's field-by-field __init__: this runs for every new signature).
        self._fields = SampleMeta(index=0, tensors=(), lengths=lengths, scalars=scalars, serving=None,
                                  recorded="signature").__dict__
        # The first frame's layout (its local names, the example's values, and where each
        # tensor position goes among them), when every tensor is a local of its own.
        self.framed = frame is not None and paths is not None
        self._names, self._values, self._placed = frame if frame is not None else ((), [], [])
        # Per tensor position: part of a key -> (the call template's tensor, its TensorMeta),
        # dropped whenever the call template drops its tensors (its generation changes).
        self._pairs: list[dict[tuple, tuple[Any, TensorMeta]]] = [{} for _ in parts]
        self._generation: int | None = None

    @classmethod
    def of(cls, runner: Runner, call: Any, args: tuple, kwargs: dict, tensors: list) -> RecordPlan:
        """The plan of ``call`` from one of its argument sets."""
        named = runner.binder.named_or_positional(args, kwargs)
        example = describe(named, 0, None, None)
        positions = {id(tensor): position for position, tensor in enumerate(tensors)}
        found = tensors_of(named)
        paths: list[tuple[str, int]] | None = [(path, positions.get(id(tensor), -1)) for path, tensor in found]
        if call.has_ints or len(found) != len(tensors) or any(position < 0 for _, position in paths):
            paths = None
        frame = frame_layout(runner.binder.frame_locals(args, kwargs), tensors) if call.flat else None
        return cls(paths, call.tensor_parts, example.lengths, example.scalars, frame)

    def describe(self, key: tuple, tensors: list, index: int, serving: str) -> SampleMeta:
        metas = self.metas
        described = []
        for path, position, part in self._steps:  # type: ignore[union-attr]
            found = (position, key[part])
            meta = metas.get(found)
            if meta is None:
                if len(metas) >= self.KEPT:
                    metas.clear()
                meta = metas[found] = tensor_meta(tensors[position])
            described.append((path, meta))
        return self.described(tuple(described), index, serving)

    def described(self, tensors: tuple, index: int, serving: str) -> SampleMeta:
        """The description of sample ``index`` with these tensor descriptions."""
        made = object.__new__(SampleMeta)
        fields = made.__dict__
        fields.update(self._fields)
        fields["index"] = index
        fields["tensors"] = tensors
        fields["serving"] = serving
        return made

    def frame(self, call: Any, key: tuple) -> tuple[dict[str, Any], tuple]:
        """A record's first-frame locals (what ``binder.frame_locals`` of ``call.arguments(key)``
        gives, the same tensors included) and its tensor descriptions (:meth:`describe`'s), for a
        plan that is :attr:`framed`."""
        pairs = self._pairs
        if call.generation != self._generation:
            self._forget(call.generation)
        got = []
        for position, slot in enumerate(self.parts):
            part = key[slot]
            pair = pairs[position].get(part)
            if pair is None:
                tensor = call.tensor(slot, part)
                if call.generation != self._generation:  # it dropped its tensors to build this one
                    self._forget(call.generation)
                pair = pairs[position][part] = (tensor, tensor_meta(tensor))
            got.append(pair)
        values = self._values.copy()
        for at, position in self._placed:
            values[at] = got[position][0]
        return (dict(zip(self._names, values)),
                tuple([(path, got[position][1]) for path, position in self.paths]))  # type: ignore[union-attr]

    def _forget(self, generation: int) -> None:
        for pairs in self._pairs:
            pairs.clear()
        self._generation = generation


def frame_layout(frame: dict[str, Any], tensors: list) -> tuple[tuple[str, ...], list, list[tuple[int, int]]] | None:
    """The layout of a flat call template's first-frame locals, from one call's (``frame``, built
    from arguments whose tensors are ``tensors``): the names, the values, and for each tensor
    position the index of the local holding it; None unless each tensor is a local of its own
    (found in a container, or twice, it could not be put in by position). The other locals are
    the same objects for every call of the template (constants, defaults, the module)."""
    positions = {id(tensor): position for position, tensor in enumerate(tensors)}
    placed = [(at, positions[id(value)]) for at, value in enumerate(frame.values()) if id(value) in positions]
    if sorted(position for _, position in placed) != list(range(len(tensors))):
        return None
    if any(_holds(value, positions) for value in frame.values() if id(value) not in positions):
        return None
    return tuple(frame), list(frame.values()), placed


def _holds(value: Any, ids: dict[int, int]) -> bool:
    """Whether a container (list, tuple, dict, nested) holds an object whose id is in ``ids``."""
    if type(value) in (list, tuple):
        return any(id(item) in ids or _holds(item, ids) for item in value)
    if type(value) is dict:
        return any(id(item) in ids or _holds(item, ids) for item in value.values())
    return False
