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


def replica_of_samples(corpus: Corpus) -> tuple[list[str], Any] | None:
    """For a traffic log corpus: the replica names its rows carry (sorted) and, per sample, the
    position of its replica's name in them (a numpy array); None for another format, or when
    a shard cannot be read."""
    import numpy as np

    if corpus.manifest.format_version != TRAFFIC_FORMAT_VERSION:
        return None
    spelled: dict[str, int] = {}  # name -> its code in order of first appearance
    codes, counts = [], []
    import pyarrow.parquet as pq

    for shard in corpus.manifest.shards:
        # Two columns only (three in a compact merge), unchecked: the analysis that asks has just
        # read every shard checked.
        try:
            path = corpus.path / shard.file
            wanted = ["replica", "count"] + (["replicas"] if "replicas" in pq.read_schema(path).names else [])
            table = pq.read_table(path, columns=wanted)
            encoded = table.column("replica").combine_chunks().dictionary_encode()
            count = table.column("count").to_numpy()
        except Exception:  # ArrowInvalid and friends, OSError: unreadable since
            return None
        local = np.array([spelled.setdefault(name, len(spelled)) for name in encoded.dictionary.to_pylist()],
                         dtype=np.int64)
        code = local[encoded.indices.to_numpy()] if len(local) else np.zeros(0, dtype=np.int64)
        if "replicas" in wanted and table.column("replicas").null_count < table.num_rows:
            code, count = _spread(table.column("replicas").combine_chunks(), code, count, spelled)
        codes.append(code)
        counts.append(count)
    names = sorted(spelled)
    if len(names) <= 1:  # one replica (or none): every code is 0, no gather and repeat needed
        return names, np.zeros(sum(int(count.sum()) for count in counts), dtype=np.int32)
    rank = np.array([names.index(name) for name in spelled], dtype=np.int32)
    return names, np.repeat(rank[np.concatenate(codes)], np.concatenate(counts))


def seen_of_rows(corpus: Corpus) -> tuple[Any, Any, Any] | None:
    """For a traffic log whose rows all carry timestamps: each row's first sample (ascending),
    and when the first and the last of its calls were recorded (ns since the epoch, UTC), as
    numpy arrays; None for another format, a row without a timestamp (a converted corpus), or a
    shard that cannot be read."""
    import numpy as np
    import pyarrow.parquet as pq

    if corpus.manifest.format_version != TRAFFIC_FORMAT_VERSION:
        return None
    starts, firsts, lasts = [], [], []
    for shard in corpus.manifest.shards:
        # Three columns only, unchecked: the analysis that asks has just read every shard checked.
        try:
            table = pq.read_table(corpus.path / shard.file, columns=["first", "first_seen", "last_seen"])
        except Exception:  # ArrowInvalid and friends, OSError: unreadable since
            return None
        if table.column("first_seen").null_count or table.column("last_seen").null_count:
            return None
        starts.append(table.column("first").to_numpy())
        firsts.append(table.column("first_seen").cast("int64").to_numpy())
        lasts.append(table.column("last_seen").cast("int64").to_numpy())
    if not starts:
        return None
    start, first, last = np.concatenate(starts), np.concatenate(firsts), np.concatenate(lasts)
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


__all__ = ["replica_of_samples", "seen_of_rows"]
