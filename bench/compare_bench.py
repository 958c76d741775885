"""Compare ``guardscope bench``'s eager and plain-compile rows with ``bench/plain_bench.py``'s
independent measurement of the same corpus on the same machine (issue 7: "the bench table
matches what an independent plain-PyTorch script measures within noise").

    python bench/compare_bench.py OUT/bench.json /tmp/plain.json [--tolerance 0.05]

Checked: the samples that recompiled and those that failed at the recompile limit (identical);
eager's and the compiled model's steady mean and median, and the speedup, within ``--tolerance`` (relative; default 5%: two processes on one GPU
differ by a few percent in clocks and memory layout); first-compile and recompile latencies within
``--compile-tolerance`` (default 25%: compile times vary more from run to run). p99, max and worst
requests are printed, not checked: with 300 requests they rest on the few slowest. Exits 1 when a
checked figure differs.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys


def _row(strategies: list[dict], name: str) -> dict:
    row = next((r for r in strategies if r["name"] == name), None)
    if row is None or row["status"] != "ok":
        raise SystemExit(f"bench.json has no measured {name!r} row ({row and row['status']}): run "
                         f"'guardscope bench DIR --strategy eager --strategy compile' first")
    return row


def figures(bench: dict, plain: dict) -> list[tuple[str, object, object, str]]:
    """(figure, guardscope's value, the plain script's, how it is checked: rel, compile, exact, info)."""
    eager, compiled = _row(bench["strategies"], "eager"), _row(bench["strategies"], "compile")
    recompile = compiled["recompile_latency"] or {}
    first = compiled["first_compile"] or {}
    return [
        ("eager steady mean (ms)", eager["steady"]["mean_ms"], plain["eager"]["steady"]["mean_ms"], "rel"),
        ("eager p50 (ms)", eager["steady"]["p50_ms"], plain["eager"]["steady"]["p50_ms"], "rel"),
        ("eager p99 (ms)", eager["steady"]["p99_ms"], plain["eager"]["steady"]["p99_ms"], "info"),
        ("eager worst (ms)", eager["worst_ms"], plain["eager"]["worst_ms"], "info"),
        ("compile: recompiled samples", [e["sample"] for e in compiled["recompile_requests"]],
         plain["compile"]["recompile_samples"], "exact"),
        ("compile: samples failed at the recompile limit",
         [e["sample"] for e in compiled["error_requests"] if "RecompileLimit" in e["error"]],
         plain["compile"].get("failed_samples", []), "exact"),
        ("compile steady mean (ms)", compiled["steady"]["mean_ms"], plain["compile"]["steady"]["mean_ms"], "rel"),
        ("compile p50 (ms)", compiled["steady"]["p50_ms"], plain["compile"]["steady"]["p50_ms"], "rel"),
        ("compile p99 (ms)", compiled["steady"]["p99_ms"], plain["compile"]["steady"]["p99_ms"], "info"),
        ("compile speedup (x)", compiled["speedup"], plain["compile"]["speedup"], "rel"),
        ("first compile (s)", first.get("latency_s"), plain["compile"]["first_compile_s"], "compile"),
        ("recompile mean (s)", recompile.get("mean_s"), plain["compile"]["recompile_mean_s"], "compile"),
        ("recompile max (s)", recompile.get("max_s"), plain["compile"]["recompile_max_s"], "compile"),
        ("eager, grad enabled (the article's baseline; ms)", None,
         plain["eager_grad_enabled"]["steady"]["mean_ms"], "info"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/compare_bench.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("bench_json", type=pathlib.Path, help="DIR/bench.json from guardscope bench")
    parser.add_argument("plain_json", type=pathlib.Path, help="the --json of bench/plain_bench.py")
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--compile-tolerance", type=float, default=0.25)
    options = parser.parse_args(argv)
    bench = json.loads(options.bench_json.read_text())
    plain = json.loads(options.plain_json.read_text())
    print(f"guardscope bench: torch {bench['torch_version']} on {bench['device_name'] or bench['device']}, "
          f"repeat {bench['repeat']}; plain script: torch {plain['torch_version']} on "
          f"{plain['device_name'] or plain['device']}, repeat {plain['repeat']}")
    limits = {"rel": options.tolerance, "compile": options.compile_tolerance}
    matched = True
    print(f"{'figure':<50} {'guardscope':>12} {'plain':>12} {'difference':>11}  check")
    for name, ours, theirs, how in figures(bench, plain):
        if how == "exact":
            ok = ours == theirs
            print(f"{name:<50} {str(ours):>12} {str(theirs):>12} {'':>11}  {'same' if ok else 'DIFFERENT'}")
            matched &= ok
            continue
        if ours is None or theirs is None:
            print(f"{name:<50} {'—' if ours is None else f'{ours:.3f}':>12} "
                  f"{'—' if theirs is None else f'{theirs:.3f}':>12} {'':>11}  "
                  f"{'n/a' if how == 'info' or ours == theirs else 'MISSING'}")
            matched &= how == "info" or ours == theirs
            continue
        difference = (ours - theirs) / theirs if theirs else 0.0
        if how == "info":
            verdict = "(not checked)"
        else:
            ok = abs(difference) <= limits[how]
            matched &= ok
            verdict = f"{'within' if ok else 'OUTSIDE'} {limits[how]:.0%}"
        print(f"{name:<50} {ours:>12.3f} {theirs:>12.3f} {difference:>+10.1%}  {verdict}")
    print("verdict: " + ("MATCH within noise" if matched else "DIFFERS beyond the tolerances"))
    return 0 if matched else 1


if __name__ == "__main__":
    sys.exit(main())
