"""The report's fleet view: for an analysis of several replicas' traffic (``catalog.json``'s
``replicas``), which replica met which topology, when it was first and last seen, and the
topologies only one replica met."""

from __future__ import annotations

from .common import percent_text

MATRIX_REPLICAS = 24  # at most this many replica columns in the matrix (the busiest ones)


def fleet_context(catalog: dict) -> dict | None:
    """The fleet section's rows, or None for one replica's analysis."""
    replicas = catalog.get("replicas")
    if not replicas:
        return None
    busiest = sorted(replicas, key=lambda name: (-replicas[name], name))[:MATRIX_REPLICAS]
    shown = sorted(busiest)
    rows = []
    for topology in catalog["topologies"]:
        seen = topology.get("replicas") or {}
        rows.append({
            "label": f"T{topology['id']}",
            "id": topology["id"],
            "count": topology["count"],
            "replicas": len(seen),
            "only": next(iter(seen)) if len(seen) == 1 else None,
            "cells": [seen.get(name, 0) for name in shown],
            "first_seen": seen_text(topology.get("first_seen")),
            "last_seen": seen_text(topology.get("last_seen")),
        })
    compiled = catalog.get("replica_compiles") or {}
    return {
        "replicas": [{"name": name, "calls": calls, "share": percent_text(calls, catalog["corpus"]["samples"]),
                      "graphs": compiled.get(name)} for name, calls in replicas.items()],
        # What the replicas' own processes compile in all, beside the union this one replay compiled.
        "compiled": sum(compiled.values()) if compiled else None,
        "union": catalog["summary"]["compiles"],
        "columns": shown,
        "hidden": len(replicas) - len(shown),
        "rows": rows,
        "single": [row["label"] for row in rows if row["only"] is not None],
        "seen": any(row["first_seen"] for row in rows),
    }


def seen_text(instant: str | None) -> str | None:
    """``2026-12-05T13:02:28.123456Z`` as ``2026-12-05 13:02:28.123``, the report's way (None stays)."""
    return instant.replace("T", " ").rstrip("Z")[:23] if instant else None


__all__ = ["fleet_context"]
