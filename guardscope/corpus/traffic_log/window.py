"""One flush of a traffic log being recorded (format 5, :mod:`guardscope.corpus.traffic_log.parquet`): the
rows of the calls added since the last flush, repeats of a signature counted on one row.

A busy replica repeats a few call layouts: with ``aggregate`` (the traffic recorder's way) every
signature-only call of a signature already in the window adds to that signature's row (its count
and ``last_seen``), so a flush holds one row per distinct signature, placed where the first of its
calls came; a call kept in full, and a call tagged with a request, is a row of its own. Every call
keeps its place: a row's ``first`` is its first call's index, and a row whose calls are not
consecutive lists them all in ``positions`` (the reader puts each call back where it came), so a
sample index is the call's index in the traffic, as in a log written call by call. Without
``aggregate`` (``guardscope convert``) only consecutive calls of one signature share a row.
"""

from __future__ import annotations

from typing import Any

from .parquet import Layout


class LogWindow:
    """The pending rows of a traffic log: :meth:`signature` and :meth:`full` add calls,
    :meth:`assign` gives them sample indices once the window is written."""

    def __init__(self, replica: str | None, aggregate: bool) -> None:
        self.replica = replica
        self.aggregate = aggregate
        self.rows: list[dict[str, Any]] = []
        self.data: list[dict[str, Any]] = []  # the calls kept in full, in data-shard order
        self.samples = 0  # calls in the window
        self.data_bytes = 0  # tensor storage bytes of the calls kept in full
        self._open: dict[str, dict[str, Any]] = {}  # digest -> its aggregated row in this window

    def __bool__(self) -> bool:
        return bool(self.rows)

    def signature(self, layout: Layout, full: Any, when: int | None, request: tuple | None = None,
                  count: int = 1) -> None:
        """``count`` signature-only calls of ``layout``; ``full`` the index (or pending row) of
        its sample kept in full, or None."""
        at = self.samples  # the calls' place in the window
        self.samples += count
        if request is None:
            row = self._open.get(layout.digest) if self.aggregate else None
            if row is None and not self.aggregate and self.rows:
                last = self.rows[-1]
                if last["layout"].digest == layout.digest and last["data"] is None and last["request"] is None:
                    row = last
            if row is not None:
                row["count"] += count
                if row["end"] != at:  # not right after its last call: the row's calls are listed
                    if row["positions"] is None:
                        row["positions"] = list(range(row["start"], row["end"]))
                    row["positions"].extend(range(at, at + count))
                elif row["positions"] is not None:
                    row["positions"].extend(range(at, at + count))
                row["end"] = at + count
                if when is not None:
                    row["last_seen"] = when
                return
        row = self._row(layout, full, when, request, count, at)
        if request is None and self.aggregate:
            self._open[layout.digest] = row

    def full(self, layout: Layout, args: tuple, kwargs: dict, when: int | None,
             request: tuple | None = None, size: int = 0) -> dict[str, Any]:
        """A call kept in full (``size``: its tensor storage bytes); returns its row (its index
        once :meth:`assign` ran)."""
        self.data_bytes += size
        row = self._row(layout, None, when, request, 1, self.samples)
        self.samples += 1
        row["data"] = len(self.data)
        self.data.append({"args": args, "kwargs": kwargs})
        return row

    def _row(self, layout: Layout, full: Any, when: int | None, request: tuple | None,
             count: int, at: int) -> dict[str, Any]:
        # "start"/"end": the window's calls from its first to after its last; "positions": every
        # call's place in the window, once they are not consecutive (None: start .. end - 1).
        row = {"layout": layout, "count": count, "first_seen": when, "last_seen": when, "replica": self.replica,
               "full": full, "data": None, "request": request, "first": None, "start": at, "end": at + count,
               "positions": None}
        self.rows.append(row)
        return row

    def assign(self, first: int) -> list[dict[str, Any]]:
        """Give every row its first call's index (the window's first call is ``first``), its
        ``positions`` the indices of its calls when they are not consecutive, and every
        reference to a row kept in full its index; returns the rows."""
        for row in self.rows:
            row["first"] = first + row["start"]
            if row["positions"] is not None:
                row["positions"] = [first + at for at in row["positions"]]
        for row in self.rows:
            full = row["full"]
            if type(full) is dict:
                row["full"] = full["first"]
        return self.rows
