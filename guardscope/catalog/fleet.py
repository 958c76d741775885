"""A fleet's catalog: each topology's calls per replica, and when it was first and last seen
(issue 38).

The samples of a merged fleet corpus (:mod:`guardscope.corpus.fleet`) each come from one replica;
given the replica of every sample, a topology's members are counted per replica, so the catalog
says which replica meets which topology, and a topology one replica meets once a day is not lost
in the fleet's total."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..model import Catalog


def with_replicas(catalog: Catalog, names: list[str], codes: Any) -> Catalog:
    """``catalog`` with its calls per replica (``names[codes[sample]]`` is sample ``sample``'s
    replica): top-level, every replica's calls; per topology, the replicas whose calls it holds
    (by name, those with none left out). The counts of a topology's replicas sum to its count."""
    import numpy as np

    if len(codes) != catalog.samples:
        raise ValueError(f"{len(codes)} replica codes for a catalog of {catalog.samples} samples")
    totals = np.bincount(codes, minlength=len(names))
    topologies = []
    for topology in catalog.topologies:
        counts = np.bincount(codes[np.asarray(topology.samples, dtype=np.int64)], minlength=len(names))
        topologies.append(replace(topology, replicas={names[i]: int(counts[i]) for i in np.flatnonzero(counts)}))
    return replace(catalog, topologies=tuple(topologies),
                   replicas={name: int(total) for name, total in zip(names, totals)})


def with_seen(catalog: Catalog, starts: Any, first_ns: Any, last_ns: Any) -> Catalog:
    """``catalog`` with each topology's first and last sighting: the earliest first-seen and the
    latest last-seen time of the traffic log rows holding its samples (row ``r`` holds samples
    ``starts[r]`` up to the next row's start; times in ns since the epoch, UTC)."""
    import numpy as np

    topologies = []
    for topology in catalog.topologies:
        members = np.asarray(topology.samples, dtype=np.int64)
        if not len(members):
            topologies.append(topology)
            continue
        rows = np.searchsorted(starts, members, side="right") - 1
        if rows.min() < 0:
            raise ValueError(f"topology {topology.id} has samples before the log's first row")
        topologies.append(replace(topology, first_seen=instant_text(int(first_ns[rows].min())),
                                  last_seen=instant_text(int(last_ns[rows].max()))))
    return replace(catalog, topologies=tuple(topologies))


def instant_text(ns: int) -> str:
    """A time (ns since the epoch) as ISO 8601 in UTC, to the microsecond:
    ``2026-12-05T13:02:28.123456Z``."""
    import numpy as np

    return str(np.datetime_as_string(np.datetime64(ns // 1_000, "us"), unit="us")) + "Z"


def single_replica_topologies(catalog: Catalog) -> list[int]:
    """The topologies only one replica met (the fleet's rare inputs), by id."""
    return [t.id for t in catalog.topologies if t.replicas is not None and len(t.replicas) == 1]


__all__ = ["instant_text", "single_replica_topologies", "with_replicas", "with_seen"]
