"""Background compiles while serving (issue 25): what a compile on a background thread costs the
serving thread, per strategy, on the seed corpus.

    PYTHONPATH=. python bench/bench_background_gpu.py --json OUT/bench_background.json          # H200
    python bench/bench_background_gpu.py --device cpu --backend eager --corpus samples/gnn/corpus \\
        --requests small --json /tmp/bg.json                                                     # smoke

A plan is built from the first --plan-samples requests (``guardscope analyze`` + ``emit-warmup``,
in a fresh process, as ``bench/bench_runtime.py`` does). Then each strategy runs in a fresh process
with empty compile caches:

  none         ``serve(model, plan)``: fallbacks run eagerly, nothing compiles while serving
  article      the seed article's Option 5 wrapper (its code, plain, in-process): warmed with the
               plan's samples, a guard miss (``error_on_recompile``) runs eagerly and hands the
               request to a background thread that compiles it; eager while that compile runs
  article_gil  the same with the GIL switch interval at 0.1 ms while a compile runs
  article_nice the same as article_gil, its worker thread also at the lowest priority (nice 19)
               and pinned to one core
  guardscope_thread   ``serve(model, plan, background_compile="thread")``: the compile on
               guardscope's worker thread (one at a time, most frequent first, GIL interval 0.1 ms)
  guardscope_process  ``serve(model, plan, background_compile="process")``: a child process
               compiles, the worker loads its compile-cache artifacts and compiles from them
  guardscope   ``serve(model, plan, background_compile=True)`` (its default choice)

Each process first times the eager model on every request (eager's own latency), then serves:
pass 1 every request in order; then the requests again, in order and round again, until no
background compile is pending (at most --max-wait seconds); then a steady pass of every request.
Every call is timed (device synchronised) with whether a background compile was pending. Reported
per strategy: the serving thread's latency while a compile was pending (mean, p99, max) against
eager's own, the ratio of those maxima (issue 25's target: at most 3), the seconds from each new
topology's first fallback until its compile was done, and the steady pass's latency and eager calls.
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
from bench.bench_runtime import stage_plan

STRATEGIES = ("none", "article", "article_gil", "article_nice", "guardscope_thread", "guardscope_process", "guardscope")
SERVED = {"none": False, "guardscope_thread": "thread", "guardscope_process": "process", "guardscope": True}
SMALL = 150  # --requests small: requests 0..149 (topologies first seen at 112 and 144 are new)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def latency(seconds: list[float]) -> dict:
    if not seconds:
        return {"calls": 0}
    ordered = sorted(seconds)
    return {"calls": len(ordered), "mean_ms": statistics.fmean(ordered) * 1e3,
            "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e3, "max_ms": ordered[-1] * 1e3}


class ArticleWrapper:
    """The seed article's ``AsyncCompileWrapper`` (Option 5), kept as published except that it is
    warmed with the plan's samples and reports when each compile ends."""

    def __init__(self, model, options, gil_interval_ms: float | None, nice: bool = False) -> None:
        import queue
        import threading

        from guardscope.replay.compiling import compile_model

        self.eager = model.eval()
        self.compiled = compile_model(model, options)
        self.gil_interval_ms = gil_interval_ms
        self.nice = nice
        self.jobs: queue.Queue = queue.Queue(maxsize=1)
        self.compiling = threading.Event()
        self.completed: list[float] = []  # perf_counter at each compile's end
        self.worker = threading.Thread(target=self._worker, daemon=True)
        self.worker.start()

    def _worker(self) -> None:
        import torch
        import torch._dynamo as dynamo

        if self.nice:  # Linux: a thread's priority and affinity are its own (its native id; 0 = this thread)
            import os
            import threading

            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
            os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
        while (sample := self.jobs.get()) is not None:
            previous = sys.getswitchinterval()
            if self.gil_interval_ms is not None:
                sys.setswitchinterval(self.gil_interval_ms / 1_000)
            saved = dynamo.config.error_on_recompile
            dynamo.config.error_on_recompile = False
            try:
                with torch.inference_mode():
                    self.compiled(*sample.args, **sample.kwargs)
            except Exception as exc:  # noqa: BLE001 - reported, the article's loop goes on
                print(f"article worker: compile failed: {type(exc).__name__}: {exc}", flush=True)
            finally:
                dynamo.config.error_on_recompile = saved
                sys.setswitchinterval(previous)
            self.completed.append(time.perf_counter())
            self.compiling.clear()
            self.jobs.task_done()
        self.jobs.task_done()

    def __call__(self, sample) -> bool:
        """Serve one request; True when it ran compiled."""
        import torch._dynamo as dynamo

        if self.compiling.is_set():
            self.eager(*sample.args, **sample.kwargs)
            return False
        saved = dynamo.config.error_on_recompile
        dynamo.config.error_on_recompile = True
        try:
            self.compiled(*sample.args, **sample.kwargs)
            return True
        except dynamo.exc.RecompileError:
            self.compiling.set()
            self.jobs.put(sample)
            self.eager(*sample.args, **sample.kwargs)
            return False
        finally:
            dynamo.config.error_on_recompile = saved

    def close(self) -> None:
        self.jobs.put(None)
        self.worker.join(timeout=60)


class StallTracer:
    """A diagnostic (``--trace-stalls MS``): a thread that wakes every millisecond and, when it woke
    more than ``threshold_ms`` late, notes where every other thread is. A late wake-up means some
    thread held the GIL that long (a C call that does not release it, or a collector pass); the
    thread that held it is, at that moment, just past the call that held it. It costs the serving
    thread some GIL hand-offs, so a traced run's latencies are not the strategy's figures."""

    def __init__(self, threshold_ms: float) -> None:
        import threading

        self.threshold = threshold_ms / 1_000
        self.stalls: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall-tracer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import threading
        import traceback

        me = threading.get_ident()
        while not self._stop.is_set():
            before = time.perf_counter()
            time.sleep(0.001)
            now = time.perf_counter()
            if now - before - 0.001 < self.threshold:
                continue
            names = {t.ident: t.name for t in threading.enumerate()}
            where = {}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                frames = traceback.extract_stack(frame, limit=10)[::-1]
                where[names.get(ident, str(ident))] = [
                    f"{_short(f.filename)}:{f.lineno} {f.name}" for f in frames]
            self.stalls.append({"at": before, "late_ms": round((now - before - 0.001) * 1e3, 2), "threads": where})

    def close(self) -> list[dict]:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.stalls


def _short(filename: str) -> str:
    """A frame's file without the machine's folders: torch/..., guardscope/..., bench/..."""
    for marker, kept in (("site-packages/", ""), ("guardscope/", "guardscope/"), ("bench/", "bench/")):
        _, found, rest = filename.partition(marker)
        if found:
            return kept + rest
    return filename.rsplit("/", 1)[-1]


def stalls_in_slow_calls(calls: list[dict], stalls: list[dict], threshold_ms: float) -> list[dict]:
    """The pending calls slower than ``threshold_ms``, each with the tracer's stalls inside it."""
    slow = []
    for call in calls:
        if not call["pending"] or call["seconds"] * 1e3 <= threshold_ms:
            continue
        end = call["at"] + call["seconds"]
        inside = [s for s in stalls if s["at"] <= end and s["at"] + 0.001 + s["late_ms"] / 1e3 >= call["at"]]
        slow.append({**{k: call[k] for k in ("sample", "phase", "compiled")}, "ms": round(call["seconds"] * 1e3, 2),
                     "stalls": inside})
    return slow


def stage_strategy(strategy: str, corpus_dir: pathlib.Path, work: pathlib.Path, device: str, backend: str,
                   requests: int, max_wait: float, trace_stalls: float = 0.0, yield_to_serving: bool = True) -> dict:
    import torch

    from bench.bench_runtime import _model
    from guardscope import load_corpus, runtime
    from guardscope.proving.isolation import import_file

    corpus = load_corpus(corpus_dir, map_location=device)
    samples = [s for s in corpus if s.index < requests]
    model = _model(corpus, device)

    eager_seconds = []
    with torch.inference_mode():
        for sample in samples[:3]:  # warm eager
            model(*sample.args, **sample.kwargs)
        for sample in samples:
            _sync(device)
            started = time.perf_counter()
            model(*sample.args, **sample.kwargs)
            _sync(device)
            eager_seconds.append(time.perf_counter() - started)

    started = time.perf_counter()
    if strategy.startswith("article"):
        from guardscope import store
        from guardscope.options import production_options

        catalog = store.read_catalog(work / "plan")
        options = production_options(catalog, backend=backend, device=device, grad_mode="inference_mode")
        from guardscope import torch_compat

        # The article set Dynamo's cache_size_limit to 64; torch 2.13 names it recompile_limit.
        torch_compat.raised_recompile_limit(64).__enter__()  # for the rest of this process
        served = ArticleWrapper(model, options, None if strategy == "article" else 0.1, nice=strategy == "article_nice")
        import_file(work / "plan" / "warmup.py").warmup(served.compiled, device=device, inference_mode=True)

        def call(sample) -> tuple[bool, bool]:
            pending = served.compiling.is_set()
            with torch.inference_mode():  # as the article's infer_step_async
                compiled = served(sample)
            return compiled, pending or served.compiling.is_set()

        def done() -> list[float]:
            return list(served.completed)
    else:
        served = runtime.serve(model, work / "plan", plan="warmup", backend=backend, device=device,
                               background_compile=SERVED[strategy], background_yield=yield_to_serving)
        done_at: list[float] = []

        def call(sample) -> tuple[bool, bool]:
            before = served.stats
            pending = before.background_pending > 0
            with torch.inference_mode():
                served(*sample.args, **sample.kwargs)
            stats = served.stats
            while len(done_at) < stats.background_done + stats.background_failed:
                done_at.append(time.perf_counter())
            # Eager: a fallback, or an accepted call run eagerly while the worker's compile FX-traced.
            compiled = (stats.fallbacks, stats.background_eager_tracing) == (before.fallbacks,
                                                                            before.background_eager_tracing)
            return compiled, pending or stats.background_pending > 0

        def done() -> list[float]:
            return list(done_at)
    setup = time.perf_counter() - started

    rows = []
    tracer = StallTracer(trace_stalls) if trace_stalls else None

    def timed(sample, phase: str) -> None:
        _sync(device)
        started = time.perf_counter()
        compiled, pending = call(sample)
        _sync(device)
        seconds = time.perf_counter() - started
        rows.append({"sample": sample.index, "phase": phase, "seconds": seconds, "compiled": compiled,
                     "pending": pending, "at": started})

    for sample in samples:
        timed(sample, "first")
    deadline = time.perf_counter() + max_wait
    rounds, busy = 0, any(r["pending"] for r in rows)
    while strategy != "none" and time.perf_counter() < deadline and (
            busy or (strategy.startswith("guardscope") and served.stats.background_pending)):
        rounds += 1
        for sample in samples:
            timed(sample, "waiting")
        busy = any(r["pending"] for r in rows[-len(samples):])
    for sample in samples:
        timed(sample, "steady")
    ends = done()
    stalls = tracer.close() if tracer else []
    if hasattr(served, "close"):
        served.close()
    eager_max_ms = max(eager_seconds) * 1e3
    return {
        **({"stall_trace": {"threshold_ms": trace_stalls, "stalls": stalls,
                            "slow_pending_calls": stalls_in_slow_calls(rows, stalls, 3 * eager_max_ms)}}
           if tracer else {}),
        "strategy": strategy,
        "setup_seconds": setup,
        "eager": latency(eager_seconds),
        "pending": latency([r["seconds"] for r in rows if r["pending"]]),
        "pending_eager_calls": sum(1 for r in rows if r["pending"] and not r["compiled"]),
        "not_pending": latency([r["seconds"] for r in rows if not r["pending"]]),
        "steady": latency([r["seconds"] for r in rows if r["phase"] == "steady"]),
        "steady_eager_calls": sum(1 for r in rows if r["phase"] == "steady" and not r["compiled"]),
        "compiles_done": len(ends),
        "waiting_rounds": rounds,
        "stats": served.stats.to_json() if hasattr(served, "stats") else None,
        "calls": [{k: r[k] for k in ("sample", "phase", "seconds", "compiled", "pending", "at")} for r in rows],
    }


def seconds_to_compiled(calls: list[dict], new: list[int]) -> dict[int, float | None]:
    """Per new-topology request: seconds from its first call (pass 1) to its first call served
    compiled (None: never within the run)."""
    result: dict[int, float | None] = {}
    for index in new:
        mine = [c for c in calls if c["sample"] == index]
        later = [c["at"] for c in mine if c["compiled"]]
        result[index] = (later[0] - mine[0]["at"]) if mine and later else None
    return result


def stall_summary(trace: dict) -> str:
    """How many slow pending calls held a GIL stall, and where the other threads were in them."""
    from collections import Counter

    slow = trace["slow_pending_calls"]
    with_stall = [call for call in slow if call["stalls"]]
    places: Counter = Counter()
    for call in with_stall:
        for stall in call["stalls"]:
            for name, frames in stall["threads"].items():
                if name != "MainThread" and frames:
                    places[f"{name}: " + " < ".join(frames[:3])] += 1
    lines = [(f"  stalls    {len(trace['stalls'])} over {trace['threshold_ms']} ms; {len(slow)} pending calls over "
              f"3x eager's max, {len(with_stall)} of them held a stall")]
    lines += [f"    {count:3d}x {place}" for place, count in places.most_common(12)]
    for call in sorted(slow, key=lambda c: -c["ms"])[:5]:
        lines.append(f"    call {call['sample']} ({call['phase']}, {'compiled' if call['compiled'] else 'eager'}) "
                     f"{call['ms']} ms: stalls {[s['late_ms'] for s in call['stalls']]}")
    return "\n".join(lines)


def _line(label: str, figures: dict) -> str:
    if not figures.get("calls"):
        return f"  {label:<10} no calls"
    return (f"  {label:<10} {figures['calls']:5d} calls  mean {figures['mean_ms']:9.2f} ms  "
            f"p99 {figures['p99_ms']:9.2f} ms  max {figures['max_ms']:9.2f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/bench_background_gpu.py", description=__doc__.splitlines()[0])
    common.add_gpu_run_options(parser, work="background", work_help="folder for the plan and logs")
    parser.add_argument("--backend", default="inductor", help="serving backend (default %(default)s)")
    parser.add_argument("--plan-samples", type=int, default=100, help="plan from this many first requests (default 100)")
    parser.add_argument("--requests", default="all",
                        help=f"'all', 'small' (the first {SMALL}: a CPU smoke test) or a number (default all)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated, of " + ", ".join(STRATEGIES))
    parser.add_argument("--max-wait", type=float, default=300.0,
                        help="seconds of serving allowed for the background compiles to finish (default 300)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per child process (default 900)")
    parser.add_argument("--reuse-plan", action="store_true", help="keep the plan already in --work (a second call)")
    parser.add_argument("--no-yield", dest="yield_to_serving", action="store_false",
                        help="guardscope's strategies with serve(background_yield=False): the compile takes turns "
                        "with served calls for the GIL instead of stepping aside (the runtime before it)")
    parser.add_argument("--trace-stalls", type=float, default=0.0, metavar="MS",
                        help="diagnostic: note where every thread is whenever a sampling thread wakes more than MS "
                        "late (a GIL hold), and which of them fell in the pending calls slower than 3x eager's max")
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=pathlib.Path, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    work, corpus = options.work.resolve(), options.corpus.resolve()
    requests = {"all": 1 << 30, "small": SMALL}.get(options.requests) or int(options.requests)

    if options.stage:  # inside a child process
        if options.stage == "plan":
            result = stage_plan(corpus, work, options.plan_samples, options.device)
        else:
            result = stage_strategy(options.stage, corpus, work, options.device, options.backend, requests,
                                    options.max_wait, options.trace_stalls, options.yield_to_serving)
        options.result.write_text(json.dumps(result))
        return 0

    strategies = [s for s in options.strategies.split(",") if s]
    unknown = sorted(set(strategies) - set(STRATEGIES))
    if unknown:
        parser.error(f"unknown strategies: {', '.join(unknown)}")
    if not (corpus / "corpus.json").is_file():
        from bench.bench_seed import ensure_full_corpus

        ensure_full_corpus(corpus, regenerate=False)
    spec = common.ensure_model_resolves(corpus)
    print(f"corpus      {corpus} (model {spec}), device {options.device}, backend {options.backend}")
    from guardscope.proving.setup import isolated_caches

    results: dict[str, dict] = {}

    def save(results: dict) -> None:
        common.write_results(options.json, {
            "benchmark": "bench_background_gpu",
            "machine": common.machine(),
            "corpus": str(corpus),
            "device": options.device,
            "backend": options.backend,
            "background_yield": options.yield_to_serving,
            "plan_samples": options.plan_samples,
            "requests": requests,
            "results": results,
        })
    reuse = options.reuse_plan and (work / "plan" / "warmup.py").is_file() and (work / "plan.json").is_file()
    if reuse:
        results["plan"] = common.read_json(work / "plan.json")
    for stage in ("plan", *strategies) if not reuse else strategies:
        result_path = work / f"{stage}.json"
        argv = [sys.executable, str(pathlib.Path(__file__).resolve()), "--stage", stage, "--result", str(result_path),
                "--corpus", str(corpus), "--work", str(work), "--device", options.device, "--backend",
                options.backend, "--plan-samples", str(options.plan_samples), "--requests", str(requests),
                "--max-wait", str(options.max_wait), "--trace-stalls", str(options.trace_stalls),
                *([] if options.yield_to_serving else ["--no-yield"])]
        print(f"running     {stage} ...", flush=True)
        with isolated_caches() as caches:
            run = common.run_child(argv, work / f"{stage}.log", env=common.child_env(caches),
                                   timeout=options.timeout, shown=f"bench_background_gpu --stage {stage}").check()
        results[stage] = {**common.read_json(result_path), "run": run.to_json()}
        if stage == "plan":
            print(f"  plan      topologies first seen at {results[stage]['plan_topologies']}", flush=True)
            continue
        r = results[stage]
        reference = results.get("none", r)  # the requests that fell back without background compiles
        new = sorted({c["sample"] for c in reference["calls"] if c["phase"] == "first" and not c["compiled"]})
        r["new_topology_requests"] = new
        r["seconds_to_compiled"] = seconds_to_compiled(r["calls"], new)
        ratio = (r["pending"]["max_ms"] / r["eager"]["max_ms"]) if r["pending"].get("calls") else None
        r["pending_max_over_eager_max"] = ratio
        shown = {k: (round(v, 2) if v is not None else None) for k, v in r["seconds_to_compiled"].items()}
        print(f"  {stage}: set-up {r['setup_seconds']:.1f} s, {r['compiles_done']} compiles done, "
              f"seconds to served compiled (by request) {shown}", flush=True)
        print(_line("eager", r["eager"]))
        print(_line("pending", r["pending"]) + (f"  (max {ratio:.2f}x eager's max)" if ratio else ""))
        print(_line("steady", r["steady"]) + f"  ({r['steady_eager_calls']} eager)", flush=True)
        if "stall_trace" in r:
            print(stall_summary(r["stall_trace"]), flush=True)
        if r.get("stats"):
            print(f"  eager while a background compile FX-traced: "
                  f"{r['stats']['background'].get('eager_while_tracing', 0)} calls", flush=True)
        save(results)  # after each strategy: a run cut short keeps the strategies it finished
    save(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
