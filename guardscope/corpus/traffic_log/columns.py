"""A traffic log's records as columns: the rows of one flat call template kept as numpy arrays.

:meth:`~guardscope.corpus.reader.Corpus.load_records` turns every row of a traffic log (format 5,
:mod:`guardscope.corpus.traffic_log.parquet`) into a :class:`~guardscope.corpus.signatures.records.SignatureRecord`, a
Python object with a tuple key per row: a few microseconds a row before anything is checked. A
guard-only replay that checks records over columns (:mod:`guardscope.replay.column_check`) needs
none of that for the rows of a *flat, tensors-only* call template (every argument a tensor or a
constant): their tensors' sizes, strides and offsets are all that varies, and they are what the
guard predicates read. :meth:`~guardscope.corpus.reader.Corpus.load_columns` gives runs of such
rows as :class:`RecordColumns` (the other rows as records, as ever); :func:`column_runs` finds them
over the log's columns without a Python object per row.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..signatures.call_template import CallTemplate
from ..signatures.records import SignatureRecord


class RecordColumns:
    """Consecutive traffic-log rows of one flat, tensors-only call template, in recorded order.

    ``first[r]`` and ``count[r]``: row ``r`` stands for samples ``first[r]`` to ``first[r] +
    count[r] - 1``; ``full[r]``: the sample of its signature kept in full (-1: none);
    ``numbers[p]``: for the template's tensor position ``p`` (its slot ``call.tensor_parts[p]``) a
    ``rows x (2 * ndim + 1)`` int64 array of each row's sizes, strides and storage offset — the
    numbers a record's key holds for that tensor (:meth:`key`). ``scanned``: where a Dask worker
    already checked the rows against the graphs known when it read them, those graphs' ids and per
    row the number of the first that accepts it (-1: none); a slice of the rows drops it."""

    __slots__ = ("call", "count", "first", "full", "numbers", "scanned", "_placement")

    def __init__(self, call: CallTemplate, first: np.ndarray, count: np.ndarray, full: np.ndarray,
                 numbers: list[np.ndarray], placement: Any,
                 scanned: tuple[tuple[str, ...], np.ndarray] | None = None) -> None:
        self.call, self.first, self.count, self.full, self.numbers = call, first, count, full, numbers
        self._placement = placement
        self.scanned = scanned

    def __len__(self) -> int:
        return len(self.first)

    def __repr__(self) -> str:
        return f"RecordColumns(rows={len(self)}, samples {self.start}..{self.end - 1})"

    @property
    def start(self) -> int:
        return int(self.first[0])

    @property
    def end(self) -> int:
        """The sample after the last one these rows stand for."""
        return int(self.first[-1] + self.count[-1])

    @property
    def samples(self) -> int:
        return int(self.count.sum())

    def key(self, row: int) -> tuple:
        """Row ``row``'s key, as :meth:`CallTemplate.column_key` makes it (None for a constant)."""
        key: list[Any] = [None] * len(self.call.slots)
        for slot, numbers in zip(self.call.tensor_parts, self.numbers):
            key[slot] = tuple(numbers[row].tolist())
        return tuple(key)

    def record(self, row: int) -> Any:
        """Row ``row`` as a :class:`~guardscope.corpus.signatures.records.SignatureRecord`."""
        full = int(self.full[row])
        return SignatureRecord(int(self.first[row]), int(self.count[row]), None, None if full < 0 else full,
                               self.call, self.key(row), None, self._placement)

    def records(self) -> list[Any]:
        return [self.record(row) for row in range(len(self))]

    def rows(self, start: int, stop: int) -> RecordColumns:
        return RecordColumns(self.call, self.first[start:stop], self.count[start:stop], self.full[start:stop],
                             [numbers[start:stop] for numbers in self.numbers], self._placement)

    def starting_at(self, index: int) -> RecordColumns | None:
        """The rows from sample ``index`` on, a row holding it cut there (a resumed replay);
        None when every row ends before it."""
        row = int(np.searchsorted(self.first + self.count, index, side="right"))
        if row >= len(self):
            return None
        if row == 0 and index <= int(self.first[0]):
            return self
        cut = self.rows(row, len(self))
        skipped = index - int(cut.first[0])
        if skipped > 0:
            cut.first, cut.count = cut.first.copy(), cut.count.copy()
            cut.first[0] += skipped
            cut.count[0] -= skipped
        return cut

    def before(self, stop: int) -> RecordColumns | None:
        """The rows' samples before sample ``stop`` (the last row cut there); None: none."""
        row = int(np.searchsorted(self.first, stop, side="left"))
        if row == 0:
            return None
        cut = self.rows(0, row) if row < len(self) else self
        over = cut.end - stop
        if over > 0:
            cut = cut.rows(0, len(cut))
            cut.count = cut.count.copy()
            cut.count[-1] -= over
        return cut

    @classmethod
    def of_records(cls, records: list[Any]) -> RecordColumns:
        """Signature records of one flat, tensors-only call template (each with its key) as
        columns."""
        call = records[0].call
        numbers = []
        for slot in call.tensor_parts:
            width = 2 * call.slots[slot][1] + 1
            numbers.append(np.array([record.key[slot] for record in records], dtype=np.int64).reshape(len(records), width))
        first = np.fromiter((record.first for record in records), dtype=np.int64, count=len(records))
        count = np.fromiter((record.repeat for record in records), dtype=np.int64, count=len(records))
        full = np.fromiter((-1 if record.full is None else record.full for record in records), dtype=np.int64,
                           count=len(records))
        return cls(call, first, count, full, numbers, records[0]._placement)


def column_runs(arrays: tuple, templates: np.ndarray, eligible: np.ndarray, call_of: Callable[[int], CallTemplate | None],
                ) -> list[tuple[int, int, CallTemplate | None, list[np.ndarray] | None]]:
    """A traffic log's rows split into runs, in order: ``(start, stop, call, numbers)`` for rows
    ``start`` to ``stop - 1``; ``call`` and ``numbers`` (:class:`RecordColumns`'s) for a run of
    one flat, tensors-only call template whose every row fits it, None for rows to be read one by
    one. ``arrays``: :meth:`~guardscope.corpus.traffic_log.parquet.Log.arrays`; ``templates``: each row's
    template number (-1: none); ``eligible``: rows that may go in columns at all (no data, no ints,
    a template); ``call_of(number)``: that template's call, when it is flat and tensors-only."""
    tensors, size_starts, sizes, stride_starts, strides, offsets = arrays[:6]
    rows = len(templates)
    if rows == 0:
        return []
    candidate = eligible.copy()
    calls: dict[int, CallTemplate | None] = {}
    for number in np.flatnonzero(np.bincount(templates[eligible])).tolist() if eligible.any() else []:
        call = calls[number] = call_of(number)
        mine = templates == number
        if call is None:
            candidate &= ~mine
            continue
        # Each row of the template: as many tensors as it has, each of its rank.
        fits = (tensors[1:] - tensors[:-1]) == len(call.tensor_parts)
        at = np.where(fits, tensors[:-1], 0)
        for position, slot in enumerate(call.tensor_parts):
            ndim = call.slots[slot][1]
            tensor = np.minimum(at + position, len(size_starts) - 2)
            fits &= (size_starts[tensor + 1] - size_starts[tensor]) == ndim
            fits &= (stride_starts[tensor + 1] - stride_starts[tensor]) == ndim
        candidate &= ~mine | fits
    # Runs: where the template changes, or whether a row goes in columns.
    group = np.where(candidate, templates, -2)
    edges = np.flatnonzero(group[1:] != group[:-1]) + 1
    starts = [0, *edges.tolist()]
    stops = [*edges.tolist(), rows]
    runs: list[tuple[int, int, CallTemplate | None, list[np.ndarray] | None]] = []
    for start, stop in zip(starts, stops):
        number = int(group[start])
        if number < 0:
            runs.append((start, stop, None, None))
            continue
        call = calls[number]
        assert call is not None
        runs.append((start, stop, call, _numbers(arrays, call, tensors[start:stop])))
    return runs


def _numbers(arrays: tuple, call: CallTemplate, base: np.ndarray) -> list[np.ndarray]:
    """:class:`RecordColumns`'s ``numbers`` of consecutive rows of ``call`` whose first tensors
    are ``base``. Every row holds the template's tensors, each of its rank, so the rows' sizes
    (and strides, and offsets) are one contiguous block of the flat column, a row's after the
    row before's: sliced and reshaped, not gathered number by number."""
    tensors, size_starts, sizes, stride_starts, strides, offsets = arrays[:6]
    ndims = [call.slots[slot][1] for slot in call.tensor_parts]
    count, width, rows = len(ndims), sum(ndims), len(base)
    first, end = int(base[0]), int(base[-1]) + count
    low, high = int(size_starts[first]), int(size_starts[end])
    stride_low, stride_high = int(stride_starts[first]), int(stride_starts[end])
    if high - low == rows * width and stride_high - stride_low == rows * width and end - first == rows * count:
        size_block = sizes[low:high].reshape(rows, width)
        stride_block = strides[stride_low:stride_high].reshape(rows, width)
        offset_block = offsets[first:end].reshape(rows, count)
        numbers, at = [], 0
        for position, ndim in enumerate(ndims):
            numbers.append(np.concatenate([size_block[:, at:at + ndim], stride_block[:, at:at + ndim],
                                           offset_block[:, position:position + 1]], axis=1))
            at += ndim
        return numbers
    numbers = []  # not one block (cannot happen for rows that fit): number by number
    for position, ndim in enumerate(ndims):
        tensor = base + position
        span = np.arange(ndim, dtype=np.int64)
        numbers.append(np.concatenate([
            sizes[size_starts[tensor][:, None] + span],
            strides[stride_starts[tensor][:, None] + span],
            offsets[tensor][:, None]], axis=1))
    return numbers
