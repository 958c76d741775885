"""Issue 38, the scale-out on paper: how fast one worker reads and checks a traffic log's rows, and
how fast the analysing process (the driver) takes them, measured on one corpus.

``analyze --engine dask`` splits an analysis in two: a worker per Parquet file reads, checks and
decodes its rows and checks them against the graphs compiled so far
(:func:`guardscope.replay.engines._decoded`: the worker's whole task); the driver takes the rows
back in order, replays the first one no graph accepts, and builds the catalog from the rest.
This runs the same analysis in one process with the worker's task done in place (the same
function the Dask worker runs, on the same arguments, timed per shard), so it measures each side's
seconds per row without a cluster's scheduling and transfer: the worker side's throughput is what
each added worker adds; the driver side is the part that does not spread. It also reports the
bytes a task's result pickles to (what crosses the network to the driver).

    PYTHONPATH=. python -m bench.bench_scan /tmp/guardscope-bench/fleet/merged --json /tmp/scan.json

The analysis's catalog is compared with a plain embedded analysis of the same corpus (``--check``).
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common


class InPlaceWorker:
    """An engine doing a Dask worker's task in this process, shard by shard, timing it."""

    name = "embedded"

    def __init__(self) -> None:
        from guardscope.replay.engines import EmbeddedEngine, TaskPlans

        self._here = EmbeddedEngine()
        self._tasks = TaskPlans()
        self._directory = ""
        self.seconds = 0.0  # in the worker's task
        self.rows = 0
        self.scanned = 0  # rows the task checked against the graphs it was given
        self.shards = 0
        self.result_bytes = 0

    def start(self, corpus: Any, shards: list, plans: Any = None) -> None:
        from guardscope.replay.engines import TaskPlans

        self._directory, self._tasks = str(corpus.path.resolve()), TaskPlans(plans)

    def records(self, corpus: Any, shard: Any, columns: bool) -> list[Any]:
        from guardscope.replay.engines import _decoded

        if not columns or not shard.file.endswith(".parquet"):
            return self._here.records(corpus, shard, columns)
        plans = self._tasks.for_task()
        started = time.perf_counter()
        runs = _decoded(self._directory, shard.to_json(), plans)
        self.seconds += time.perf_counter() - started
        if runs is None:
            return self._here.records(corpus, shard, columns)
        self.shards += 1
        self.result_bytes += len(pickle.dumps(runs, protocol=pickle.HIGHEST_PROTOCOL))
        found = self._tasks.columns(corpus, runs)
        self.rows += sum(len(run) for run in found)
        self.scanned += sum(len(run) for run in found if run.scanned is not None)
        return found

    def close(self) -> None:
        pass

    def describe(self) -> str:
        return "in place (a worker's task timed in this process)"

    def summary(self) -> dict[str, Any]:
        return {"name": "embedded"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path, help="a traffic log corpus (format 5)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/guardscope-bench/scan/analysis"))
    parser.add_argument("--json", default=None)
    arguments = parser.parse_args(argv)

    from guardscope import pipeline
    from guardscope.replay import engines

    print(f"machine     {common.describe_machine(common.machine())}")
    worker = InPlaceWorker()
    engines.engine = lambda name, scheduler=None, notice=None: worker  # the analysis's engine, this one
    started = time.perf_counter()
    analysis = pipeline.analyze(arguments.corpus, arguments.out, force=True)
    wall = time.perf_counter() - started
    compiles = common.compile_seconds(arguments.out)
    driver = wall - worker.seconds - compiles
    calls = analysis.catalog.samples
    results = {
        "machine": common.machine(), "tree": common.tree(), "corpus": str(arguments.corpus),
        "calls": calls, "rows": worker.rows, "shards": worker.shards, "scanned_rows": worker.scanned,
        "analysis_seconds": round(wall, 3), "worker_seconds": round(worker.seconds, 3),
        "compile_seconds": round(compiles, 3), "driver_seconds": round(driver, 3),
        "worker_rows_per_second": round(worker.rows / worker.seconds) if worker.seconds else None,
        "driver_rows_per_second": round(worker.rows / driver) if driver > 0 else None,
        "result_bytes": worker.result_bytes,
        "result_bytes_per_row": round(worker.result_bytes / worker.rows, 1) if worker.rows else None,
    }
    print(f"corpus      {arguments.corpus}: {calls:,} calls in {worker.rows:,} rows, {worker.shards} shards "
          f"({worker.scanned:,} rows checked in the task)")
    print(f"analysis    {wall:.1f} s in one process: the workers' tasks {worker.seconds:.1f} s, compiles "
          f"{compiles:.1f} s, the driver's part {driver:.1f} s")
    print(f"per worker  {results['worker_rows_per_second']:,} rows/s (read, check, decode and check guards)")
    print(f"driver      {results['driver_rows_per_second']:,} rows/s (take the rows in order, build the catalog)")
    print(f"transfer    {worker.result_bytes / 2**20:,.1f} MiB of task results, "
          f"{results['result_bytes_per_row']} bytes a row")
    common.write_results(arguments.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
