"""Issue 23: the corpus writer's own throughput, requests a second, by signature and in full,
against baselines measured in the same run.

    python -m bench.bench_writer                                 # 20,000 seed requests, 3 rounds
    python -m bench.bench_writer --samples 50000 --rounds 5 --json /tmp/writer.json

The requests are ``bench.scale_corpus``'s (the small seed GNN's distribution: six tensors, about
7 KB, a request; of 20,000 almost every one has a signature of its own). Each case runs in a
fresh process from the repository root, which first draws the requests into memory (timed
apart: ``generate``), then times writing them all, ``close()`` included:

* ``signature`` (baseline): ``signature(args, kwargs, inference=False)`` and its digest for each
  request, nothing written — the least a writer by signature pays a request;
* ``torch.save`` (baseline): the requests pickled with ``torch.save``, one file a 256 requests,
  each written atomically and synced as the writer writes its shards — the least a writer of
  every tensor pays;
* ``by signature``: ``CorpusWriter(keep="signatures", full_per_signature=0)``, no tensor data;
* ``README``: ``CorpusWriter(keep="signatures")``, the README's lines: the first request of each
  signature in full while the data kept in full stays within the default bound (64 MiB), every
  other one by signature;
* ``in full``: ``CorpusWriter(keep="all")``, every tensor (format 2).

The cases run in rounds (each case once a round, in this order); the figure kept is each case's
median over the rounds, the spread beside it, with the load average before and after each run.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import sys
import time

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench import common

CASES = {
    "signature": "baseline: signature() and its digest, nothing written",
    "torch.save": "baseline: torch.save, one synced file a 256 requests",
    "by signature": 'CorpusWriter(keep="signatures", full_per_signature=0)',
    "README": 'CorpusWriter(keep="signatures") (first of each in full within 64 MiB)',
    "in full": 'CorpusWriter(keep="all")',
}
SHARD_SIZE = 256


def run_case(case: str, samples: int, out: pathlib.Path) -> dict:
    """In the child: draw the requests, then write them as ``case`` does; the seconds of each."""
    import gc
    import io

    import torch

    from bench.scale_corpus import iter_scale_samples
    from guardscope.corpus.signatures.signature import signature, signature_digest
    from guardscope.corpus.writer import CorpusWriter
    from guardscope.files import write_atomic
    from samples.gnn.generate import COMPILE_OPTIONS, model_spec

    started = time.perf_counter()
    requests = list(iter_scale_samples(samples))
    generate = time.perf_counter() - started
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    summary = None
    gc.collect()
    started = time.perf_counter()
    if case == "signature":
        for request in requests:
            signature_digest(signature((), request, inference=False))
    elif case == "torch.save":
        for number, first in enumerate(range(0, samples, SHARD_SIZE)):
            buffer = io.BytesIO()
            torch.save(requests[first:first + SHARD_SIZE], buffer)
            write_atomic(out / f"shard-{number:05d}.pt", buffer.getvalue(), sync=True)
    else:
        keep = {"by signature": {"keep": "signatures", "full_per_signature": 0},
                "README": {"keep": "signatures"}, "in full": {}}[case]
        with CorpusWriter(out, model=model_spec(out, "small"), compile=COMPILE_OPTIONS, **keep) as writer:
            for request in requests:
                writer.add(**request)
        summary = writer.summary()
    seconds = time.perf_counter() - started
    size = sum(path.stat().st_size for path in out.iterdir() if path.is_file())
    return {"case": case, "samples": samples, "generate_seconds": round(generate, 3),
            "write_seconds": round(seconds, 3), "corpus_bytes": size, "writer_summary": summary}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_writer",
        description="The corpus writer's throughput (requests a second) by signature and in full, "
        "against a signature-only and a torch.save baseline, each case in a fresh process.",
    )
    parser.add_argument("--samples", type=int, default=20_000, help="requests (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each case (default %(default)s)")
    parser.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/guardscope-bench/writer"),
                        help="folder for the corpora and logs (default %(default)s)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--child", choices=sorted(CASES), help=argparse.SUPPRESS)
    parser.add_argument("--result", type=pathlib.Path, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.samples < 1 or options.rounds < 1:
        parser.error("--samples and --rounds must be at least 1")
    work = options.work.resolve()
    if options.child:
        options.result.write_text(json.dumps(run_case(options.child, options.samples, work / "corpus")))
        return 0
    info = common.machine()
    print(f"machine     {common.describe_machine(info)}")
    print(f"requests    {options.samples:,} seed requests (bench.scale_corpus), {options.rounds} rounds")
    runs: dict[str, list[dict]] = {case: [] for case in CASES}
    for number in range(options.rounds):
        for case in CASES:
            name = case.replace(" ", "-").replace(".", "-")
            result = work / f"{name}-{number}.json"
            child = common.run_child(
                [sys.executable, "-m", "bench.bench_writer", "--child", case, "--samples", str(options.samples),
                 "--work", str(work / name), "--result", str(result)],
                work / f"{name}-{number}.log", shown=f"python -m bench.bench_writer --child {case!r}").check()
            measured = json.loads(result.read_text())
            measured.update(max_rss_bytes=child.max_rss_bytes, load_before=child.load_before,
                            load_after=child.load_after)
            runs[case].append(measured)
            print(f"round {number + 1}     {case:<12} {options.samples / measured['write_seconds']:>9,.0f} requests/s "
                  f"({measured['write_seconds']:.2f} s; drawing them took {measured['generate_seconds']:.1f} s), "
                  f"{measured['corpus_bytes'] / 1e6:,.1f} MB; {common.load_text(child)}", flush=True)
    results: dict = {"benchmark": "bench_writer", "machine": info, "samples": options.samples,
                     "rounds": options.rounds, "cases": {}}
    print(f"{'case':<13} {'requests/s':>10}  {'us/request':>10}  {'spread (requests/s)':>21}  {'corpus':>9}  what")
    for case, measured in runs.items():
        rates = sorted(options.samples / run["write_seconds"] for run in measured)
        median = statistics.median(rates)
        results["cases"][case] = {"what": CASES[case], "requests_per_second": round(median, 1),
                                  "us_per_request": round(1e6 / median, 1),
                                  "requests_per_second_range": [round(rates[0], 1), round(rates[-1], 1)],
                                  "corpus_bytes": measured[-1]["corpus_bytes"], "runs": measured}
        print(f"{case:<13} {median:>10,.0f}  {1e6 / median:>10,.1f}  {rates[0]:>10,.0f}-{rates[-1]:<10,.0f}  "
              f"{measured[-1]['corpus_bytes'] / 1e6:>6,.1f} MB  {CASES[case]}")
    for case, measured in runs.items():
        if measured[-1]["writer_summary"]:
            print(f"summary     {case}: {measured[-1]['writer_summary']}")
    common.write_results(options.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
