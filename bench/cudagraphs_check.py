"""CUDA Graph Trees on a real GPU: does guardscope see every recording and skip, per sample?

    PYTHONPATH=. python bench/cudagraphs_check.py --out $OUT          # on the GPU machine (H200)

In-process analyses with ``--backend inductor --device cuda --mode reduce-overhead`` of the
small seed GNN:

  default       the seed corpus (samples/gnn/corpus: 300 requests, 300 distinct shapes): a new
                CUDA graph tree (warm-up) per request, nothing seen twice, so no recording
  repeats       its first 40 requests, then the same 40 again: a shape is recorded on its second
                call by the graph that runs it. Dynamo tries graphs most-recently-used first, so
                the second round mostly runs on graph 0/1 (sample 40, the first request again, is
                no longer run by 0/0): 41 new shapes and 39 recordings expected
  skip_dynamic  the repeats corpus with torch._inductor.config.triton.cudagraph_skip_dynamic_graphs
                = True. With inductor's graph partitioning (torch 2.11+, on by default) only the
                static-shape partitions are CUDA-graphed: one new shape per graph that ran, one
                recording per graph that ran twice, no re-recording per size and no skip (5 and
                4 here). Without it (TORCHINDUCTOR_GRAPH_PARTITION=0, or an older torch) every
                graph has symbolic sizes, so each compile logs a skip and nothing records

For each it prints guardscope's summary, torch's own cudagraph counters for the run, and checks:
the compiles are the article's (the first eleven or five), every sample ran (``full`` replay),
and the new shapes / recordings guardscope observed equal what the shapes predict
(``expected``, which follows the graph Dynamo really ran and inductor's settings). It writes
under ``--out``:

  default/, repeats/, skip_dynamic/  the analyses (catalog.json, report.html, trace/cudagraphs.jsonl)
  repeats-corpus/                    the repeats corpus
  cudagraphs_fixture.json            per run: the raw records (cudagraphs log lines, the trace's
                                     capture events) of the first 40 samples and of every sample with
                                     a skip or recording, the events guardscope made of them, torch's
                                     counters, version and device. Copy it to
                                     tests/fixtures/cudagraphs/torch-<version>/ to test the parser on it.

Expected on an H200 with torch 2.11: 1-3 minutes in all (21 inductor compiles of the small
model); ends with "ALL CHECKS PASSED".
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

REPO = pathlib.Path(__file__).resolve().parents[1]
SEED = REPO / "samples" / "gnn" / "corpus"
MODEL = REPO / "samples" / "gnn" / "model.py"
ARTICLE_COMPILES = [0, 1, 4, 12, 24, 40, 60, 84, 112, 144, 180]
REPEATED = 40  # the repeats corpus: the first 40 requests twice
FIXTURE_SAMPLES = 40  # the raw records of the first samples, plus those of every sample with a skip or recording


def repeats_corpus(out: pathlib.Path) -> pathlib.Path:
    from guardscope import CorpusWriter, load_corpus

    seed = load_corpus(SEED)
    target = out / "repeats-corpus"
    with CorpusWriter(target, model=f"{MODEL}:small", compile=seed.manifest.compile, overwrite=True) as writer:
        for _ in range(2):
            for index in range(REPEATED):
                sample = seed.sample(index)
                writer.add(*sample.args, **sample.kwargs)
    return target


def counters_snapshot() -> dict[str, int]:
    from torch._dynamo.utils import counters

    return {key: int(value) for key, value in sorted(counters["inductor"].items()) if "cudagraph" in key}


def run(name: str, corpus: pathlib.Path, out: pathlib.Path, skip_dynamic: bool, compiles: list[int],
        device: str = "cuda", backend: str = "inductor") -> dict:
    import torch

    import guardscope
    from guardscope.replay.cudagraphs import cudagraph_events, read_cudagraph_log
    from guardscope.store import CUDAGRAPH_LOG, TRACE_DIR
    from guardscope.terminal import format_summary

    before = counters_snapshot()
    started = time.perf_counter()
    with torch._inductor.config.patch({"triton.cudagraph_skip_dynamic_graphs": skip_dynamic}):
        analysis = guardscope.analyze(corpus, out / name, force=True, backend=backend, device=device,
                                      mode="reduce-overhead")
    seconds = time.perf_counter() - started
    after = counters_snapshot()
    print(f"\n=== {name} ({seconds:.0f} s) ===")
    print(format_summary(analysis))
    for warning in analysis.warnings:
        print(f"warning: {warning}")

    catalog = analysis.catalog.to_json()
    section = catalog["cudagraphs"]
    recorded, expected = section["recorded"] or {"new_shapes": {"count": 0}, "recordings": {"count": 0}, "skips": []}, section["expected"]
    settings = section["settings"]
    checks = {
        "compiles are the article's": catalog["summary"]["compile_samples"] == compiles,
        "every sample ran (full replay)": catalog["replay_mode"] == "full",
        "recordings observed": section["observed"] is True,
        "no unreadable records": not catalog["summary"]["unparsed"],
        "skip_dynamic_graphs seen as set": settings["skip_dynamic_graphs"] is skip_dynamic,
        "new shapes as expected": recorded["new_shapes"]["count"] == expected["new_shapes"],
        "recordings as expected": recorded["recordings"]["count"] == expected["recordings"],
    }
    dynamic_skips = sum(skip["count"] for skip in recorded["skips"] if "cudagraph_skip_dynamic_graphs" in skip["reason"])
    if skip_dynamic and settings["graph_partition"]:
        # Partitioned: the static partitions of each graph are captured once, whatever the sizes
        # (so "recordings as expected" means one per graph that ran twice).
        checks["no re-recording per size: at most one recording per graph"] = all(
            g["recordings"] <= 1 for g in recorded.get("by_graph", []) if g["graph"] != "unknown")
        checks["no whole-graph skip"] = dynamic_skips == 0
    elif skip_dynamic:
        checks["a skip with torch's reason per compile"] = dynamic_skips == len(compiles)
        checks["nothing recorded"] = recorded["recordings"]["count"] == 0
    counters = {key: after.get(key, 0) - before.get(key, 0) for key in sorted(set(before) | set(after))}
    print(f"torch counters (this run): {counters}")
    for check, passed in checks.items():
        print(f"  {'ok  ' if passed else 'FAIL'} {check}")

    raw_path = out / name / TRACE_DIR / CUDAGRAPH_LOG
    # (no raw log when the replay did not run CUDA graphs: --device cpu checks the logic only)
    by_sample, unreadable = read_cudagraph_log(raw_path.read_text().splitlines() if raw_path.exists() else [])
    eventful = {s for s, records in by_sample.items()
                if any(e.kind.value in ("skip", "recording") for e in cudagraph_events(records)[0])}
    kept = sorted((s for s in by_sample if s is not None and (s < FIXTURE_SAMPLES or s in eventful)))
    return {
        "seconds": round(seconds, 1),
        "checks": checks,
        "counters": counters,
        "recorded": recorded,
        "expected": expected,
        "settings": settings,
        "padding_verdict": section["padding"]["verdict"],
        "unreadable_lines": unreadable,
        "raw_lines": sum(len(r) for r in by_sample.values()),
        "samples": {
            str(s): {
                "records": [r.to_json() for r in by_sample[s]],
                "events": [[e.kind.value, e.detail, e.compile_id] for e in cudagraph_events(by_sample[s])[0]],
            }
            for s in kept
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--out", type=pathlib.Path, required=True, help="folder for the analyses and the fixture")
    parser.add_argument("--runs", nargs="+", choices=("default", "repeats", "skip_dynamic"),
                        default=["default", "repeats", "skip_dynamic"])
    parser.add_argument("--device", default="cuda", help="cpu runs the script's logic only: no CUDA graphs, checks fail")
    parser.add_argument("--backend", default="inductor", choices=("inductor", "eager"))
    args = parser.parse_args(argv)

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("needs a CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    from guardscope import torch_compat

    args.out.mkdir(parents=True, exist_ok=True)
    repeats = repeats_corpus(args.out)
    first = [s for s in ARTICLE_COMPILES if s < REPEATED]
    plan = {
        "default": (SEED, False, ARTICLE_COMPILES),
        "repeats": (repeats, False, first),
        "skip_dynamic": (repeats, True, first),
    }
    results = {}
    for name in args.runs:
        corpus, skip_dynamic, compiles = plan[name]
        results[name] = run(name, corpus, args.out, skip_dynamic, compiles, device=args.device, backend=args.backend)
    fixture = {
        "torch_version": torch_compat.torch_version(),
        "torch_build": str(torch.__version__),
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device,
        "command": "PYTHONPATH=. python bench/cudagraphs_check.py --out OUT",
        "runs": results,
    }
    path = args.out / "cudagraphs_fixture.json"
    path.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")
    failed = [f"{name}: {check}" for name, r in results.items() for check, ok in r["checks"].items() if not ok]
    print(f"\nwrote {path} ({path.stat().st_size // 1024} KiB)")
    print("ALL CHECKS PASSED" if not failed else "FAILED: " + "; ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
