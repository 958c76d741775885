"""Pure: a corpus's tagged requests (``requests.json``) against its analysis."""

from __future__ import annotations

from typing import Any

from ..corpus.storage.requests import RequestRuns
from ..model import Catalog


def request_summary(runs: RequestRuns, catalog: Catalog) -> dict[str, Any]:
    """The tagged requests of a corpus against the analysis: how many requests, how many of them
    compiled, the request and step of each compile (in compile order), and the chance that the
    next request brings a topology none brought before (Good-Turing over requests)."""
    compiles = []
    for classified in catalog.compiles:
        event = classified.event
        tagged = runs.of(event.sample) if event.sample is not None else None
        if tagged is not None:
            compiles.append({"compile_id": event.compile_id, "sample": event.sample,
                             "request": tagged[0], "step": tagged[1]})
    # Good-Turing by requests, not calls: a request's calls are one run of steps, not independent
    # draws, so the share of calls whose topology was seen once underestimates what the next
    # request brings. Here: topologies seen in exactly one request, over the requests.
    seen_in: dict[int, set] = {}
    for topology in catalog.topologies:
        if topology.compile_id is None:
            continue
        tags = {tagged[0] for tagged in map(runs.of, topology.samples) if tagged is not None}
        if tags:
            seen_in[topology.id] = tags
    requests = runs.requests()
    singletons = sorted(t for t, tags in seen_in.items() if len(tags) == 1)
    return {"requests": requests, "calls": sum(run[3] for run in runs.runs),
            "compiling": len({c["request"] for c in compiles}), "compiles": compiles,
            "singleton_topologies": singletons,
            "unseen_topology_probability": round(len(singletons) / requests, 6) if requests else None}
