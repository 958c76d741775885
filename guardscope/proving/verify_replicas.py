"""``verify`` on a fleet's analysis: each replica's verdict (issue 38).

A fleet's plan is set up alike on every replica, and each replica then serves its own traffic.
The fleet-wide replay (:func:`guardscope.proving.verify_compiled.verify_compiled` over the merged
corpus) already says whether any call compiles; per replica:

* when that replay compiled nothing, no graph came into being during it, so every call of every
  replica was accepted by a graph the set-up compiled, which each replica's own process compiles
  too: each replica replays its calls with 0 recompiles (``"from": "fleet"``), with no replay more;
* otherwise each replica's calls are replayed alone, in a fresh process with the plan set up (a
  graph one replica's call compiled is not there for another's), and its recompiles, with the
  fleet's sample numbers, are that replica's (``"from": "replayed"``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .. import store


def replica_calls(corpus_dir: Path, holdout: float | None) -> dict[str, int] | None:
    """Each replica's calls a verify replays (the last ``holdout`` fraction, or all), by name;
    None for a corpus that is not a fleet's."""
    import numpy as np

    from ..corpus.fleet.samples import replica_of_samples
    from ..corpus.reader import load_corpus

    corpus = load_corpus(corpus_dir)
    found = replica_of_samples(corpus)
    if found is None or len(found[0]) < 2:
        return None
    names, codes = found
    start = 0 if holdout is None else int(len(corpus) * (1.0 - holdout))
    counts = np.bincount(codes[start:], minlength=len(names))
    return {name: int(count) for name, count in zip(names, counts)}


def replica_results(out_dir: Path, corpus_dir: Path, result: dict[str, Any], holdout: float | None,
                    replay_alone: Callable[[str], dict[str, Any]]) -> dict[str, dict[str, Any]] | None:
    """Each replica's verdict on a compiled plan's fleet-wide ``result`` (the module's docstring),
    by name; ``replay_alone(name)`` verifies one replica's calls in a fresh process. None when the
    analysis is not a fleet's, or the plan was not replayed (skipped, infeasible, crashed)."""
    if "replicas" not in store.read_catalog(out_dir) or result.get("replay_recompiles") is None:
        return None
    calls = replica_calls(corpus_dir, holdout)
    if calls is None:
        return None
    if result["status"] == "passed" and not result["replay_recompiles"]:
        return {name: {"status": "passed", "samples": count, "recompiles": 0, "recompile_samples": [], "from": "fleet"}
                for name, count in calls.items()}
    found = {}
    for name in calls:
        alone = replay_alone(name)
        found[name] = {"status": alone["status"], "samples": alone.get("samples_replayed"),
                       "recompiles": alone.get("replay_recompiles"),
                       "recompile_samples": alone.get("recompile_samples") or [], "from": "replayed",
                       **({"reason": alone["reason"]} if alone.get("reason") else {})}
    return found


__all__ = ["replica_calls", "replica_results"]
