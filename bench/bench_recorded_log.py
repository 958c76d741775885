"""Issue 53: a traffic log recorded as a service records it, analysed as fast as the bench's own.

``--calls`` calls of the seed distribution (``bench.bench_traffic_log``'s draws) are offered from one
thread to a ``TrafficRecorder`` with its defaults (``max_pending`` included: the calls it drops are
counted), in a child process: the files it wrote, their bytes, the seconds ``offer()`` took (each
call's tensors are built beforehand, once per argument and shape, untimed) and the seconds
``close()`` took after the last offer (the writer draining), the child's peak RSS. In the same run
``bench.bench_traffic_log`` writes its own log of the same calls (``CorpusWriter(keep="signatures",
log="parquet", full_per_signature=0, shard_size=65536)``), and each log is analysed in a fresh
process: wall seconds, peak RSS, and whether the catalogs' compiles and topologies agree.

``--files-calls``: that many calls written as the recorder's writer thread writes them (the
recorder's own ``CorpusWriter``, with its defaults: the first call of each signature kept in full
until ``max_bytes``, files written in the background), to count the files a long day leaves (the
write level only: no queue, no drops, no analysis; ``--files-only`` runs that alone). Targets: the recorder's
log analysed within 1.5x the bench log's, 0 drops, peak RSS <= 1 GB; 10M calls in a few dozen
files. Usage::

    PYTHONPATH=. python -m bench.bench_recorded_log --calls 1000000 --files-calls 10000000 --json /tmp/recorded.json
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

RECORD = ("import json, pathlib, sys\n"
          "from bench.bench_recorded_log import record\n"
          "pathlib.Path(sys.argv[3]).write_text(json.dumps(record(pathlib.Path(sys.argv[1]), int(sys.argv[2]))))")
WRITE = ("import json, pathlib, sys\n"
         "from bench.bench_traffic_log import write\n"
         "pathlib.Path(sys.argv[3]).write_text(json.dumps(write(pathlib.Path(sys.argv[1]), int(sys.argv[2]))))")
FILES = ("import json, pathlib, sys\n"
         "from bench.bench_recorded_log import files\n"
         "pathlib.Path(sys.argv[3]).write_text(json.dumps(files(pathlib.Path(sys.argv[1]), int(sys.argv[2]))))")


def _calls(count: int):
    """The seed distribution's calls as keyword arguments, each tensor zero-filled and shared by
    the calls of its argument and shape (built once: the recorder reads their layout, and copies
    the calls it keeps in full)."""
    import torch

    from bench.bench_traffic_log import signatures

    built: dict[tuple, torch.Tensor] = {}
    for sig in signatures(count):
        kwargs = {}
        for name, tensor in sig[2][1:]:
            key = (name, tensor[2], tensor[3], tensor[5])
            value = built.get(key)
            if value is None:
                # The signature's own strides (a (2, 0) tensor's are (0, 1), not zeros()'s (1, 1)).
                value = built[key] = torch.empty_strided(tensor[2], tensor[3], dtype=getattr(torch, tensor[5])).zero_()
            kwargs[name.strip("'")] = value
        yield kwargs


def _listing(directory: Path) -> dict:
    names = sorted(path.name for path in directory.iterdir())
    return {"files": len(names), "parquet": sum(name.endswith(".parquet") for name in names),
            "data_shards": sum(name.endswith(".pt") for name in names),
            "bytes": sum(path.stat().st_size for path in directory.iterdir()),
            "manifest_bytes": (directory / "corpus.json").stat().st_size}


def record(directory: Path, count: int) -> dict:
    """Offer ``count`` seed calls to a ``TrafficRecorder`` with its defaults and close it."""
    import torch

    from bench.scale_corpus import COMPILE_OPTIONS, model_spec
    from guardscope.runtime import TrafficRecorder

    shutil.rmtree(directory, ignore_errors=True)
    recorder = TrafficRecorder(directory, model=model_spec(directory, "small"), compile=dict(COMPILE_OPTIONS),
                               replica="bench:0")
    offering = 0.0
    clock = time.perf_counter
    with torch.inference_mode():  # as a server serves (the recorder keeps its grad mode; the bench log's default)
        for kwargs in _calls(count):
            started = clock()
            recorder.offer((), kwargs)
            offering += clock() - started
    started = clock()
    recorder.close()
    drain = clock() - started
    counts = recorder.counts()
    listing = _listing(directory)
    print(f"recorded    {count:,} calls: offer() {offering:.1f} s, close() {drain:.1f} s after the last offer; "
          f"{counts['dropped']} dropped; {listing['files']} files ({listing['parquet']} Parquet, "
          f"{listing['data_shards']} data shards), {listing['bytes'] / 1e6:.1f} MB, manifest "
          f"{listing['manifest_bytes']:,} bytes")
    return {"offer_seconds": round(offering, 3), "drain_seconds": round(drain, 3), "dropped": counts["dropped"],
            "dropped_by_reason": dict(counts["dropped_by_reason"]), "full": counts["full"], **listing}


def _size(sig: tuple) -> int:
    """Tensor storage bytes of a seed call, from its signature (each argument its own storage)."""
    total = 0
    for _, tensor in sig[2][1:]:
        count = 1
        for size in tensor[2]:
            count *= size
        total += count * (8 if tensor[5] == "int64" else 4)
    return total


def files(directory: Path, count: int) -> dict:
    """``count`` seed calls written as a recorder's writer thread writes them: a ``TrafficRecorder``'s
    writer (its defaults: window and fold bounds, files written on a thread of their own), the first
    call of each signature kept in full (its tensors built, zero-filled, and copied as ``offer()``
    copies them) until ``max_bytes`` of them are kept, every other call by signature, a flush every
    ``flush_every`` seconds. Not through ``offer()``'s queue: nothing is dropped, and the time-bound
    flushes and rolls come at this loop's rate, not a server's."""
    import inspect

    import torch

    from bench.bench_traffic_log import signatures
    from bench.scale_corpus import COMPILE_OPTIONS, model_spec
    from guardscope.corpus.traffic_log.files import WINDOW_ROWS
    from guardscope.corpus.values.sample import snapshot
    from guardscope.corpus.writer import CorpusWriter
    from guardscope.runtime import TrafficRecorder

    defaults = {name: parameter.default for name, parameter in inspect.signature(TrafficRecorder).parameters.items()}
    shutil.rmtree(directory, ignore_errors=True)
    # The recorder's writer as TrafficRecorder._open_writer opens it, with the recorder's defaults.
    writer = CorpusWriter(directory, model=model_spec(directory, "small"), compile=dict(COMPILE_OPTIONS),
                          keep="signatures", full_per_signature=defaults["full_per_signature"],
                          max_signatures=defaults["max_signatures"], log=defaults["log"], replica="bench:0",
                          shard_size=WINDOW_ROWS, roll_bytes=defaults["roll_bytes"],
                          roll_seconds=defaults["roll_seconds"], background=True, max_full_bytes=defaults["max_bytes"])
    max_bytes, flush_every = defaults["max_bytes"], defaults["flush_every"]
    kept: set[int] = set()
    reserved, smallest, full = 0, None, 0
    started = last_flush = time.perf_counter()
    with writer:
        for sig in signatures(count):
            if time.perf_counter() - last_flush >= flush_every:  # the recorder's flush every flush_every s
                last_flush = time.perf_counter()
                writer.flush(wait=False)
            if smallest is None or reserved + smallest <= max_bytes:  # a full copy may still fit
                key, size = hash(sig), _size(sig)
                smallest = size if smallest is None else min(smallest, size)
                if key not in kept and reserved + size <= max_bytes and len(kept) < defaults["max_signatures"]:
                    kept.add(key)
                    reserved += size
                    kwargs = {name.strip("'"): torch.empty_strided(tensor[2], tensor[3], dtype=getattr(torch, tensor[5]))
                              .zero_() for name, tensor in sig[2][1:]}
                    args, kwargs = snapshot((), kwargs)
                    writer.add_snapshot(args, kwargs, sig, when=time.time_ns())
                    full += 1
                    continue
            writer.add_signature(sig, {"cpu"}, when=time.time_ns())
    seconds = time.perf_counter() - started
    listing = _listing(directory)
    print(f"written     {count:,} calls as the recorder's writer writes them in {seconds:.1f} s ({full:,} in full): "
          f"{listing['files']} files ({listing['parquet']} Parquet, {listing['data_shards']} data shards), "
          f"{listing['bytes'] / 1e6:.1f} MB, manifest {listing['manifest_bytes']:,} bytes")
    return {"seconds": round(seconds, 3), "full": full, **listing}


def _files_only(work: Path, arguments: argparse.Namespace) -> int:
    """``--files-only``: the ``--files-calls`` count alone."""
    run = common.run_child([sys.executable, "-c", FILES, str(work / f"files-{arguments.files_calls}"),
                            str(arguments.files_calls), str(work / "files.json")], work / "files.log",
                           shown="python -c <the recorder's writer>").check()
    print(run.log.read_text().strip())
    print(f"files             {run.wall_seconds:7.1f} s wall, peak RSS {run.max_rss_bytes / 2**20:,.0f} MiB  ({run.command})")
    common.write_results(arguments.json, {"machine": common.machine(), "tree": common.tree(),
                                          "files": common.read_json(work / "files.json"), "runs": {"files": run.to_json()}})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--files-calls", type=int, default=0, help="calls written to count the files (0: none)")
    parser.add_argument("--files-only", action="store_true", help="only --files-calls: no recorder, no analysis")
    parser.add_argument("--work", type=Path, default=Path("/tmp/guardscope-bench/recorded-log"))
    parser.add_argument("--json", default=None)
    arguments = parser.parse_args(argv)
    print(f"machine     {common.describe_machine(common.machine())}")
    work, python = arguments.work, sys.executable
    work.mkdir(parents=True, exist_ok=True)
    if arguments.files_only:
        return _files_only(work, arguments)
    recorded, written = work / f"recorded-{arguments.calls}", work / f"log-{arguments.calls}"
    children = {
        "record": common.run_child([python, "-c", RECORD, str(recorded), str(arguments.calls), str(work / "record.json")],
                                   work / "record.log", shown="python -c <offer the calls to a TrafficRecorder>"),
        "write": common.run_child([python, "-c", WRITE, str(written), str(arguments.calls), str(work / "write.json")],
                                  work / "write.log", shown="python -c <bench.bench_traffic_log.write>"),
    }
    for run in children.values():
        run.check()
        print(run.log.read_text().strip())
    common.preread(recorded)
    common.preread(written)
    runs = {"analyze_recorded": common.run_analyze(recorded, work / "analysis-recorded").check(),
            "analyze_bench": common.run_analyze(written, work / "analysis-bench").check()}
    if arguments.files_calls:
        runs["files"] = common.run_child(
            [python, "-c", FILES, str(work / f"files-{arguments.files_calls}"), str(arguments.files_calls),
             str(work / "files.json")], work / "files.log", shown="python -c <the recorder's writer, no data>").check()
        print(runs["files"].log.read_text().strip())
    for name, run in {**children, **runs}.items():
        print(f"{name:<17} {run.wall_seconds:7.1f} s wall, peak RSS {run.max_rss_bytes / 2**20:,.0f} MiB  ({run.command})")
    catalogs = {name: common.read_json(work / f"analysis-{name}" / "catalog.json") for name in ("recorded", "bench")}
    # The same compiles and topologies (members and counts); only when each was seen differs.
    same = {"summary": catalogs["recorded"]["summary"] == catalogs["bench"]["summary"],
            "topologies": [{k: v for k, v in t.items() if k not in ("first_seen", "last_seen")}
                           for t in catalogs["recorded"]["topologies"]]
            == [{k: v for k, v in t.items() if k not in ("first_seen", "last_seen")} for t in catalogs["bench"]["topologies"]]}
    ratio = runs["analyze_recorded"].wall_seconds / runs["analyze_bench"].wall_seconds
    summary = catalogs["recorded"]["summary"]
    print(f"catalog     {summary['compiles']} compiles at {summary['compile_samples']}, {summary['topologies']} "
          f"topologies; the same as the bench log's: summary {same['summary']}, topologies {same['topologies']}")
    print(f"ratio       analyze recorded / bench log = {ratio:.2f}x (target <= 1.5x)")
    common.write_results(arguments.json, {
        "machine": common.machine(), "tree": common.tree(), "calls": arguments.calls,
        "record": common.read_json(work / "record.json"), "write": common.read_json(work / "write.json"),
        "files": common.read_json(work / "files.json") if arguments.files_calls else None,
        "runs": {name: run.to_json() for name, run in {**children, **runs}.items()}, "same": same,
        "ratio": round(ratio, 3), "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
