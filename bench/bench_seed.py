"""Full-size seed corpus: guardscope's default analysis (guard-only replay) against the plain
replay (``--replay full``), same backend, each in a fresh process; same catalog?

    python -m bench.bench_seed                        # /tmp/gnn-full, generated when missing
    python -m bench.bench_seed --corpus DIR --json results.json

Prints each run's wall time (process start to exit, as a user sees it) and replay/compile
seconds from ``timings.json``, the ratio plain / guardscope, and IDENTICAL or DIFFERENT for the
two ``catalog.json`` files compared byte for byte with ``replay_mode`` blanked (the one field
that may differ). Target (issue 5): ratio >= 8 on the 2-core CPU machines. A plain full-size
replay costs minutes there (about 0.85 s per forward, 300 forwards).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench import common

TARGET_RATIO = 8.0


def ensure_full_corpus(corpus: pathlib.Path, regenerate: bool) -> str:
    """Generate the article's full-size corpus in ``corpus`` when missing (or asked)."""
    if regenerate or not (corpus / "corpus.json").is_file():
        from samples.gnn.generate import model_spec, write_corpus

        started = time.perf_counter()
        write_corpus(corpus, model=model_spec(corpus, "full"), overwrite=regenerate)
        print(f"generated   {corpus} in {time.perf_counter() - started:.1f} s")
    return common.ensure_model_resolves(corpus)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_seed",
        description="guardscope analyze (default guard-only replay) vs the plain replay "
        "(--replay full) on the full-size seed corpus, same backend, fresh processes.",
    )
    parser.add_argument("--corpus", type=pathlib.Path, default=pathlib.Path("/tmp/gnn-full"),
                        help="full-size corpus (generated there when missing; default %(default)s)")
    parser.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/guardscope-bench/seed"),
                        help="folder for the two analyses and their logs (default %(default)s)")
    parser.add_argument("--backend", default="eager", help="backend of both runs (default %(default)s)")
    parser.add_argument("--device", default="cpu", help="device of both runs (default %(default)s)")
    parser.add_argument("--regenerate", action="store_true", help="rewrite the corpus first")
    parser.add_argument("--json", help="also write the results to this JSON file")
    options = parser.parse_args(argv)

    spec = ensure_full_corpus(options.corpus, options.regenerate)
    info = common.machine()
    print(f"machine     {common.describe_machine(info)}")
    print(f"corpus      {options.corpus} (model {spec}; {common.preread(options.corpus) / 1e6:.0f} MB, "
          "read once into the page cache)")
    shared = ("--backend", options.backend, "--device", options.device)
    runs = {}
    for name, extra in (("guardscope", ()), ("plain", ("--replay", "full"))):
        out = options.work / name
        print(f"running     {name}: guardscope analyze {options.corpus} --out {out} "
              f"{' '.join(shared + extra)} ...", flush=True)
        runs[name] = common.run_analyze(options.corpus, out, *shared, *extra).check()
    rows = {}
    for name, run in runs.items():
        out = options.work / name
        catalog = common.read_json(out / "catalog.json")
        rows[name] = {
            **run.to_json(),
            "replay_mode": catalog["replay_mode"],
            "replay_seconds": common.replay_seconds(out),
            "compile_seconds": round(common.compile_seconds(out), 3),
            "compile_samples": catalog["summary"]["compile_samples"],
            "topologies": catalog["summary"]["topologies"],
        }
        row = rows[name]
        print(f"{name:<11} {row['wall_seconds']:7.1f} s wall  replay {row['replay_seconds']:7.1f} s "
              f"(compile {row['compile_seconds']:.1f} s, mode {row['replay_mode']})  "
              f"peak RSS {row['max_rss_bytes'] / 2**20:,.0f} MiB  {common.load_text(run)}")
    ratio = rows["plain"]["wall_seconds"] / rows["guardscope"]["wall_seconds"]
    replay_ratio = rows["plain"]["replay_seconds"] / rows["guardscope"]["replay_seconds"]
    identical = common.catalogs_identical_except_replay_mode(
        options.work / "guardscope" / "catalog.json", options.work / "plain" / "catalog.json"
    )
    print(f"ratio       plain / guardscope = {ratio:.1f}x wall ({replay_ratio:.1f}x replay only); "
          f"target >= {TARGET_RATIO:g}x: {'MET' if ratio >= TARGET_RATIO else 'MISSED'}")
    print(f"catalog     {'IDENTICAL' if identical else 'DIFFERENT'} (catalog.json byte for byte, "
          "replay_mode blanked)")
    print(f"compiles    at samples {rows['guardscope']['compile_samples']}, "
          f"{rows['guardscope']['topologies']} topologies")
    common.write_results(options.json, {
        "benchmark": "bench_seed",
        "machine": info,
        "corpus": str(options.corpus),
        "runs": rows,
        "ratio_wall": round(ratio, 3),
        "ratio_replay": round(replay_ratio, 3),
        "target_ratio": TARGET_RATIO,
        "target_met": ratio >= TARGET_RATIO,
        "catalog_identical": identical,
    })
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
