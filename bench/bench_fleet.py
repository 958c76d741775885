"""Issue 38's target: a fleet's traffic merged and analysed on one machine.

``--replicas`` replicas each record ``--calls`` calls of the seed distribution (the draws of
``bench.bench_traffic_log``, dealt to the replicas at random, each call stamped 1 us after the
one before, so the fleet order is the draw order) by signature only, as ``TrafficRecorder``
writes them (``CorpusWriter(keep="signatures", log="parquet", full_per_signature=0)``, one
replica name each, a log file per 4,096 rows: a recorder flushes every 30 s or 256 distinct
rows). Then, each in a fresh process from the repository root: ``merge`` (``guardscope merge``:
every replica's log read, checked and written again as one compact corpus, a row per signature),
``analyze`` (``guardscope analyze`` given the replicas' folder: the merge in fleet order, then the
analysis of the merged corpus), ``analyze_dask`` (the same on a 2-worker LocalCluster) and
``analyze_compact`` (the compact corpus analysed: the same topologies, counts, replicas and
times), with wall time and peak RSS. The analysis must find the seed distribution's compiles,
and every topology's calls per replica must sum to its count.

Target (issue 38, the 2-core CPU machine): 64 replicas x 100k calls merged and analysed in
<= 90 s with peak RSS <= 1.5 GB. Usage::

    PYTHONPATH=. python -m bench.bench_fleet --replicas 64 --calls 100000 --json /tmp/fleet.json
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common

EPOCH = 1_767_225_600_000_000_000
MERGE = "import sys; from guardscope.cli import main; sys.exit(main())"
WRITE = ("import json, pathlib, sys\n"
         "from bench.bench_fleet import write\n"
         "written = write(pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))\n"
         "pathlib.Path(sys.argv[4]).write_text(json.dumps(written))")


def write(directory: Path, replicas: int, calls: int) -> dict:
    from bench.bench_traffic_log import signatures
    from bench.scale_corpus import COMPILE_OPTIONS, model_spec
    from guardscope.corpus.writer import CorpusWriter

    shutil.rmtree(directory, ignore_errors=True)
    started = time.perf_counter()
    writers = [CorpusWriter(directory / f"r{k:03d}", model=model_spec(directory / f"r{k:03d}", "small"),
                            compile=COMPILE_OPTIONS, keep="signatures", log="parquet", full_per_signature=0,
                            shard_size=4096, replica=f"r{k:03d}", dynamo_config={}, grad_mode="inference_mode")
               for k in range(replicas)]
    deal = random.Random(38)
    for position, sig in enumerate(signatures(replicas * calls)):
        writers[deal.randrange(replicas)].add_signature(sig, {"cpu"}, when=EPOCH + 1000 * position)
    for writer in writers:
        writer.close()
    seconds = time.perf_counter() - started
    size = sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())
    print(f"wrote       {replicas} replicas x {calls:,} calls in {seconds:.1f} s, {size / 1e6:.1f} MB")
    return {"seconds": round(seconds, 3), "bytes": size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--calls", type=int, default=100_000, help="calls per replica (on average)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/guardscope-bench/fleet"))
    parser.add_argument("--reuse", action="store_true", help="keep the replicas written by an earlier run")
    parser.add_argument("--json", default=None)
    arguments = parser.parse_args(argv)
    print(f"machine     {common.describe_machine(common.machine())}")
    replicas = arguments.work / f"replicas-{arguments.replicas}x{arguments.calls}"
    python = sys.executable
    written = None
    if not (arguments.reuse and replicas.is_dir()):
        # Written in a child: a child's peak RSS counts its parent's pages at fork, so the parent
        # stays small for the children timed after it.
        log = arguments.work / "write.log"
        common.run_child([python, "-c", WRITE, str(replicas), str(arguments.replicas), str(arguments.calls),
                          str(log.with_suffix(".json"))], log, shown="python -c <write the replicas>").check()
        written = common.read_json(log.with_suffix(".json"))
        print(log.read_text().strip())
    for path in replicas.iterdir():
        common.preread(path)
    merged = (arguments.work / "merged").resolve()
    runs = {
        "merge": common.run_child([python, "-c", MERGE, "merge", str(replicas.resolve()), "--out", str(merged),
                                   "--overwrite"], arguments.work / "merge.log",
                                  shown=f"guardscope merge {replicas} --out {merged}").check(),
        "analyze": common.run_analyze(replicas, arguments.work / "analysis").check(),
        # The same through a 2-worker LocalCluster (--engine dask, no address).
        "analyze_dask": common.run_analyze(replicas, arguments.work / "analysis-dask", "--engine", "dask",
                                           env={**common.child_env(), "DASK_SCHEDULER_ADDRESS": ""}).check(),
        # The compact corpus `merge` wrote, analysed: the same topologies, counts and replicas.
        "analyze_compact": common.run_analyze(merged, arguments.work / "analysis-compact").check(),
    }
    for name, run in runs.items():
        print(f"{name:<11} {run.wall_seconds:7.1f} s wall, peak RSS {run.max_rss_bytes / 2**20:,.0f} MiB  ({run.command})")
    catalog = common.read_json(arguments.work / "analysis" / "catalog.json")
    sums = all(sum(t["replicas"].values()) == t["count"] for t in catalog["topologies"])
    print(f"catalog     {catalog['summary']['compiles']} compiles at {catalog['summary']['compile_samples']}, "
          f"{catalog['summary']['topologies']} topologies, {len(catalog['replicas'])} replicas; "
          f"per-replica counts sum to each topology's: {sums}")
    identical = ((arguments.work / "analysis" / "catalog.json").read_bytes()
                 == (arguments.work / "analysis-dask" / "catalog.json").read_bytes())
    dask_timings = common.read_json(arguments.work / "analysis-dask" / "timings.json")
    engine = dask_timings.get("engine")
    scanned = (dask_timings.get("column_checks") or {}).get("scanned_on_cluster", 0)
    print(f"dask        catalog identical to embedded: {identical}; {engine}; {scanned:,} rows checked on the "
          f"cluster; {runs['analyze_dask'].wall_seconds / runs['analyze'].wall_seconds:.2f}x the embedded engine's "
          "wall time")
    compact = common.read_json(arguments.work / "analysis-compact" / "catalog.json")

    def kept(found: dict) -> list:
        return [(t["graphs"], t["count"], t.get("replicas"), t.get("first_seen"), t.get("last_seen"))
                for t in found["topologies"]]

    compact_same = kept(compact) == kept(catalog) and compact["replicas"] == catalog["replicas"]
    print(f"compact     {compact['corpus']['samples']:,} calls; topologies, counts, replicas and times the fleet "
          f"analysis's: {compact_same}")
    analyze = runs["analyze"]
    print(f"target      analysed in {analyze.wall_seconds:.1f} s (<= 90 s: "
          f"{'MET' if analyze.wall_seconds <= 90 else 'MISSED'}), peak RSS {analyze.max_rss_bytes / 2**30:.2f} GiB "
          f"(<= 1.5: {'MET' if analyze.max_rss_bytes <= 1.5 * 2**30 else 'MISSED'})")
    common.write_results(arguments.json, {
        "machine": common.machine(), "tree": common.tree(), "replicas": arguments.replicas, "calls": arguments.calls,
        "written": written, "runs": {name: run.to_json() for name, run in runs.items()},
        "per_replica_sums": sums, "dask_identical": identical, "dask_engine": engine, "dask_scanned_rows": scanned,
        "compact_same": compact_same, "summary": catalog["summary"]})
    return 0 if sums and identical and compact_same else 1


if __name__ == "__main__":
    sys.exit(main())
