"""Many replicas' traffic logs as one corpus, in fleet order (``guardscope merge``, and
``guardscope analyze`` given several corpora).

Each replica records its own traffic log (format 5: one row per signature per flush, with the
row's first-seen timestamp and the replica's name). The fleet's calls are their union, ordered by

1. the row's first-seen time, where a replica's clock is made monotone first (a row's time is
   the latest first-seen of its replica up to and including it, so a clock stepped back by NTP
   never reorders a replica's own calls);
2. then the replica's name (rows of several replicas stamped in the same nanosecond);
3. then the replica's own order (its folder's place among those given, then the row's).

Replicas' clocks are not one clock: skew between machines moves one replica's calls against
another's by the skew, which moves *which* call of a topology comes first (the sample a
compile is reported at), never which topologies exist or how many calls each has.

The merged corpus is an ordinary format 5 corpus: its rows keep their replica names, the calls
kept in full keep their tensors (in new data shards), a signature's full recording keeps
pointing at it, and request tags become ``"replica/tag"`` (two replicas' request 7 are two
requests). A compact merge (:mod:`.compact`) keeps a row per signature instead, and takes
compact merges as replicas too. The replicas come found, opened and checked to be one fleet
(:mod:`.replicas`) before anything is written.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import CorpusError, ShardError
from ..reader import Corpus
from ..spec import respec
from ..storage.compile_log import merge_compile_logs
from ..storage.format import ShardInfo
from ..storage.shards import read_checked, read_shard
from ..traffic_log.parquet import read_log
from ..writer import CorpusWriter
from .compact import digest_codes
from .order import Layout, ReadRows, fleet_layout
from .replicas import Replica

SHARD_ROWS = 65536  # rows per merged log shard (a recorder's flush writes fewer)


@dataclass
class Merged:
    """What :func:`merge_fleet` wrote: calls per replica name, rows, shards, and the shards it
    skipped (with ``skip_bad_shards``), each as the one-line reason."""

    samples: int = 0
    rows: int = 0
    shards: int = 0
    replicas: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    compact: bool = False
    requests_dropped: int = 0  # request-tagged calls a compact merge kept without their tags

    def summary(self) -> str:
        names = len(self.replicas)
        text = (f"{self.samples:,} calls of {names} replica{'s' * (names != 1)} in {self.rows:,} rows"
                f"{' (one per signature, compact)' if self.compact else ''}, "
                f"{self.shards} shard{'s' * (self.shards != 1)}")
        if self.skipped:
            text += f"; {len(self.skipped)} unreadable shard{'s' * (len(self.skipped) != 1)} skipped"
        return text


def merge_fleet(replicas: Sequence[Replica], destination: str | os.PathLike[str], *, overwrite: bool = False,
                skip_bad_shards: bool = False, shard_rows: int = SHARD_ROWS, compact: bool = False,
                progress: Callable[[str], None] | None = None) -> Merged:
    """Write the replicas' calls as one traffic log corpus at ``destination``, in fleet order
    (the module's docstring). With ``skip_bad_shards`` an unreadable shard is left out (its
    calls lost, counted in :attr:`Merged.skipped`) and the rest merged; without, its
    ``ShardError``. ``progress(line)`` is told of each replica read. ``compact``: one row per
    distinct signature with its calls per replica, and one call of it kept in full
    (:mod:`.compact`); request tags are not kept.

    Two passes, so memory holds a few numbers per row and a shard per replica, never the fleet's
    rows: the first reads and checks every shard, keeping only what places a row (its time,
    replica, count, and its full recording's and data's positions); the second writes the merged
    shards in fleet order, reading each source shard again when a merged shard first needs its
    rows and dropping it after its last."""
    target = pathlib.Path(destination)
    for replica in replicas:
        if target.exists() and target.resolve() == replica.corpus.path.resolve():
            raise CorpusError(f"{target} is the replica {replica.label}; write the merged corpus to another folder")
    merged = Merged(compact=compact)
    read = _read_rows(replicas, merged, skip_bad_shards=skip_bad_shards, compact=compact, progress=progress)
    if not read.sources:
        raise CorpusError("no readable traffic log in the replicas given")
    _release_arrow_memory()  # the shards' tables are gone: their pages back before the sort
    layout = fleet_layout(read, [replica.corpus.requests for replica in replicas], compact)
    merged.samples, merged.requests_dropped = layout.samples, layout.requests_dropped
    _write_merged(replicas, target, read, layout, merged, overwrite=overwrite, shard_rows=shard_rows)
    merged.rows = len(layout.shard_of)
    merge_compile_logs([replica.corpus.path for replica in replicas], destination)  # each process's compiles
    _release_arrow_memory()  # for an analysis that follows in this process
    merged.replicas = layout.calls
    return merged


# --- the first pass: every shard read and checked, what places its rows kept -----------------------


def _read_rows(replicas: Sequence[Replica], merged: Merged, *, skip_bad_shards: bool, compact: bool,
               progress: Callable[[str], None] | None) -> ReadRows:
    """Every replica's shards read and checked, in order (a shard left out with
    ``skip_bad_shards``, its reason in ``merged.skipped``)."""
    read = ReadRows()
    for number, replica in enumerate(replicas):
        corpus = replica.corpus
        for shard in corpus.manifest.shards:
            found = _readable_shard(corpus, shard, merged, skip_bad_shards)
            if found is not None:
                _keep_rows(read, number, replica, shard, *found, compact=compact)
        if progress is not None:
            progress(f"read        {replica.label}: {corpus.manifest.samples:,} calls")
    return read


def _readable_shard(corpus: Corpus, shard: ShardInfo, merged: Merged,
                    skip_bad_shards: bool) -> tuple[Any, dict[str, str], bool, Any] | None:
    """A shard's rows, templates, whether it holds codec objects and its rows' replica lists
    (:func:`_replica_lists`); None for a shard left out with ``skip_bad_shards``."""
    try:
        table, templates, structured = _read_shard(corpus, shard)
    except ShardError as exc:
        if not skip_bad_shards:
            raise
        merged.skipped.append(str(exc))
        return None
    # A compact merge's rows that count several replicas' calls (a ShardError when a list is off).
    try:
        listed = _replica_lists(table, corpus.path / shard.file)
    except ShardError as exc:
        if not skip_bad_shards:
            raise
        merged.skipped.append(str(exc))
        return None
    return table, templates, structured, listed


def _keep_rows(read: ReadRows, number: int, replica: Replica, shard: ShardInfo, table: Any,
               templates: dict[str, str], structured: bool, listed: Any, *, compact: bool) -> None:
    """What places the rows of replica ``number``'s ``shard`` added to ``read``, once they are
    checked to have a place in the fleet's order under replica names of this folder alone."""
    import numpy as np

    corpus = replica.corpus
    if "replicas" in table.column_names and not compact:
        raise CorpusError(f"replica {replica.label} is a compact merge (its rows count several replicas' "
                          "calls, their order lost): merge it compactly (guardscope merge, without "
                          "--keep-order), then analyse the merged corpus")
    if table.column("first_seen").null_count:
        raise CorpusError(f"replica {replica.label}: {corpus.path / shard.file} has rows without a timestamp "
                          "(a converted corpus): they have no place in the fleet's order")
    encoded = table.column("replica").combine_chunks().dictionary_encode()
    spelled = encoded.dictionary.to_pylist()
    for name in spelled + (sorted(set(listed[1])) if listed is not None else []):
        if read.owner.setdefault(name, replica.label) != replica.label:
            raise CorpusError(f"replicas {read.owner[name]} and {replica.label} both name their calls {name!r}: "
                              "two processes must record under two names")
    read.templates.update(templates)
    read.structured = read.structured or structured
    read.sources.append((number, shard))
    columns = read.columns
    columns["first"].append(table.column("first").to_numpy())
    columns["count"].append(table.column("count").to_numpy())
    columns["seen"].append(table.column("first_seen").cast("int64").to_numpy())
    columns["name"].append(np.array(spelled, dtype=object)[encoded.indices.to_numpy()])
    columns["full"].append(table.column("full").fill_null(-1).to_numpy())
    columns["data"].append(table.column("data").fill_null(-1).to_numpy())
    if listed is not None:  # (row, replica name, calls), the row counted from all rows read so far
        offset = sum(len(part) for part in columns["first"]) - table.num_rows
        read.lists.append((listed[0] + offset, listed[1], listed[2]))
    if compact:
        try:
            columns["digest"].append(digest_codes(table.column("digest")))
        except ValueError as exc:
            raise ShardError(f"traffic log {corpus.path / shard.file}: {exc}; re-record the corpus") from None
        columns["last"].append(table.column("last_seen").cast("int64").to_numpy())


# --- the second pass: the merged shards written in fleet order --------------------------------------


def _write_merged(replicas: Sequence[Replica], target: pathlib.Path, read: ReadRows, layout: Layout,
                  merged: Merged, *, overwrite: bool, shard_rows: int) -> None:
    """The merged corpus written at ``target``, ``shard_rows`` rows a shard, each source shard read
    again when a merged shard first needs its rows and dropped after its last."""
    import numpy as np

    writer = _merged_writer(replicas, target, overwrite)
    devices = set()
    for replica in replicas:
        devices.update(part for part in replica.corpus.manifest.device.split(",") if part)
    shard_of, counts, new_first = layout.shard_of, layout.counts, layout.new_first
    last_chunk = np.zeros(len(read.sources), dtype=np.int64)  # the last merged shard needing each source shard
    for number, start in enumerate(range(0, len(shard_of), shard_rows)):
        last_chunk[np.unique(shard_of[start:start + shard_rows])] = number
    held_shards: dict[int, tuple[Any, list]] = {}  # source shard -> (its rows, its data shard's calls)
    with writer:
        for number, start in enumerate(range(0, len(shard_of), shard_rows)):
            stop = min(start + shard_rows, len(shard_of))
            wanted_shards = np.unique(shard_of[start:stop])
            chunk, calls = _chunk(replicas, read.sources, layout, held_shards, wanted_shards, start, stop)
            used = {name for name in chunk.column("template").unique().to_pylist() if name is not None}
            end = int(new_first[stop - 1] + counts[stop - 1])
            tags = [entry for entry in layout.requests if int(new_first[start]) <= entry[0] < end]
            writer.append_log(chunk, {name: read.templates[name] for name in used}, calls,
                              structured=read.structured, devices=devices, requests=tags)
            merged.shards += 1
            for index in wanted_shards[last_chunk[wanted_shards] == number]:
                del held_shards[index]  # its last row is written


def _merged_writer(replicas: Sequence[Replica], target: pathlib.Path, overwrite: bool) -> CorpusWriter:
    """The writer of the merged traffic log: the first replica's model (re-expressed for
    ``target``), compile options and settings, and torch version."""
    manifest = replicas[0].corpus.manifest
    writer = CorpusWriter(
        target, respec(manifest.model, replicas[0].corpus.path, target), dict(manifest.compile), keep="signatures",
        log="parquet", overwrite=overwrite, method=manifest.method, recorded_from=manifest.recorded_model,
        dynamo_config=manifest.dynamo_config or {}, grad_mode=manifest.grad_mode)
    writer.torch_version = manifest.torch_version  # the replicas' (checked to be one), not this process's
    return writer


def _chunk(replicas: Sequence[Replica], sources: list[tuple[int, ShardInfo]], layout: Layout,
           held_shards: dict[int, tuple[Any, list]], wanted_shards: Any, start: int, stop: int) -> tuple[Any, list]:
    """The merged rows ``start:stop`` as one table (their source shards read into ``held_shards``
    where not yet held), and their calls kept in full, in order."""
    import numpy as np
    import pyarrow as pa

    shard_of, row_in_shard, data = layout.shard_of, layout.row_in_shard, layout.data
    pieces, placed = [], []
    for index in wanted_shards:
        if index not in held_shards:
            replica_number, shard = sources[index]
            held_shards[index] = _reread_shard(replicas[replica_number].corpus, shard)
        at = np.flatnonzero(shard_of[start:stop] == index)
        pieces.append(held_shards[index][0].take(row_in_shard[start:stop][at]))
        placed.append(at)
    chunk = _concat(pieces).take(np.argsort(np.concatenate(placed), kind="stable"))
    held = np.flatnonzero(data[start:stop] >= 0)  # the chunk's calls kept in full, in order
    calls = [held_shards[int(shard_of[start + at])][1][int(data[start + at])] for at in held]
    positions = np.full(stop - start, -1, dtype=np.int64)
    positions[held] = np.arange(len(held))
    chunk = _with(chunk, first=layout.new_first[start:stop], full=layout.full_new[start:stop], data=positions)
    plan = layout.plan
    if plan is not None:  # a compact row's calls, times and replicas are its signature's
        chunk = _with(chunk, count=layout.counts[start:stop])
        for name, values in (("first_seen", plan.first_seen), ("last_seen", plan.last_seen)):
            chunk = chunk.set_column(chunk.schema.get_field_index(name), name,
                                     pa.array(values[start:stop], type=pa.int64()).cast(chunk.schema.field(name).type))
        chunk = chunk.append_column("replicas", plan.replicas.slice(start, stop - start))
    return chunk, calls


def _replica_lists(table: Any, path: Any) -> tuple[Any, list[str], Any] | None:
    """A compact merge's shard: for each row whose ``replicas`` list is set, each entry as
    ``(row, replica name, calls)`` (three parallel sequences); None for a shard of a replica's own
    log (no such column) or one whose every row is its ``replica``'s. ``ShardError`` when a row's
    list does not count its calls."""
    import numpy as np
    import pyarrow.compute as pc

    if "replicas" not in table.column_names or table.column("replicas").null_count == table.num_rows:
        return None
    lists = table.column("replicas").combine_chunks()
    lengths = pc.list_value_length(lists).fill_null(0).to_numpy()
    entries = lists.flatten()
    counts = entries.field("count").to_numpy()
    rows = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    summed = np.bincount(rows, weights=counts, minlength=len(lengths))
    own = table.column("count").to_numpy()
    if entries.field("name").null_count or (counts < 1).any() or (
            (lengths > 0) & (summed != own)).any():
        raise ShardError(f"traffic log {path}: a row's 'replicas' list does not count its calls; merge the "
                         "replicas again")
    return rows, entries.field("name").to_pylist(), counts


def _release_arrow_memory() -> None:
    """Give back the pages pyarrow's allocator keeps for reuse after its tables are freed
    (mimalloc or jemalloc hold a few hundred MB after a merge's reads otherwise)."""
    import pyarrow as pa

    pool = pa.default_memory_pool()
    if hasattr(pool, "release_unused"):
        pool.release_unused()


def _concat(tables: list[Any]) -> Any:
    import pyarrow as pa

    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def _with(table: Any, **values: Any) -> Any:
    """``table`` with these int64 columns replaced (a negative value: null)."""
    import pyarrow as pa

    for name, array in values.items():
        table = table.set_column(table.schema.get_field_index(name), name, pa.array(array, mask=array < 0))
    return table


def _read_shard(corpus: Corpus, shard: ShardInfo) -> tuple[Any, dict[str, str], bool]:
    """A log shard's rows (checked as loading checks them: its numbers, and its data shard holding
    every call a row names), its templates as JSON text, and whether its calls kept in full hold
    codec objects."""
    path = corpus.path / shard.file
    if not shard.file.endswith(".parquet"):
        raise ShardError(f"{path} is not a traffic log shard")
    log = read_log(path, read_checked(path, shard.sha256))
    counts = log.table.column("count").to_numpy()
    if int(counts.sum()) != shard.samples or (counts < 1).any():
        raise ShardError(f"traffic log {path} holds {int(counts.sum())} samples but the manifest lists "
                         f"{shard.samples}; the corpus is inconsistent: re-record it")
    log.arrays()  # the numbers range-checked, as loading does
    calls, structured = _data_of(corpus, shard)
    data = log.table.column("data").fill_null(-1).to_numpy()
    if (data >= len(calls)).any():
        raise ShardError(f"traffic log {path} names a call its data shard does not hold; re-record the corpus")
    texts = {name: json.dumps(value, separators=(",", ":")) for name, value in log.templates.items()}
    return log.table.replace_schema_metadata(None), texts, structured


def _reread_shard(corpus: Corpus, shard: ShardInfo) -> tuple[Any, list[dict[str, Any]]]:
    """A shard :func:`_read_shard` checked, read again for its rows and its calls kept in full."""
    path = corpus.path / shard.file
    table = read_log(path, read_checked(path, shard.sha256)).table.replace_schema_metadata(None)
    if "replicas" in table.column_names:  # a compact input's: the merge writes its own
        table = table.drop_columns(["replicas"])
    return table, _data_of(corpus, shard)[0]


def _data_of(corpus: Corpus, shard: ShardInfo) -> tuple[list[dict[str, Any]], bool]:
    if shard.data is None:
        return [], False
    from ..storage.format import STRUCTURED_FORMAT_VERSION

    content = read_shard(corpus.path / shard.data[0], shard.data[1], STRUCTURED_FORMAT_VERSION, "cpu")
    return content["samples"], content.get("structured", False)


__all__ = ["Merged", "merge_fleet"]
