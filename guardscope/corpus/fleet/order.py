"""A fleet's rows placed in fleet order, between :func:`~guardscope.corpus.fleet.merge.merge_fleet`'s two
passes: what the first pass kept of every replica's rows, concatenated, ordered (the order
:mod:`.merge` defines), and laid out as the merged corpus holds them, one row per row read or
(compact) one per signature (:mod:`.compact`). Memory holds a few numbers per row: each
column is reordered in turn and dropped once no step needs it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .compact import compact_rows
from ..storage.format import ShardInfo
from ..storage.requests import RequestRuns


@dataclass
class ReadRows:
    """What the first pass keeps: the shards read, in order, as (replica number, shard); each
    one's columns that place its rows (one array per shard); the call templates and whether any
    call kept in full holds codec objects; which folder's rows carry each replica name; and the
    rows of compact inputs that count several replicas' calls, as (row, replica names, calls)
    with the row counted from all rows read."""

    sources: list[tuple[int, ShardInfo]] = field(default_factory=list)
    columns: dict[str, list] = field(default_factory=lambda: {
        name: [] for name in ("first", "count", "seen", "name", "full", "data", "last", "digest")})
    templates: dict[str, str] = field(default_factory=dict)
    structured: bool = False
    owner: dict[str, str] = field(default_factory=dict)
    lists: list[tuple[Any, list[str], Any]] = field(default_factory=list)


@dataclass
class _Rows:
    """All rows read, one array per column (in the order read, then in fleet ``order``): each
    row's source shard and row there, its folder's number (``source``), its first call's index
    there, calls, first-seen time, full recording, position among its data shard's calls, and
    (compact) digest code and last-seen time; its replica's rank in ``names``; and the compact
    inputs' rows that count several replicas' calls, as (row, replica rank, calls). A column no
    step needs any longer is None, so that memory holds one copy of each."""

    shard_of: Any
    row_in_shard: Any
    source: Any
    old_first: Any
    counts: Any
    seen: Any
    full_old: Any
    data: Any
    digest: Any
    last: Any
    name_rank: Any
    names: list[str]
    listed: Any
    order: Any = None


@dataclass
class Layout:
    """The merged corpus's rows in fleet order, as the second pass writes them: each row's source
    shard and row there, its position among its data shard's calls (-1: none), its first call's
    new index, its full recording's new index, and its calls; a compact merge's plan (None
    otherwise); the request tags; the calls per replica name, and in all; and the request-tagged
    calls a compact merge keeps without their tags."""

    shard_of: Any
    row_in_shard: Any
    data: Any
    new_first: Any
    full_new: Any
    counts: Any
    plan: Any
    requests: list[tuple[int, str, int]]
    calls: dict[str, int] = field(default_factory=dict)
    samples: int = 0
    requests_dropped: int = 0


def fleet_layout(read: ReadRows, runs: Sequence[RequestRuns | None], compact: bool) -> Layout:
    """The rows read, in fleet order, laid out as the merged corpus holds them; ``runs``: each
    replica's request tags (None: it has none)."""
    rows = _concatenated(read, compact)
    _order(rows, compact)
    samples, calls_per_name, listed = _reordered(rows)
    if compact:
        layout = _compact_layout(rows, listed, runs)
    else:
        layout = _ordered_layout(rows, runs)
    layout.samples = samples
    layout.calls = {name: int(total) for name, total in zip(rows.names, calls_per_name)}
    return layout


def _concatenated(read: ReadRows, compact: bool) -> _Rows:
    """The columns read, each concatenated and its per-shard parts dropped before the next
    (memory: one copy)."""
    import numpy as np

    columns = read.columns
    rows_of = np.array([len(part) for part in columns["first"]], dtype=np.int64)
    shard_of = np.repeat(np.arange(len(read.sources), dtype=np.int64), rows_of)
    row_in_shard = np.arange(len(shard_of), dtype=np.int64) - np.repeat(np.cumsum(rows_of) - rows_of, rows_of)
    source = np.array([number for number, _ in read.sources], dtype=np.int64)[shard_of]
    old_first, counts, seen, full_old, data = (np.concatenate(columns.pop(name))
                                               for name in ("first", "count", "seen", "full", "data"))
    digest, last = ((np.concatenate(columns.pop("digest")), np.concatenate(columns.pop("last"))) if compact
                    else (None, None))
    names = np.concatenate(columns.pop("name"))
    sorted_names = sorted(set(read.owner))
    name_rank = np.searchsorted(np.array(sorted_names, dtype=object), names)
    del names
    # Rows of compact inputs that count several replicas' calls: (row, replica rank, calls).
    listed = None
    if read.lists:
        lists = read.lists
        listed = (np.concatenate([rows for rows, _, _ in lists]),
                  np.searchsorted(np.array(sorted_names, dtype=object),
                                  np.array([name for _, spelled_of, _ in lists for name in spelled_of],
                                           dtype=object)),
                  np.concatenate([calls for _, _, calls in lists]))
    read.lists = []
    return _Rows(shard_of, row_in_shard, source, old_first, counts, seen, full_old, data, digest, last, name_rank,
                 sorted_names, listed)


def _order(rows: _Rows, compact: bool) -> None:
    """``rows.order``: the fleet order (:mod:`.merge`'s docstring)."""
    import numpy as np

    # Each replica's clock made monotone, so its own order stays.
    seen, source = rows.seen, rows.source
    clock = np.empty_like(seen)
    bounds = np.flatnonzero(np.diff(source)) + 1  # a replica's rows are one run of the concatenation
    for begin, end in zip(np.concatenate(([0], bounds)), np.concatenate((bounds, [len(source)]))):
        clock[begin:end] = np.maximum.accumulate(seen[begin:end])
    # lexsort is stable, and a replica name belongs to one folder: ties keep the concatenation's
    # order (the folders' order, then each one's rows).
    rows.order = np.lexsort((rows.name_rank, clock))
    del clock
    if not compact:
        rows.seen = None


def _reordered(rows: _Rows) -> tuple[int, Any, Any]:
    """The columns both merges take in fleet order, reordered; the calls in all and per replica
    rank, and the compact inputs' listed rows at their new places."""
    import numpy as np

    order = rows.order
    # One array at a time, each old one freed before the next is taken (memory: one extra array).
    rows.counts = rows.counts[order]
    rows.shard_of = rows.shard_of[order]
    rows.row_in_shard = rows.row_in_shard[order]
    rows.data = rows.data[order]
    rows.name_rank = rows.name_rank[order]
    counts, name_rank, size = rows.counts, rows.name_rank, len(rows.names)
    calls_per_name = np.bincount(name_rank, weights=counts, minlength=size)
    samples = int(counts.sum())
    listed = None
    if rows.listed is not None:  # a compact input's listed rows: their calls by their list, not their replica
        position = np.empty(len(order), dtype=np.int64)
        position[order] = np.arange(len(order))
        listed = (position[rows.listed[0]], rows.listed[1], rows.listed[2])
        del position
        rows.listed = None
        changed = np.unique(listed[0])  # each such row's calls once off its replica, then its list's on theirs
        calls_per_name -= np.bincount(name_rank[changed], weights=counts[changed], minlength=size)
        calls_per_name += np.bincount(listed[1], weights=listed[2], minlength=size)
        del changed
    return samples, calls_per_name, listed


def _put_in_order(rows: _Rows, fields: tuple[str, ...]) -> None:
    """Each of ``fields`` of ``rows`` taken in fleet order (``rows.order``), which is then let go:
    one extra array at a time."""
    order, rows.order = rows.order, None
    for field in fields:
        setattr(rows, field, getattr(rows, field)[order])


def _compact_layout(rows: _Rows, listed: Any, runs: Sequence[RequestRuns | None]) -> Layout:
    """A compact merge's rows (:func:`~.compact.compact_rows`); the request tags it drops
    counted, not kept."""
    import numpy as np

    rows.old_first = rows.full_old = rows.source = None
    _put_in_order(rows, ("digest", "last", "seen"))
    plan = compact_rows(rows.digest, rows.counts, rows.data, rows.seen, rows.last, rows.name_rank, rows.names,
                        listed)
    rows.digest = rows.last = rows.seen = rows.name_rank = None
    pick = plan.rows
    dropped = sum(run[3] for tags in runs if tags is not None for run in tags.runs)
    # A row for a signature's other calls keeps no tensors, though it takes a full row's columns.
    rows.shard_of = rows.shard_of[pick]
    rows.row_in_shard = rows.row_in_shard[pick]
    rows.data = np.where(plan.kept_in_full, rows.data[pick], -1)
    return Layout(shard_of=rows.shard_of, row_in_shard=rows.row_in_shard, data=rows.data, new_first=plan.first,
                  full_new=plan.full, counts=plan.count, plan=plan, requests=[], requests_dropped=dropped)


def _ordered_layout(rows: _Rows, runs: Sequence[RequestRuns | None]) -> Layout:
    """An order-keeping merge's rows: each its own, its calls renumbered in fleet order, its full
    recording's index moved with them, the request tags kept."""
    import numpy as np

    _put_in_order(rows, ("source", "old_first", "full_old"))
    counts = rows.counts
    new_first = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    full_new = _full_moved(rows.source, rows.old_first, rows.full_old, rows.data, new_first)
    requests = _requests(runs, rows.source, rows.old_first, counts, new_first,
                         [rows.names[r] for r in rows.name_rank] if any(tags is not None for tags in runs) else [])
    rows.source = rows.old_first = rows.full_old = rows.name_rank = None
    return Layout(shard_of=rows.shard_of, row_in_shard=rows.row_in_shard, data=rows.data, new_first=new_first,
                  full_new=full_new, counts=counts, plan=None, requests=requests)


def _full_moved(source: Any, old_first: Any, full_old: Any, data: Any, new_first: Any) -> Any:
    """Each fleet-ordered row's full recording (the same replica's sample it names, ``full_old``)
    at its new index; -1 for none, or when that sample's shard was skipped. Such a sample is a
    row kept in full (``data``): only those are looked up."""
    import numpy as np

    full_new = np.full(len(full_old), -1, dtype=np.int64)
    naming = np.flatnonzero(full_old >= 0)
    held = np.flatnonzero(data >= 0)
    if not len(naming) or not len(held):
        return full_new
    key = source[held] * (1 << 40) + old_first[held]
    by_key = np.argsort(key, kind="stable")
    key, held = key[by_key], held[by_key]
    wanted = source[naming] * (1 << 40) + full_old[naming]
    found = np.clip(np.searchsorted(key, wanted), 0, len(key) - 1)
    hit = key[found] == wanted
    full_new[naming[hit]] = new_first[held[found[hit]]]
    return full_new


def _requests(runs: Sequence[RequestRuns | None], source: Any, old_first: Any, counts: Any, new_first: Any,
              names: Any) -> list[tuple[int, str, int]]:
    """The merged corpus's request tags: each replica's ``tag`` (its ``runs``) as ``"replica/tag"``, in order."""
    if not any(run is not None for run in runs):
        return []
    tags: list[tuple[int, str, int]] = []
    for at in range(len(source)):
        run = runs[int(source[at])]
        if run is None:
            continue
        for offset in range(int(counts[at])):
            tag = run.of(int(old_first[at]) + offset)
            if tag is not None:
                tags.append((int(new_first[at]) + offset, f"{names[at]}/{tag[0]}", tag[1]))
    return tags


__all__ = ["Layout", "ReadRows", "fleet_layout"]
