"""The files of a traffic log being written (format 5, :mod:`guardscope.corpus.traffic_log.parquet`): each
flush's window of rows a small Parquet file of its own, folded into one file past a size or an age.

Log shippers (Kafka Connect's S3 sink, Fluent Bit, Vector) roll their files by size and time and lose
at most the open batch on a crash; a traffic log does the same. A flush writes its window as
``shard-NNNNN.parquet`` (and the calls it kept in full as ``shard-NNNNN.pt``), atomically and
synced, and the manifest lists it: a process killed at any moment leaves every flushed window
readable by guardscope and by DuckDB or pyarrow, and loses at most the window it had not flushed.
Once the open file's windows hold ``roll_bytes`` bytes, or its first is ``roll_seconds`` old, and at
``close()``, they are folded into one ``shard-NNNNN.parquet`` (their rows in order, one row group a
window) with one data shard, the manifest lists it in their place and they are deleted. A day of
traffic is then a few files, and the manifest does not grow with every flush. Each window is
appended to that file in memory as it is written (it is read back from no file), so a roll only
writes the folded file's bytes: however many rows it holds, the thread writing the files never
stops for a fold. A window of another call template begins a new file (a file's metadata names
its templates), and so does a window of much data in full, which stays a file of its own.

A kill during a fold can leave its windows beside the file they were folded into (written first,
listed next, the windows deleted last): the manifest lists either the windows or the folded file,
never both, and ``guardscope`` reads what it lists; a glob over ``shard-*.parquet`` may then count
the calls twice until the folder is re-recorded.
"""

from __future__ import annotations

import hashlib
import io
import pathlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..storage.format import FORMAT_VERSION, STRUCTURED_FORMAT_VERSION, ShardInfo
from ..storage.shards import encode_shard
from .parquet import COLUMNS, WRITE_OPTIONS, encode_log, encode_table, log_schema

# A traffic log's file is folded past this many bytes (its windows' Parquet and data shards) or
# this age, unless the writer is told otherwise (None: one file per flush, as before issue 53).
ROLL_BYTES = 64 * 2**20
ROLL_SECONDS = 600.0
# ...or this many rows: a file's rows are read at once, so its rows bound an analysis's memory
# (the bench's own logs are 65,536 rows a file). Not the fold's cost, which no longer grows with
# the file: 1M seed calls as 262,144-row files analyse at 924 MiB peak RSS here, as 1,048,576-row
# files at 1.8 GiB (docs/benchmarks.md 15f); fewer, larger files need a file read in parts.
ROLL_ROWS = 262_144
# The distinct rows a traffic recorder's window holds at most before it is flushed (besides its
# flush_every seconds): a flush costs a file write and the manifest's, so not every few hundred calls.
WINDOW_ROWS = 16384
# ...or this many bytes of calls kept in full (where the log is folded).
WINDOW_BYTES = 32 * 2**20
# A window holding this many bytes of calls kept in full stays a file of its own, never rewritten
# by a fold (the recorder's max_bytes bounds how many there can be); the others are folded.
KEEP_DATA_BYTES = 4 * 2**20


@dataclass
class _Window:
    info: ShardInfo
    templates: set[str] = field(default_factory=set)
    size: int = 0
    rows: int = 0
    samples: int = 0


@dataclass
class _Fold:
    """The open file's windows folded as they come: their rows appended to one Parquet file being
    written in memory (one row group a window), their calls kept in full gathered for its data
    shard. Its schema carries the templates of its first window; a window using another begins
    a new file."""
    templates: dict[str, str]
    schema: Any
    buffer: io.BytesIO
    sink: Any  # a pyarrow.parquet.ParquetWriter into buffer
    data: list[dict[str, Any]] = field(default_factory=list)
    structured: bool = False


class LogFiles:
    """Where a writer's traffic-log windows go: :meth:`write` one window, :meth:`roll` the open
    file, :attr:`shards` the files the manifest lists (folded files, then the open file's
    windows). ``write_file(path, data)`` writes atomically and synced.

    The open file's windows are folded as they are written (:class:`_Fold`, in memory): a roll
    writes the folded file, whatever its rows, in the time of writing its bytes, so the thread
    that writes the files never stops for seconds (issue 53: a fold of 262,144 rows read back from
    their windows took 4-6 s, in which a recorder's queue filled)."""

    def __init__(self, directory: pathlib.Path, write_file: Callable[[pathlib.Path, bytes], None],
                 roll_bytes: int | None = ROLL_BYTES, roll_seconds: float | None = ROLL_SECONDS) -> None:
        self.directory, self._write_file = directory, write_file
        self.roll_bytes, self.roll_seconds = roll_bytes, roll_seconds
        self.folded: list[ShardInfo] = []
        self._open: list[_Window] = []
        self._fold: _Fold | None = None
        self._opened = 0.0  # time.monotonic() of the open file's first window
        self._done: list[pathlib.Path] = []  # windows folded, deleted once the manifest lists their file
        self.number = 0  # the next file's number
        self.rolls = 0

    @property
    def shards(self) -> list[ShardInfo]:
        return [*self.folded, *(window.info for window in self._open)]

    def take_number(self) -> int:
        number, self.number = self.number, self.number + 1
        return number

    def write(self, rows: list[dict[str, Any]], templates: dict[str, str], data: list[dict[str, Any]],
              structured: bool, first: int, samples: int) -> None:
        """Write one window (its rows, the templates they use, the calls kept in full) as the open
        file's next window and fold it in; a window of much data in full stays a file of its own
        (the open file before it is folded first)."""
        log = encode_log(rows, templates)
        info, size, data_size = self._write_files(log, data, structured, first, samples)
        if self.roll_bytes is None:  # one file per flush
            self.folded.append(info)
            return
        if data_size >= KEEP_DATA_BYTES:
            self._finish()
            self.folded.append(info)
            return
        if self._fold is not None and not set(templates) <= set(self._fold.templates):
            self._finish()
        if self._fold is None:
            self._opened = time.monotonic()
            self._fold = _open_fold(templates)
        self._open.append(_Window(info, set(templates), size, len(rows), samples))
        _fold_in(self._fold, log, data, structured)

    def append(self, table: Any, templates: dict[str, str], data: list[dict[str, Any]], structured: bool,
               first: int, samples: int) -> None:
        """Write rows taken from other logs (an Arrow table, ``guardscope merge``) as a file of
        their own, with the calls they kept in full."""
        self._finish()
        self.folded.append(self._write_files(encode_table(table, templates), data, structured, first, samples)[0])

    def _write_files(self, log: bytes, data: list[dict[str, Any]], structured: bool, first: int,
                     samples: int) -> tuple[ShardInfo, int, int]:
        """The next file's Parquet bytes and data shard written: its manifest entry, its bytes and
        its data shard's."""
        number = self.take_number()
        data_info, size, data_size = None, len(log), 0
        if data:
            content = _data_shard(data, structured)
            data_info = (f"shard-{number:05d}.pt", hashlib.sha256(content).hexdigest())
            self._write_file(self.directory / data_info[0], content)
            size, data_size = size + len(content), len(content)
        name = f"shard-{number:05d}.parquet"
        self._write_file(self.directory / name, log)
        return ShardInfo(name, first, samples, hashlib.sha256(log).hexdigest(), data_info), size, data_size

    def due(self) -> bool:
        """Whether the open file is past its size, its rows or its age."""
        if self.roll_bytes is None or len(self._open) < 2:
            return False
        return (sum(window.size for window in self._open) >= self.roll_bytes
                or sum(window.rows for window in self._open) >= ROLL_ROWS
                or (self.roll_seconds is not None and time.monotonic() - self._opened >= self.roll_seconds))

    def roll(self, fold: bool = True) -> list[pathlib.Path]:
        """Write the open file's windows as one file when ``fold`` (a file of one window stays as
        it is); returns the files of the windows folded so far, for the caller to delete once the
        manifest lists the files they were folded into."""
        if fold:
            self._finish()
        done, self._done = self._done, []
        return done

    def _finish(self) -> None:
        """The open file written as the next in :attr:`folded` (its windows, when it holds one)."""
        fold, windows = self._fold, self._open
        self._fold, self._open = None, []
        if fold is None:
            return
        fold.sink.close()
        if len(windows) < 2:
            self.folded.extend(window.info for window in windows)
            return
        self.folded.append(self._write_files(fold.buffer.getvalue(), fold.data, fold.structured, windows[0].info.first,
                                             sum(window.samples for window in windows))[0])
        self.rolls += 1
        self._done += [self.directory / file for window in windows
                       for file in (window.info.file, *((window.info.data[0],) if window.info.data else ()))]


def _open_fold(templates: dict[str, str]) -> _Fold:
    import pyarrow.parquet as pq

    schema = log_schema(templates, positions=True)
    buffer = io.BytesIO()
    return _Fold(dict(templates), schema, buffer, pq.ParquetWriter(buffer, schema, **WRITE_OPTIONS))


def _fold_in(fold: _Fold, log: bytes, data: list[dict[str, Any]], structured: bool) -> None:
    """A window's rows (its Parquet bytes) appended to ``fold`` as a row group, its ``data``
    pointing into the folded data shard."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(pa.BufferReader(log))
    columns = [table.column(name) for name in COLUMNS]
    if fold.data:  # the window's data rows point into the folded data shard
        at = COLUMNS.index("data")
        columns[at] = pc.add(columns[at], pa.scalar(len(fold.data), pa.int64()))
    columns.append(table.column("positions") if "positions" in table.column_names
                   else pa.nulls(table.num_rows, fold.schema.field("positions").type))
    fold.sink.write_table(pa.Table.from_arrays(columns, schema=fold.schema))
    fold.data.extend(data)
    fold.structured = fold.structured or structured


def roll_bounds(roll_bytes: int | None, roll_seconds: float | None,
                error: type[Exception] = ValueError) -> tuple[int | None, float | None]:
    """A traffic log's fold bounds, checked (``error`` saying why; ``roll_bytes=None``: one file
    per flush)."""
    if roll_bytes is not None and (type(roll_bytes) is not int or roll_bytes < 1):
        raise error(f"roll_bytes must be a positive int or None (one file per flush), got {roll_bytes!r}")
    if roll_seconds is not None and (not isinstance(roll_seconds, (int, float)) or isinstance(roll_seconds, bool)
                                     or not roll_seconds >= 0):
        raise error(f"roll_seconds must be a number of seconds >= 0 or None, got {roll_seconds!r}")
    return roll_bytes, None if roll_seconds is None else float(roll_seconds)


def _data_shard(data: list[dict[str, Any]], structured: bool) -> bytes:
    buffer = io.BytesIO()
    torch.save(encode_shard(data, STRUCTURED_FORMAT_VERSION if structured else FORMAT_VERSION), buffer)
    return buffer.getvalue()
