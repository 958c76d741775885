"""100,000 samples of the small seed GNN: end-to-end ``guardscope analyze`` time, per-sample
overhead and peak RSS, against baselines measured in the same run.

    python -m bench.bench_scale                        # /tmp/gnn-scale-100k, generated when missing
    python -m bench.bench_scale --profile              # also profile analyze (cProfile, extra run)
    python -m bench.bench_scale --corpus /tmp/gnn-scale-10k --samples 10000 --profile

Each measurement is a fresh process started from the repository root:

* ``startup``: ``import torch, guardscope.cli`` — what any guardscope command pays first;
* ``load``:    iterate the corpus with ``guardscope.load_corpus`` — the loading floor (read,
               checksum, ``torch.load(weights_only=True)`` of every shard);
* ``analyze``: ``guardscope analyze CORPUS --out OUT`` with the defaults (guard-only replay).

Per-sample overhead = (analyze wall - compile seconds from ``timings.json``) / samples. Peak
RSS is each child's own (``os.wait4``). Targets (issue 5): analyze <= 60 s, peak RSS <= 2 GB
(2,000,000,000 bytes). ``--profile`` reruns analyze in-process under cProfile (slower than the
timed run) and prints where the time goes, function by function, per sample.
"""

from __future__ import annotations

import argparse
import pathlib
import pstats
import sys
import time

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench import common

TARGET_SECONDS = 60.0
TARGET_RSS_BYTES = 2_000_000_000
STARTUP = "import torch, guardscope.cli"
LOAD = (
    "import sys, guardscope\n"
    "count = sum(1 for _ in guardscope.load_corpus(sys.argv[1]))\n"
    "print(count, 'samples')"
)
PROFILE = (
    "import cProfile, sys, guardscope\n"
    "corpus, out, stats = sys.argv[1:4]\n"
    "profiler = cProfile.Profile()\n"
    "profiler.runcall(guardscope.analyze, corpus, out, force=True)\n"
    "profiler.dump_stats(stats)"
)


def ensure_scale_corpus(corpus: pathlib.Path, samples: int, regenerate: bool) -> int:
    """Generate the scale corpus when missing (or asked); return its sample count."""
    if regenerate or not (corpus / "corpus.json").is_file():
        from bench.scale_corpus import write_scale_corpus

        print(f"generating  {samples} samples into {corpus} ...", flush=True)
        started = time.perf_counter()
        write_scale_corpus(corpus, samples=samples, overwrite=regenerate)
        print(f"generated   in {time.perf_counter() - started:.1f} s")
    common.ensure_model_resolves(corpus)
    found = common.read_json(corpus / "corpus.json")["samples"]
    if found != samples:
        raise SystemExit(f"{corpus} holds {found} samples, not {samples}: pass --samples {found} "
                         "or --regenerate")
    return found


def _short(function: tuple[str, int, str]) -> str:
    filename, line, name = function
    if filename == "~":
        return name
    parts = pathlib.Path(filename).parts
    return f"{'/'.join(parts[-2:])}:{line}({name})"


def print_profile(stats_path: pathlib.Path, samples: int, top: int) -> list[dict]:
    """Print the top functions by own time and guardscope's functions by cumulative time."""
    stats = pstats.Stats(str(stats_path))
    entries = [
        {"function": _short(function), "calls": calls, "own_seconds": own, "cumulative_seconds": cumulative}
        for function, (_, calls, own, cumulative, _) in stats.stats.items()  # type: ignore[attr-defined]
    ]
    total = stats.total_tt  # type: ignore[attr-defined]
    print(f"profile     {total:.1f} s under cProfile, {samples} samples "
          f"({total / samples * 1e6:,.0f} us a sample); per-sample figures divide by {samples}")
    header = f"  {'own s':>8} {'cum s':>8} {'us/sample':>10} {'calls':>10}  function"
    print(f"  top {top} by own time:\n{header}")
    for entry in sorted(entries, key=lambda e: -e["own_seconds"])[:top]:
        print(f"  {entry['own_seconds']:8.2f} {entry['cumulative_seconds']:8.2f} "
              f"{entry['own_seconds'] / samples * 1e6:10.1f} {entry['calls']:10d}  {entry['function']}")
    print(f"  guardscope functions by cumulative time (us/sample of cumulative):\n{header}")
    ours = [e for e in entries if e["function"].startswith(("guardscope/", "bench/"))]
    for entry in sorted(ours, key=lambda e: -e["cumulative_seconds"])[:top]:
        print(f"  {entry['own_seconds']:8.2f} {entry['cumulative_seconds']:8.2f} "
              f"{entry['cumulative_seconds'] / samples * 1e6:10.1f} {entry['calls']:10d}  {entry['function']}")
    return sorted(entries, key=lambda e: -e["cumulative_seconds"])[:100]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_scale",
        description="guardscope analyze on the 100,000-sample small-GNN corpus: wall time, "
        "per-sample overhead, peak RSS, against a startup and a corpus-loading baseline.",
    )
    parser.add_argument("--corpus", type=pathlib.Path, default=pathlib.Path("/tmp/gnn-scale-100k"),
                        help="scale corpus (generated there when missing; default %(default)s)")
    parser.add_argument("--samples", type=int, default=100_000,
                        help="samples the corpus holds / is generated with (default %(default)s)")
    parser.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/guardscope-bench/scale"),
                        help="folder for the analysis, logs and profile (default %(default)s)")
    parser.add_argument("--regenerate", action="store_true", help="rewrite the corpus first")
    parser.add_argument("--profile", action="store_true",
                        help="also run analyze under cProfile and print function-level figures")
    parser.add_argument("--top", type=int, default=25, help="functions to list with --profile (default %(default)s)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    options = parser.parse_args(argv)

    options.corpus, options.work = options.corpus.resolve(), options.work.resolve()
    samples = ensure_scale_corpus(options.corpus, options.samples, options.regenerate)
    info = common.machine()
    size = common.preread(options.corpus)
    print(f"machine     {common.describe_machine(info)}")
    print(f"corpus      {options.corpus}: {samples} samples, {size / 1e6:.0f} MB (read once into the page cache)")
    work = options.work
    python = sys.executable
    startup = common.run_child([python, "-c", STARTUP], work / "startup.log",
                               shown=f"python -c {STARTUP!r}").check()
    load = common.run_child([python, "-c", LOAD, str(options.corpus)], work / "load.log",
                            shown=f"python -c <iterate guardscope.load_corpus({str(options.corpus)!r})>").check()
    print(f"running     {'guardscope analyze'} {options.corpus} --out {work / 'analysis'} ...", flush=True)
    analyze = common.run_analyze(options.corpus, work / "analysis").check()
    out = work / "analysis"
    catalog = common.read_json(out / "catalog.json")
    compiling = common.compile_seconds(out)
    replay = common.replay_seconds(out)
    overhead = (analyze.wall_seconds - compiling) / samples
    replay_overhead = (replay - compiling) / samples
    load_per_sample = (load.wall_seconds - startup.wall_seconds) / samples
    for name, run in (("startup", startup), ("load", load), ("analyze", analyze)):
        print(f"{name:<11} {run.wall_seconds:7.1f} s wall  peak RSS {run.max_rss_bytes / 2**20:7,.0f} MiB  "
              f"{common.load_text(run)}")
    print(f"analyze     replay {replay:.1f} s (mode {catalog['replay_mode']}), of which compile {compiling:.1f} s; "
          f"{catalog['summary']['compiles']} compiles at samples {catalog['summary']['compile_samples']}, "
          f"{catalog['summary']['topologies']} topologies")
    print(f"per sample  {overhead * 1e6:,.0f} us end to end without compiles "
          f"({replay_overhead * 1e6:,.0f} us in the replay loop; loading alone {load_per_sample * 1e6:,.0f} us)")
    rest = analyze.wall_seconds - load.wall_seconds - replay
    print(f"breakdown   startup {startup.wall_seconds:.1f} s + loading {load.wall_seconds - startup.wall_seconds:.1f} s "
          f"(baseline) + replay loop {replay - compiling:.1f} s + compiles {compiling:.1f} s + rest {rest:.1f} s "
          "(model, report, writes; the estimate assumes analyze loads as fast as the baseline)")
    print(f"ratios      analyze / load = {analyze.wall_seconds / load.wall_seconds:.1f}x, "
          f"analyze / startup = {analyze.wall_seconds / startup.wall_seconds:.1f}x, "
          f"per-sample overhead / loading per sample = {overhead / load_per_sample:.1f}x")
    time_met = analyze.wall_seconds <= TARGET_SECONDS
    rss_met = analyze.max_rss_bytes <= TARGET_RSS_BYTES
    print(f"targets     time {analyze.wall_seconds:.1f} s <= {TARGET_SECONDS:g} s: {'MET' if time_met else 'MISSED'}; "
          f"peak RSS {analyze.max_rss_bytes / 1e9:.2f} GB <= 2 GB: {'MET' if rss_met else 'MISSED'}")
    results = {
        "benchmark": "bench_scale",
        "machine": info,
        "corpus": str(options.corpus),
        "samples": samples,
        "corpus_bytes": size,
        "runs": {"startup": startup.to_json(), "load": load.to_json(), "analyze": analyze.to_json()},
        "replay_seconds": replay,
        "compile_seconds": round(compiling, 3),
        "replay_mode": catalog["replay_mode"],
        "summary": catalog["summary"],
        "overhead_us_per_sample": round(overhead * 1e6, 1),
        "replay_overhead_us_per_sample": round(replay_overhead * 1e6, 1),
        "load_us_per_sample": round(load_per_sample * 1e6, 1),
        "targets": {"seconds": TARGET_SECONDS, "rss_bytes": TARGET_RSS_BYTES,
                    "time_met": time_met, "rss_met": rss_met},
    }
    if options.profile:
        stats_path = work / "analyze.prof"
        print("profiling   guardscope.analyze under cProfile ...", flush=True)
        profiled = common.run_child(
            [python, "-c", PROFILE, str(options.corpus), str(work / "profiled"), str(stats_path)],
            work / "profile.log", shown="python -c <cProfile guardscope.analyze>",
        ).check()
        print(f"profiled    {profiled.wall_seconds:.1f} s wall  {common.load_text(profiled)}")
        results["profile"] = {"run": profiled.to_json(), "stats": str(stats_path),
                              "top_cumulative": print_profile(stats_path, samples, options.top)}
    common.write_results(options.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
