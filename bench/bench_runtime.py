"""The serving runtime on the seed corpus: a plan built from the first N requests, then every
request served, against plain ``torch.compile`` meeting the same requests.

    PYTHONPATH=. python bench/bench_runtime.py --json OUT/bench_runtime.json          # H200
    python -m bench.bench_runtime --device cpu --backend eager --corpus samples/gnn/corpus --json /tmp/r.json

Three fresh processes, each with empty inductor and triton cache folders:

  plan   the first --plan-samples requests written as a corpus, ``guardscope analyze`` (eager
         backend, as by default) and ``guardscope emit-warmup`` on it
  serve  ``guardscope.runtime.serve(model, plan, backend=--backend)``: set-up time, then every
         request of the corpus timed (device synchronised), with whether it fell back
  plain  ``torch.compile(model, backend=--backend, dynamic=True, fullgraph=True)`` meeting the
         same requests, Dynamo's recompile limit raised to 64: its recompile stalls are what
         serving avoids

Prints per-call latency (mean, median, p99, worst) of the served calls that ran a compiled graph,
of the fallbacks, and of the plain run's calls; graphs compiled while serving (expected 0);
fallback requests against the topologies first seen after the plan's requests; and the largest
difference between served and eager outputs. Expected on an H200 with the full-size corpus (plan
from 100 requests, inductor): set-up about a minute (7 graphs), 0 compiles while serving,
fallbacks at 112, 144 and 180 costing about an eager forward each (about 6 ms) where the plain
run stalls for seconds at each of its 10 recompiles. Needs only the working tree (PYTHONPATH=.).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench import common
from guardscope.plans import SERVED


def _synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed_calls(call, samples, device: str, fell_back=None) -> list[dict]:
    rows = []
    for sample in samples:
        before = fell_back() if fell_back else 0
        _synchronize(device)
        started = time.perf_counter()
        call(sample)
        _synchronize(device)
        seconds = time.perf_counter() - started
        rows.append({"sample": sample.index, "seconds": seconds,
                     "fallback": bool(fell_back and fell_back() > before)})
    return rows


def stage_plan(corpus_dir: pathlib.Path, work: pathlib.Path, plan_samples: int, device: str) -> dict:
    import guardscope
    from guardscope import CorpusWriter, load_corpus, pipeline
    from guardscope.corpus.spec import split_spec

    corpus = load_corpus(corpus_dir)
    target, attr = split_spec(corpus.manifest.model)
    source = corpus.path / target if (corpus.path / target).is_file() else common.REPO / target
    spec = f"{source.resolve()}:{attr}" if target.endswith(".py") else corpus.manifest.model
    started = time.perf_counter()
    with CorpusWriter(work / "plan-corpus", model=spec, compile=corpus.manifest.compile, overwrite=True) as writer:
        for sample in corpus:
            if sample.index >= plan_samples:
                break
            writer.add(*sample.args, **sample.kwargs)
    analysis = guardscope.analyze(work / "plan-corpus", work / "plan", device=device, force=True)
    fixes = pipeline.emit_warmup(work / "plan")
    return {
        "seconds": time.perf_counter() - started,
        "plan_topologies": [t.first_sample for t in analysis.catalog.topologies],
        "warmup_samples": [step.sample for step in fixes.warmup.steps],
        "warmup_graphs": fixes.warmup.graphs,
        "unbacked_graphs": fixes.unbacked.graphs,
    }


def _model(corpus, device: str):
    from guardscope.corpus.spec import load_model

    return load_model(corpus.manifest.model, base_dir=corpus.path).to(device).eval()


def stage_serve(corpus_dir: pathlib.Path, work: pathlib.Path, device: str, backend: str, plan: str) -> dict:
    import shutil

    import torch

    from guardscope import load_corpus, runtime

    corpus = load_corpus(corpus_dir, map_location=device)
    samples = list(corpus)
    model = _model(corpus, device)
    shutil.rmtree(work / "fallbacks", ignore_errors=True)
    counters = torch._dynamo.utils.counters
    started = time.perf_counter()
    served = runtime.serve(model, work / "plan", plan=plan, backend=backend, device=device,
                           fallback_dir=work / "fallbacks")
    setup = time.perf_counter() - started
    graphs_before = counters["stats"]["unique_graphs"]
    outputs = {}

    def call(sample):
        outputs[sample.index] = served(*sample.args, **sample.kwargs)

    rows = _timed_calls(call, samples, device, fell_back=lambda: served.stats.fallbacks)
    compiles = counters["stats"]["unique_graphs"] - graphs_before
    served.close()
    with torch.inference_mode():
        difference = max(
            (outputs[s.index] - model(*s.args, **s.kwargs)).abs().max().item() for s in samples
        )
    return {"setup_seconds": setup, "graphs": served.graphs, "plan": served.plan, "calls": rows,
            "compiles_while_serving": compiles, "stats": served.stats.to_json(),
            "max_abs_difference_vs_eager": difference}


def stage_plain(corpus_dir: pathlib.Path, device: str, backend: str) -> dict:
    import torch

    from guardscope import load_corpus, torch_compat
    from guardscope.pipeline import options_from_manifest
    from guardscope.replay.compiling import compile_model

    corpus = load_corpus(corpus_dir, map_location=device)
    samples = list(corpus)
    model = _model(corpus, device)
    options = options_from_manifest(corpus.manifest.compile, backend=backend, device=device)
    compiled = compile_model(model, options)
    counters = torch._dynamo.utils.counters
    # Raised so every topology compiles (Dynamo's default of 8 graphs would fail the ninth
    # under fullgraph=True), as the article's plain run did.
    with torch.inference_mode(), torch_compat.raised_recompile_limit(64):
        rows = _timed_calls(lambda s: compiled(*s.args, **s.kwargs), samples, device)
    return {"calls": rows, "compiles": counters["stats"]["unique_graphs"]}


def summary(rows: list[dict]) -> dict:
    if not rows:
        return {"calls": 0}
    seconds = sorted(row["seconds"] for row in rows)
    return {
        "calls": len(seconds),
        "mean_ms": statistics.fmean(seconds) * 1e3,
        "median_ms": statistics.median(seconds) * 1e3,
        "p99_ms": seconds[min(len(seconds) - 1, int(0.99 * len(seconds)))] * 1e3,
        "worst_ms": seconds[-1] * 1e3,
        "worst_sample": max(rows, key=lambda row: row["seconds"])["sample"],
    }


def _line(label: str, stats: dict) -> str:
    if not stats["calls"]:
        return f"{label:<22} no calls"
    return (f"{label:<22} {stats['calls']:4d} calls  mean {stats['mean_ms']:9.2f} ms  median "
            f"{stats['median_ms']:8.2f} ms  p99 {stats['p99_ms']:9.2f} ms  worst {stats['worst_ms']:10.2f} ms "
            f"(sample {stats['worst_sample']})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/bench_runtime.py",
        description="guardscope.runtime.serve with a plan from the first N requests vs plain "
        "torch.compile, on the seed corpus; writes a JSON of results.",
    )
    common.add_gpu_run_options(parser, work="runtime", work_help="folder for the plan, the fallback corpus and logs")
    parser.add_argument("--backend", default="inductor", help="serving backend (default %(default)s)")
    parser.add_argument("--plan", default="warmup", choices=SERVED,
                        help="plan to serve (default %(default)s)")
    parser.add_argument("--plan-samples", type=int, default=100,
                        help="the plan is built from this many first requests (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=420.0,
                        help="seconds allowed per stage before it is killed (default %(default)s)")
    parser.add_argument("--stage", choices=("plan", "serve", "plain"), help=argparse.SUPPRESS)
    parser.add_argument("--result", type=pathlib.Path, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    work = options.work.resolve()
    corpus = options.corpus.resolve()

    if options.stage:  # inside a child process
        if options.stage == "plan":
            result = stage_plan(corpus, work, options.plan_samples, options.device)
        elif options.stage == "serve":
            result = stage_serve(corpus, work, options.device, options.backend, options.plan)
        else:
            result = stage_plain(corpus, options.device, options.backend)
        options.result.write_text(json.dumps(result))
        return 0

    started = time.perf_counter()
    if not (corpus / "corpus.json").is_file():
        from bench.bench_seed import ensure_full_corpus

        ensure_full_corpus(corpus, regenerate=False)
    spec = common.ensure_model_resolves(corpus)
    print(f"corpus      {corpus} (model {spec}; {common.preread(corpus) / 1e6:.0f} MB)")
    results: dict[str, dict] = {}
    for stage in ("plan", "serve", "plain"):
        result_path = work / f"{stage}.json"
        argv = [sys.executable, str(pathlib.Path(__file__).resolve()), "--stage", stage,
                "--result", str(result_path), "--corpus", str(corpus), "--work", str(work),
                "--device", options.device, "--backend", options.backend, "--plan", options.plan,
                "--plan-samples", str(options.plan_samples)]
        print(f"running     {stage} ...", flush=True)
        from guardscope.proving.setup import isolated_caches

        with isolated_caches() as caches:  # new, empty compile caches for every stage
            run = common.run_child(argv, work / f"{stage}.log", env=common.child_env(caches),
                                   timeout=options.timeout, shown=f"bench_runtime --stage {stage}").check()
        results[stage] = {**common.read_json(result_path), "run": run.to_json()}
        print(f"  {stage:<5} {run.wall_seconds:7.1f} s wall  {common.load_text(run)}", flush=True)

    plan, serve, plain = results["plan"], results["serve"], results["plain"]
    compiled_calls = [row for row in serve["calls"] if not row["fallback"]]
    fallback_calls = [row for row in serve["calls"] if row["fallback"]]
    new_topologies = sorted(set(row["sample"] for row in fallback_calls))
    figures = {
        "served_compiled": summary(compiled_calls),
        "served_fallback": summary(fallback_calls),
        "plain": summary(plain["calls"]),
        "plain_after_first": summary(plain["calls"][1:]),
    }
    print(f"plan        from requests 0..{options.plan_samples - 1}: topologies first seen at "
          f"{plan['plan_topologies']}; warmup {plan['warmup_samples']} ({plan['warmup_graphs']} graphs)")
    print(f"serve       plan {serve['plan']}, set-up {serve['setup_seconds']:.1f} s, {serve['graphs']} graphs; "
          f"{serve['compiles_while_serving']} graphs compiled while serving; stats {serve['stats']}")
    print(f"fallbacks   at requests {new_topologies}")
    for key, label in (("served_compiled", "served, compiled"), ("served_fallback", "served, fallback"),
                       ("plain", "plain torch.compile"), ("plain_after_first", "plain, after call 0")):
        print(_line(label, figures[key]))
    print(f"outputs     largest |served - eager| = {serve['max_abs_difference_vs_eager']:.3g}")
    total = time.perf_counter() - started
    print(f"total       {total:.0f} s")
    common.write_results(options.json, {
        "benchmark": "bench_runtime",
        "machine": common.machine(),
        "corpus": str(corpus),
        "device": options.device,
        "backend": options.backend,
        "plan_samples": options.plan_samples,
        "stages": results,
        "figures": figures,
        "fallback_samples": new_topologies,
        "total_seconds": round(total, 1),
    })
    return 0 if serve["compiles_while_serving"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
