"""Probe for topologies the corpus has not shown yet: synthetic inputs at the sizes, equalities,
layouts and dtypes Dynamo specialises on, derived from real samples.

Three steps, kept apart:

* :func:`plan_candidates` (pure): from the catalog's dynamic dimensions (grouped into classes of
  dims that are equal in every sample, e.g. an edge index's length and its scale's rows), the
  topologies' representative samples and what the corpus scan saw, list bounded *edits* on each
  representative: each dynamic class at 0, 1 and 2, pairs of classes made equal, and every
  dtype and memory layout seen for an input applied to the representatives that lack it; on the
  most common topology's representative also every pair of classes at every pair of those
  values (pairwise, not the full product). A size edit always sets a whole class: dims the
  corpus always shows equal are a relation the model may need (a mask with one entry per row
  of ``x``), and an input that breaks it is more likely to raise in the model than to show a
  topology. Only when asked (``break_relations``) is each member of a class also edited alone,
  labelled as breaking the relation.
* :func:`scan` (reads tensors, compiles nothing): dtypes and layouts seen per input, and which
  integer inputs index into which dimension (every value below that dim's size in every
  scanned sample), so synthetic index tensors stay in range.
* :func:`synthesize` (tensor ops, compiles nothing): one edited copy of a real sample. Shrinking
  keeps a prefix, growing repeats the existing rows, index tensors are wrapped into the new
  range; an edit that would index into an empty dim is invalid and dropped.

The check itself — which compiled graph accepts each synthetic sample, and the new graphs for
those none accepts — runs through :mod:`guardscope.replay` (see ``pipeline.probe``).
"""

from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable

import torch

from .model import Sample
from .binding import lookup, tensors_of

DEFAULT_VALUES = (0, 1, 2)
# Where pairs of dims are edited together: on the most common topology's representative only
# ("general", the default), on every representative ("all"), or nowhere ("none").
PAIRWISE = ("general", "all", "none")
DEFAULT_MAX_CANDIDATES = 5000
SCAN_INDEX_SAMPLES = 64  # samples read to infer index relations (plus every representative)


# --- edits (pure) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    """One change to a real sample.

    ``kind`` is ``"size"`` (every dim of ``dims`` the sample has set to ``value``), ``"equal"``
    (every dim of ``dims`` set to the size ``other`` has in the base sample), ``"dtype"`` (input
    ``path`` cast to ``value``) or ``"layout"`` (input ``path`` given the layout ``value``:
    ``("order", stride order)`` or, for an empty tensor, ``("empty", strides)``). ``breaks``
    names the dims a size edit leaves alone although the corpus always showed them equal to
    ``dims`` (only with ``break_relations``).
    """

    kind: str
    dims: tuple[str, ...] = ()
    value: Any = None
    path: str = ""
    other: tuple[str, ...] = ()
    breaks: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.kind == "size":
            broken = f", breaking {_dims_words(self.dims)} = {_dims_words(self.breaks)}" if self.breaks else ""
            return f"{_dims_words(self.dims)} = {self.value}{broken}"
        if self.kind == "equal":
            return f"{_dims_words(self.dims)} = {_dims_words(self.other)}"
        if self.kind == "dtype":
            return f"{self.path} as {self.value}"
        kind, layout = self.value
        if kind == "empty":
            return f"{self.path} empty with strides {list(layout)}"
        return f"{self.path} with stride order {list(layout)}"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind}
        if self.dims:
            data["dims"] = list(self.dims)
        if self.other:
            data["equal_to"] = list(self.other)
        if self.breaks:
            data["breaks"] = list(self.breaks)
        if self.path:
            data["input"] = self.path
        if self.value is not None:
            data["value"] = [self.value[0], list(self.value[1])] if self.kind == "layout" else self.value
        return data


def _dims_words(dims: tuple[str, ...]) -> str:
    from .catalog import dim_words

    return "/".join(dim_words(d) for d in dims)


@dataclass(frozen=True)
class Candidate:
    base_topology: int
    base_sample: int
    kind: str  # "single", "pair", "equal", "dtype", "layout", "broken"
    edits: tuple[Edit, ...]

    def describe(self) -> str:
        return ", ".join(e.describe() for e in self.edits) + f" (from sample {self.base_sample})"


@dataclass(frozen=True)
class ScanResult:
    """What the corpus showed per input path: dtypes, stride orders, index relations."""

    dtypes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    layouts: dict[str, tuple[tuple[str, tuple[int, ...]], ...]] = field(default_factory=dict)
    # integer input path -> the dim (e.g. "x.size()[0]") its values index into
    indexes: dict[str, str] = field(default_factory=dict)
    samples: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "dtypes": {p: list(v) for p, v in sorted(self.dtypes.items())},
            "layouts": {p: [[k, list(o)] for k, o in v] for p, v in sorted(self.layouts.items())},
            "indexes": dict(sorted(self.indexes.items())),
        }


def dim_classes(dimensions: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """Dynamic dims grouped with the dims equal to them in every sample, in catalog order."""
    classes: list[tuple[str, ...]] = []
    seen: set[str] = set()
    for dim in dimensions:
        if not dim["dynamic"] or dim["dim"] in seen:
            continue
        members = tuple(sorted({dim["dim"], *dim["equal_to"]}))
        seen.update(members)
        classes.append(members)
    return classes


def plan_candidates(
    catalog: dict[str, Any],
    base_shapes: dict[int, dict[str, tuple[int, ...]]],
    scan_result: ScanResult,
    *,
    values: tuple[int, ...] = DEFAULT_VALUES,
    pairwise: str = "general",
    base_layouts: dict[int, dict[str, tuple[str, tuple[int, ...]]]] | None = None,
    base_dtypes: dict[int, dict[str, str]] | None = None,
    break_relations: bool = False,
) -> list[Candidate]:
    """Every edit worth checking, per topology representative, in a deterministic order.

    ``base_shapes[sample][path]`` is a representative's tensor shapes (edits that change
    nothing are left out); layouts and dtypes likewise, for the layout and dtype edits. Size
    edits set whole classes; ``break_relations`` adds, for each class of several dims the
    representative has, each of them alone at each value (kind ``"broken"``).
    """
    if pairwise not in PAIRWISE:
        raise ValueError(f"pairwise must be one of {PAIRWISE}")
    classes = dim_classes(catalog["dimensions"])
    general = general_topology(catalog)
    candidates: list[Candidate] = []
    for topology in catalog["topologies"]:
        if topology.get("compile_id") is None:
            continue
        base = topology["first_sample"]
        shapes = base_shapes.get(base, {})

        def size_of(dims: tuple[str, ...]) -> int | None:
            for dim in dims:
                path, axis = split_dim(dim)
                if path in shapes and axis < len(shapes[path]):
                    return shapes[path][axis]
            return None

        present = [c for c in classes if size_of(c) is not None]
        for members in present:
            for value in values:
                if size_of(members) != value:
                    candidates.append(Candidate(topology["id"], base, "single", (Edit("size", members, value),)))
        if break_relations:
            for members in present:
                here = [dim for dim in members if size_of((dim,)) is not None]
                if len(here) < 2:
                    continue
                for dim in here:
                    rest = tuple(d for d in here if d != dim)
                    for value in values:
                        if size_of(members) != value:
                            edit = Edit("size", (dim,), value, breaks=rest)
                            candidates.append(Candidate(topology["id"], base, "broken", (edit,)))
        if pairwise == "all" or (pairwise == "general" and topology["id"] == general):
            for a, b in itertools.combinations(present, 2):
                for va, vb in itertools.product(values, repeat=2):
                    if size_of(a) != va and size_of(b) != vb:
                        edits = (Edit("size", a, va), Edit("size", b, vb))
                        candidates.append(Candidate(topology["id"], base, "pair", edits))
        for a, b in itertools.permutations(present, 2):
            if size_of(a) != size_of(b) and (size_of(b) or 0) >= 2:
                candidates.append(Candidate(topology["id"], base, "equal", (Edit("equal", a, other=b),)))
        for path, dtypes in sorted(scan_result.dtypes.items()):
            have = (base_dtypes or {}).get(base, {}).get(path)
            for dtype in dtypes:
                if have is not None and dtype != have and _same_family(dtype, have):
                    candidates.append(Candidate(topology["id"], base, "dtype", (Edit("dtype", path=path, value=dtype),)))
        for path, layouts in sorted(scan_result.layouts.items()):
            have = (base_layouts or {}).get(base, {}).get(path)
            for layout in layouts:
                # An order applies to a tensor with elements, strides of an empty tensor to an
                # empty one of the same rank.
                if have is not None and layout != have and layout[0] == have[0] and len(layout[1]) == len(have[1]):
                    candidates.append(Candidate(topology["id"], base, "layout", (Edit("layout", path=path, value=layout),)))
    return candidates


def raised_words(explored: dict[str, Any]) -> str:
    """``"3 raised in the model (broken 3)"``: how many checked samples raised and from which
    kind of edit, so a probe whose inputs the model rejects says so (and whether it was asked
    to break relations) rather than hiding it in a count of what was explored."""
    by_kind = explored["model_error_by_kind"]
    kinds = f" ({', '.join(f'{kind} {count}' for kind, count in by_kind.items())})" if by_kind else ""
    return f"{explored['model_error']} raised in the model{kinds}"


def general_topology(catalog: dict[str, Any]) -> int | None:
    """The topology serving most samples (ties: the earliest): the traffic a new input most
    likely resembles, and the base of the pairwise edits by default."""
    served = [t for t in catalog["topologies"] if t.get("compile_id") is not None]
    if not served:
        return None
    return max(served, key=lambda t: (t["count"], -t["id"]))["id"]


def _same_family(a: str, b: str) -> bool:
    def family(name: str) -> str:
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            return name
        if dtype == torch.bool:
            return "bool"
        return "float" if dtype.is_floating_point else "complex" if dtype.is_complex else "int"

    return family(a) == family(b)


def split_dim(dim: str) -> tuple[str, int]:
    """``"x.size()[0]"`` -> ``("x", 0)``."""
    path, _, rest = dim.rpartition(".size()[")
    return path, int(rest.rstrip("]"))


# --- reading real samples ----------------------------------------------------------------------


def bind(model: Any, sample: Sample) -> inspect.BoundArguments | None:
    forward = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        bound = inspect.signature(forward).bind(*sample.args, **sample.kwargs)
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    return bound


def stride_order(tensor: torch.Tensor) -> tuple[int, ...]:
    """Axes from the largest stride to the smallest (contiguous: 0, 1, ..., n-1)."""
    if tensor.layout != torch.strided:
        return tuple(range(tensor.dim()))
    return tuple(sorted(range(tensor.dim()), key=lambda a: (-tensor.stride(a), a)))


def layout_of(tensor: torch.Tensor) -> tuple[str, tuple[int, ...]]:
    """``("order", stride order)`` for a tensor with elements; ``("empty", strides)`` for an
    empty one, whose strides are whatever the op that made it chose (and Dynamo guards them)."""
    if tensor.numel() == 0 and tensor.layout == torch.strided:
        return ("empty", tuple(tensor.stride()))
    return ("order", stride_order(tensor))


def _integer(tensor: torch.Tensor) -> bool:
    return not tensor.is_floating_point() and not tensor.is_complex() and tensor.dtype != torch.bool


class Scanner:
    """Accumulates :class:`ScanResult` one bound sample at a time (the corpus streams)."""

    def __init__(self, index_samples: int = SCAN_INDEX_SAMPLES) -> None:
        self.dtypes: dict[str, set[str]] = {}
        self.layouts: dict[str, set[tuple[str, tuple[int, ...]]]] = {}
        self.index_samples = index_samples
        self.index_seen = 0
        # integer path -> {dim: total slack}; None once no dim bounds it
        self.bounds: dict[str, dict[str, int] | None] = {}
        self.samples = 0

    def add(self, arguments: dict[str, Any], *, for_indexes: bool = False) -> None:
        self.samples += 1
        found = tensors_of(arguments)
        for path, tensor in found:
            self.dtypes.setdefault(path, set()).add(str(tensor.dtype).replace("torch.", ""))
            if tensor.dim() >= 2:
                self.layouts.setdefault(path, set()).add(layout_of(tensor))
        if not (for_indexes or self.index_seen < self.index_samples):
            return
        self.index_seen += 1
        sizes = {f"{p}.size()[{a}]": s for p, t in found for a, s in enumerate(t.shape)}
        for path, tensor in found:
            if not _integer(tensor) or tensor.numel() == 0 or self.bounds.get(path, {}) is None:
                continue
            low, high = int(tensor.min()), int(tensor.max())
            if low < 0:
                self.bounds[path] = None
                continue
            own = {f"{path}.size()[{a}]" for a in range(tensor.dim())}
            fits = {dim: size - 1 - high for dim, size in sizes.items() if dim not in own and size > high}
            previous = self.bounds.get(path)
            merged = fits if previous is None else {d: previous[d] + fits[d] for d in previous if d in fits}
            self.bounds[path] = merged or None

    def result(self) -> ScanResult:
        indexes = {}
        for path, slack in self.bounds.items():
            if slack:
                indexes[path] = min(slack, key=lambda d: (slack[d], d))
        return ScanResult(
            dtypes={p: tuple(sorted(v)) for p, v in self.dtypes.items()},
            layouts={p: tuple(sorted(v)) for p, v in self.layouts.items() if len(v) > 1},
            indexes=indexes,
            samples=self.samples,
        )


# --- synthesis ---------------------------------------------------------------------------------


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
                raise InvalidCandidate(f"{_dims_words(edit.dims + edit.other)} not in this sample")
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
