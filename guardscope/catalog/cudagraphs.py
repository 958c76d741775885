"""CUDA graphs in the catalog (pure): the settings an analysis asked for, what the replay's samples
told about CUDA graphs (the distinct shapes each graph ran, the CUDA Graph Trees events of each
sample), and from them the catalog's ``cudagraphs`` section: the recordings the corpus's shapes
imply, those observed, and the padding advice of :mod:`guardscope.catalog.buckets`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from ..model import CudagraphEvent, CudagraphEventKind, DimensionStats, compile_order
from .buckets import MAX_BUCKETS, SHAPES_PER_GRAPH, ShapeRow, dim_groups, recommend


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


def _expected_model(settings: CudagraphSettings) -> str:
    """How ``expected`` counts: ``per_shape``, ``static_partitions`` or ``skipped``."""
    if not settings.skip_dynamic_graphs:
        return "per_shape"
    return "static_partitions" if settings.graph_partition else "skipped"


@dataclass
class CudagraphTally:
    """With CUDA graphs (mode="reduce-overhead"): the distinct shapes per graph that ran (Dynamo's
    lookup, SampleMeta.ran; CUDA Graph Trees are that graph's), for the expected recordings and
    the padding buckets, and the CUDA graph events of each sample."""

    shapes: dict[tuple[str | None, int, tuple[int, ...]], int] = field(default_factory=dict)
    layouts: list[tuple[str, ...]] = field(default_factory=list)
    events: list[tuple[int, str, str, str | None, float | None]] = field(default_factory=list)

    def add_events(self, sample: int, events: Iterable[CudagraphEvent]) -> None:
        for event in events:
            self.events.append((sample, event.kind.value, event.detail, event.compile_id, event.seconds))

    def add_shape(self, graph: str | None, dims: tuple[str, ...], values: tuple[int, ...]) -> None:
        try:
            layout = self.layouts.index(dims)
        except ValueError:
            layout = len(self.layouts)
            self.layouts.append(dims)
        key = (graph, layout, values)
        self.shapes[key] = self.shapes.get(key, 0) + 1

    def to_state(self) -> dict[str, Any]:
        """The tally as JSON values, under the keys of the builder's checkpoint state."""
        return {
            "shapes": [[graph, layout, list(values), count] for (graph, layout, values), count in self.shapes.items()],
            "layouts": [list(dims) for dims in self.layouts],
            "cudagraph_events": [list(event) for event in self.events],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> CudagraphTally:
        return cls(
            shapes={(graph, layout, tuple(values)): count for graph, layout, values, count in state.get("shapes", [])},
            layouts=[tuple(dims) for dims in state.get("layouts", [])],
            events=[tuple(event) for event in state.get("cudagraph_events", [])],
        )

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
            for sample, kind, _, compile_id, seconds in self.events
            if kind == CudagraphEventKind.RECORDING.value and seconds is not None
        ]

    def _recorded(self) -> dict[str, Any]:
        """What CUDA Graph Trees did during the replay, sample by sample, aggregated."""
        by_kind: dict[str, list[int]] = {}
        by_detail: dict[tuple[str, str], list[int]] = {}
        by_graph: dict[str, dict[str, int]] = {}
        for sample, kind, detail, compile_id, _ in self.events:
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

    def section(self, settings: CudagraphSettings, dimensions: tuple[DimensionStats, ...],
                order: list[str]) -> dict[str, Any]:
        """The catalog's ``cudagraphs`` section; ``order``: the dims in the order samples showed them."""
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
