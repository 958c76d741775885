"""Pure: what production lives through under its recompile limits — ``catalog.json``'s ``production``.

The analysis replays with Dynamo's recompile limit raised, to see every graph the traffic needs.
Production runs with its own limits (torch's defaults, 8 graphs per function and 256 in all, unless
the corpus recorded others): Dynamo compiles a frame's first ``limit`` graphs, then refuses the
next compile. A call that none of those graphs accepts then fails with ``FailOnRecompileLimitHit``
under ``fullgraph=True`` (or ``fail_on_recompile_limit_hit``), and otherwise runs that frame
eagerly, for the life of the process (Dynamo sets the frame to run only the graphs it has).

The replay knows, for every sample and every frame, the earliest-compiled graph that accepts it
(its topology's graphs). Production has the first ``limit`` graphs of each frame, compiled at the
same samples in the same order, so a sample is served there exactly when its earliest accepting
graph is one of them. That is exact for the first frame. A later frame (a resume function after
a graph break, a callee that broke) is not reached by a call that ran the first frame eagerly, so
a later-frame graph the replay compiled for such a call does not exist in production, and the
later frame's graphs after it may differ: ``exact`` is then false.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..corpus.storage.requests import RequestRuns
from ..model import Catalog

TORCH_DEFAULT = "torch default"
RECORDED = "recorded"
# The backend production compiles with, when the corpus does not say: torch.compile's default.
DEFAULT_BACKEND = "inductor"
ASSUMED = "torch.compile's default"


@dataclass(frozen=True)
class ProductionLimits:
    """Dynamo's recompile limits in production, and whether reaching one fails the call."""

    recompile_limit: int
    accumulated_recompile_limit: int
    fail_on_limit: bool  # torch._dynamo.config.fail_on_recompile_limit_hit
    source: str  # TORCH_DEFAULT or RECORDED
    backend: str = DEFAULT_BACKEND  # the backend production compiles with
    backend_source: str = ASSUMED  # RECORDED or ASSUMED
    # Recorded off production's torch.compile, for the record: inductor's options= beyond its
    # mode's, torch 2.13's isolate_recompiles (the manifest's compile).
    inductor_options: dict[str, Any] | None = None
    isolate_recompiles: bool = False

    @property
    def per_frame(self) -> int:
        """The graphs one frame can hold: both limits count one model's cache entries per frame."""
        return min(self.recompile_limit, self.accumulated_recompile_limit)


def production_limits(dynamo_config: dict[str, Any] | None, compile_options: dict[str, Any],
                      defaults: dict[str, Any]) -> ProductionLimits:
    """The limits a corpus recorded (its manifest's ``dynamo_config``, and torch 2.13's per-call
    ``recompile_limit`` in its ``compile``, which replaces the global one for that function),
    else torch's ``defaults`` (:func:`guardscope.torch_compat.dynamo_defaults`)."""
    recorded = dict(dynamo_config or {})
    if compile_options.get("recompile_limit") is not None:
        recorded["recompile_limit"] = compile_options["recompile_limit"]
    value = {**defaults, **recorded}
    source = RECORDED if {"recompile_limit", "accumulated_recompile_limit"} & set(recorded) else TORCH_DEFAULT
    backend = compile_options.get("backend")
    return ProductionLimits(int(value["recompile_limit"]), int(value["accumulated_recompile_limit"]),
                            bool(value.get("fail_on_recompile_limit_hit", False)), source,
                            backend=str(backend) if backend else DEFAULT_BACKEND,
                            backend_source=RECORDED if backend else ASSUMED,
                            inductor_options=dict(compile_options.get("inductor_options") or {}) or None,
                            isolate_recompiles=bool(compile_options.get("isolate_recompiles")))


def production_section(catalog: Catalog, limits: ProductionLimits, runs: RequestRuns | None = None,
                       carries_state: bool = False) -> dict[str, Any]:
    """``catalog.json``'s ``production``: the limits, every sample production would fail or run
    without a compiled graph because a limit was reached, and per frame the graphs it needs, its
    limit, where it is reached (the sample, and its request and step for tagged traffic), and the
    calls and share of traffic that lose their graph there.

    ``carries_state``: the calls carry model state (a KV cache, :mod:`guardscope.corpus.chains`).
    Then ``eager_state_samples`` lists the tagged steps after one production runs eagerly in their
    request: the cache they get was extended by eager code, laid out as eager lays it out, where
    the compiled forward would have laid it out its own way (the warmup rebuilds caches through
    the compiled forward, so it does not take those layouts from the recording)."""
    ranked = _ranked_graphs(catalog)
    limit = limits.per_frame
    refused = {e.compile_id for events in ranked.values() for e in events[limit:]}  # never compiled there
    fails = bool(catalog.compile.get("fullgraph")) or limits.fail_on_limit
    first_frame = min(ranked, default=0)
    lost, cut_first = _lost_samples(catalog, ranked, refused, first_frame)

    cut = set(cut_first)
    failed = sorted(cut) if fails else []
    eager = sorted({s for frame, samples in lost.items() for s in samples if not (fails and s in cut)})
    # A later-frame graph compiled for a call whose first frame production runs eagerly does not
    # exist there; the later frame's graphs after it may then differ.
    exact = not any(e.sample in cut for frame, events in ranked.items() if frame != first_frame
                    for e in events[:limit])
    total = catalog.samples
    frames = _frame_rows(catalog, ranked, lost, limit, first_frame, fails, runs)
    return {
        "recompile_limit": limits.recompile_limit,
        "accumulated_recompile_limit": limits.accumulated_recompile_limit,
        "fail_on_recompile_limit_hit": limits.fail_on_limit,
        "source": limits.source,
        "on_limit": "fail" if fails else "eager",
        "failed_samples": failed,
        "eager_samples": eager,
        "failed_share": round(len(failed) / total, 6) if total else 0.0,
        "eager_share": round(len(eager) / total, 6) if total else 0.0,
        "exact": exact,
        "eager_state_samples": _after_eager_steps(eager, runs, total) if carries_state else [],
        "frames": frames,
        "backend": limits.backend,
        "backend_source": limits.backend_source,
        **({"inductor_options": limits.inductor_options} if limits.inductor_options else {}),
        **({"isolate_recompiles": True} if limits.isolate_recompiles else {}),
    }


def _ranked_graphs(catalog: Catalog) -> dict[int, list[Any]]:
    """Per frame, its graphs' compile events in compile order."""
    ranked: dict[int, list[Any]] = {}
    for compiled in catalog.graphs:
        ranked.setdefault(compiled.event.frame_id, []).append(compiled.event)
    for events in ranked.values():
        events.sort(key=lambda e: e.frame_compile_id)
    return ranked


def _lost_samples(catalog: Catalog, ranked: dict[int, list[Any]], refused: set[Any],
                  first_frame: int) -> tuple[dict[int, list[int]], list[int]]:
    """Per frame the samples that lose their graph there, and the samples whose first frame has
    no graph (the whole call fails or runs eagerly)."""
    frame_of = {e.compile_id: frame for frame, events in ranked.items() for e in events}
    lost: dict[int, list[int]] = {}
    cut_first: list[int] = []
    for topology in catalog.topologies:
        graphs = topology.graphs or ((topology.compile_id,) if topology.compile_id else ())
        if not graphs:
            continue
        if graphs[0] in refused:
            cut_first.extend(topology.samples)
            lost.setdefault(frame_of[graphs[0]], []).extend(topology.samples)
            continue
        for graph in graphs[1:]:
            if graph in refused:
                lost.setdefault(frame_of[graph], []).extend(topology.samples)
    # Samples no graph accepted while the replay's own limit stopped compiling: past any smaller one.
    cut_first.extend(catalog.not_analysed)
    if catalog.not_analysed:
        lost.setdefault(first_frame, []).extend(catalog.not_analysed)
    return lost, cut_first


def _frame_rows(catalog: Catalog, ranked: dict[int, list[Any]], lost: dict[int, list[int]], limit: int,
                first_frame: int, fails: bool, runs: RequestRuns | None) -> list[dict[str, Any]]:
    """Per frame: the graphs it needs, its limit, where that is reached, and the calls that lose it."""
    labels = {f["frame"]: f["label"] for f in catalog.frames}
    total = catalog.samples
    frames = []
    for frame in sorted(set(ranked) | set(lost)):
        events = ranked.get(frame, [])
        needed = len(events) + (1 if frame == first_frame and catalog.not_analysed else 0)
        reached = events[limit] if len(events) > limit else None
        if reached is None and frame == first_frame and catalog.not_analysed:
            reached_at = _where(catalog.not_analysed[0], runs)
        else:
            reached_at = None if reached is None else _where(reached.sample, runs)
        samples = sorted(set(lost.get(frame, ())))
        in_frame_failed = len(samples) if fails and frame == first_frame else 0
        frames.append({
            "frame": frame,
            "label": labels.get(frame, "forward" if frame == first_frame else f"frame {frame}"),
            "graphs_needed": needed,
            "limit": limit,
            "reached_at": reached_at,
            "margin": None if reached_at is not None else limit - needed,
            "failed": in_frame_failed,
            "eager": len(samples) - in_frame_failed,
            "share": round(len(samples) / total, 6) if total else 0.0,
        })
    return frames


def _where(sample: int | None, runs: RequestRuns | None) -> dict[str, Any]:
    tagged = runs.of(sample) if runs is not None and sample is not None else None
    return {"sample": sample, **({"request": tagged[0], "step": tagged[1]} if tagged is not None else {})}


def _after_eager_steps(eager: list[int], runs: RequestRuns | None, total: int) -> list[int]:
    """The tagged calls that follow, in their request, a step production runs eagerly."""
    if runs is None or not eager:
        return []
    first_eager: dict[Any, int] = {}  # request -> its first step run eagerly
    for sample in eager:
        tagged = runs.of(sample)
        if tagged is not None:
            request, step = tagged
            first_eager[request] = min(step, first_eager.get(request, step))
    found = []
    for request, first, step, calls in runs.upto(total):
        if request in first_eager:
            found.extend(first + offset for offset in range(calls) if step + offset > first_eager[request])
    return sorted(found)
