"""A merged fleet corpus read back for its analysis: which replica each sample came from, and
when each row's calls were recorded (the catalog's per-replica counts and first/last-seen times,
:mod:`guardscope.catalog.fleet`).

Both read only the few Parquet columns they need of a corpus the analysis has just read whole and
checked, so a shard that cannot be read now gives None (no per-replica view), never an error.
"""

from __future__ import annotations

from typing import Any

from .format import TRAFFIC_FORMAT_VERSION
from .reader import Corpus


def fleet_view(corpus: Corpus) -> tuple[tuple[list[str], Any] | None, tuple[Any, Any, Any] | None]:
    """:func:`replica_of_samples` and :func:`seen_of_rows` from one read of each shard (an
    analysis asks for both); each None as those functions say."""
    import numpy as np
    import pyarrow.parquet as pq

    if corpus.manifest.format_version != TRAFFIC_FORMAT_VERSION:
        return None, None
    replicas: _Replicas | None = _Replicas()
    seen: _Seen | None = _Seen()
    for shard in corpus.manifest.shards:
        # A few columns only, unchecked: the analysis that asks has just read every shard checked.
        try:
            path = corpus.path / shard.file
            wanted = ["first", "count", "first_seen", "last_seen", "replica"]
            table = pq.read_table(path, columns=wanted + (["replicas"] if "replicas" in pq.read_schema(path).names
                                                          else []))
            if replicas is not None:
                replicas.add(table)
            if seen is not None and not seen.add(table):
                seen = None
        except Exception:  # ArrowInvalid and friends, OSError: unreadable since
            return None, None
    return (replicas.result() if replicas is not None else None), (seen.result(np) if seen is not None else None)


def replica_of_samples(corpus: Corpus) -> tuple[list[str], Any] | None:
    """For a traffic log corpus: the replica names its rows carry (sorted) and, per sample, the
    position of its replica's name in them (a numpy array); None for another format, or when
    a shard cannot be read."""
    return fleet_view(corpus)[0]


def seen_of_rows(corpus: Corpus) -> tuple[Any, Any, Any] | None:
    """For a traffic log whose rows all carry timestamps: each row's first sample (ascending),
    and when the first and the last of its calls were recorded (ns since the epoch, UTC), as
    numpy arrays; None for another format, a row without a timestamp (a converted corpus), or a
    shard that cannot be read."""
    return fleet_view(corpus)[1]


class _Replicas:
    """Each sample's replica, a shard's rows at a time."""

    def __init__(self) -> None:
        self.spelled: dict[str, int] = {}  # name -> its code in order of first appearance
        self.codes: list[Any] = []
        self.counts: list[Any] = []

    def add(self, table: Any) -> None:
        import numpy as np

        encoded = table.column("replica").combine_chunks().dictionary_encode()
        count = table.column("count").to_numpy()
        local = np.array([self.spelled.setdefault(name, len(self.spelled))
                          for name in encoded.dictionary.to_pylist()], dtype=np.int64)
        code = local[encoded.indices.to_numpy()] if len(local) else np.zeros(0, dtype=np.int64)
        if "replicas" in table.column_names and table.column("replicas").null_count < table.num_rows:
            code, count = _spread(table.column("replicas").combine_chunks(), code, count, self.spelled)
        self.codes.append(code)
        self.counts.append(count)

    def result(self) -> tuple[list[str], Any]:
        import numpy as np

        names = sorted(self.spelled)
        if len(names) <= 1:  # one replica (or none): every code is 0, no gather and repeat needed
            return names, np.zeros(sum(int(count.sum()) for count in self.counts), dtype=np.int32)
        rank = np.array([names.index(name) for name in self.spelled], dtype=np.int32)
        return names, np.repeat(rank[np.concatenate(self.codes)], np.concatenate(self.counts))


class _Seen:
    """Each row's first sample and times, a shard's rows at a time."""

    def __init__(self) -> None:
        self.starts: list[Any] = []
        self.firsts: list[Any] = []
        self.lasts: list[Any] = []

    def add(self, table: Any) -> bool:
        """False when a row has no timestamp."""
        if table.column("first_seen").null_count or table.column("last_seen").null_count:
            return False
        self.starts.append(table.column("first").to_numpy())
        self.firsts.append(table.column("first_seen").cast("int64").to_numpy())
        self.lasts.append(table.column("last_seen").cast("int64").to_numpy())
        return True

    def result(self, np: Any) -> tuple[Any, Any, Any] | None:
        if not self.starts:
            return None
        start, first, last = np.concatenate(self.starts), np.concatenate(self.firsts), np.concatenate(self.lasts)
        if len(start) > 1 and not (start[1:] > start[:-1]).all():
            order = np.argsort(start, kind="stable")
            start, first, last = start[order], first[order], last[order]
        return start, first, last


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


__all__ = ["fleet_view", "replica_of_samples", "seen_of_rows"]
