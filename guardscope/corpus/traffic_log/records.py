"""A traffic log shard read as records (format 5, :mod:`guardscope.corpus.traffic_log.parquet`): its rows in
order, those kept in full from its data shard, every row checked as a shard's are.

:func:`log_records` gives each row as a :class:`~guardscope.corpus.signatures.records.SignatureRecord` (or a
:class:`~guardscope.model.Sample` for a row kept in full); with ``columns``, runs of rows of one
flat, tensors-only call template come as :class:`~guardscope.corpus.traffic_log.columns.RecordColumns`
instead, checked a column at a time (a log that fails a check is read again row by row, which
names the first bad row).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np

from ...errors import ShardError
from ...model import Sample
from ...text import message_line
from ..signatures.call_template import CallTemplate
from ..signatures.records import SignatureRecord
from ..storage.format import STRUCTURED_FORMAT_VERSION, ShardInfo
from .columns import RecordColumns, column_runs
from ..storage.shards import read_checked, read_shard
from ..signatures.signature import signature_from_json, signature_to_json
from ..values.structured import rebuild
from .parquet import Log, read_log, signature_with

_ROW_COLUMNS = ("first", "count", "template", "full", "data", "signature")


def log_records(corpus: Any, path: pathlib.Path, shard: ShardInfo, columns: bool = False) -> list[Any]:
    """Shard ``shard`` of ``corpus`` (its log at ``path``) as records, in order."""
    log = read_log(path, read_checked(path, shard.sha256))
    if not log.call_indices:
        corpus.row_indices = True  # an old log's gathered repeats: its indices are its rows' order
    arrays = log.arrays()
    reading = _Rows(corpus, path, shard, log, arrays)
    if not columns:
        reading.check_held()
        return reading.rows(0, log.table.num_rows, shard.first)
    runs = reading.column_runs(arrays)
    if runs is None:  # a row fails a check: read row by row, which names it
        reading.check_held()
        return reading.rows(0, log.table.num_rows, shard.first)
    records: list[Any] = []
    first = reading.first
    in_columns = 0
    for start, stop, call, numbers in runs:
        if call is None:
            records.extend(reading.rows(start, stop, int(first[start])))
        else:
            # A call kept in full is checked with the rows of its template (its guards read its
            # layout only), naming itself as its full sample: a row that must run runs on its data.
            in_columns += int(reading.kept_rows[start:stop].sum())  # type: ignore[index]
            records.append(RecordColumns(call, first[start:stop], reading.count[start:stop],
                                         reading.full[start:stop], numbers, corpus._placement))  # type: ignore[arg-type]
    if in_columns:
        corpus.full_in_columns[shard.file] = in_columns  # once a shard, however often it is read
    return records


class _Rows:
    """One traffic log being read: its columns, as Python lists (row by row) or numpy arrays."""

    def __init__(self, corpus: Any, path: pathlib.Path, shard: ShardInfo, log: Log, arrays: tuple) -> None:
        self.corpus, self.path, self.shard, self.log, self.arrays = corpus, path, shard, log, arrays
        self._kept: tuple[list, bool] | None = None  # the data shard, read when a row needs it
        self.kept_rows: np.ndarray | None = None  # column_runs: the rows kept in full
        self.calls: dict[str, tuple[CallTemplate | None, tuple]] = {}
        self._lists: dict[str, list] | None = None
        self._numbers: tuple | None = None
        self.first: np.ndarray | None = None
        self.count: np.ndarray | None = None
        self.full: np.ndarray | None = None

    @property
    def kept(self) -> list:
        """The calls the log's data shard holds (read on first use)."""
        return self._data()[0]

    @property
    def structured(self) -> bool:
        return self._data()[1]

    def _data(self) -> tuple[list, bool]:
        if self._kept is None:
            self._kept = ([], False)
            if self.shard.data is not None:
                content = read_shard(self.corpus.path / self.shard.data[0], self.shard.data[1],
                                     STRUCTURED_FORMAT_VERSION, self.corpus._map_location)
                self._kept = (content["samples"], content.get("structured", False))
        return self._kept

    def check_held(self) -> None:
        held = sum(self.log.column("count"))
        if held != self.shard.samples:
            raise ShardError(f"traffic log {self.path} holds {held} samples but the manifest lists "
                             f"{self.shard.samples}; the corpus is inconsistent: re-record it")

    def column_runs(self, arrays: tuple) -> list | None:
        """The log's runs (:func:`~guardscope.corpus.traffic_log.columns.column_runs`), every row's
        ``first``, ``count`` and ``full`` checked a column at a time; None when one fails."""
        import pyarrow.compute as pc

        table = self.log.table
        first = table.column("first").to_numpy()
        count = table.column("count").to_numpy()
        full_column = table.column("full")
        full = pc.fill_null(full_column, -1).to_numpy()
        has_full = ~pc.is_null(full_column).to_numpy(zero_copy_only=False)
        expected = self.shard.first + np.concatenate([[0], np.cumsum(count)[:-1]]) if len(count) else count
        kept = ~pc.is_null(table.column("data")).to_numpy(zero_copy_only=False)
        if (int(count.sum()) != self.shard.samples or (count < 1).any() or not np.array_equal(first, expected)
                or (has_full & ((full < 0) | (full >= first))).any() or (kept & (count != 1)).any()):
            return None
        # A call kept in full names itself as its full sample (a signature's later calls name it).
        self.first, self.count, self.full = first, count, np.where(kept, first, np.where(has_full, full, -1))
        self.kept_rows = kept
        templates = table.column("template").combine_chunks().dictionary_encode()
        numbers = pc.fill_null(templates.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        names = templates.dictionary.to_pylist()
        int_starts = arrays[6]
        eligible = (numbers >= 0) & (int_starts[1:] == int_starts[:-1])

        def call_of(number: int) -> CallTemplate | None:
            row = int(np.flatnonzero(numbers == number)[0])
            try:
                call = self._call(self._where(row, int(first[row])), names[number])[0]
            except ShardError:  # named in order when its rows are read one by one
                return None
            return call if call is not None and call.flat and not call.has_ints else None

        return column_runs(arrays, numbers, eligible, call_of)

    def _where(self, row: int, index: int) -> str:
        return f"traffic log {self.path}, row {self.log.file_row(row)} (sample {index})"

    def rows(self, start: int, stop: int, index: int) -> list[Any]:
        """Rows ``start`` to ``stop - 1`` (the first one's first sample ``index``) one by one."""
        if self._lists is None:
            self._lists = {name: self.log.column(name) for name in _ROW_COLUMNS}
            self._numbers = tuple(array.tolist() for array in self.arrays)
        columns, corpus, kept = self._lists, self.corpus, None
        tensors, size_starts, sizes, stride_starts, strides, offsets, int_starts, ints = self._numbers  # type: ignore[misc]
        records: list[Any] = []
        for row in range(start, stop):
            first, count, template, full, data, text = (columns[name][row] for name in _ROW_COLUMNS)
            where = self._where(row, index)
            if first != index or count < 1:
                raise ShardError(f"{where}: 'first' {first} and 'count' {count} do not continue the rows before it; "
                                 "re-record the corpus")
            if full is not None and not 0 <= full < index:
                raise ShardError(f"{where} names sample {full} as its full recording, which does not come "
                                 "before it; re-record the corpus")
            if data is not None:
                kept = self.kept if kept is None else kept
                if not 0 <= data < len(kept) or count != 1:
                    raise ShardError(f"{where} names data {data} of the {len(kept)} calls its data shard holds; "
                                     "re-record the corpus")
                args, kwargs = kept[data]["args"], kept[data]["kwargs"]
                if self.structured:
                    try:
                        args, kwargs = rebuild(args), rebuild(kwargs)
                    except (ValueError, RecursionError) as exc:
                        raise ShardError(f"{where}: {message_line(exc)}") from None
                records.append(Sample(index, args, kwargs))
            elif template is not None:
                known = self.calls.get(template)
                call = known[0] if known is not None else None
                key = None
                if call is not None and call.flat and not call.has_ints:  # the quick way: tensors only
                    key = _flat_key(call, tensors[row], tensors[row + 1], size_starts, sizes, stride_starts,
                                    strides, offsets)
                if key is not None and int_starts[row] == int_starts[row + 1]:
                    records.append(_record(corpus, index, count, full, call, key))
                else:
                    numbers = _row_numbers(row, tensors, size_starts, sizes, stride_starts, strides, offsets,
                                           int_starts, ints)
                    records.append(self._template_record(where, template, index, count, numbers, full))
            elif text is not None:
                try:
                    array = json.loads(text)
                except ValueError:
                    raise ShardError(f"{where}: its signature is not JSON; re-record the corpus") from None
                records.append(corpus._parsed(self.path, index, array, count, full))
            else:
                raise ShardError(f"{where} has neither a template nor a signature; re-record the corpus")
            index += count
        return records

    def _call(self, where: str, template: str) -> tuple[CallTemplate | None, tuple]:
        """A template's call (None: no call template rebuilds it) and one signature of it."""
        known = self.calls.get(template)
        if known is None:
            array = self.log.templates.get(template)
            if array is None:
                raise ShardError(f"{where} names the call template {template}, which the log's metadata does not "
                                 "hold; re-record the corpus")
            try:
                call, _, sig = self.corpus._match(array)
            except (ValueError, RuntimeError, RecursionError) as exc:
                raise ShardError(f"{where}: its call template cannot be rebuilt ({message_line(exc)}); "
                                 "re-record the corpus") from None
            known = self.calls[template] = (call, sig if sig is not None else signature_from_json(array))
        return known

    def _template_record(self, where: str, template: str, index: int, count: int, numbers: tuple,
                         full: int | None) -> Any:
        """A traffic log row of a call template as a signature record (its key from its columns)."""
        call, sig = self._call(where, template)
        try:
            if call is not None:
                return _record(self.corpus, index, count, full, call, call.column_key(*numbers))
            filled = signature_with(sig, *numbers)
        except ValueError as exc:
            raise ShardError(f"{where}: {message_line(exc)}; re-record the corpus") from None
        return SignatureRecord(index, count, signature_to_json(filled), full, None, None, filled,
                               self.corpus._placement)


def _record(corpus: Any, index: int, count: int, full: int | None, call: CallTemplate, key: tuple) -> Any:
    return SignatureRecord(index, count, None, full, call, key, None, corpus._placement)


def _flat_key(call: CallTemplate, start: int, stop: int, size_starts: list, sizes: list, stride_starts: list,
              strides: list, offsets: list) -> tuple | None:
    """The key of a flat, tensors-only call template's log row from the flat columns (the numbers
    were range-checked a column at a time); None when the row's tensors do not fit the template."""
    slots, parts = call.slots, call.tensor_parts
    if stop - start != len(parts):
        return None
    key: list[Any] = [None] * len(slots)  # a constant's part of a key is None
    for position, tensor in zip(parts, range(start, stop)):
        ndim = slots[position][1]
        a, b = size_starts[tensor], size_starts[tensor + 1]
        c, d = stride_starts[tensor], stride_starts[tensor + 1]
        if b - a != ndim or d - c != ndim:
            return None
        key[position] = (*sizes[a:b], *strides[c:d], offsets[tensor])
    return tuple(key)


def _row_numbers(row: int, tensors: list, size_starts: list, sizes: list, stride_starts: list, strides: list,
                 offsets: list, int_starts: list, ints: list) -> tuple[list, list, list, list]:
    """One log row's (sizes, strides, offsets, ints), per tensor, from the flat columns."""
    span = range(tensors[row], tensors[row + 1])
    return ([sizes[size_starts[t]:size_starts[t + 1]] for t in span],
            [strides[stride_starts[t]:stride_starts[t + 1]] for t in span],
            [offsets[t] for t in span], ints[int_starts[row]:int_starts[row + 1]])
