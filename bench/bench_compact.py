"""Issue 38, the merge composed: a fleet's replicas compacted where they run, then the compacts
merged, against one compact merge of them all.

Given a folder of replica traffic logs (``bench.bench_fleet``'s), this times in one process
(``guardscope.corpus.fleet.merge.merge_fleet``, as ``guardscope merge`` runs it): the compact merge of
every replica at once; each replica compacted alone (what each replica's own machine would run,
here one after the other); and the merge of those compacts. The two results must hold the same
rows (every column, times included). Usage::

    PYTHONPATH=. python -m bench.bench_compact /tmp/guardscope-bench/fleet/replicas-64x100000
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common


def _rows(folder: Path) -> object:
    import pyarrow.parquet as pq

    return pq.read_table(sorted(folder.glob("shard-*.parquet")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("replicas", type=Path, help="a folder of replica traffic logs")
    parser.add_argument("--work", type=Path, default=Path("/tmp/guardscope-bench/compact"))
    parser.add_argument("--json", default=None)
    arguments = parser.parse_args(argv)

    from guardscope.corpus.fleet.merge import merge_fleet
    from guardscope.corpus.fleet.replicas import find_corpora, open_fleet

    print(f"machine     {common.describe_machine(common.machine())}")
    shutil.rmtree(arguments.work, ignore_errors=True)
    folders = find_corpora([arguments.replicas])
    started = time.perf_counter()
    whole = merge_fleet(open_fleet(folders), arguments.work / "whole", compact=True)
    whole_seconds = time.perf_counter() - started
    print(f"whole       {whole.summary()} in {whole_seconds:.1f} s")
    started = time.perf_counter()
    parts, part_rows = [], 0
    for folder in folders:
        part = merge_fleet(open_fleet([folder]), arguments.work / "parts" / folder.name, compact=True)
        parts.append(arguments.work / "parts" / folder.name)
        part_rows += part.rows
    parts_seconds = time.perf_counter() - started
    print(f"parts       {len(folders)} replicas compacted alone in {parts_seconds:.1f} s "
          f"({parts_seconds / len(folders):.2f} s each), {part_rows:,} rows in all")
    started = time.perf_counter()
    combined = merge_fleet(open_fleet(parts), arguments.work / "combined", compact=True)
    combined_seconds = time.perf_counter() - started
    print(f"combined    {combined.summary()} in {combined_seconds:.1f} s")
    same = _rows(arguments.work / "whole").equals(_rows(arguments.work / "combined"))
    print(f"same rows   the compacts merged and the whole merged: {same}")
    common.write_results(arguments.json, {
        "machine": common.machine(), "tree": common.tree(), "replicas": len(folders),
        "whole": {"seconds": round(whole_seconds, 3), "rows": whole.rows, "samples": whole.samples},
        "parts": {"seconds": round(parts_seconds, 3), "rows": part_rows},
        "combined": {"seconds": round(combined_seconds, 3), "rows": combined.rows, "samples": combined.samples},
        "same_rows": same})
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
