"""The probe's candidates, planned from the catalog (pure): bounded *edits* of real samples.

:func:`plan_candidates`: from the catalog's dynamic dimensions (grouped into classes of dims that
are equal in every sample, e.g. an edge index's length and its scale's rows), the topologies'
representative samples and what the corpus scan saw (:class:`ScanResult`, read by
:mod:`guardscope.fixes.probe_scan`), list bounded edits on each representative: each dynamic class
at 0, 1 and 2, pairs of classes made equal, and every dtype and memory layout seen for an input
applied to the representatives that lack it; on the most common topology's representative also
every pair of classes at every pair of those values (pairwise, not the full product). A size edit
always sets a whole class: dims the corpus always shows equal are a relation the model may need (a
mask with one entry per row of ``x``), and an input that breaks it is more likely to raise in the
model than to show a topology. Only when asked (``break_relations``) is each member of a class also
edited alone, labelled as breaking the relation.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import torch

from ..text import dim_words

DEFAULT_VALUES = (0, 1, 2)
# Where pairs of dims are edited together: on the most common topology's representative only
# ("general", the default), on every representative ("all"), or nowhere ("none").
PAIRWISE = ("general", "all", "none")


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
            broken = f", breaking {dims_words(self.dims)} = {dims_words(self.breaks)}" if self.breaks else ""
            return f"{dims_words(self.dims)} = {self.value}{broken}"
        if self.kind == "equal":
            return f"{dims_words(self.dims)} = {dims_words(self.other)}"
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


def dims_words(dims: tuple[str, ...]) -> str:
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
