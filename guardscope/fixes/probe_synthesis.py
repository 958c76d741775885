"""A probe candidate made real (tensor ops, compiles nothing): :func:`synthesize` gives one edited
copy of a real sample. Shrinking keeps a prefix, growing repeats the existing rows, index tensors
are wrapped into the new range; an edit that would index into an empty dim is invalid
(:class:`InvalidCandidate`) and dropped.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from ..model import Sample
from ..replay.arguments import lookup
from .probe_plan import Candidate, dims_words, split_dim
from .probe_scan import stride_order


class InvalidCandidate(ValueError):
    """The edit cannot give a valid input (e.g. edges that index into zero nodes)."""


def _resize(tensor: torch.Tensor, axis: int, size: int) -> torch.Tensor:
    current = tensor.shape[axis]
    # Always a fresh tensor: a view would carry its base, and Dynamo guards a view's base too.
    if size == current:
        return tensor.clone()
    if size < current:
        return tensor.narrow(axis, 0, size).clone(memory_format=torch.contiguous_format)
    if current == 0:
        shape = list(tensor.shape)
        shape[axis] = size
        return torch.zeros(shape, dtype=tensor.dtype, device=tensor.device)
    rows = torch.arange(size, device=tensor.device) % current
    return tensor.index_select(axis, rows)


def _with_order(tensor: torch.Tensor, order: tuple[int, ...]) -> torch.Tensor:
    """The same values, laid out with ``order`` (largest stride first)."""
    if list(order) == sorted(order):
        return tensor.clone(memory_format=torch.contiguous_format)
    inverse = [order.index(a) for a in range(len(order))]
    return tensor.permute(*order).clone(memory_format=torch.contiguous_format).permute(*inverse)


def _set(arguments: dict[str, Any], path: str, new: Any) -> None:
    name, _, rest = path.partition("[")
    if not rest:
        arguments[name] = new
        return
    keys = []
    while rest:
        key, _, rest = rest.partition("]")
        rest = rest.lstrip("[")
        keys.append(int(key) if key.lstrip("-").isdigit() else key.strip("'\""))

    def replaced(container: Any, keys: list) -> Any:
        head, *tail = keys
        item = new if not tail else replaced(container[head], tail)
        if isinstance(container, tuple):
            return tuple(item if i == head else v for i, v in enumerate(container))
        copy = list(container) if isinstance(container, list) else dict(container)
        copy[head] = item
        return copy

    arguments[name] = replaced(arguments[name], keys)


def synthesize(base: Sample, bound: inspect.BoundArguments, candidate: Candidate, indexes: dict[str, str],
               index: int) -> Sample:
    """A copy of ``base`` (bound to the forward's parameters as ``bound``) with the candidate's
    edits, numbered ``index``; raises :class:`InvalidCandidate`."""
    arguments = dict(bound.arguments)
    sizes: dict[str, int] = {}
    for edit in candidate.edits:
        if edit.kind in ("size", "equal"):
            # A class may hold an optional input's dims (a mask passed as None, a shorter list):
            # the edit sets the members this sample has, so the relation holds where it applies.
            here = [dim for dim in edit.dims if _size_in(arguments, (dim,)) is not None]
            value = int(edit.value) if edit.kind == "size" else _size_in(arguments, edit.other)
            if not here or value is None:
                raise InvalidCandidate(f"{dims_words(edit.dims + edit.other)} not in this sample")
            for dim in here:
                sizes[dim] = value
    for dim, value in sorted(sizes.items()):
        path, axis = split_dim(dim)
        _set(arguments, path, _resize(lookup(arguments, path), axis, value))
    for edit in candidate.edits:
        if edit.kind == "dtype":
            tensor = lookup(arguments, edit.path)
            _set(arguments, edit.path, tensor.to(getattr(torch, edit.value)))
        elif edit.kind == "layout":
            tensor = lookup(arguments, edit.path)
            kind, layout = edit.value
            if kind == "empty":
                if tensor.numel() != 0:
                    raise InvalidCandidate(f"{edit.path} is not empty in this sample")
                new = torch.empty_strided(tuple(tensor.shape), tuple(layout), dtype=tensor.dtype, device=tensor.device)
            else:
                new = _with_order(tensor, tuple(layout))
            _set(arguments, edit.path, new)
    # Index tensors: keep every value inside the (possibly new) size of the dim it indexes.
    for path, target in sorted(indexes.items()):
        try:
            tensor = lookup(arguments, path)
            target_path, axis = split_dim(target)
            limit = int(lookup(arguments, target_path).shape[axis])
        except (KeyError, IndexError, TypeError):
            continue
        if not isinstance(tensor, torch.Tensor) or tensor.numel() == 0:
            continue
        if limit == 0:
            raise InvalidCandidate(f"{path} indexes {target}, which this edit makes 0")
        if int(tensor.max()) >= limit:
            wrapped = tensor % limit
            if tensor.dim() >= 2 and not tensor.is_contiguous():
                wrapped = _with_order(wrapped, stride_order(tensor))
            _set(arguments, path, wrapped)
    return Sample(index, *_call_form(bound, arguments, base))


def _size_in(arguments: dict[str, Any], dims: tuple[str, ...]) -> int | None:
    """The size of the first of ``dims`` that is a tensor dimension of these arguments."""
    for dim in dims:
        path, axis = split_dim(dim)
        try:
            tensor = lookup(arguments, path)
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(tensor, torch.Tensor) and axis < tensor.dim():
            return int(tensor.shape[axis])
    return None


def _call_form(bound: inspect.BoundArguments, arguments: dict[str, Any], base: Sample) -> tuple[tuple, dict]:
    """Pass the edited arguments the way the real sample passed its own (positionally or by
    keyword): an exported program, for one, only takes the form it was exported with."""
    parameters = list(bound.signature.parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        rebound = inspect.BoundArguments(bound.signature, arguments)  # type: ignore[arg-type]
        return tuple(rebound.args), dict(rebound.kwargs)
    args = tuple(arguments[p.name] for p in parameters[: len(base.args)])
    kwargs = {name: arguments[name] for name in base.kwargs}
    return args, kwargs
