"""The warmup plan ``emit-warmup`` writes as ``warmup.py``: which samples warm up, in which order.

Coverage between the topologies' representatives is measured (the question that needs Dynamo —
"which representatives does the graph compiled for sample r also serve?" — is asked through
:mod:`guardscope.replay`, the only module that calls ``torch.compile``); choosing the fewest
representatives that cover every topology is pure (:func:`choose_cover`: coverage sets in, an
order out). A chained corpus's decode steps are preceded by their request's earlier steps
(:mod:`guardscope.corpus.chains`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import networkx as nx

from ..corpus.chains import CarriedState, Chains, chained_order
from ..model import Sample
from ..replay.session import ReplayOptions, coverage_after_warmup


@dataclass(frozen=True)
class WarmupStep:
    topology: int
    sample: int
    compile_id: str | None
    covers: tuple[int, ...]  # other topologies whose representatives this graph also serves
    # The request tag and step it is written with in the warmup corpus: a decode step runs on the
    # state its request's earlier steps extended (guardscope.corpus.chains).
    request: str | int | None = None
    step: int = 0
    hands_on: bool = False  # run for the model state it hands to a later step of its request


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
    chains: Chains | None = None,
    measure_cover: bool = True,
    progress: Callable[[str], None] | None = None,
) -> WarmupPlan:
    """Measure coverage between topology representatives and choose the warmup order.

    ``frames``: the frames the analysis compiled. With graph breaks (more than one), coverage is
    measured by running each representative under ``fail_on_recompile`` (later frames see values
    computed from the data), so the warmup covers every frame's graphs.

    ``chains``: the corpus's calls that carry model state (KV caches). A chosen decode step is then
    preceded by its request's earlier steps, from the prefill, so that it runs on a cache the
    compiled model extended, as in production (:mod:`guardscope.corpus.chains`); the graphs
    are measured on that order.

    Without ``measure_cover`` nothing is compiled to look for a smaller cover: the warmup is each
    served topology's representative in corpus order, the order the analysis compiled them in,
    and its graphs are the analysis's (a chained corpus is still measured on its order). ``progress``
    hears one line per topology compiled alone and one for the chosen order.
    """
    served = [t for t in topologies if t["compile_id"] is not None]
    order = [t["id"] for t in served]
    samples = {t["id"]: representative(t["first_sample"]) for t in served}
    probes = [samples[t] for t in order]
    run_probes = frames > 1

    def coverage(warmup: list[int]) -> tuple[list[bool], int]:
        return coverage_after_warmup(model, [samples[t] for t in warmup], probes, options, run_probes=run_probes)

    # The analysis itself was the one-sample-per-topology warmup in corpus order: each topology
    # got its own graph(s).
    one_per_topology = len(order) if not run_probes else len({g for t in served for g in t.get("graphs") or ()})
    covers: dict[int, set[int]] = {topology: {topology} for topology in order}
    if not measure_cover:
        chosen, graphs = list(order), one_per_topology
    else:
        for position, topology in enumerate(order, 1):
            accepted, _ = coverage([topology])
            covers[topology] = {t for t, ok in zip(order, accepted) if ok} | {topology}
            if progress is not None:
                progress(f"warmup: T{topology} compiled alone serves {len(covers[topology])} of {len(order)} "
                         f"topologies ({position} of {len(order)})")
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
        if progress is not None:
            progress(f"warmup: {len(chosen)} samples in the chosen order compile {graphs} graphs")
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
    if chains is not None:
        steps, chained_graphs = _chained(model, steps, chains, topologies, representative, probes, options, run_probes)
        if chained_graphs is not None:
            graphs = chained_graphs
    return WarmupPlan(steps=steps, graphs=graphs, one_per_topology=one_per_topology, topologies=len(order))


def _chained(model: Any, steps: tuple[WarmupStep, ...], chains: Chains, topologies: list[dict[str, Any]],
             representative: Callable[[int], Sample], probes: list[Sample], options: ReplayOptions,
             run_probes: bool) -> tuple[tuple[WarmupStep, ...], int | None]:
    """``steps`` with each decode step preceded by its request's earlier steps, tagged; the graphs
    that order compiles (None when no step carries state: the order is unchanged)."""
    order = list(chained_order([step.sample for step in steps], chains.requests, chains.holds_state, chains.calls))
    if all(tag == f"call-{call}" for call, tag, _ in order):
        return steps, None
    planned = {step.sample: step for step in steps}
    topology_of = {sample: t["id"] for t in topologies for sample in t.get("samples") or () if t["compile_id"] is not None}
    chained = []
    for call, tag, position in order:
        step = planned.get(call)
        if step is None:  # an earlier step of a planned one's request, run for the state it hands on
            topology = topology_of.get(call)
            compile_id = topologies[topology]["compile_id"] if topology is not None else None
            step = WarmupStep(topology=topology if topology is not None else -1, sample=call, compile_id=compile_id,
                              covers=(), hands_on=True)
        chained.append(replace(step, request=tag, step=position))
    tags = {step.sample: (step.request, step.step) for step in chained}
    _, graphs = coverage_after_warmup(model, [representative(step.sample) for step in chained], probes, options,
                                      run_probes=run_probes, carry=CarriedState(tags.get))
    return tuple(chained), graphs
