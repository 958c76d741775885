"""Signature records checked against the compiled graphs' guards a column at a time.

A guard-only replay of signature records asks, record after record, which compiled graph accepts
it (``guard_manager.check`` on its frame locals, 5-15 us each). For the records of one flat call
template (:class:`~guardscope.corpus.signatures.call_template.CallTemplate`), which differ only in their
tensors' sizes, strides and offsets, each graph's guards are a predicate over those numbers
(:func:`guardscope.torch_compat.column_guards`): one graph's acceptance of a batch of records is a
few numpy comparisons. :class:`ColumnBatch` holds a batch's columns and the graph found for each
record so far; the replay loop (:mod:`guardscope.replay.session`) keeps Dynamo's semantics exactly:
graphs are tried earliest-compiled first, the first record no graph accepts is replayed through
Dynamo (which compiles the next graph), and only the graphs compiled since are tried on the
records still unserved. A graph whose guards cannot be translated is checked with Dynamo's own
check record by record (:attr:`ColumnStats.calls`, with the reason), never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from .. import torch_compat
from ..corpus.traffic_log.columns import RecordColumns
from ..model import ServedRows, compile_order
from .record_plan import RecordPlan
from .runner import Runner

# Records checked in one batch (their columns take 8 bytes a number).
COLUMN_BATCH = 1 << 16


@dataclass
class ColumnStats:
    """What a replay checked over columns: signature samples whose graph was found over columns,
    checks made one by one with Dynamo's check (a graph not translatable: one per record it was
    tried on), and why, per graph."""

    samples: int = 0
    calls: int = 0
    reasons: dict[str, str] = field(default_factory=dict)
    # Rows whose checks against the graphs known then a Dask worker made as it read them.
    scanned_rows: int = 0

    def to_json(self) -> dict[str, Any]:
        found = {"samples": self.samples, "calls": self.calls, "reasons": dict(sorted(self.reasons.items()))}
        if self.scanned_rows:
            found["scanned_on_cluster"] = self.scanned_rows
        return found


class ColumnChecks:
    """The column predicates of one replay: per call template and graph, translated once."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.stats = ColumnStats()
        self._translated: dict[Any, dict[str, torch_compat.ColumnGuards]] = {}  # call -> compile id -> guards
        self._layouts: dict[Any, tuple[dict, list[tuple[str, int, int]]] | None] = {}
        # (call template, compile id) -> whether the guards its predicate leaves out (the same for
        # every record: ColumnGuards.assumed) held on a record Dynamo's check was asked about.
        self.assumed: dict[tuple[Any, str], bool] = {}

    def layout(self, call: Any, plan: RecordPlan) -> tuple[dict, list[tuple[str, int, int]]] | None:
        """The frame locals that vary across a call template's records, and for each its name,
        its tensor position and its slot; None when the template's records cannot be checked
        over columns (not framed, or a tensor that is an inference tensor)."""
        if call in self._layouts:
            return self._layouts[call]
        found = None
        if plan.framed and call.flat and not call.has_ints:
            names = plan._names
            varying: dict[str, torch_compat.TensorColumn] = {}
            places: list[tuple[str, int, int]] = []
            for at, position in plan._placed:
                slot_index = call.tensor_parts[position]
                _, ndim, _, dtype, device, requires_grad, inference = call.slots[slot_index]
                if inference:
                    break
                varying[names[at]] = torch_compat.TensorColumn(ndim, dtype, device, requires_grad)
                places.append((names[at], position, slot_index))
            else:
                found = (varying, places)
        if len(self._layouts) >= 256:
            self._layouts.clear()
        self._layouts[call] = found
        return found

    def batch(self, chunk: RecordColumns, plan: RecordPlan) -> ColumnBatch | None:
        layout = self.layout(chunk.call, plan)
        if layout is None:
            return None
        return ColumnBatch(self, chunk, plan, layout)

    def guards(self, call: Any, plan: RecordPlan, layout: tuple, example_key: tuple) -> list[torch_compat.ColumnGuards]:
        """Every compiled graph's column guards for this call template, earliest-compiled first;
        each graph translated once (under the replay's settings and grad mode)."""
        known = self._translated.setdefault(call, {})
        entries = self.runner.entries()
        if any(compile_id not in known for compile_id, _ in entries):
            f_locals, _ = plan.frame(call, example_key)
            with self.runner.grad_context():
                translated = torch_compat.column_guards(self.runner.code, layout[0], f_locals) or []
            for guards in translated:
                known.setdefault(guards.compile_id, guards)
                if guards.predicate is None and guards.reason:
                    self.stats.reasons.setdefault(guards.compile_id, guards.reason)
        return [known[compile_id] for compile_id, _ in entries if compile_id in known]

    def scan_plans(self) -> dict[Any, ScanPlan]:
        """For each call template met so far, what a worker reading its rows can check there
        (:func:`scan`): its columns and the graphs' predicates, earliest compiled first, up to
        the first graph that only this process can check (Dynamo's own check, or guards left
        out of the predicate and not yet confirmed here) — a worker that stopped there leaves
        the rest to :meth:`ColumnBatch.find`, in the same order."""
        plans: dict[Any, ScanPlan] = {}
        order = [compile_id for compile_id, _ in self.runner.entries()]
        for call, known in self._translated.items():
            layout = self._layouts.get(call)
            if layout is None:
                continue
            graphs = []
            for compile_id in sorted(order, key=compile_order):
                guards = known.get(compile_id)
                if guards is None or guards.predicate is None or (
                        guards.assumed and not self.assumed.get((call, compile_id), False)):
                    break
                graphs.append((compile_id, guards.predicate))
            if graphs:
                plans[call] = ScanPlan([(name, position, call.slots[slot_index][1])
                                        for name, position, slot_index in layout[1]], graphs)
        return plans


@dataclass
class ScanPlan:
    """What :func:`scan` needs of one call template: for each varying tensor its local's name,
    tensor position and ndim; the graphs' ids and predicates, earliest compiled first (plain data,
    pickled to a Dask worker)."""

    places: list[tuple[str, int, int]]
    graphs: list[tuple[str, Any]]


def columns_of(numbers: list[np.ndarray], places: list[tuple[str, int, int]]) -> dict[tuple, np.ndarray]:
    """The columns guard predicates read — ``(local, "size"|"stride", dim)`` and ``(local,
    "offset")`` — as views of a run's per-tensor numbers."""
    columns: dict[tuple, np.ndarray] = {}
    for name, position, ndim in places:
        block = numbers[position]
        for dim in range(ndim):
            columns[(name, "size", dim)] = block[:, dim]
            columns[(name, "stride", dim)] = block[:, ndim + dim]
        columns[(name, "offset")] = block[:, 2 * ndim]
    return columns


class _Taken(Mapping):
    """The columns at ``rows``, each gathered when a predicate first reads it (a graph's guards
    read a few of a call's columns)."""

    def __init__(self, columns: dict[tuple, np.ndarray], rows: np.ndarray) -> None:
        self._columns, self._rows, self._taken = columns, rows, {}

    def __getitem__(self, key: tuple) -> np.ndarray:
        column = self._taken.get(key)
        if column is None:
            column = self._taken[key] = self._columns[key][self._rows]
        return column

    def __iter__(self) -> Iterator[tuple]:
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)


def _accepted(predicate: Any, columns: dict[tuple, np.ndarray], rows: np.ndarray, size: int) -> np.ndarray:
    """Those of ``rows`` (ascending) ``predicate`` accepts. When they are most of the ``size``
    rows, the predicate reads every row (comparing a column costs less than gathering it; its
    verdict on a row does not depend on the others); else it reads the columns it needs at
    ``rows``."""
    if len(rows) * 4 >= size:
        return rows[predicate(columns)[rows]] if len(rows) < size else np.flatnonzero(predicate(columns))
    return rows[predicate(_Taken(columns, rows))]


def scan(numbers: list[np.ndarray], plan: ScanPlan) -> tuple[tuple[str, ...], np.ndarray]:
    """A run's rows checked against ``plan``'s graphs in order, as :meth:`ColumnBatch.find` does:
    the graphs tried, and per row the number of the first that accepts it (-1: none)."""
    columns = columns_of(numbers, plan.places)
    size = len(numbers[0]) if numbers else 0
    graph = np.full(size, -1, dtype=np.int64)
    unserved = np.ones(size, dtype=bool)
    for number, (_, predicate) in enumerate(plan.graphs):
        rows = np.flatnonzero(unserved)
        if not len(rows):
            break
        accepted = _accepted(predicate, columns, rows, size)
        unserved[accepted] = False
        graph[accepted] = number
    return tuple(compile_id for compile_id, _ in plan.graphs), graph


class ColumnBatch:
    """The rows of one call template, in order: their columns, and the graph found for each."""

    def __init__(self, checks: ColumnChecks, chunk: RecordColumns, plan: RecordPlan, layout: tuple) -> None:
        self.checks, self.chunk, self.call, self.plan, self.layout = checks, chunk, chunk.call, plan, layout
        self.size = len(chunk)
        self.columns = columns_of(chunk.numbers, [(name, position, self.call.slots[slot_index][1])
                                                  for name, position, slot_index in layout[1]])
        # Per row, the number of the graph that serves it in ``graphs`` (-1: none found yet).
        self.graph = np.full(self.size, -1, dtype=np.int64)
        self.graphs: list[str] = []
        self._tried: set[str] = set()
        scanned = chunk.scanned
        if scanned is not None and len(scanned[1]) == self.size:  # graphs a Dask worker already tried
            self.graphs, self.graph = list(scanned[0]), scanned[1]
            self._tried = set(self.graphs)
            stats = checks.stats
            stats.scanned_rows += self.size
        self._unserved = self.graph < 0

    def find(self) -> None:
        """Try every graph not tried yet, earliest-compiled first, on the records no graph
        accepted so far."""
        stats = self.checks.stats
        for guards in sorted(self.checks.guards(self.call, self.plan, self.layout, self.chunk.key(0)),
                             key=lambda found: compile_order(found.compile_id)):
            if guards.compile_id in self._tried:
                continue
            self._tried.add(guards.compile_id)
            rows = np.flatnonzero(self._unserved)
            if not len(rows):
                return
            if guards.predicate is not None:
                accepted = _accepted(guards.predicate, self.columns, rows, self.size)
                if guards.assumed and len(accepted) and not self._assumed_hold(guards, int(accepted[0])):
                    accepted = accepted[:0]
            else:  # Dynamo's own check, record by record
                accepted_list = []
                with self.checks.runner.grad_context():
                    for row in rows.tolist():
                        f_locals, _ = self.plan.frame(self.call, self.chunk.key(row))
                        try:
                            if guards.check(f_locals):
                                accepted_list.append(row)
                        except Exception:
                            pass
                stats.calls += len(rows)
                accepted = np.array(accepted_list, dtype=np.int64)
            self._unserved[accepted] = False
            self.graph[accepted] = len(self.graphs)
            self.graphs.append(guards.compile_id)

    def _assumed_hold(self, guards: torch_compat.ColumnGuards, row: int) -> bool:
        """Whether the guards ``guards.predicate`` leaves out hold: Dynamo's check of one record
        the predicate accepts (once per graph and call template; the same for every record)."""
        known = self.checks.assumed.get((self.call, guards.compile_id))
        if known is None:
            f_locals, _ = self.plan.frame(self.call, self.chunk.key(row))
            with self.checks.runner.grad_context():
                try:
                    known = bool(guards.check(f_locals))
                except Exception:
                    known = False
            self.checks.assumed[(self.call, guards.compile_id)] = known
            self.checks.stats.calls += 1
            if not known:
                self.checks.stats.reasons.setdefault(guards.compile_id, f"fails {guards.assumed[0]}")
        return known

    def first_unserved(self, start: int) -> int:
        """The first record from ``start`` that no graph accepts (``size``: none)."""
        found = np.flatnonzero(self._unserved[start:])
        return start + int(found[0]) if len(found) else self.size

    def served(self, start: int, stop: int) -> ServedRows:
        """Rows ``start`` to ``stop - 1``, every one served, as :class:`~guardscope.model.ServedRows`."""
        chunk, plan = self.chunk.rows(start, stop), self.plan
        graph, graphs = self.graph[start:stop], tuple(self.graphs)
        shapes = tuple((path, chunk.numbers[position][:, :self.call.slots[self.call.tensor_parts[position]][1]])
                       for path, position in plan.paths)  # type: ignore[union-attr]

        def describe(row: int) -> Any:
            _, described = plan.frame(chunk.call, chunk.key(row))
            return plan.described(described, int(chunk.first[row]), graphs[int(graph[row])])

        return ServedRows(chunk.first, chunk.count, graph, graphs, shapes, describe)
