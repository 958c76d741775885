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
traffic is then a few files, and the manifest does not grow with every flush.

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
# (the bench's own logs are 65,536 rows a file).
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
    data: list[dict[str, Any]]  # the calls it kept in full, as its data shard holds them
    structured: bool
    templates: set[str] = field(default_factory=set)
    size: int = 0
    rows: int = 0
    data_size: int = 0  # its data shard's bytes


class LogFiles:
    """Where a writer's traffic-log windows go: :meth:`write` one window, :meth:`roll` the open
    file, :attr:`shards` the files the manifest lists (folded files, then the open file's
    windows). ``write_file(path, data)`` writes atomically and synced."""

    def __init__(self, directory: pathlib.Path, write_file: Callable[[pathlib.Path, bytes], None],
                 roll_bytes: int | None = ROLL_BYTES, roll_seconds: float | None = ROLL_SECONDS) -> None:
        self.directory, self._write_file = directory, write_file
        self.roll_bytes, self.roll_seconds = roll_bytes, roll_seconds
        self.folded: list[ShardInfo] = []
        self._open: list[_Window] = []
        self._opened = 0.0  # time.monotonic() of the open file's first window
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
        file's next window; then fold the open file if it is due."""
        info, size, data_size = self._write_files(encode_log(rows, templates), data, structured, first, samples)
        if not self._open:
            self._opened = time.monotonic()
        self._open.append(_Window(info, data if self.roll_bytes is not None else [], structured, set(templates), size,
                                  len(rows), data_size))

    def append(self, table: Any, templates: dict[str, str], data: list[dict[str, Any]], structured: bool,
               first: int, samples: int) -> None:
        """Write rows taken from other logs (an Arrow table, ``guardscope merge``) as a file of
        their own, with the calls they kept in full."""
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

    def roll(self, templates: dict[str, str]) -> list[pathlib.Path]:
        """Fold the open file's windows into one file (``templates``: digest -> JSON text of every
        template the writer knows); returns the windows' files, for the caller to delete once the
        manifest lists the folded file. Nothing to fold for an open file of one window or none, or
        without ``roll_bytes`` (one file per flush)."""
        windows, self._open = self._open, []
        if len(windows) < 2 or self.roll_bytes is None:
            self.folded.extend(window.info for window in windows)
            return []
        done: list[pathlib.Path] = []
        run: list[_Window] = []
        for window in [*windows, None]:  # runs of windows folded; one of much data kept as it is
            if window is not None and window.data_size < KEEP_DATA_BYTES:
                run.append(window)
                continue
            if len(run) > 1:
                done += self._fold(run, templates)
            else:
                self.folded.extend(kept.info for kept in run)
            run = []
            if window is not None:
                self.folded.append(window.info)
        return done

    def _fold(self, windows: list[_Window], templates: dict[str, str]) -> list[pathlib.Path]:
        """Windows folded into one file (the next in :attr:`folded`); returns their files."""
        data: list[dict[str, Any]] = []
        structured = any(window.structured for window in windows)
        buffer = io.BytesIO()
        used = sorted(set().union(*(window.templates for window in windows)))
        schema = log_schema({name: templates[name] for name in used}, positions=True)
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        with pq.ParquetWriter(buffer, schema, **WRITE_OPTIONS) as sink:
            for window in windows:
                table = pq.read_table(self.directory / window.info.file)
                columns = [table.column(name) for name in COLUMNS]
                if data:  # the window's data rows point into the folded data shard
                    at = COLUMNS.index("data")
                    columns[at] = pc.add(columns[at], pa.scalar(len(data), pa.int64()))
                columns.append(table.column("positions") if "positions" in table.column_names
                               else pa.nulls(table.num_rows, schema.field("positions").type))
                sink.write_table(pa.Table.from_arrays(columns, schema=schema))
                data.extend(window.data)
        first = windows[0].info.first
        self.folded.append(self._write_files(buffer.getvalue(), data, structured, first,
                                             sum(window.info.samples for window in windows))[0])
        self.rolls += 1
        return [self.directory / file for window in windows
                for file in (window.info.file, *((window.info.data[0],) if window.info.data else ()))]


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
