"""A fleet's catalog: each topology's calls per replica (issue 38).

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


def single_replica_topologies(catalog: Catalog) -> list[int]:
    """The topologies only one replica met (the fleet's rare inputs), by id."""
    return [t.id for t in catalog.topologies if t.replicas is not None and len(t.replicas) == 1]


__all__ = ["single_replica_topologies", "with_replicas"]
