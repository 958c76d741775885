"""Pure: compile events + per-sample descriptions -> :class:`Catalog`.

A *topology* is a class of inputs that needs a compiled graph of its own; guardscope names each
one by the cache entry that served its samples during the replay. Its *facts* are read from that
entry's guards (:mod:`guardscope.catalog.facts`). Across the corpus, each input dimension gets
min, max, whether it was ever 0 or 1, and the dimensions equal to it in every sample (connected
components of an equality graph, networkx).

:class:`CatalogBuilder` takes samples one at a time, so memory grows with distinct dimensions
and topologies, not with the corpus.
"""

from __future__ import annotations

import dataclasses
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import networkx as nx

from ..model import (
    Catalog,
    ClassifiedCompile,
    CompileEvent,
    DimensionStats,
    FailedSample,
    GraphBreak,
    SampleMeta,
    ServedRows,
    Topology,
    compile_order,
)
from ..sources import FrameArguments, strip_locals
from ..text import normalize_reason
from .classify import classify_reasons
from .cudagraphs import CudagraphSettings, CudagraphTally
from .facts import always_equal, guard_atoms, later_frame_facts, render_facts
from .frames import break_summaries, frame_label, frame_summaries, skipped_frames


def _against_order(failure: Any) -> tuple[int, ...]:
    return compile_order(failure.against)


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
    # Each topology's samples, in order, as 8-byte ints (an analysis of millions of calls keeps them all).
    members: dict[str, array] = field(default_factory=dict)
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
    # With CUDA graphs (mode="reduce-overhead"): the distinct shapes per graph that ran and the
    # CUDA graph events of each sample (cudagraphs.CudagraphTally). Memory grows with distinct
    # shapes, so shapes are only kept when asked for.
    track_shapes: bool = False
    cudagraph_tally: CudagraphTally = field(default_factory=CudagraphTally)
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
        self.cudagraph_tally.add_events(meta.index, meta.cudagraph)
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
        self._apply_partition(dims, firsts, fresh)
        if self.track_shapes:
            self.cudagraph_tally.add_shape(meta.ran or meta.serving, tuple(dims), tuple(values))
        if meta.serving is None:
            self.not_analysed.append(meta.index)
            return
        key = topology_key(meta.serving, meta.graphs) if meta.graphs else meta.serving
        self.members.setdefault(key, array("q")).append(meta.index)
        if key not in self.first_shapes:
            self.first_shapes[key] = {path: list(t.shape) for path, t in meta.tensors}
            self.first_arguments[key] = passed_arguments(meta)

    def _apply_partition(self, dims: list[str], firsts: tuple[int, ...], fresh: set[str]) -> None:
        """Narrow the equal-dim candidates by one sample's pattern of equal dims: ``firsts[k]``
        is the first position among ``dims`` whose size equals dim ``k``'s."""
        partition = (tuple(dims), firsts)
        if partition in self._partitions_seen:
            return
        self._partitions_seen.add(partition)
        groups: dict[int, set[str]] = {}
        for dim, first in zip(dims, firsts):
            groups.setdefault(first, set()).add(dim)
        present = set(dims)
        for dim, first in zip(dims, firsts):
            same = groups[first] - {dim}
            current = self.equal_candidates.get(dim)
            if current is None:
                self.equal_candidates[dim] = set(same)
            else:
                current -= present - same - {dim}
                current |= same & fresh

    def add_rows(self, rows: ServedRows) -> None:
        """:meth:`add_sample` of every sample of ``rows`` (signature samples served over columns,
        none failed or run), a column at a time; the builder ends as it would sample by sample.

        Dims' minima, maxima, zeros and ones are reductions over the columns. The equal-dim
        candidates are narrowed as by one sample whose pattern of equal dims is the rows'
        common one (dims equal in every row): every row has every dim of the rows, so narrowing
        row after row ends there too."""
        import numpy as np

        samples = rows.samples
        self.samples += samples
        self.signature_samples += samples
        self.described += samples
        dims: list[str] = []
        columns: list[Any] = []
        fresh: set[str] = set()
        for path, sizes in rows.shapes:
            ndim = sizes.shape[1]
            known = self._dim_names.get(path)
            if known is None or len(known) < ndim:
                known = self._dim_names[path] = [f"{path}.size()[{axis}]" for axis in range(ndim)]
            for axis in range(ndim):
                dim, column = known[axis], sizes[:, axis]
                dims.append(dim)
                columns.append(column)
                accumulator = self.dims.get(dim)
                if accumulator is None:
                    accumulator = self.dims[dim] = _DimAccumulator(path, axis, int(column[0]), int(column[0]))
                    self.equal_candidates[dim] = None
                    fresh.add(dim)
                accumulator.min = min(accumulator.min, int(column.min()))
                accumulator.max = max(accumulator.max, int(column.max()))
                accumulator.ever_zero = accumulator.ever_zero or bool((column == 0).any())
                accumulator.ever_one = accumulator.ever_one or bool((column == 1).any())
        firsts: list[int] = []
        for k, column in enumerate(columns):
            firsts.append(next((j for j in range(k) if firsts[j] == j and columns[j][0] == column[0]
                                and np.array_equal(columns[j], column)), k))
        self._apply_partition(dims, tuple(firsts), fresh)
        # Members: each graph's samples in order (a row's repeats are consecutive samples).
        indices = np.repeat(rows.first, rows.count)
        if len(indices) != len(rows.first):
            indices += np.arange(len(indices)) - np.repeat(np.cumsum(rows.count) - rows.count, rows.count)
        graph = np.repeat(rows.graph, rows.count)
        first_rows = {}
        for number in np.flatnonzero(np.bincount(rows.graph)).tolist():
            first_rows[int(np.argmax(rows.graph == number))] = number
        for row, number in sorted(first_rows.items()):
            key = rows.graphs[number]
            self.members.setdefault(key, array("q")).frombytes(indices[graph == number].astype(np.int64).tobytes())
            if key not in self.first_shapes:
                meta = rows.describe(row)
                self.first_shapes[key] = {path: list(t.shape) for path, t in meta.tensors}
                self.first_arguments[key] = passed_arguments(meta)

    def members_after(self, counts: dict[str, int]) -> dict[str, array]:
        """Each topology's members after the first ``counts[key]`` (those a checkpoint streamed
        already), for the topologies that have more (``array('q')`` copies)."""
        return {key: found[counts.get(key, 0):] for key, found in self.members.items()
                if len(found) > counts.get(key, 0)}

    def member_counts(self) -> dict[str, int]:
        return {key: len(found) for key, found in self.members.items()}

    def to_state(self, members: bool = True) -> dict[str, Any]:
        """Everything accumulated so far, as JSON values (for checkpoints); with ``members``
        False, the topologies' member counts instead of their members (a checkpoint that
        streams them, :func:`guardscope.checkpoint.append_members`)."""
        return {
            "track_shapes": self.track_shapes,
            **self.cudagraph_tally.to_state(),
            "dims": [[dim, a.input, a.axis, a.min, a.max, a.ever_zero, a.ever_one] for dim, a in self.dims.items()],
            "equal_candidates": [[d, None if c is None else sorted(c)] for d, c in self.equal_candidates.items()],
            **({"members": [[cid, list(m)] for cid, m in self.members.items()]} if members
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
        builder.members = {cid: array("q", m) for cid, m in state["members"]}
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
        builder.cudagraph_tally = CudagraphTally.from_state(state)
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
        later = later_frame_facts(paths, guards, labels)
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
                    samples=served,
                    facts=facts,
                    graphs=(compile_id, *graphs),
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

    def cudagraph_section(self, settings: CudagraphSettings, dimensions: tuple[DimensionStats, ...]) -> dict[str, Any]:
        """The catalog's ``cudagraphs`` section from the tally, its dims in the order samples showed them."""
        return self.cudagraph_tally.section(settings, dimensions, list(self.dims))
