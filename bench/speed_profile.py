"""Where a request's time goes on the GPU: host time to issue the call vs device time, eager
against torch.compile variants, on the main topology of the full-size seed corpus.

    PYTHONPATH=. python bench/speed_profile.py --json OUT/speed.json [--variant default --variant cpp_wrapper]

One process (a diagnostic, not a serving benchmark: ``guardscope bench`` runs each strategy in a
fresh process). Requests are the corpus samples of its most common topology (the injected
patterns and equal edge counts left out), so every compiled variant serves them with one graph
after one compile. For each variant: compile time of its first call, then ``--passes`` passes:
mean wall latency per request (device synchronised before and after), mean host time until the
call returns (``issue``), and the device's busy time per request from ``torch.profiler`` over
``--profiled`` requests. A wall latency close to ``issue`` and well above the device time means
the host launching kernels, not the GPU, sets the latency.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

VARIANTS = {
    "default": {},
    "cpp_wrapper": {"cpp_wrapper": True},
    "max_autotune": {"max_autotune": True},
    "coordinate_descent": {"coordinate_descent_tuning": True},
}
INJECTED = {0, 4, 12, 24, 40, 60, 84, 112, 144, 180}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/speed_profile.py")
    parser.add_argument("--corpus", type=pathlib.Path, default=pathlib.Path("/tmp/gnn-full"))
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--profiled", type=int, default=20)
    parser.add_argument("--json", type=pathlib.Path)
    options = parser.parse_args(argv)

    import torch

    from guardscope import load_corpus
    from samples.gnn.model import full

    device = torch.device("cuda")
    corpus = load_corpus(options.corpus)
    requests = []
    for sample in corpus:
        kwargs = sample.kwargs
        if sample.index in INJECTED or kwargs["local_edge_index"].shape[1] == kwargs["cross_edge_index"].shape[1]:
            continue
        requests.append({k: v.to(device) for k, v in kwargs.items()})
    model = full().to(device).eval()
    with torch.inference_mode():
        model(**requests[0])
    torch.cuda.synchronize()

    def measure(call) -> dict:
        passes = []
        for _ in range(options.passes):
            walls, issues = [], []
            for kwargs in requests:
                torch.cuda.synchronize()
                begun = time.perf_counter()
                with torch.inference_mode():
                    call(**kwargs)
                issued = time.perf_counter()
                torch.cuda.synchronize()
                walls.append(time.perf_counter() - begun)
                issues.append(issued - begun)
            passes.append({"wall_ms": round(statistics.fmean(walls) * 1e3, 4),
                           "p50_ms": round(statistics.median(walls) * 1e3, 4),
                           "max_ms": round(max(walls) * 1e3, 4),
                           "issue_ms": round(statistics.fmean(issues) * 1e3, 4)})
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for kwargs in requests[: options.profiled]:
                with torch.inference_mode():
                    call(**kwargs)
            torch.cuda.synchronize()
        events = prof.key_averages()
        attribute = "self_device_time_total" if hasattr(events[0], "self_device_time_total") else "self_cuda_time_total"
        # Kernels and copies only: an operator's own entry repeats the time of the kernels it launched.
        device_us = sum(getattr(e, attribute) for e in events if e.device_type.name == "CUDA") / options.profiled
        top = sorted(events, key=lambda e: getattr(e, attribute), reverse=True)[:10]
        kernels = sum(e.count for e in events if getattr(e, attribute) > 0 and e.device_type.name == "CUDA")
        return {"passes": passes, "device_ms": round(device_us / 1e3, 4),
                "device_events_per_request": round(kernels / options.profiled, 1),
                "top": [[e.key[:90], e.count // options.profiled, round(getattr(e, attribute) / options.profiled / 1e3, 4)]
                        for e in top]}

    results = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "requests": len(requests)}
    results["eager"] = measure(model)
    print("eager", json.dumps(results["eager"]["passes"]), results["eager"]["device_ms"], flush=True)
    for name in options.variant or ["default", "cpp_wrapper"]:
        torch._dynamo.reset()
        compiled = torch.compile(model, dynamic=True, fullgraph=True, options=VARIANTS[name] or None)
        try:
            begun = time.perf_counter()
            with torch.inference_mode():
                compiled(**requests[0])
            torch.cuda.synchronize()
            first = time.perf_counter() - begun
            results[name] = {"first_call_s": round(first, 3), **measure(compiled)}
        except Exception as exc:  # a variant that cannot compile is a result too
            results[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(name, json.dumps({k: v for k, v in results[name].items() if k != "top"}), flush=True)
    results["eager_again"] = measure(model)
    print("eager_again", json.dumps(results["eager_again"]["passes"]), flush=True)
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
