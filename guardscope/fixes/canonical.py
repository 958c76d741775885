"""The input canonicalisation ``emit-warmup --transform SPEC...`` writes: ``canonicalise.py`` (the
chain the user applies before the compiled model) and ``canonical_warmup/``, the warmup for the
transformed inputs.

The corpus is replayed transformed by each prefix of the chain (as ``whatif`` replays it,
guard-only where sound): the original topologies (the catalog's) whose transformed samples share
a graph are merged by that prefix, and each line of ``canonicalise()`` is commented with the
merges its transform adds. The warmup is the transformed samples the whole chain's replay
compiled on, in corpus order: run in that order they compile the same graphs, which accept every
transformed sample (``guardscope verify`` proves it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..model import Sample
from ..options import analysis_options
from ..replay.session import replay
from .transforms import Call, Function, Transform, apply_chain, check_transforms


@dataclass(frozen=True)
class CanonicalStep:
    spec: str  # the transform, as the generated module parses it
    merges: tuple[tuple[int, ...], ...]  # groups of original topologies this prefix merges first


@dataclass(frozen=True)
class CanonicalPlan:
    steps: tuple[CanonicalStep, ...]
    positional: tuple[str, ...]  # forward's positional parameter names
    warmup: tuple[int, ...]  # corpus samples whose transformed call the warmup runs, in order
    graphs: int  # graphs the whole chain's replay compiled
    topologies: int  # original topologies
    canonical_topologies: int  # groups of them once transformed
    raised: tuple[int, ...]  # samples that raised once transformed (not in the warmup)


def _portable(transform: Transform) -> str:
    """The spec the generated module parses: a user function's file made absolute, so the
    module imports it by path from wherever it runs."""
    if isinstance(transform, Function):
        target, _, name = transform.target.rpartition(":")
        if target.endswith(".py"):
            return f"fn:{Path(target).resolve()}:{name}"
    return transform.spec


def _groups(catalog: dict[str, Any], corpus: Any, model: Any, call: Call, chain: tuple[Transform, ...],
            options: Any) -> tuple[list[set[int]], list[int], int, list[int]]:
    """Replay ``corpus`` transformed by ``chain``: the original topologies grouped by the graphs
    their transformed samples run through, the samples that compiled (in order), the graphs
    compiled and the samples that raised."""
    topology_of = {index: t["id"] for t in catalog["topologies"] for index in t["samples"]}
    failed_before = {f["sample"] for f in catalog.get("failed_samples", [])}
    paths: dict[tuple, set[int]] = {}
    raised: list[int] = []

    def transformed() -> Any:
        for sample in corpus:
            args, kwargs, _ = apply_chain(call, chain, sample.args, sample.kwargs, sample.index)
            yield Sample(sample.index, args, kwargs)

    def collect(meta: Any) -> None:
        if meta.error is not None:
            if meta.index not in failed_before:
                raised.append(meta.index)
            return
        if meta.index in topology_of:
            paths.setdefault((meta.serving, *meta.graphs), set()).add(topology_of[meta.index])

    result = replay(model, transformed(), options, on_sample=collect, guard_only=True)
    compiled = sorted({e.sample for e in result.events if e.sample is not None})
    graphs = sum(1 for e in result.events if e.fail_type is None)
    # A topology whose samples now run through different graphs (it split) joins them all.
    merged: list[set[int]] = []
    for members in sorted(paths.values(), key=min):
        overlapping = [group for group in merged if group & members]
        for group in overlapping:
            merged.remove(group)
            members = members | group
        merged.append(set(members))
    return sorted(merged, key=min), compiled, graphs, sorted(raised)


def plan_canonical(catalog: dict[str, Any], corpus: Any, model: Any, transforms: tuple[Transform, ...], *,
                   progress: Callable[[str], None] | None = None) -> CanonicalPlan:
    """Plan ``canonicalise.py`` for ``transforms`` (checked on the corpus's first sample first);
    ``progress`` hears each prefix of the chain before its replay."""
    call = check_transforms(model, transforms, corpus.sample(0))
    options = analysis_options(catalog)
    before = [{t["id"]} for t in catalog["topologies"]]
    steps = []
    compiled: list[int] = []
    graphs, raised = 0, []
    for n in range(1, len(transforms) + 1):
        if progress is not None:
            progress(" + ".join(t.spec for t in transforms[:n]))
        groups, compiled, graphs, raised = _groups(catalog, corpus, model, call, transforms[:n], options)
        known = {frozenset(group) for group in before}
        merges = tuple(tuple(sorted(group)) for group in groups if len(group) > 1 and frozenset(group) not in known)
        steps.append(CanonicalStep(_portable(transforms[n - 1]), merges))
        before = groups
    return CanonicalPlan(
        steps=tuple(steps),
        positional=call.positional,
        warmup=tuple(compiled),
        graphs=graphs,
        topologies=len(catalog["topologies"]),
        canonical_topologies=len(before),
        raised=tuple(raised),
    )
