"""A fleet's merged rows made compact (``guardscope merge``'s default): one row per distinct
signature, with its calls counted per replica, and one call of it kept in full.

:func:`~guardscope.corpus.fleet.merge.merge_fleet` orders every replica's rows in fleet order; a compact
merge then keeps, for each signature (its digest),

* the first call of it kept in full, in fleet order, as its own row (its tensors in the merged
  data shards), where a replica kept one;
* one row for all its other calls, placed where the first of them is in fleet order: ``count``
  their sum, ``first_seen``/``last_seen`` the earliest and latest of their times, ``replica``
  the replica of the first of them, ``replicas`` the calls per replica (a list of ``{name,
  count}`` by name; null when every call is ``replica``'s), ``full`` the sample of the row kept in
  full.

Each signature's first call keeps its place in fleet order, so every topology, its count, its
calls per replica and when it was first and last seen are the full merge's; what is lost is the
order of the repeats (a topology's later members are numbered together) and the request tags.

A compact merge's own rows may be merged again (each replica compacting its day where it runs,
the fleet merging the compacts): a row whose ``replicas`` list is set counts its calls by that
list, and the result is the compact merge of all their replicas at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..traffic_log.parquet import replicas_type

# Hex digit -> value, for digests read as bytes.
_HEX = bytes(range(256)).translate(bytes.maketrans(b"0123456789abcdef", bytes(range(16))))


def digest_codes(column: Any) -> Any:
    """A Parquet column of 16-hex-digit digests as int64 codes (equal digests, equal codes),
    without a Python string per row. ``ValueError`` for a digest of another form."""
    import numpy as np
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not len(array):
        return np.zeros(0, dtype=np.int64)
    if array.null_count:
        raise ValueError("a row without a digest")
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32)[array.offset:array.offset + len(array) + 1]
    if not (np.diff(offsets) == 16).all():
        raise ValueError("a digest that is not 16 hex digits")
    data = np.frombuffer(array.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    nibbles = np.frombuffer(data.tobytes().translate(_HEX), dtype=np.uint8).reshape(len(array), 16)
    if (nibbles > 15).any():
        raise ValueError("a digest that is not 16 lowercase hex digits")
    codes = np.zeros(len(array), dtype=np.uint64)
    for place in range(16):
        codes = (codes << np.uint64(4)) | nibbles[:, place].astype(np.uint64)
    return codes.view(np.int64)


@dataclass
class CompactRows:
    """The rows a compact merge writes, in order: ``rows`` their positions among the fleet-ordered
    rows (whose table row each takes), then what it writes instead of that row's own values:
    ``first`` (its first sample), ``count``, ``first_seen``/``last_seen`` (ns), ``full`` (the
    sample kept in full, -1: none) and ``replicas`` (:func:`~.traffic_log.parquet.replicas_type`, null where the row's
    calls are all its replica's)."""

    rows: Any
    kept_in_full: Any  # bool per row: a call kept in full (its tensors in a data shard)
    first: Any
    count: Any
    first_seen: Any
    last_seen: Any
    full: Any
    replicas: Any  # a pyarrow list<struct<name: string, count: int64>> array


def compact_rows(digest: Any, counts: Any, data: Any, first_seen: Any, last_seen: Any, rank: Any,
                 names: list[str], listed: tuple[Any, Any, Any] | None = None) -> CompactRows:
    """The compact form of fleet-ordered rows (the module's docstring): per row its signature's
    digest code, calls, position in its data shard (-1: signature only), first/last-seen times
    (ns) and replica (``names[rank[row]]``). ``listed``: rows of compact inputs whose calls are
    several replicas', as ``(row, replica rank, calls)`` entries; such a row's calls count by
    its entries, not its replica."""
    import numpy as np
    import pyarrow as pa

    size = len(digest)
    _, group = np.unique(digest, return_inverse=True)
    group = group.reshape(-1)
    groups = int(group.max()) + 1 if size else 0
    full_rows = np.flatnonzero(data >= 0)
    # The first row kept in full of each signature that has one (np.unique: its first position).
    kept_groups, first_at = np.unique(group[full_rows], return_index=True)
    kept_full = full_rows[first_at]
    others = np.ones(size, dtype=bool)
    others[kept_full] = False
    members = np.flatnonzero(others)
    member_group = group[members]
    # One row per signature for its other calls, at the first of them.
    has_rows, lead_at = np.unique(member_group, return_index=True)
    lead = members[lead_at]
    total = np.zeros(groups, dtype=np.int64)
    np.add.at(total, member_group, counts[members])
    earliest = np.full(groups, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(earliest, member_group, first_seen[members])
    latest = np.full(groups, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(latest, member_group, last_seen[members])
    # Calls per (signature, replica): a member's calls on its replica, a listed row's by its list.
    pair_key, pair_count = member_group * len(names) + rank[members], counts[members]
    if listed is not None and len(listed[0]):
        is_listed = np.zeros(size, dtype=bool)
        is_listed[listed[0]] = True
        plain = ~is_listed[members]
        entry = others[listed[0]]  # entries of rows that are members (a kept full row has no list)
        pair_key = np.concatenate((pair_key[plain], group[listed[0][entry]] * len(names) + listed[1][entry]))
        pair_count = np.concatenate((pair_count[plain], listed[2][entry]))
    pair, pair_calls = np.unique(pair_key, return_inverse=True)
    per_pair = np.zeros(len(pair), dtype=np.int64)
    np.add.at(per_pair, pair_calls.reshape(-1), pair_count)
    split = np.searchsorted(pair // len(names), np.arange(groups + 1))

    rows = np.concatenate((kept_full, lead))
    is_full = np.concatenate((np.ones(len(kept_full), dtype=bool), np.zeros(len(lead), dtype=bool)))
    row_group = np.concatenate((kept_groups, has_rows))
    order = np.argsort(rows, kind="stable")
    rows, is_full, row_group = rows[order], is_full[order], row_group[order]
    count = np.where(is_full, counts[rows], total[row_group])
    first = np.concatenate(([0], np.cumsum(count)[:-1])).astype(np.int64)
    full_of_group = np.full(groups, -1, dtype=np.int64)
    full_of_group[row_group[is_full]] = first[is_full]
    # The calls per replica of each row as an Arrow list of {name, count}: null for a row kept
    # in full, and for one whose calls are all its own replica's.
    span = (split[row_group + 1] - split[row_group]).astype(np.int64)
    own = (span == 1) & (pair[np.minimum(split[row_group], max(len(pair) - 1, 0))] % len(names) == rank[rows]) \
        if len(pair) else np.ones(len(rows), dtype=bool)
    null = is_full | own
    lengths = np.where(null, 0, span)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    taken = np.repeat(split[row_group] - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
    values = pa.StructArray.from_arrays(
        [pa.array(np.array(names, dtype=object)[pair[taken] % len(names)], type=pa.string()),
         pa.array(per_pair[taken], type=pa.int64())], names=["name", "count"])
    replicas = pa.ListArray.from_arrays(pa.array(offsets, mask=np.append(null, False)), values, type=replicas_type())
    return CompactRows(
        rows=rows, kept_in_full=is_full, first=first, count=count,
        first_seen=np.where(is_full, first_seen[rows], earliest[row_group]),
        last_seen=np.where(is_full, last_seen[rows], latest[row_group]),
        full=np.where(is_full, -1, full_of_group[row_group]), replicas=replicas)


__all__ = ["CompactRows", "compact_rows", "digest_codes"]
