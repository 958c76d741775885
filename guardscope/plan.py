"""Plans for the fixes ``emit-warmup`` writes: which samples warm up, which dims go unbacked,
which ``torch.export`` Dims to declare.

The selection logic is pure (catalog dicts and coverage sets in, plans out). The two questions
that need Dynamo — "which representatives does the graph compiled for sample r also serve?" and
"which samples still compile under the unbacked configuration?" — are asked through
:mod:`guardscope.replay`, the only module that calls ``torch.compile``.
"""

from __future__ import annotations

import keyword
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import networkx as nx

from .errors import CatalogError
from .model import Sample
from .replay import ReplayOptions, coverage_after_warmup, replay


def check_identifier(name: str, what: str = "argument name") -> str:
    """Names that reach generated code must be plain identifiers (never corpus-controlled code)."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise CatalogError(f"{what} {name!r} is not a Python identifier; guardscope will not emit code for it")
    return name


# --- warmup ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WarmupStep:
    topology: int
    sample: int
    compile_id: str | None
    covers: tuple[int, ...]  # other topologies whose representatives this graph also serves


@dataclass(frozen=True)
class WarmupPlan:
    steps: tuple[WarmupStep, ...]
    graphs: int  # graphs the warmup compiles, measured
    one_per_topology: int  # graphs a one-sample-per-topology warmup in corpus order compiles
    topologies: int


def choose_cover(order: list[int], covers: dict[int, set[int]]) -> list[int]:
    """Fewest representatives whose graphs cover every topology, general ones first.

    ``covers[r]`` holds the topologies the graph compiled for ``r``'s representative serves
    (``r`` itself included). Coverage is a preorder, so the minimum cover is one member of each
    source component of the coverage graph's condensation; a component's member that covers
    most goes first. Topologies left uncovered (coverage is not always transitive) are added in
    corpus order.
    """
    graph = nx.DiGraph()
    graph.add_nodes_from(order)
    for source, targets in covers.items():
        graph.add_edges_from((source, t) for t in targets if t != source)
    condensed = nx.condensation(graph)
    rank = {t: i for i, t in enumerate(order)}
    chosen = []
    for component in condensed.nodes:
        if condensed.in_degree(component) == 0:
            members = condensed.nodes[component]["members"]
            chosen.append(min(members, key=lambda t: (-len(covers.get(t, ())), rank[t])))
    chosen.sort(key=lambda t: (-len(covers.get(t, ())), rank[t]))
    covered = set().union(*(covers.get(t, {t}) for t in chosen)) if chosen else set()
    chosen += [t for t in order if t not in covered and t not in chosen]
    return chosen


def plan_warmup(
    model: Any,
    topologies: list[dict[str, Any]],
    representative: Callable[[int], Sample],
    options: ReplayOptions,
    *,
    frames: int = 1,
) -> WarmupPlan:
    """Measure coverage between topology representatives and choose the warmup order.

    ``frames``: the frames the analysis compiled. With graph breaks (more than one), coverage is
    measured by running each representative under ``fail_on_recompile`` (later frames see values
    computed from the data), so the warmup covers every frame's graphs.
    """
    served = [t for t in topologies if t["compile_id"] is not None]
    order = [t["id"] for t in served]
    samples = {t["id"]: representative(t["first_sample"]) for t in served}
    probes = [samples[t] for t in order]
    run_probes = frames > 1

    def coverage(warmup: list[int]) -> tuple[list[bool], int]:
        return coverage_after_warmup(model, [samples[t] for t in warmup], probes, options, run_probes=run_probes)

    covers: dict[int, set[int]] = {}
    for topology in order:
        accepted, _ = coverage([topology])
        covers[topology] = {t for t, ok in zip(order, accepted) if ok} | {topology}
    chosen = choose_cover(order, covers)
    # Compile the chosen order in one process, as warmup() will, and re-check every topology:
    # a graph compiled after others can differ from one compiled alone. Add what is missed until
    # nothing is (at most once per topology).
    accepted, graphs = coverage(chosen)
    for _ in order:
        missing = [t for t, ok in zip(order, accepted) if not ok and t not in chosen]
        if not missing:
            break
        chosen += missing
        accepted, graphs = coverage(chosen)
    by_id = {t["id"]: t for t in served}
    steps = tuple(
        WarmupStep(
            topology=t,
            sample=by_id[t]["first_sample"],
            compile_id=by_id[t]["compile_id"],
            covers=tuple(sorted(c for c in covers[t] if c != t)),
        )
        for t in chosen
    )
    # The analysis itself was the one-sample-per-topology warmup in corpus order: each topology
    # got its own graph(s).
    one_per_topology = len(order) if not run_probes else len({g for t in served for g in t.get("graphs") or ()})
    return WarmupPlan(steps=steps, graphs=graphs, one_per_topology=one_per_topology, topologies=len(order))


# --- mark_unbacked -----------------------------------------------------------------------------


@dataclass(frozen=True)
class UnbackedDim:
    argument: str
    axis: int
    reason: str  # where it came from: the topology and guard, or the corpus range


@dataclass(frozen=True)
class UnbackedPlan:
    dims: tuple[UnbackedDim, ...]
    duck_shape: bool
    duck_reason: str | None
    residual: tuple[int, ...] = ()  # corpus samples that still compile under the configuration
    graphs: int = 0  # graphs the configuration compiles over the corpus, every frame counted
    # Dims the plan cannot mark, with why: a nested argument, or a value a later frame computed
    # inside the model (only the inputs of a call can be marked).
    skipped: tuple[tuple[str, str], ...] = field(default=())
    frames: int = 1  # frames the model compiles to under the configuration
    added_breaks: tuple[str, ...] = ()  # graph breaks the marks add ("location: reason")
    failed: tuple[tuple[int, str], ...] = ()  # samples that raise once marked, with the error
    status: str = "ok"  # "infeasible": the configuration breaks the model (see reason)
    reason: str | None = None


def _topology_of(catalog: dict[str, Any]) -> dict[int, int]:
    return {s: t["id"] for t in catalog["topologies"] for s in t["samples"]}


def _frame_labels(catalog: dict[str, Any]) -> dict[int, str]:
    return {f["frame"]: f.get("label") or f"frame {f['frame']}" for f in catalog.get("frames", [])}


def choose_unbacked(catalog: dict[str, Any]) -> UnbackedPlan:
    """Mark every varying input dim that was 0/1-specialized (or is ever 0 or 1 in the corpus);
    turn duck sizing off when it caused a recompile.

    Only a call's inputs can be marked: a 0/1 specialization in a later frame (after a graph
    break) on a value the model computed is listed in ``skipped`` with its frame, as is a dim of
    a nested argument (mark it in your own code)."""
    sample_topology = _topology_of(catalog)
    inputs = {d["dim"] for d in catalog["dimensions"]}
    labels = _frame_labels(catalog)
    reasons: dict[str, str] = {}
    skipped: dict[str, str] = {}
    duck_reason = None
    for compiled in catalog["compiles"]:
        topology = sample_topology.get(compiled["sample"])
        frame = compiled.get("frame", 0)
        for failure in compiled["failures"]:
            where = f"T{topology}, sample {compiled['sample']}: guard {failure['guard']!r}"
            if "zero_one_specialization" in failure["causes"]:
                for dim in failure["dims"]:
                    if frame == 0 and dim in inputs:
                        reasons.setdefault(dim, f"0/1 specialization ({where})")
                    elif frame != 0:
                        skipped.setdefault(dim, f"a value computed inside the model in {labels.get(frame, f'frame {frame}')} "
                                                f"(compile {compiled['compile_id']}), not an input: mark_unbacked cannot reach it")
            if "duck_sizing" in failure["causes"] and duck_reason is None:
                duck_reason = f"duck sizing ({where})"
    for stats in catalog["dimensions"]:
        if stats["dynamic"] and (stats["ever_zero"] or stats["ever_one"]):
            seen = "0" if stats["ever_zero"] else "1"
            reasons.setdefault(
                stats["dim"], f"varies {stats['min']}..{stats['max']} in the corpus and is {seen} in some samples"
            )
    dims = []
    for dim in sorted(reasons, key=_dim_order(catalog)):
        argument, _, rest = dim.partition(".size()[")
        if not argument.isidentifier() or not rest.rstrip("]").isdigit():
            skipped.setdefault(dim, "a nested argument: mark it in your own code")
            continue
        dims.append(UnbackedDim(check_identifier(argument), int(rest.rstrip("]")), reasons[dim]))
    return UnbackedPlan(
        dims=tuple(dims), duck_shape=duck_reason is None, duck_reason=duck_reason,
        skipped=tuple(sorted(skipped.items(), key=lambda item: _dim_order(catalog)(item[0]))),
    )


def _dim_order(catalog: dict[str, Any]) -> Callable[[str], tuple[int, str]]:
    arguments = {name: i for i, name in enumerate(catalog.get("arguments", []))}

    def key(dim: str) -> tuple[int, str]:
        return (arguments.get(dim.split(".")[0].split("[")[0], len(arguments)), dim)

    return key


def residual_samples(
    model: Any, corpus: Any, plan: UnbackedPlan, options: ReplayOptions, catalog: dict[str, Any]
) -> UnbackedPlan:
    """Replay the corpus with the unbacked configuration; samples that still compile form the
    plan's residual warmup (strides, dtypes, list lengths... that no mark removes).

    Marks can change how the model compiles: a size Dynamo no longer knows can break the graph
    where the model branches on it (the plan then says which breaks it adds and how many frames
    result), or fail to compile at all under ``fullgraph=True``. A sample that ran in the
    analysis but raises once marked makes the plan infeasible: it is not written, and the reason
    keeps torch's whole message."""
    marked = replace(
        options,
        duck_shape=plan.duck_shape,
        mark_unbacked=tuple((d.argument, d.axis) for d in plan.dims),
        mark_samples="all",
    )
    errors: list[tuple[int, str]] = []
    failed_before = {f["sample"] for f in catalog.get("failed_samples", [])}

    def collect(meta: Any) -> None:
        if meta.error is not None and meta.index not in failed_before:
            errors.append((meta.index, meta.error))

    result = replay(model, corpus, marked, on_sample=collect, guard_only=True)
    compiled = sorted({e.sample for e in result.events if e.sample is not None})
    known = {(b.get("location"), b.get("reason")) for b in catalog.get("graph_breaks", [])}
    added = sorted({f"{b.location or '?'}: {b.reason}" for b in result.graph_breaks if (b.location, b.reason) not in known})
    plan = replace(plan, residual=tuple(compiled), graphs=sum(1 for e in result.events if e.fail_type is None),
                   frames=len({e.frame_id for e in result.events}) or 1, added_breaks=tuple(added),
                   failed=tuple(errors))
    if errors:
        sample, error = errors[0]
        replayed = result.samples
        plan = replace(plan, status="infeasible", reason=(
            f"{len(errors)} of {replayed} replayed samples raise once these dims are marked unbacked "
            f"(first, sample {sample}): {error}"))
    return plan


# --- torch.export Dims -------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportDim:
    name: str
    min: int
    max: int
    members: tuple[tuple[str, int], ...]  # (argument, axis) sharing this Dim
    note: str


@dataclass(frozen=True)
class ExportPlan:
    dims: tuple[ExportDim, ...]
    arguments: tuple[str, ...]
    example_sample: int
    margin: float
    warnings: tuple[str, ...] = ()


def choose_export_dims(catalog: dict[str, Any], margin: float = 0.0) -> ExportPlan:
    """One ``Dim`` per class of dynamic dims equal in every sample; static dims stay static."""
    order = _dim_order(catalog)
    stats = {d["dim"]: d for d in catalog["dimensions"]}
    seen: set[str] = set()
    dims: list[ExportDim] = []
    warnings: list[str] = []
    for name in sorted(stats, key=order):
        item = stats[name]
        if not item["dynamic"] or name in seen:
            continue
        group = sorted({name, *item["equal_to"]}, key=order)
        seen.update(group)
        members = []
        for dim in group:
            argument, _, rest = dim.partition(".size()[")
            if not argument.isidentifier() or not rest.rstrip("]").isdigit():
                warnings.append(f"{dim}: nested argument, left out of DYNAMIC_SHAPES")
                continue
            members.append((check_identifier(argument), int(rest.rstrip("]"))))
        if not members:
            continue
        low = min(stats[d]["min"] for d in group)
        high = max(stats[d]["max"] for d in group)
        high = max(int(math.ceil(high * (1.0 + margin))), low + 1)
        note = f"corpus range {low}..{stats[name]['max']}"
        if len(members) > 1:
            note += "; equal in every sample: " + ", ".join(f"{a} dim {x}" for a, x in members)
        if low <= 1:
            size = "0" if any(stats[d]["ever_zero"] for d in group) else "1"
            note += f"; the corpus has inputs where it is {size} (guardscope verify checks export takes them)"
        dims.append(
            ExportDim(name=check_identifier(f"{members[0][0]}_{members[0][1]}", "Dim name"),
                      min=low, max=high, members=tuple(members), note=note)
        )
    largest = max(catalog["topologies"], key=lambda t: (t["count"], -t["id"])) if catalog["topologies"] else None
    arguments = tuple(check_identifier(a) for a in catalog.get("arguments", []) if a not in ("args", "kwargs"))
    return ExportPlan(
        dims=tuple(dims),
        arguments=arguments,
        example_sample=largest["first_sample"] if largest else 0,
        margin=margin,
        warnings=tuple(warnings),
    )
