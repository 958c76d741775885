"""A merged fleet corpus read back for its analysis: which replica each sample came from
(:func:`replica_of_samples`, for ``verify``), and an analysis's topologies' calls per replica and
first and last sightings (:func:`group_tally`, for :mod:`guardscope.catalog.fleet`).

Both read only the few Parquet columns they need of a corpus the analysis has just read whole and
checked, a shard at a time, so a shard that cannot be read now gives None (no per-replica view),
never an error.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

from ..storage.format import TRAFFIC_FORMAT_VERSION
from ..reader import Corpus


def _shard_tables(corpus: Corpus, columns: list[str], skip: Collection[str] = ()) -> Iterator[Any]:
    """Each shard's ``columns`` (and ``replicas``, where the shard has it), a shard at a time,
    but for the shards whose files ``skip`` names; unchecked: the analysis that asks has just read
    every shard checked. ``_Unreadable`` when a shard cannot be read now."""
    import pyarrow.parquet as pq

    for shard in corpus.manifest.shards:
        if shard.file in skip:
            continue
        try:
            with pq.ParquetFile(corpus.path / shard.file) as parquet:  # opened once: schema, then columns
                extra = ["replicas"] if "replicas" in parquet.schema_arrow.names else []
                table = parquet.read(columns=columns + extra)
        except Exception:  # ArrowInvalid and friends, OSError: unreadable since
            raise _Unreadable from None
        yield table


class _Unreadable(Exception):
    pass


def replica_of_samples(corpus: Corpus) -> tuple[list[str], Any] | None:
    """For a traffic log corpus: the replica names its rows carry (sorted) and, per sample, the
    position of its replica's name in them (a numpy array); None for another format, or when
    a shard cannot be read."""
    import numpy as np

    if corpus.manifest.format_version != TRAFFIC_FORMAT_VERSION:
        return None
    spelled: dict[str, int] = {}
    codes, counts = [], []
    try:
        for table in _shard_tables(corpus, ["count", "replica"]):
            code, count = _runs(table, spelled)
            codes.append(code)
            counts.append(count)
    except _Unreadable:
        return None
    names = sorted(spelled)
    if len(names) <= 1:  # one replica (or none): every code is 0, no gather and repeat needed
        return names, np.zeros(sum(int(count.sum()) for count in counts), dtype=np.int32)
    rank = np.array([names.index(name) for name in spelled], dtype=np.int32)
    return names, np.repeat(rank[np.concatenate(codes)], np.concatenate(counts))


@dataclass
class GroupTally:
    """A traffic log's calls tallied by a grouping of its samples (an analysis's topologies):
    ``calls[g, r]``, group ``g``'s calls from replica ``names[r]`` (the last row: samples in no
    group); ``first_ns[g]`` and ``last_ns[g]``, when the first and the last call of a row holding
    one of group ``g``'s samples was recorded (ns since the epoch, UTC; None when a row has no
    timestamp, as in a converted corpus; a group with no sample keeps int64's max and min)."""

    names: list[str]
    calls: Any
    first_ns: Any | None
    last_ns: Any | None


def group_tally(corpus: Corpus, group: Any, groups: int, skip: Collection[str] = ()) -> GroupTally | None:
    """:class:`GroupTally` of a traffic log whose sample ``s`` is in group ``group[s]`` (-1: in
    none), read a shard at a time (no array of every row's times or every sample's replica), but
    for the shards whose files ``skip`` names (an analysis's skipped shards). None for another
    format, a shard that cannot be read, or a log holding more samples than ``group``."""
    import numpy as np

    if corpus.manifest.format_version != TRAFFIC_FORMAT_VERSION:
        return None
    spelled: dict[str, int] = {}
    calls = np.zeros((groups + 1, 0), dtype=np.int64)
    first = np.full(groups + 1, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(groups + 1, np.iinfo(np.int64).min, dtype=np.int64)
    timed = True
    try:
        for table in _shard_tables(corpus, ["first", "count", "first_seen", "last_seen", "replica"], skip):
            starts, count = table.column("first").to_numpy(), table.column("count").to_numpy()
            if (count == 1).all():
                samples, row_of = starts, None
            else:
                row_of = np.repeat(np.arange(len(starts)), count)
                samples = starts[row_of] + (np.arange(len(row_of)) - np.repeat(np.cumsum(count) - count, count))
            if len(samples) and (samples.min() < 0 or samples.max() >= len(group)):
                return None
            mine = group[samples].astype(np.int64)
            mine[mine < 0] = groups
            code, run_count = _runs(table, spelled)
            if not (len(run_count) == len(samples) and (run_count == 1).all()):
                if int(run_count.sum()) != len(samples):  # a compact row's replicas do not sum to its count
                    return None
                code = np.repeat(code, run_count)
            if calls.shape[1] < len(spelled):
                calls = np.pad(calls, ((0, 0), (0, len(spelled) - calls.shape[1])))
            width = calls.shape[1]
            if width == 1:
                calls[:, 0] += np.bincount(mine, minlength=groups + 1)
            elif width:
                calls += np.bincount(mine * width + code, minlength=(groups + 1) * width).reshape(groups + 1, width)
            if timed and (table.column("first_seen").null_count or table.column("last_seen").null_count):
                timed = False
            if timed:
                seen_first = table.column("first_seen").cast("int64").to_numpy()
                seen_last = table.column("last_seen").cast("int64").to_numpy()
                if row_of is not None:
                    seen_first, seen_last = seen_first[row_of], seen_last[row_of]
                np.minimum.at(first, mine, seen_first)
                np.maximum.at(last, mine, seen_last)
    except _Unreadable:
        return None
    names = sorted(spelled)
    order = [spelled[name] for name in names]
    return GroupTally(names, calls[:, order], first[:-1] if timed else None, last[:-1] if timed else None)


def _runs(table: Any, spelled: dict[str, int]) -> tuple[Any, Any]:
    """A shard's rows as runs of one replica's calls, in sample order: each run's replica (its
    code in ``spelled``, name -> code in order of first appearance, which this extends) and
    calls."""
    import numpy as np

    encoded = table.column("replica").combine_chunks().dictionary_encode()
    count = table.column("count").to_numpy()
    local = np.array([spelled.setdefault(name, len(spelled))
                      for name in encoded.dictionary.to_pylist()], dtype=np.int64)
    code = local[encoded.indices.to_numpy()] if len(local) else np.zeros(0, dtype=np.int64)
    if "replicas" in table.column_names and table.column("replicas").null_count < table.num_rows:
        code, count = _spread(table.column("replicas").combine_chunks(), code, count, spelled)
    return code, count


def _spread(lists: Any, code: Any, count: Any, spelled: dict[str, int]) -> tuple[Any, Any]:
    """A compact merge's rows as runs of one replica's calls: a row whose ``replicas`` list is set
    becomes one run per replica it names (in the list's order), the others stay one run."""
    import numpy as np
    import pyarrow.compute as pc

    valid = lists.is_valid().to_numpy(zero_copy_only=False)
    lengths = pc.list_value_length(lists).fill_null(1).to_numpy()
    run_row = np.repeat(np.arange(len(code)), lengths)
    run_code, run_count = code[run_row], count[run_row]
    listed = np.flatnonzero(valid[run_row])
    entries = lists.flatten()
    names = entries.field("name").to_pylist()
    run_code[listed] = np.array([spelled.setdefault(name, len(spelled)) for name in names], dtype=np.int64)
    run_count[listed] = entries.field("count").to_numpy()
    return run_code, run_count


__all__ = ["GroupTally", "group_tally", "replica_of_samples"]
