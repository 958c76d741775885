"""A fleet's catalog: each topology's calls per replica, and when it was first and last seen
(issue 38).

The samples of a merged fleet corpus (:mod:`guardscope.corpus.fleet.merge`) each come from one replica;
its rows, tallied by topology (:func:`sample_groups`, then
:func:`guardscope.corpus.fleet.samples.group_tally`), give each topology's calls per replica, so
the catalog says which replica meets which topology, and a topology one replica meets once a day
is not lost in the fleet's total."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..model import Catalog


def sample_groups(catalog: Catalog, samples: int = 0) -> Any:
    """Each of the corpus's ``samples`` samples' topology (at least the catalog's), by position in
    ``catalog.topologies`` (-1: in none, as a failed sample or one of a skipped shard), as an int32
    numpy array: what :func:`guardscope.corpus.fleet.samples.group_tally` tallies a traffic log's
    rows by."""
    import numpy as np

    group = np.full(max(samples, catalog.samples), -1, dtype=np.int32)
    for position, topology in enumerate(catalog.topologies):
        group[np.asarray(topology.samples, dtype=np.int64)] = position
    return group


def with_fleet(catalog: Catalog, names: list[str], calls: Any, first_ns: Any | None = None,
               last_ns: Any | None = None) -> Catalog:
    """``catalog`` with its calls per replica, when it has more than one replica (``calls[t, r]``:
    topology ``t``'s calls from replica ``names[r]``; a last row for samples in no topology):
    top-level, every replica's calls; per topology, the replicas whose calls it holds (by name,
    those with none left out; they sum to its count). With ``first_ns`` and ``last_ns`` (ns since
    the epoch, UTC, per topology): each topology's first and last sighting."""
    import numpy as np

    topologies = list(catalog.topologies)
    if len(calls) != len(topologies) + 1:
        raise ValueError(f"calls of {len(calls) - 1} topologies for a catalog of {len(topologies)}")
    replicas = None
    if len(names) > 1:
        totals = calls.sum(axis=0)
        if int(totals.sum()) != catalog.samples:
            raise ValueError(f"{int(totals.sum())} calls tallied for a catalog of {catalog.samples} samples")
        replicas = {name: int(total) for name, total in zip(names, totals)}
        topologies = [replace(topology, replicas={names[i]: int(calls[t, i]) for i in np.flatnonzero(calls[t])})
                      for t, topology in enumerate(topologies)]
    if first_ns is not None and last_ns is not None:
        topologies = [replace(topology, first_seen=instant_text(int(first_ns[t])),
                              last_seen=instant_text(int(last_ns[t]))) if len(topology.samples) else topology
                      for t, topology in enumerate(topologies)]
    return replace(catalog, topologies=tuple(topologies),
                   **({"replicas": replicas} if replicas is not None else {}))


def instant_text(ns: int) -> str:
    """A time (ns since the epoch) as ISO 8601 in UTC, to the microsecond:
    ``2026-12-05T13:02:28.123456Z``."""
    import numpy as np

    return str(np.datetime_as_string(np.datetime64(ns // 1_000, "us"), unit="us")) + "Z"


def single_replica_topologies(catalog: Catalog) -> list[int]:
    """The topologies only one replica met (the fleet's rare inputs), by id."""
    return [t.id for t in catalog.topologies if t.replicas is not None and len(t.replicas) == 1]


__all__ = ["instant_text", "sample_groups", "single_replica_topologies", "with_fleet"]
