"""Issue 37, targets 2 and 3: a traffic log of the seed distribution (format 5, Parquet), written
and analysed at production scale.

``--samples`` calls of the seed distribution (``bench.scale_corpus``'s draws: the small seed GNN's
sizes with the article's injections; the first 300 are checked against the committed sample
corpus) are written by signature only (``CorpusWriter(keep="signatures", log="parquet",
full_per_signature=0)``, as a ``TrafficRecorder`` without tensor data writes them; the signatures
are built from each call's sizes, not from tensors). Then, each in a fresh process from the
repository root: ``columns`` (every Parquet file read into Arrow columns: the new load floor),
``records`` (``Corpus.load_records`` over every shard: what an analysis reads), ``analyze``
(``guardscope analyze``, the guard-only replay with the column checks) and ``rows`` (the same
analysis with the column checks off: the row-by-row path); the two catalogs must be identical.

Targets (issue 37, the 2-core CPU machine): 10M calls analysed in <= 60 s with peak RSS <= 1 GB
and a log <= 300 MB; 1M analysed in <= 1.5x the load floor. Usage::

    PYTHONPATH=. python -m bench.bench_traffic_log --samples 1000000 --json /tmp/traffic-log.json
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

FEATURES = 16
COLUMNS = ("import sys, pathlib, pyarrow.parquet as pq\n"
           "rows = calls = 0\n"
           "for path in sorted(pathlib.Path(sys.argv[1]).glob('shard-*.parquet')):\n"
           "    table = pq.read_table(path)\n"
           "    rows += table.num_rows\n"
           "    calls += sum(table.column('count').to_pylist())\n"
           "print(rows, 'rows,', calls, 'calls')")
RECORDS = ("import sys, guardscope\n"
           "corpus = guardscope.load_corpus(sys.argv[1])\n"
           "count = 0\n"
           "for shard in corpus.manifest.shards:\n"
           "    for item in corpus.load_records(shard):\n"
           "        count += getattr(item, 'repeat', 1)\n"
           "print(count, 'samples')")
ROWS = ("import sys; from guardscope.replay import session; session.COLUMN_CHECKS = False; "
        "from guardscope.cli import main; sys.exit(main())")


WRITE = ("import json, pathlib, sys\n"
         "from bench.bench_traffic_log import check_seed, write\n"
         "check_seed()\n"
         "written = write(pathlib.Path(sys.argv[1]), int(sys.argv[2]))\n"
         "pathlib.Path(sys.argv[3]).write_text(json.dumps(written))")


def seed_signature(nodes: int, local: int, cross: int, context: int) -> tuple:
    """The signature of ``samples.gnn.generate._request(nodes, local, cross, context)``."""
    def tensor(shape: tuple, dtype: str) -> tuple:
        stride = (shape[1], 1)
        return ("tensor", "Tensor", shape, stride, 0, dtype, "cpu", "torch.strided", False, False, None)

    return ("call", ("tuple", 0), ("dict",
            ("'x'", tensor((nodes, FEATURES), "float32")),
            ("'local_edge_index'", tensor((2, local), "int64")),
            ("'cross_edge_index'", tensor((2, cross), "int64")),
            ("'local_edge_scale'", tensor((local, 1), "float32")),
            ("'cross_edge_scale'", tensor((cross, 1), "float32")),
            ("'context'", tensor((context, FEATURES), "float32"))))


def signatures(samples: int):
    """The scale corpus's calls as signatures, drawn as ``bench.scale_corpus`` draws them."""
    from bench.scale_corpus import SEED, SMALL_MAX_SIZE, SMALL_MIN_SIZE, apply_pattern, scale_schedule

    schedule = scale_schedule(samples)
    shape_rng = random.Random(SEED)
    for index in range(samples):
        counts = [shape_rng.randint(SMALL_MIN_SIZE, SMALL_MAX_SIZE) for _ in range(4)]
        yield seed_signature(*apply_pattern(schedule.get(index), *counts))


def check_seed(count: int = 300) -> None:
    from guardscope.corpus.reader import load_corpus
    from guardscope.corpus.signatures.signature import signature

    for sample, sig in zip(load_corpus(common.REPO / "samples" / "gnn" / "corpus"), signatures(count)):
        if signature(sample.args, sample.kwargs, inference=False) != sig:
            raise SystemExit(f"call {sample.index}'s signature differs from the committed sample corpus")


def write(directory: Path, samples: int) -> dict:
    from bench.scale_corpus import COMPILE_OPTIONS, model_spec
    from guardscope.corpus.writer import CorpusWriter

    shutil.rmtree(directory, ignore_errors=True)
    started = time.perf_counter()
    with CorpusWriter(directory, model=model_spec(directory, "small"), compile=COMPILE_OPTIONS, keep="signatures",
                      log="parquet", full_per_signature=0, shard_size=65536, replica="bench:0") as writer:
        for sig in signatures(samples):
            writer.add_signature(sig, {"cpu"})
    seconds = time.perf_counter() - started
    size = sum(path.stat().st_size for path in directory.iterdir())
    print(f"wrote       {samples:,} calls in {seconds:.1f} s ({samples / seconds:,.0f} calls/s), "
          f"{size / 1e6:.1f} MB: {writer.summary()}")
    return {"seconds": round(seconds, 3), "bytes": size, "summary": writer.summary()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/guardscope-bench/traffic-log"))
    parser.add_argument("--no-rows", dest="rows", action="store_false", help="skip the row-by-row analysis")
    parser.add_argument("--reuse", action="store_true",
                        help="analyse the log an earlier run wrote under --work (when it holds --samples calls)")
    parser.add_argument("--json", default=None)
    arguments = parser.parse_args(argv)
    print(f"machine     {common.describe_machine(common.machine())}")
    corpus = arguments.work / f"log-{arguments.samples}"
    python = sys.executable
    manifest = corpus / "corpus.json"
    if arguments.reuse and manifest.is_file() and common.read_json(manifest)["samples"] == arguments.samples:
        written = None
        print(f"reused      {corpus}")
    else:
        # Written in a child: a child's peak RSS counts its parent's pages at fork, so the parent
        # stays small for the children timed after it.
        log = arguments.work / "write.log"
        common.run_child([python, "-c", WRITE, str(corpus), str(arguments.samples), str(log.with_suffix(".json"))],
                         log, shown="python -c <write the traffic log>").check()
        written = common.read_json(log.with_suffix(".json"))
        print(log.read_text().strip())
    common.preread(corpus)
    runs = {
        "startup": common.run_child([python, "-c", "import pyarrow.parquet"], arguments.work / "startup.log",
                                    shown="python -c 'import pyarrow.parquet'").check(),
        "imports": common.run_child([python, "-c", "import guardscope.cli, guardscope.pipeline"],
                                    arguments.work / "imports.log",
                                    shown="python -c 'import guardscope.cli, guardscope.pipeline'").check(),
        "columns": common.run_child([python, "-c", COLUMNS, str(corpus)], arguments.work / "columns.log",
                                    shown="python -c <read every Parquet file>").check(),
        "records": common.run_child([python, "-c", RECORDS, str(corpus)], arguments.work / "records.log",
                                    shown="python -c <Corpus.load_records over every shard>").check(),
        "analyze": common.run_analyze(corpus, arguments.work / "analysis").check(),
    }
    if arguments.rows:
        out = (arguments.work / "analysis-rows").resolve()
        runs["rows"] = common.run_child(
            [python, "-c", ROWS, "analyze", str(corpus.resolve()), "--out", str(out), "--force", "-q"],
            arguments.work / "analysis-rows.log", shown="guardscope analyze (column checks off)").check()
    for name, run in runs.items():
        print(f"{name:<11} {run.wall_seconds:7.1f} s wall, peak RSS {run.max_rss_bytes / 2**20:,.0f} MiB  ({run.command})")
    catalog = common.read_json(arguments.work / "analysis" / "catalog.json")
    timings = common.read_json(arguments.work / "analysis" / "timings.json")
    identical = None
    if arguments.rows:
        rows = common.read_json(arguments.work / "analysis-rows" / "catalog.json")
        identical = {k: v for k, v in rows.items() if k != "corpus"} == {
            k: v for k, v in catalog.items() if k != "corpus"}
        print(f"identical   the column and row-by-row catalogs: {identical}")
    print(f"catalog     {catalog['summary']['compiles']} compiles at {catalog['summary']['compile_samples']}, "
          f"{catalog['summary']['topologies']} topologies; column checks {timings.get('column_checks')}")
    floor = runs["columns"].wall_seconds
    analyze = runs["analyze"].wall_seconds
    compiles = common.compile_seconds(arguments.work / "analysis")
    # What grows with the calls: the analysis less its imports and compiles, against the column
    # read less the interpreter's start and pyarrow's import.
    variable = analyze - runs["imports"].wall_seconds - compiles
    read = floor - runs["startup"].wall_seconds
    print(f"ratio       analyze / column load floor = {analyze / floor:.1f}x; analyze / records = "
          f"{analyze / runs['records'].wall_seconds:.2f}x"
          + (f"; rows / columns analyze = {runs['rows'].wall_seconds / analyze:.2f}x" if "rows" in runs else ""))
    print(f"per call    analyze less imports ({runs['imports'].wall_seconds:.1f} s) and compiles ({compiles:.1f} s) = "
          f"{variable:.1f} s = {variable / arguments.samples * 1e6:.2f} us a call; the column read less start-up "
          f"= {read:.2f} s ({variable / read:.1f}x)")
    common.write_results(arguments.json, {
        "machine": common.machine(), "tree": common.tree(), "samples": arguments.samples, "written": written,
        "runs": {name: run.to_json() for name, run in runs.items()}, "identical": identical,
        "compile_seconds": compiles, "variable_seconds": variable, "read_seconds": read,
        "column_checks": timings.get("column_checks"), "summary": catalog["summary"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
