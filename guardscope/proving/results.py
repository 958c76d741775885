"""What every verification child reports (pure): one result's fields, and the statuses that are
no failure."""

from __future__ import annotations

from typing import Any

from ..catalog.classify import classify_reasons

# A fix that cannot work on this model (emit-warmup said why) is "infeasible": not a failure of
# the fixes that can.
OK_STATUSES = ("passed", "skipped", "infeasible")
# An export that ran every topology it was planned for but leaves others outside its Dims
# serves only part of the corpus: not a failure, and not a pass either.
PARTIAL = "partial"


def result(name: str, status: str, reason: str | None = None, **fields: Any) -> dict[str, Any]:
    result = {
        "name": name,
        "status": status,
        "reason": reason,
        "setup_graphs": None,
        "setup_frames": None,
        "setup_seconds": None,
        "replay_recompiles": None,
        "recompile_samples": [],
        "failures": [],
        "samples_replayed": None,
        "probed_replayed": 0,
        "topologies": [],
        "bundle": None,
    }
    result.update(fields)
    return result


def recompile_failures(recompiles: list[Any]) -> list[dict[str, Any]]:
    """A result's ``failures``: each compile during the replay, with its sample, graph, frame and
    guard failures (classified)."""
    return [{"sample": e.sample, "compile_id": e.compile_id, "frame": e.frame_id,
             "reasons": [f"{f.kind.value}: {f.raw}" for f in classify_reasons(e.reasons)]} for e in recompiles]
