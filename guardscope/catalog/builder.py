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

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import networkx as nx

from ..model import (
    Catalog,
    ClassifiedCompile,
    CompileEvent,
    CudagraphEventKind,
    DimensionStats,
    FailedSample,
    GraphBreak,
    SampleMeta,
    Topology,
    compile_order,
)
from ..sources import FrameArguments, strip_locals
from ..text import any_float_words, dim_words, flag_words, normalize_reason, value_words
from .buckets import MAX_BUCKETS, SHAPES_PER_GRAPH, ShapeRow, dim_groups, recommend
from .classify import classify_reasons
from .frames import break_summaries, frame_label, frame_of, frame_summaries, skipped_frames

_TENSOR_MATCH = re.compile(
    r"check_tensor\((?P<source>[^,]+), .*?torch\.(?P<dtype>\w+), .*?size=\[(?P<size>[^\]]*)\], "
    r"stride=\[(?P<stride>[^\]]*)\]\)"
)
_EQUALITY = re.compile(r"^(?P<a>\S+\.(?:size|stride)\(\)\[\d+\]) == (?P<b>\S+\.(?:size|stride)\(\)\[\d+\])$")
# Inductor's int32-indexing guards ("32*x.size()[0] <= 2147483647"): bounds, not topologies.
# Inductor's indexing bounds: an expression at most about int32 or int64 max ("16*s0 <= 2147483631"
# on CUDA, "<= 2147483646" as the top of a two-sided bound): they depend on the backend, not the input.
_LIMIT = r"(?:21474\d{5}|92233720368547\d{5})"
_OVERFLOW_BOUND = re.compile(rf"<= {_LIMIT}$")
_OVERFLOW_END = re.compile(rf"^(?P<bounded>-?\d+ <= .+?) <= {_LIMIT}$")
# A guard on the frame's inputs reads a local (``L['x']``), not the wrapper's closure or globals.
_ON_INPUTS = re.compile(r"L\[['\"](?!self['\"])\w+['\"]\](?!(?:\[[^\]]*\])*\.__(?:closure|defaults|code|kwdefaults)__)")
_LAYER = re.compile(r"\.layers\[\d+\]")
# The implicit guard of a float input Dynamo did not specialise ("NaN specialization"): any value.
_ANY_FLOAT = re.compile(r"^not math\.isnan\((?P<name>[^()]+)\)$")
_LOWER_TWO = re.compile(r"^2 <= (?P<dim>\S+\.size\(\)\[\d+\])(?: <= \d+)?$")


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


def guard_atoms(guards: Iterable[str], rename: Callable[[str], str] = strip_locals) -> set[Atom]:
    """Normalised constraints of one compiled entry, from its guard lines; ``rename`` turns the
    frame's sources into the names facts use (the first frame's: the user's argument names)."""
    atoms: set[Atom] = set()
    static: dict[str, int] = {}
    graph = nx.Graph()
    for line in guards:
        kind, _, body = line.partition(":")
        body = body.strip()
        expression = rename(body.split("  # ")[0].split(" # ")[0]).strip()
        if kind == "TENSOR_MATCH":
            match = _TENSOR_MATCH.search(body)
            if not match:
                continue
            name = rename(match.group("source")).strip()
            atoms.add(("dtype", name, match.group("dtype")))
            for axis, value in enumerate(_ints(match.group("size"))):
                if value is not None:
                    dim = f"{name}.size()[{axis}]"
                    static[dim] = value
                    atoms.add(("size", dim, value))
            for axis, value in enumerate(_ints(match.group("stride"))):
                if value is not None:
                    atoms.add(("stride", f"{name}.stride()[{axis}]", value))
        elif kind in ("LAMBDA_GUARD", "LENGTH_CHECK", "EQUALS_MATCH") and not _ON_INPUTS.search(body.split("  # ")[0]):
            continue  # on globals or on the wrapper's closure (a library's own code), not on inputs
        elif kind == "EQUALS_MATCH":
            # A Python scalar baked into the graph as a constant (``temperature == 0.5``).
            name, equals, value = expression.partition(" == ")
            if equals:
                atoms.add(("value", name.strip(), value.strip()))
        elif kind == "LAMBDA_GUARD" and _ANY_FLOAT.match(expression):
            # Dynamo's implicit guard on a float it did not specialise: the graph takes any value.
            atoms.add(("any_float", _ANY_FLOAT.match(expression).group("name")))
        elif kind == "LAMBDA_GUARD":
            equality = _EQUALITY.match(expression)
            lower = _LOWER_TWO.match(expression)
            if equality and ".stride()" not in expression:
                graph.add_edge(equality.group("a"), equality.group("b"))
            elif equality:
                continue  # stride == size: the layout of a contiguous tensor, not a topology fact
            elif lower:
                atoms.add(("ge2", lower.group("dim")))
            elif _OVERFLOW_END.match(expression):
                atoms.add(("relation", _OVERFLOW_END.match(expression).group("bounded")))
            elif expression and not _OVERFLOW_BOUND.search(expression):
                atoms.add(("relation", expression))
        elif kind == "LENGTH_CHECK":
            atoms.add(("relation", rename(body.split(" # ")[0]).strip()))
        elif kind in ("TRUE_MATCH", "FALSE_MATCH") and _ON_INPUTS.search(body.split("  # ")[0]):
            # A bool attribute of an input object (a cache layer's is_initialized): the graph is
            # for one value of it.
            atoms.add(("flag", expression.partition(" == ")[0].strip(), kind == "TRUE_MATCH"))
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
        elif atom[0] == "value":
            facts.append((-1, value_words(atom[1], atom[2])))
        elif atom[0] == "any_float":
            facts.append((-1, any_float_words(atom[1])))

    # A flag every layer of a cache repeats (is_initialized) is said once, for its first layer.
    said: set[tuple[str, bool]] = set()
    for _, path, value in sorted(atom for atom in atoms if atom[0] == "flag"):
        key = (_LAYER.sub(".layers[*]", path), value)
        if key not in said:
            said.add(key)
            facts.append((-1, flag_words(path, value)))
    return tuple(text for _, text in sorted(facts))


@dataclass(frozen=True)
class CudagraphSettings:
    """The catalog's ``cudagraphs`` section: asked for when the compile mode uses CUDA graphs."""

    observed: bool  # the replay ran them (inductor, a CUDA-graph mode, a GPU)
    paddable: tuple[str, ...] | None = None  # dims the user confirmed paddable; None: not asked
    shapes_per_graph: int = SHAPES_PER_GRAPH
    max_buckets: int = MAX_BUCKETS
    # Inductor's settings at analysis time (torch_compat.cudagraph_config):
    # triton.cudagraph_skip_dynamic_graphs, and whether graph partitioning turns it into
    # "CUDA-graph the static partitions only" instead of "skip the whole graph".
    skip_dynamic_graphs: bool = False
    graph_partition: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"skip_dynamic_graphs": self.skip_dynamic_graphs, "graph_partition": self.graph_partition}


def _against_order(failure: Any) -> tuple[int, ...]:
    return compile_order(failure.against)


def _expected_model(settings: CudagraphSettings) -> str:
    """How ``expected`` counts: ``per_shape``, ``static_partitions`` or ``skipped``."""
    if not settings.skip_dynamic_graphs:
        return "per_shape"
    return "static_partitions" if settings.graph_partition else "skipped"


# --- the builder -------------------------------------------------------------------------------


def passed_arguments(meta: SampleMeta) -> list[str]:
    """The top-level arguments a call passed with a value (None counts as not passed)."""
    names = {path.split("[")[0] for path, _ in meta.tensors}
    names |= {path.split("[")[0] for path, _ in meta.lengths}
    names |= {path.split("[")[0] for path, text in meta.scalars if text != "NoneType:None"}
    return sorted(names)


def topology_key(serving: str, graphs: tuple[str, ...] = ()) -> str:
    """A topology's key: the first frame's graph, then the graphs of later frames (``"0/1"``,
    ``"0/2|7/1|9/0"``): the samples that run through the same graphs in every frame."""
    return "|".join((serving, *graphs))


# How many samples that ran on tensors materialised from their signature catalog.json lists.
MATERIALISED_LISTED = 20
# (path, shape) pairs CatalogBuilder remembers as accumulated, before it starts afresh.
SHAPES_SEEN_KEPT = 65536
# Up to this many dims a sample's pattern of equal sizes is found by list.index (in C).
_INDEXED_DIMS = 32


@dataclass
class _DimAccumulator:
    input: str
    axis: int
    min: int
    max: int
    ever_zero: bool = False
    ever_one: bool = False


@dataclass
class CatalogBuilder:
    """Accumulates samples; :meth:`build` returns the :class:`Catalog`."""

    dims: dict[str, _DimAccumulator] = field(default_factory=dict)
    equal_candidates: dict[str, set[str] | None] = field(default_factory=dict)
    members: dict[str, list[int]] = field(default_factory=dict)
    first_shapes: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    first_arguments: dict[str, list[str]] = field(default_factory=dict)  # arguments passed, not None
    failed: list[FailedSample] = field(default_factory=list)
    # Samples no compiled graph served: Dynamo ran them eagerly, which happens when a frame
    # hit the recompile limit (or a torch build hides its cache entries from guardscope).
    not_analysed: list[int] = field(default_factory=list)
    samples: int = 0
    _partitions_seen: set = field(default_factory=set, repr=False)
    _dim_names: dict[str, list[str]] = field(default_factory=dict, repr=False)  # per path, by axis
    # (path, shape) pairs whose sizes the dims' accumulators already hold, each with its dims'
    # names: a pair seen before changes no min, max, zero or one, so it costs one lookup (the
    # newest SHAPES_SEEN_KEPT; forgetting one only costs its update again).
    _shapes_seen: dict = field(default_factory=dict, repr=False, compare=False)
    described: int = 0  # samples whose forward ran (failed ones carry no shapes worth trusting)
    # With CUDA graphs (mode="reduce-overhead"): the distinct shapes per graph that ran (Dynamo's
    # lookup, SampleMeta.ran; CUDA Graph Trees are that graph's), for the expected recordings and
    # the padding buckets, and the CUDA graph events of each sample. Memory grows with distinct
    # shapes, so this is only kept when asked for.
    track_shapes: bool = False
    shapes: dict[tuple[str | None, int, tuple[int, ...]], int] = field(default_factory=dict)
    layouts: list[tuple[str, ...]] = field(default_factory=list)
    cudagraph_events: list[tuple[int, str, str, str | None, float | None]] = field(default_factory=list)
    # Samples recorded as signatures only: their count, and what those that ran were run on.
    signature_samples: int = 0
    ran_on: dict[str, int] = field(default_factory=dict)
    materialised: list[int] = field(default_factory=list)  # the first MATERIALISED_LISTED

    def add_sample(self, meta: SampleMeta) -> None:
        self.samples += 1
        if meta.recorded == "signature":
            self.signature_samples += 1
            if meta.ran_on is not None:
                self.ran_on[meta.ran_on] = self.ran_on.get(meta.ran_on, 0) + 1
                if meta.ran_on == "materialised" and len(self.materialised) < MATERIALISED_LISTED:
                    self.materialised.append(meta.index)
        for event in meta.cudagraph:
            self.cudagraph_events.append((meta.index, event.kind.value, event.detail, event.compile_id, event.seconds))
        if meta.error is not None:
            self.failed.append(FailedSample(meta.index, meta.error))
            return
        self.described += 1
        dims: list[str] = []
        values: list[int] = []
        fresh: set[str] = set()
        names = self._dim_names
        accumulators = self.dims
        seen = self._shapes_seen
        for path, tensor in meta.tensors:
            shape = tensor.shape
            pair = (path, shape)
            named = seen.get(pair)
            if named is not None:  # its dims exist and their accumulators hold these sizes already
                dims.extend(named)
                values.extend(shape)
                continue
            known = names.get(path)
            if known is None or len(known) < len(shape):
                known = names[path] = [f"{path}.size()[{axis}]" for axis in range(len(shape))]
            named = known if len(known) == len(shape) else known[:len(shape)]
            dims.extend(named)
            values.extend(shape)
            if len(seen) >= SHAPES_SEEN_KEPT:
                seen.clear()
            seen[pair] = named
            for axis, value in enumerate(shape):
                dim = known[axis]
                accumulator = accumulators.get(dim)
                if accumulator is None:
                    accumulator = accumulators[dim] = _DimAccumulator(path, axis, value, value)
                    self.equal_candidates[dim] = None  # no evidence yet: this sample gives the first
                    fresh.add(dim)
                # Inline, not a method: this runs for every dim of every sample.
                if value < accumulator.min:
                    accumulator.min = value
                elif value > accumulator.max:
                    accumulator.max = value
                if value == 0:
                    accumulator.ever_zero = True
                elif value == 1:
                    accumulator.ever_one = True
        # Equal dims are those equal in every sample where both are present (an optional
        # argument's dims can still equal another input's). Candidates only change when a
        # sample's pattern of equal dims is new: intersecting with one already applied changes
        # nothing.
        # Each value's first position: list.index in C for a few dims, a dict for many.
        if len(values) <= _INDEXED_DIMS:
            firsts = tuple(map(values.index, values))
        else:
            first_of: dict[int, int] = {}
            firsts = tuple(first_of.setdefault(v, i) for i, v in enumerate(values))
        partition = (tuple(dims), firsts)
        if partition not in self._partitions_seen:
            self._partitions_seen.add(partition)
            groups: dict[int, set[str]] = {}
            for dim, value in zip(dims, values):
                groups.setdefault(value, set()).add(dim)
            present = set(dims)
            for dim, value in zip(dims, values):
                same = groups[value] - {dim}
                current = self.equal_candidates.get(dim)
                if current is None:
                    self.equal_candidates[dim] = set(same)
                else:
                    current -= present - same - {dim}
                    current |= same & fresh
        if self.track_shapes:
            self._add_shape(meta.ran or meta.serving, tuple(dims), tuple(values))
        if meta.serving is None:
            self.not_analysed.append(meta.index)
            return
        key = topology_key(meta.serving, meta.graphs) if meta.graphs else meta.serving
        self.members.setdefault(key, []).append(meta.index)
        if key not in self.first_shapes:
            self.first_shapes[key] = {path: list(t.shape) for path, t in meta.tensors}
            self.first_arguments[key] = passed_arguments(meta)

    def _add_shape(self, graph: str | None, dims: tuple[str, ...], values: tuple[int, ...]) -> None:
        try:
            layout = self.layouts.index(dims)
        except ValueError:
            layout = len(self.layouts)
            self.layouts.append(dims)
        key = (graph, layout, values)
        self.shapes[key] = self.shapes.get(key, 0) + 1

    def members_after(self, counts: dict[str, int]) -> dict[str, list[int]]:
        """Each topology's members after the first ``counts[key]`` (those a checkpoint streamed
        already), for the topologies that have more."""
        return {key: found[counts.get(key, 0):] for key, found in self.members.items()
                if len(found) > counts.get(key, 0)}

    def member_counts(self) -> dict[str, int]:
        return {key: len(found) for key, found in self.members.items()}

    def to_state(self, members: bool = True) -> dict[str, Any]:
        """Everything accumulated so far, as JSON values (for checkpoints); with ``members``
        False, the topologies' member counts instead of their members (a checkpoint that
        streams them, :func:`guardscope.store.append_members`)."""
        return {
            "track_shapes": self.track_shapes,
            "shapes": [[graph, layout, list(values), count] for (graph, layout, values), count in self.shapes.items()],
            "layouts": [list(dims) for dims in self.layouts],
            "cudagraph_events": [list(event) for event in self.cudagraph_events],
            "dims": [[dim, a.input, a.axis, a.min, a.max, a.ever_zero, a.ever_one] for dim, a in self.dims.items()],
            "equal_candidates": [[d, None if c is None else sorted(c)] for d, c in self.equal_candidates.items()],
            **({"members": [[cid, m] for cid, m in self.members.items()]} if members
               else {"member_counts": self.member_counts()}),
            "first_shapes": [[cid, shapes] for cid, shapes in self.first_shapes.items()],
            "first_arguments": [[key, names] for key, names in self.first_arguments.items()],
            "failed": [[f.index, f.error] for f in self.failed],
            "not_analysed": list(self.not_analysed),
            "samples": self.samples,
            "described": self.described,
            "signature_samples": self.signature_samples,
            "ran_on": dict(self.ran_on),
            "materialised": list(self.materialised),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> CatalogBuilder:
        builder = cls()
        for dim, input_, axis, low, high, zero, one in state["dims"]:
            builder.dims[dim] = _DimAccumulator(input_, axis, low, high, zero, one)
        builder.equal_candidates = {d: None if c is None else set(c) for d, c in state["equal_candidates"]}
        builder.members = {cid: list(m) for cid, m in state["members"]}
        builder.first_shapes = {cid: shapes for cid, shapes in state["first_shapes"]}
        builder.first_arguments = {key: list(names) for key, names in state.get("first_arguments", [])}
        builder.failed = [FailedSample(i, e) for i, e in state["failed"]]
        builder.not_analysed = list(state["not_analysed"])
        builder.samples = int(state["samples"])
        builder.described = int(state["described"])
        builder.signature_samples = int(state.get("signature_samples", 0))
        builder.ran_on = {str(k): int(v) for k, v in state.get("ran_on", {}).items()}
        builder.materialised = [int(i) for i in state.get("materialised", [])]
        builder.track_shapes = bool(state.get("track_shapes", False))
        builder.layouts = [tuple(dims) for dims in state.get("layouts", [])]
        builder.shapes = {(graph, layout, tuple(values)): count for graph, layout, values, count in state.get("shapes", [])}
        builder.cudagraph_events = [tuple(event) for event in state.get("cudagraph_events", [])]
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

    def _absent_facts(self, key: str, keys: Iterable[str]) -> tuple[str, ...]:
        """"without mask" when the first sample of some topology among ``keys`` passes an argument
        this one leaves out or passes as None (optional arguments choose graphs too)."""
        passed = [set(self.first_arguments[k]) for k in keys if k in self.first_arguments]
        everything = set().union(*passed) if passed else set()
        missing = everything - set(self.first_arguments.get(key, everything))
        if not missing:
            return ()
        rank = {name: position for position, name in enumerate(dict.fromkeys(d.split(".")[0].split("[")[0] for d in self.dims))}
        return ("without " + ", ".join(sorted(missing, key=lambda n: (rank.get(n, len(rank)), n))),)

    def _fallback_facts(self, meta: dict[str, list[int]]) -> tuple[str, ...]:
        """Facts from the topology's first sample, when torch gave no guards to read."""
        facts = []
        for path, shape in meta.items():
            for axis, value in enumerate(shape):
                acc = self.dims[f"{path}.size()[{axis}]"]
                if value in (0, 1) and acc.min != acc.max:
                    facts.append(f"{path} dim {axis} is {value}")
        return tuple(facts)

    def topologies(self, events: list[CompileEvent], rename: Callable[[str], str] = strip_locals,
                   members: dict[str, list[int]] | None = None) -> tuple[Topology, ...]:
        """One topology per distinct set of graphs run, in order of first sample. Facts come from
        the first frame's graph (what it guards that not every graph of that frame does), then
        from each later frame's graph that not every topology runs through. ``members``: the
        samples each graph set really served, when not all the replay described (the builder's)."""
        members = self.members if members is None else members
        guards = {e.compile_id: e.guards for e in events}
        labels = {e.frame_id: frame_label(e.co_name, e.location) for e in sorted(events, key=lambda e: e.frame_compile_id, reverse=True)}
        paths = {key: key.split("|") for key in members}
        servings = {path[0] for path in paths.values()}
        atoms = {cid: guard_atoms(guards[cid], rename) for cid in servings if guards.get(cid)}
        shared = set.intersection(*atoms.values()) if atoms else set()
        rank = {dim: position for position, dim in enumerate(self.dims)}
        aliases = always_equal(shared, rank)
        later = self._later_frame_facts(paths, guards, labels)
        ordered = sorted(members.items(), key=lambda item: item[1][0])
        topologies = []
        for position, (key, served) in enumerate(ordered):
            compile_id, *graphs = paths[key]
            if compile_id in atoms:
                own = atoms[compile_id] - shared
                static = {a[1] for a in atoms[compile_id] if a[0] == "size"}
                facts = render_facts(own, static, aliases, rank) if own else ("the graph every other input shares",)
            else:
                facts = self._fallback_facts(self.first_shapes[key])
            facts = self._absent_facts(key, members) + facts + later.get(key, ())
            topologies.append(
                Topology(
                    id=position,
                    compile_id=compile_id,
                    first_sample=served[0],
                    samples=tuple(served),
                    facts=facts,
                    graphs=(compile_id, *graphs),
                )
            )
        return tuple(topologies)

    @staticmethod
    def _later_frame_facts(paths: dict[str, list[str]], guards: dict[str, tuple[str, ...]],
                           labels: dict[int, str]) -> dict[str, tuple[str, ...]]:
        """``{topology key: facts}`` for topologies that share their first-frame graph with others
        and differ in a later frame: the facts of each later-frame graph it runs that not all of
        those siblings run, against that frame's other graphs among them, prefixed with the frame.
        A graph whose guards say nothing the others' do not is named by its compile id."""
        siblings: dict[str, list[str]] = {}
        for key, path in paths.items():
            siblings.setdefault(path[0], []).append(key)
        atoms_of: dict[str, set[Atom]] = {}
        facts: dict[str, tuple[str, ...]] = {}
        for keys in siblings.values():
            if len(keys) < 2:
                continue
            runs = {key: set(paths[key][1:]) for key in keys}
            everywhere = set.intersection(*runs.values())
            by_frame: dict[int, set[str]] = {}
            for graph in set().union(*runs.values()) - everywhere:
                by_frame.setdefault(frame_of(graph), set()).add(graph)
            for graph in set().union(*by_frame.values()) if by_frame else ():
                if graph not in atoms_of:
                    atoms_of[graph] = guard_atoms(guards.get(graph, ()))
            # The graphs fewest siblings run say most about a topology: they come first.
            runners = {graph: sum(graph in run for run in runs.values()) for graph in set().union(*runs.values())}
            for key in keys:
                found: list[str] = []
                for graph in sorted(runs[key] - everywhere, key=lambda g: (runners[g], compile_order(g))):
                    frame = frame_of(graph)
                    common = set.intersection(*(atoms_of[g] for g in by_frame[frame]))
                    own = atoms_of[graph] - common
                    # What no other graph of the frame guards comes first: it tells most.
                    unique = own - set().union(*(atoms_of[g] for g in by_frame[frame] if g != graph))
                    static = {a[1] for a in atoms_of[graph] if a[0] == "size"}
                    words = (render_facts(unique, static, {}, {}) + render_facts(own - unique, static, {}, {})
                             if own else (f"graph {graph}",))
                    label = labels.get(frame, f"frame {frame}")
                    found.extend(f"in {label}: {text}" for text in words)
                facts[key] = tuple(found)
        return facts

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
        cudagraphs: CudagraphSettings | None = None,
        frame_arguments: FrameArguments | None = None,
        graph_breaks: tuple[GraphBreak, ...] = (),
    ) -> Catalog:
        ordered = sorted(events, key=lambda e: (e.frame_id, e.frame_compile_id))
        rename = frame_arguments.rename if frame_arguments is not None else strip_locals
        # Dynamo lists the rejecting entries most-recently-used first, which depends on replay
        # history; order them by compile id so the catalog does not.
        sizes = self._first_sizes()
        absent = self._first_absent()
        compiles = tuple(
            ClassifiedCompile(e, tuple(sorted(self._classify(e, rename, sizes.get(e.sample), absent.get(e.sample, ())),
                                              key=_against_order)))
            for e in ordered
        )
        counts = dict(unparsed or {})
        others = sum(1 for c in compiles for f in c.failures if f.kind.value == "other")
        if others:
            counts["unclassified_failures"] = others
        dimensions = self.dimensions()
        frames = frame_summaries(ordered)
        skipped = skipped_frames(ordered, graph_breaks, fullgraph=bool(compile_options.get("fullgraph")),
                                 errors={f.index: f.error for f in self.failed})
        members, not_analysed, skipped = self._eager_after_skip(skipped)
        return Catalog(
            torch_version=torch_version,
            corpus_path=corpus_path,
            samples=self.samples,
            model=model,
            compile=compile_options,
            compiles=compiles,
            topologies=self.topologies(ordered, rename, members),
            dimensions=dimensions,
            failed_samples=tuple(self.failed),
            arguments=arguments,
            not_analysed=tuple(not_analysed),
            skipped_shards=skipped_shards,
            replay_mode=replay_mode,
            unparsed=counts,
            cudagraphs=self.cudagraph_section(cudagraphs, dimensions) if cudagraphs else None,
            frames=frames,
            graph_breaks=break_summaries(graph_breaks, ordered),
            frame_arguments=frame_arguments if frame_arguments is not None and frame_arguments.wrapped else None,
            signatures=self.signature_section(len(frames)),
            skipped_frames=skipped,
        )

    def _eager_after_skip(self, skipped: tuple[dict[str, Any], ...]) -> tuple[
            dict[str, list[int]], list[int], tuple[dict[str, Any], ...]]:
        """The topologies' members and the samples not analysed, without the samples that ran
        eagerly because the first frame was skipped, and ``skipped`` with those samples as the
        first frame's ``eager_samples``. From the failed compile's sample on, no call ran a
        compiled graph of the forward, though the replay's guard check finds graphs that would
        have accepted some; those that raised stay failed samples. Which calls reached a later
        frame after it was skipped is not known: its ``eager_samples`` is None."""
        first = next((s for s in skipped if s["frame"] == 0), None)
        if first is None:
            return self.members, self.not_analysed, tuple({**s, "eager_samples": None} for s in skipped)
        cut = first["sample"]
        members = {key: [i for i in found if i < cut] for key, found in self.members.items()}
        eager = sorted([i for found in self.members.values() for i in found if i >= cut]
                       + [i for i in self.not_analysed if i >= cut])
        return ({key: found for key, found in members.items() if found}, [i for i in self.not_analysed if i < cut],
                tuple({**s, "eager_samples": eager if s is first else None} for s in skipped))

    def signature_section(self, frames: int) -> dict[str, Any] | None:
        """catalog.json's ``corpus.signatures``: None when every sample was recorded in full.

        A signature-only sample is exact for the first frame's guards. Where the model breaks
        into several frames, later frames see values computed from tensor data: those samples
        ran on the data of a full sample of their signature, or on zero-filled tensors when the
        corpus has none, so ``later_frames_exact`` is false.
        """
        if not self.signature_samples:
            return None
        return {
            "samples": self.signature_samples,
            "ran_on_full": self.ran_on.get("full", 0),
            "ran_on_materialised": self.ran_on.get("materialised", 0),
            "materialised_samples": list(self.materialised),
            "later_frames_exact": frames <= 1,
        }

    def _first_sizes(self) -> dict[int, dict[str, int]]:
        """The sizes of each topology's first sample, by dim (``"x.size()[0]"``). A compile's
        sample is always the first of a topology (the graph it compiled is new), so these are
        the sizes that broke the guards of its failures."""
        sizes: dict[int, dict[str, int]] = {}
        for key, members in self.members.items():
            sizes[members[0]] = {f"{path}.size()[{axis}]": value
                                 for path, shape in self.first_shapes.get(key, {}).items()
                                 for axis, value in enumerate(shape)}
        return sizes

    def _first_absent(self) -> dict[int, frozenset[str]]:
        """The arguments each topology's first sample passed as None or left out, among those
        the first sample of some topology passed: a guard on one of their values failed because
        the argument was absent (``temperature == 0.5`` against ``temperature=None``)."""
        passed = {key: set(names) for key, names in self.first_arguments.items()}
        everything = set().union(*passed.values()) if passed else set()
        return {members[0]: frozenset(everything - passed[key])
                for key, members in self.members.items() if key in passed}

    @staticmethod
    def _classify(event: CompileEvent, rename: Callable[[str], str], sizes: dict[str, int] | None,
                  absent: Iterable[str] = ()) -> tuple[Any, ...]:
        """The event's failures. The first frame's sources are renamed into the user's argument
        names before classifying (``kwargs['input_ids']`` -> ``input_ids``), a guard with two
        bounds is judged by the bound the sample's own size broke, and a guard on the value of an
        argument the sample passed as None (``absent``) is an optional argument; ``raw`` keeps
        torch's own text. Later frames keep their own locals."""
        if event.frame_id != 0:
            return classify_reasons(event.reasons)
        failures = []
        for reason in event.reasons:
            if not reason or not reason.strip():
                continue
            (failure,) = classify_reasons((rename(reason),), values=sizes, absent=frozenset(absent))
            failures.append(dataclasses.replace(failure, raw=normalize_reason(reason)))
        return tuple(failures)

    # --- CUDA graphs ---------------------------------------------------------------------------

    def shape_rows(self) -> list[ShapeRow]:
        return [
            ShapeRow(graph, self.layouts[layout], values, count)
            for (graph, layout, values), count in sorted(
                self.shapes.items(), key=lambda item: (item[0][0] or "", item[0][1], item[0][2])
            )
        ]

    def recording_times(self) -> list[dict[str, Any]]:
        """Measured capture times (they vary run to run: for timings.json, not the catalog)."""
        return [
            {"sample": sample, "compile_id": compile_id, "seconds": seconds}
            for sample, kind, _, compile_id, seconds in self.cudagraph_events
            if kind == CudagraphEventKind.RECORDING.value and seconds is not None
        ]

    def _recorded(self) -> dict[str, Any]:
        """What CUDA Graph Trees did during the replay, sample by sample, aggregated."""
        by_kind: dict[str, list[int]] = {}
        by_detail: dict[tuple[str, str], list[int]] = {}
        by_graph: dict[str, dict[str, int]] = {}
        for sample, kind, detail, compile_id, _ in self.cudagraph_events:
            by_kind.setdefault(kind, []).append(sample)
            if kind in (CudagraphEventKind.SKIP.value, CudagraphEventKind.HINT.value):
                by_detail.setdefault((kind, detail), []).append(sample)
            if kind in (CudagraphEventKind.NEW_SHAPE.value, CudagraphEventKind.RECORDING.value):
                counts = by_graph.setdefault(compile_id or "unknown", {"new_shapes": 0, "recordings": 0})
                counts["new_shapes" if kind == CudagraphEventKind.NEW_SHAPE.value else "recordings"] += 1

        def events(kind: CudagraphEventKind) -> dict[str, Any]:
            samples = by_kind.get(kind.value, [])
            return {"count": len(samples), "samples": sorted(set(samples))}

        def details(kind: CudagraphEventKind, key: str) -> list[dict[str, Any]]:
            found = [(detail, samples) for (k, detail), samples in by_detail.items() if k == kind.value]
            return [
                {key: detail, "count": len(samples), "samples": sorted(set(samples))}
                for detail, samples in sorted(found, key=lambda item: (-len(item[1]), item[0]))
            ]

        return {
            "new_shapes": events(CudagraphEventKind.NEW_SHAPE),
            "recordings": events(CudagraphEventKind.RECORDING),
            "skips": details(CudagraphEventKind.SKIP, "reason"),
            "hints": details(CudagraphEventKind.HINT, "text"),
            "by_graph": [{"graph": graph, **counts} for graph, counts in sorted(by_graph.items(), key=lambda i: compile_order(i[0]))],
        }

    def _expected(self, settings: CudagraphSettings) -> dict[str, Any]:
        """Recordings the corpus's shapes imply, per graph that ran the samples.

        By default a graph meets a new size key on the first sample with it (a new tree, warmed
        up) and captures it on the second. With ``cudagraph_skip_dynamic_graphs`` and graph
        partitioning, only the graph's static-shape partitions are CUDA-graphed: their key never
        varies, so one new shape per graph, captured on its second run. With it and no
        partitioning, CUDA graphs are skipped for the whole graph: a skip at its compile, no
        recording (assuming every graph has symbolic sizes, as with ``dynamic=True``).
        """
        runs: dict[str, int] = {}
        keys: dict[str, int] = {}
        repeated: dict[str, int] = {}
        for (graph, _, _), count in self.shapes.items():
            name = graph or "none"
            runs[name] = runs.get(name, 0) + count
            keys[name] = keys.get(name, 0) + 1
            repeated[name] = repeated.get(name, 0) + int(count >= 2)
        by_graph: dict[str, dict[str, int]] = {}
        for name in runs:
            if not settings.skip_dynamic_graphs:
                counts = {"new_shapes": keys[name], "recordings": repeated[name], "skips": 0}
            elif settings.graph_partition:
                counts = {"new_shapes": 1, "recordings": int(runs[name] >= 2), "skips": 0}
            else:
                counts = {"new_shapes": 0, "recordings": 0, "skips": 1}
            by_graph[name] = counts
        return {
            "model": _expected_model(settings),
            "new_shapes": sum(c["new_shapes"] for c in by_graph.values()),
            "recordings": sum(c["recordings"] for c in by_graph.values()),
            "skips": sum(c["skips"] for c in by_graph.values()),
            "by_graph": [{"graph": graph, **counts} for graph, counts in sorted(by_graph.items(), key=lambda i: compile_order(i[0]))],
        }

    def cudagraph_section(self, settings: CudagraphSettings, dimensions: tuple[DimensionStats, ...]) -> dict[str, Any]:
        order = list(self.dims)
        known = {d.dim for d in dimensions if d.dynamic}
        paddable = settings.paddable
        unknown = sorted(set(paddable or ()) - known)
        groups = dim_groups(dimensions, order, [d for d in paddable if d in known] if paddable is not None else None)
        recommendation = recommend(
            self.shape_rows(), groups, budget=settings.shapes_per_graph,
            max_buckets=settings.max_buckets, confirmed=paddable is not None,
            partitioned=settings.graph_partition,
        )
        section: dict[str, Any] = {
            "observed": settings.observed,
            "note": None if settings.observed else (
                "the replay did not run CUDA graphs (they need --backend inductor on a CUDA device): "
                "recordings are expected from the corpus's shapes, not observed"
            ),
            "settings": settings.to_json(),
            "expected": self._expected(settings),
            "recorded": self._recorded() if settings.observed else None,
            "padding": {**recommendation.to_json(), "unknown_paddable": unknown},
        }
        return section
