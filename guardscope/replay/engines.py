"""Where an analysis reads its corpus: in this process (``embedded``, the default: nothing to
start) or on a Dask cluster (``dask``).

A traffic log's shards are read, checked and decoded into columns
(:meth:`~guardscope.corpus.reader.Corpus.load_columns`: the Parquet read, the checksum, the
per-row checks and the arrays of sizes, strides and offsets), and their rows checked against the
compiled graphs' guards over those columns — the part of an analysis that grows with the calls.
With the Dask engine each shard is one task on the cluster's workers, a window of them ahead of
the replay, and the task checks its rows against the graphs compiled when it was sent
(:func:`~.column_check.scan`, the predicates pickled as plain data). The replay itself stays
here, in order, because each compile changes what later calls need and the model lives here: it
takes each shard's columns as they come back, under this process's own call templates, tries only
the graphs compiled since on the rows the worker left unserved, and replays the first row none
accepts — so the catalog is the embedded engine's byte for byte.

A shard whose rows are not all columns (calls kept in full, int arguments, containers) is read
here, as the embedded engine reads it. One task per Parquet file rather than ``dask.dataframe``:
the logs' columns are nested lists, which a pandas partition holds as one Python object a row.

``--engine dask --scheduler tcp://host:8786`` (or ``DASK_SCHEDULER_ADDRESS``) uses a running
cluster, whose workers need guardscope and torch installed and the corpus at the same path;
without an address a ``LocalCluster`` of one single-threaded worker process per core is started
and stopped with the analysis.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any, Callable

from ..corpus.storage.format import ShardInfo
from ..corpus.traffic_log.columns import RecordColumns
from ..errors import EngineError
from .column_check import ScanPlan, scan
from ..text import message_line

ENGINES = ("embedded", "dask")
# Seconds to wait for a scheduler before saying it cannot be reached.
CONNECT_TIMEOUT = 10


class EmbeddedEngine:
    """Shards read in this process, when the replay asks for them."""

    name = "embedded"

    def start(self, corpus: Any, shards: list[ShardInfo], plans: Callable[[], dict] | None = None) -> None:
        pass

    def records(self, corpus: Any, shard: ShardInfo, columns: bool) -> list[Any]:
        return corpus.load_columns(shard) if columns else corpus.load_records(shard)

    def close(self) -> None:
        pass

    def describe(self) -> str:
        return "embedded"

    def summary(self) -> dict[str, Any]:
        return {"name": self.name}


def _decoded(directory: str, shard: dict[str, Any],
             plans: list[tuple[Any, ScanPlan]]) -> tuple[list[tuple], int] | None:
    """On a worker: a traffic log shard's runs of columns as plain values — for each run its
    template's signature (JSON), first, count, full, per-tensor numbers, and the rows checked
    against the graphs of ``plans`` (``(tried, graph)`` from :func:`~.column_check.scan`, for a
    run whose template matches a plan's example signature; else None) — with the number of calls
    kept in full that the columns check (the driver takes them off the signature count, as the
    reader does for a shard it decodes itself), or None when the shard has rows that are not
    columns (read by the driver). ``ShardError`` as the reader raises it."""
    from ..corpus.storage.format import ShardInfo
    from ..corpus.reader import load_corpus
    from ..corpus.signatures.signature import signature_to_json

    data = shard.get("data")
    info = ShardInfo(shard["file"], shard["first"], shard["samples"], shard["sha256"],
                     (data["file"], data["sha256"]) if data else None)
    corpus = load_corpus(directory)
    items = corpus.load_columns(info)
    if any(type(item) is not RecordColumns for item in items):
        return None
    runs = []
    for item in items:
        plan = next((plan for example, plan in plans if item.call.match(example) is not None), None)
        runs.append((signature_to_json(item.record(0).signature), item.first, item.count, item.full, item.numbers,
                     scan(item.numbers, plan) if plan is not None else None))
    return runs, corpus.full_in_columns.get(info.file, 0)


class TaskPlans:
    """The driver's side of a worker's task: what to send with it — the replay's
    :class:`~.column_check.ScanPlan` per call template, each with a signature of it as the worker
    matches its own rows (``plans()``: the replay's plans now) — and its result made columns again
    under this process's call templates (whose signatures it remembers for the next tasks)."""

    def __init__(self, plans: Callable[[], dict] | None = None) -> None:
        self._plans = plans
        self._examples: dict[Any, Any] = {}  # call template -> a signature of it (JSON)

    def for_task(self) -> list[tuple[Any, ScanPlan]]:
        known = self._plans() if self._plans is not None else {}
        return [(self._examples[call], plan) for call, plan in known.items() if call in self._examples]

    def columns(self, corpus: Any, runs: list[tuple]) -> list[RecordColumns]:
        """:func:`_decoded`'s runs as :class:`RecordColumns` of ``corpus``'s call templates."""
        found = []
        for array, first, count, full, numbers, scanned in runs:
            call = corpus.call_of(array)
            self._examples.setdefault(call, array)
            found.append(RecordColumns(call, first, count, full, numbers, corpus._placement, scanned))
        return found


class DaskEngine:
    """Traffic log shards decoded on a Dask cluster, ``window`` tasks ahead of the replay."""

    name = "dask"

    def __init__(self, scheduler: str | None = None, *, workers: int | None = None,
                 notice: Callable[[str], None] | None = None) -> None:
        try:
            import distributed
        except ImportError:
            raise EngineError("--engine dask needs Dask: pip install 'guardscope[fleet]' "
                              "(dask[distributed])") from None
        self._notice = notice
        self._cluster = None
        address = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or None
        try:
            if address is None:
                count = workers or os.cpu_count() or 1
                self._cluster = distributed.LocalCluster(n_workers=count, threads_per_worker=1, processes=True,
                                                         dashboard_address=None, silence_logs=50)
                self.client = distributed.Client(self._cluster)
                self._where = f"a LocalCluster of {count} worker processes"
            else:
                self.client = distributed.Client(address, timeout=CONNECT_TIMEOUT)
                self._where = f"the Dask scheduler at {address}"
        except (OSError, TimeoutError) as exc:
            self.close()
            raise EngineError(f"cannot reach the Dask scheduler at {address}: {message_line(exc)}") from None
        workers_now = len(self.client.scheduler_info().get("workers", {}))
        self.window = max(2, 2 * workers_now)
        self._futures: OrderedDict[str, Any] = OrderedDict()
        self._pending: list[ShardInfo] = []
        self._directory = ""
        self._tasks = TaskPlans()
        self.on_cluster = 0  # shards whose columns the cluster decoded
        self.here = 0  # shards read here (rows that are not columns, or not a traffic log)

    def describe(self) -> str:
        return f"dask ({self._where})"

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "shards_on_cluster": self.on_cluster, "shards_here": self.here}

    def start(self, corpus: Any, shards: list[ShardInfo], plans: Callable[[], dict] | None = None) -> None:
        """The shards the replay will ask for, in order: the first ``window`` are submitted.
        ``plans()``: the replay's :class:`~.column_check.ScanPlan` per call template now, sent
        with each shard so its worker checks the rows against the graphs compiled so far."""
        self._directory = str(corpus.path.resolve())
        self._tasks = TaskPlans(plans)
        self._pending = [shard for shard in shards if shard.file.endswith(".parquet")]
        self._top_up()

    def _top_up(self) -> None:
        while self._pending and len(self._futures) < self.window:
            shard = self._pending.pop(0)
            plans = self._tasks.for_task()
            self._futures[shard.file] = self.client.submit(_decoded, self._directory, shard.to_json(), plans,
                                                           key=f"guardscope-decode-{shard.file}-{id(self)}", pure=False)

    def records(self, corpus: Any, shard: ShardInfo, columns: bool) -> list[Any]:
        future = self._futures.pop(shard.file, None)
        if future is None:  # not submitted (another format, or a shard asked for out of order)
            self._pending = [pending for pending in self._pending if pending.file != shard.file]
            self.here += 1
            return EmbeddedEngine().records(corpus, shard, columns)
        try:
            decoded = future.result()  # a ShardError on the worker is raised here as it was there
        finally:
            self._top_up()
        if decoded is None or not columns:
            self.here += 1
            return EmbeddedEngine().records(corpus, shard, columns)
        self.on_cluster += 1
        runs, kept_in_columns = decoded
        if kept_in_columns:  # as the reader counts a shard it decodes (corpus/traffic_log/records.py)
            corpus.full_in_columns[shard.file] = kept_in_columns
        return self._tasks.columns(corpus, runs)

    def close(self) -> None:
        for future in getattr(self, "_futures", {}).values():
            future.cancel()
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
        if self._cluster is not None:
            self._cluster.close()


def engine(name: str, scheduler: str | None = None, notice: Callable[[str], None] | None = None) -> Any:
    """The engine called ``name`` (:data:`ENGINES`), started."""
    if name == "embedded":
        if scheduler:
            raise EngineError("--scheduler is for --engine dask")
        return EmbeddedEngine()
    if name == "dask":
        return DaskEngine(scheduler, notice=notice)
    raise EngineError(f"unknown engine {name!r}: choose one of {', '.join(ENGINES)}")
