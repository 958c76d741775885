"""guardscope.replay.column_check.scan: what a Dask worker checks of a shard's rows — each row
given the first graph, in compile order, whose predicate accepts it — and the columns it reads.
Pure: predicates over plain numpy columns, no compile."""

from __future__ import annotations

import numpy as np

from guardscope.corpus.traffic_log.columns import RecordColumns
from guardscope.replay.column_check import ScanPlan, columns_of, scan


def _numbers(sizes: list[tuple[int, int]]) -> list[np.ndarray]:
    """One 2-d tensor per row: sizes, contiguous strides, offset 0."""
    return [np.array([[a, b, b, 1, 0] for a, b in sizes], dtype=np.int64)]


def test_columns_are_the_sizes_strides_and_offset_of_each_local():
    columns = columns_of(_numbers([(3, 4), (5, 6)]), [("x", 0, 2)])
    assert sorted(columns) == [("x", "offset"), ("x", "size", 0), ("x", "size", 1), ("x", "stride", 0),
                               ("x", "stride", 1)]
    assert columns[("x", "size", 1)].tolist() == [4, 6] and columns[("x", "stride", 0)].tolist() == [4, 6]


def test_each_row_goes_to_the_first_graph_that_accepts_it():
    seen = []

    def accepts(dim0: set[int]):
        def predicate(columns):
            seen.append(len(columns[("x", "size", 0)]))
            return np.isin(columns[("x", "size", 0)], sorted(dim0))
        return predicate

    plan = ScanPlan([("x", 0, 2)], [("0/0", accepts({3})), ("0/1", accepts({3, 5})), ("0/2", accepts({7}))])
    tried, graph = scan(_numbers([(3, 4), (5, 4), (9, 4), (3, 4), (5, 4), (7, 4)]), plan)
    assert tried == ("0/0", "0/1", "0/2")
    assert graph.tolist() == [0, 1, -1, 0, 1, 2]  # 3 stays with 0/0 though 0/1 accepts it too
    assert seen == [6, 6, 6]  # most rows unserved: each predicate reads every row, none gathered

    # Few rows left unserved: a later graph reads only those rows' columns, gathered.
    seen.clear()
    many = [(3, 4)] * 20 + [(5, 4), (7, 4)]
    tried, graph = scan(_numbers(many), plan)
    assert graph.tolist() == [0] * 20 + [1, 2]
    assert seen == [22, 2, 1]


def test_a_slice_of_scanned_rows_drops_the_scan_but_the_whole_run_keeps_it():
    numbers = _numbers([(3, 4), (5, 4)])
    run = RecordColumns(None, np.array([0, 1]), np.array([1, 2]), np.array([-1, -1]), numbers, None,
                        (("0/0",), np.array([0, -1])))
    assert run.starting_at(0) is run and run.before(3) is run
    assert run.rows(0, 1).scanned is None and run.starting_at(1).scanned is None
