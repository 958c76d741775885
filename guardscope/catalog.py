"""Pure: compile events + per-sample descriptions -> :class:`Catalog`.

A *topology* is a class of inputs that needs a compiled graph of its own; guardscope names each
one by the cache entry that served its samples during the replay. Its *facts* are read from that
entry's guards: every constraint the entry has that not all entries share ("local_edge_index
dim 1 is 0", "cross_edge_index dim 1 equals local_edge_index dim 1"). Across the corpus, each
input dimension gets min, max, whether it was ever 0 or 1, and the dimensions equal to it in
every sample (connected components of an equality graph, networkx).

:class:`CatalogBuilder` takes samples one at a time, so memory grows with distinct dimensions
and topologies, not with the corpus.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

import networkx as nx

from .classify import classify_reasons
from .model import (
    Catalog,
    ClassifiedCompile,
    CompileEvent,
    DimensionStats,
    FailedSample,
    SampleMeta,
    Topology,
)


_SOURCE = re.compile(r"L\[['\"]([^'\"]+)['\"]\]")
_DIM_TEXT = re.compile(r"^(?P<input>.+)\.(?P<which>size|stride)\(\)\[(?P<axis>\d+)\]$")
_TENSOR_MATCH = re.compile(
    r"check_tensor\((?P<source>[^,]+), .*?torch\.(?P<dtype>\w+), .*?size=\[(?P<size>[^\]]*)\], "
    r"stride=\[(?P<stride>[^\]]*)\]\)"
)
_EQUALITY = re.compile(r"^(?P<a>\S+\.(?:size|stride)\(\)\[\d+\]) == (?P<b>\S+\.(?:size|stride)\(\)\[\d+\])$")
# Inductor's int32-indexing guards ("32*x.size()[0] <= 2147483647"): bounds, not topologies.
_OVERFLOW_BOUND = re.compile(r"<= (?:2147483647|9223372036854775807)$")
_LOWER_TWO = re.compile(r"^2 <= (?P<dim>\S+\.size\(\)\[\d+\])(?: <= \d+)?$")


def strip_scope(text: str) -> str:
    """``L['x'].size()[0]`` -> ``x.size()[0]`` (torch's own spelling in recompile reasons)."""
    return _SOURCE.sub(lambda m: m.group(1), text)


def dim_words(dim: str) -> str:
    """``x.size()[0]`` -> ``x dim 0``; ``x.stride()[1]`` -> ``x stride 1``."""
    match = _DIM_TEXT.match(dim)
    if not match:
        return dim
    which = "dim" if match.group("which") == "size" else "stride"
    return f"{match.group('input')} {which} {match.group('axis')}"


# --- facts from an entry's guards --------------------------------------------------------------

Atom = tuple


def _ints(text: str) -> list[int | None]:
    values: list[int | None] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        values.append(int(part) if part.lstrip("-").isdigit() else None)
    return values


def guard_atoms(guards: Iterable[str]) -> set[Atom]:
    """Normalised constraints of one compiled entry, from its guard lines."""
    atoms: set[Atom] = set()
    static: dict[str, int] = {}
    graph = nx.Graph()
    for line in guards:
        kind, _, body = line.partition(":")
        body = body.strip()
        expression = strip_scope(body.split("  # ")[0].split(" # ")[0]).strip()
        if kind == "TENSOR_MATCH":
            match = _TENSOR_MATCH.search(body)
            if not match:
                continue
            name = strip_scope(match.group("source")).strip()
            atoms.add(("dtype", name, match.group("dtype")))
            for axis, value in enumerate(_ints(match.group("size"))):
                if value is not None:
                    dim = f"{name}.size()[{axis}]"
                    static[dim] = value
                    atoms.add(("size", dim, value))
            for axis, value in enumerate(_ints(match.group("stride"))):
                if value is not None:
                    atoms.add(("stride", f"{name}.stride()[{axis}]", value))
        elif kind == "LAMBDA_GUARD":
            equality = _EQUALITY.match(expression)
            lower = _LOWER_TWO.match(expression)
            if equality and ".stride()" not in expression:
                graph.add_edge(equality.group("a"), equality.group("b"))
            elif equality:
                continue  # stride == size: the layout of a contiguous tensor, not a topology fact
            elif lower:
                atoms.add(("ge2", lower.group("dim")))
            elif expression and not _OVERFLOW_BOUND.search(expression):
                atoms.add(("relation", expression))
        elif kind == "LENGTH_CHECK":
            atoms.add(("relation", strip_scope(body.split(" # ")[0]).strip()))
    # Dims fixed to the same value are equal too: that keeps "les dim 0 equals lei dim 1" a
    # shared constraint when both are 0 in one entry and tied by a guard in another.
    by_value: dict[int, list[str]] = {}
    for dim, value in static.items():
        by_value.setdefault(value, []).append(dim)
    for dims in by_value.values():
        for other in dims[1:]:
            graph.add_edge(dims[0], other)
    for component in nx.connected_components(graph):
        ordered = sorted(component)
        for i, a in enumerate(ordered):
            for b in ordered[i + 1:]:
                atoms.add(("eq", a, b))
    return atoms


def always_equal(shared: set[Atom], rank: dict[str, int]) -> dict[str, str]:
    """Map each dim to the representative of the dims every entry holds equal to it: the one
    of the earliest forward argument, so facts read in the model's own order."""
    graph = nx.Graph()
    graph.add_edges_from((a[1], a[2]) for a in shared if a[0] == "eq")
    aliases = {}
    for component in nx.connected_components(graph):
        representative = min(component, key=lambda d: (rank.get(d, len(rank)), d))
        aliases.update({dim: representative for dim in component})
    return aliases


def render_facts(
    atoms: set[Atom], static_dims: set[str], aliases: dict[str, str], rank: dict[str, int]
) -> tuple[str, ...]:
    """Plain-words facts; equalities that hold in every entry (a scale's rows always match its
    edge count) are folded so only the equalities that define this topology remain."""
    facts: list[tuple[int, str]] = []
    graph = nx.Graph()
    for atom in atoms:
        if atom[0] != "eq" or (atom[1] in static_dims and atom[2] in static_dims):
            continue  # both fixed: their "is N" facts already say it
        a, b = aliases.get(atom[1], atom[1]), aliases.get(atom[2], atom[2])
        if a != b:
            graph.add_edge(a, b)
    for component in nx.connected_components(graph):
        representative, *others = sorted(component, key=lambda d: (rank.get(d, len(rank)), d))
        for other in others:
            facts.append((1, f"{dim_words(other)} equals {dim_words(representative)}"))
    for atom in atoms:
        if atom[0] == "size":
            facts.append((0, f"{dim_words(atom[1])} is {atom[2]}"))
        elif atom[0] == "ge2":
            facts.append((2, f"{dim_words(atom[1])} is at least 2"))
        elif atom[0] == "stride":
            facts.append((3, f"{dim_words(atom[1])} is {atom[2]}"))
        elif atom[0] == "dtype":
            facts.append((4, f"{atom[1]} is {atom[2]}"))
        elif atom[0] == "relation":
            facts.append((5, f"guard: {atom[1]}"))
    return tuple(text for _, text in sorted(facts))


def _against_order(failure: Any) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", failure.against or "")) or (1 << 30,)


# --- the builder -------------------------------------------------------------------------------


@dataclass
class _DimAccumulator:
    input: str
    axis: int
    min: int
    max: int
    ever_zero: bool = False
    ever_one: bool = False

    def add(self, value: int) -> None:
        self.min = min(self.min, value)
        self.max = max(self.max, value)
        self.ever_zero |= value == 0
        self.ever_one |= value == 1


@dataclass
class CatalogBuilder:
    """Accumulates samples; :meth:`build` returns the :class:`Catalog`."""

    dims: dict[str, _DimAccumulator] = field(default_factory=dict)
    equal_candidates: dict[str, set[str] | None] = field(default_factory=dict)
    members: dict[str, list[int]] = field(default_factory=dict)
    first_shapes: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    failed: list[FailedSample] = field(default_factory=list)
    # Samples no compiled graph served: Dynamo ran them eagerly, which happens when a frame
    # hit the recompile limit (or a torch build hides its cache entries from guardscope).
    not_analysed: list[int] = field(default_factory=list)
    samples: int = 0
    _partitions_seen: set = field(default_factory=set, repr=False)
    described: int = 0  # samples whose forward ran (failed ones carry no shapes worth trusting)

    def add_sample(self, meta: SampleMeta) -> None:
        self.samples += 1
        if meta.error is not None:
            self.failed.append(FailedSample(meta.index, meta.error))
            return
        self.described += 1
        dims: list[str] = []
        values: list[int] = []
        for path, tensor in meta.tensors:
            for axis, value in enumerate(tensor.shape):
                dim = f"{path}.size()[{axis}]"
                dims.append(dim)
                values.append(value)
                accumulator = self.dims.get(dim)
                if accumulator is None:
                    accumulator = self.dims[dim] = _DimAccumulator(path, axis, value, value)
                    # A dim first seen now was absent before: it cannot be equal in every sample.
                    self.equal_candidates[dim] = set() if self.described > 1 else None
                accumulator.add(value)
        # Equality candidates only change when a sample's pattern of equal dims is new:
        # intersecting with a partition already applied changes nothing.
        first_of: dict[int, int] = {}
        partition = (tuple(dims), tuple(first_of.setdefault(v, i) for i, v in enumerate(values)))
        if partition not in self._partitions_seen:
            self._partitions_seen.add(partition)
            groups: dict[int, set[str]] = {}
            for dim, value in zip(dims, values):
                groups.setdefault(value, set()).add(dim)
            for dim, value in zip(dims, values):
                same = groups[value] - {dim}
                current = self.equal_candidates.get(dim)
                self.equal_candidates[dim] = set(same) if current is None else current & same
            present = set(dims)
            for dim, candidates in self.equal_candidates.items():
                if dim not in present and candidates:
                    candidates.clear()
        if meta.serving is None:
            self.not_analysed.append(meta.index)
            return
        self.members.setdefault(meta.serving, []).append(meta.index)
        if meta.serving not in self.first_shapes:
            self.first_shapes[meta.serving] = {path: list(t.shape) for path, t in meta.tensors}

    def to_state(self) -> dict[str, Any]:
        """Everything accumulated so far, as JSON values (for checkpoints)."""
        return {
            "dims": [[dim, a.input, a.axis, a.min, a.max, a.ever_zero, a.ever_one] for dim, a in self.dims.items()],
            "equal_candidates": [[d, None if c is None else sorted(c)] for d, c in self.equal_candidates.items()],
            "members": [[cid, m] for cid, m in self.members.items()],
            "first_shapes": [[cid, shapes] for cid, shapes in self.first_shapes.items()],
            "failed": [[f.index, f.error] for f in self.failed],
            "not_analysed": list(self.not_analysed),
            "samples": self.samples,
            "described": self.described,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> CatalogBuilder:
        builder = cls()
        for dim, input_, axis, low, high, zero, one in state["dims"]:
            builder.dims[dim] = _DimAccumulator(input_, axis, low, high, zero, one)
        builder.equal_candidates = {d: None if c is None else set(c) for d, c in state["equal_candidates"]}
        builder.members = {cid: list(m) for cid, m in state["members"]}
        builder.first_shapes = {cid: shapes for cid, shapes in state["first_shapes"]}
        builder.failed = [FailedSample(i, e) for i, e in state["failed"]]
        builder.not_analysed = list(state["not_analysed"])
        builder.samples = int(state["samples"])
        builder.described = int(state["described"])
        return builder

    def dimensions(self) -> tuple[DimensionStats, ...]:
        graph = nx.Graph()
        dynamic = {d for d, acc in self.dims.items() if acc.min != acc.max}
        graph.add_nodes_from(dynamic)
        for dim, candidates in self.equal_candidates.items():
            for other in candidates or ():
                if dim in dynamic and other in dynamic and dim in (self.equal_candidates.get(other) or ()):
                    graph.add_edge(dim, other)
        stats = []
        for dim in sorted(self.dims):
            acc = self.dims[dim]
            equal = sorted(nx.node_connected_component(graph, dim) - {dim}) if dim in graph else []
            stats.append(
                DimensionStats(
                    dim=dim,
                    input=acc.input,
                    axis=acc.axis,
                    min=acc.min,
                    max=acc.max,
                    ever_zero=acc.ever_zero,
                    ever_one=acc.ever_one,
                    equal_to=tuple(equal),
                )
            )
        return tuple(stats)

    def _fallback_facts(self, meta: dict[str, list[int]]) -> tuple[str, ...]:
        """Facts from the topology's first sample, when torch gave no guards to read."""
        facts = []
        for path, shape in meta.items():
            for axis, value in enumerate(shape):
                acc = self.dims[f"{path}.size()[{axis}]"]
                if value in (0, 1) and acc.min != acc.max:
                    facts.append(f"{path} dim {axis} is {value}")
        return tuple(facts)

    def topologies(self, events: list[CompileEvent]) -> tuple[Topology, ...]:
        guards = {e.compile_id: e.guards for e in events}
        atoms = {cid: guard_atoms(guards[cid]) for cid in self.members if cid in guards and guards[cid]}
        shared = set.intersection(*atoms.values()) if atoms else set()
        rank = {dim: position for position, dim in enumerate(self.dims)}
        aliases = always_equal(shared, rank)
        ordered = sorted(self.members.items(), key=lambda item: item[1][0])
        topologies = []
        for position, (compile_id, members) in enumerate(ordered):
            if compile_id in atoms:
                own = atoms[compile_id] - shared
                static = {a[1] for a in atoms[compile_id] if a[0] == "size"}
                facts = render_facts(own, static, aliases, rank) if own else ("the graph every other input shares",)
            else:
                facts = self._fallback_facts(self.first_shapes[compile_id])
            topologies.append(
                Topology(
                    id=position,
                    compile_id=compile_id,
                    first_sample=members[0],
                    samples=tuple(members),
                    facts=facts,
                )
            )
        return tuple(topologies)

    def build(
        self,
        *,
        events: list[CompileEvent],
        torch_version: str,
        corpus_path: str,
        model: str,
        compile_options: dict[str, Any],
        replay_mode: str = "full",
        unparsed: dict[str, int] | None = None,
        arguments: tuple[str, ...] = (),
        skipped_shards: tuple[dict[str, str], ...] = (),
    ) -> Catalog:
        ordered = sorted(events, key=lambda e: (e.frame_id, e.frame_compile_id))
        # Dynamo lists the rejecting entries most-recently-used first, which depends on replay
        # history; order them by compile id so the catalog does not.
        compiles = tuple(
            ClassifiedCompile(e, tuple(sorted(classify_reasons(e.reasons), key=_against_order)))
            for e in ordered
        )
        counts = dict(unparsed or {})
        others = sum(1 for c in compiles for f in c.failures if f.kind.value == "other")
        if others:
            counts["unclassified_failures"] = others
        return Catalog(
            torch_version=torch_version,
            corpus_path=corpus_path,
            samples=self.samples,
            model=model,
            compile=compile_options,
            compiles=compiles,
            topologies=self.topologies(ordered),
            dimensions=self.dimensions(),
            failed_samples=tuple(self.failed),
            arguments=arguments,
            not_analysed=tuple(self.not_analysed),
            skipped_shards=skipped_shards,
            replay_mode=replay_mode,
            unparsed=counts,
        )
