"""``guardscope bench``: what each way of serving the model costs, in the seed article's terms.

For each strategy — eager; plain ``torch.compile``; guardscope's warmup; guardscope's
``mark_unbacked`` plan; ``torch.export`` + AOTInductor with an eager fallback for calls outside the
exported bounds — one fresh process (``python -m guardscope.proving.bench STRATEGY DIR RESULT``), with
empty inductor and triton cache folders of its own (``TORCHINDUCTOR_CACHE_DIR``,
``TRITON_CACHE_DIR``) so that its set-up compiles everything it needs. A crash, a segfault or a
timeout becomes a ``failed`` row for that strategy, never the end of the others.

What a strategy's process does:

1. builds the model on the device and runs one eager forward of the corpus's first sample,
   untimed: CUDA context, cuBLAS handles and the caching allocator are what any server pays at
   start, whatever it serves with;
2. **set-up**, timed: nothing (eager, plain compile: torch.compile is lazy); ``warmup()``
   (warmup); ``configure()`` + ``warmup()`` (unbacked); ``torch.export`` with the emitted Dims,
   AOTInductor compile and load, one call of the export example (export);
3. **replay**: the corpus in recorded order (``repeat`` times), request by request. A request's
   arguments are moved to the device first (untimed); then the device is synchronized, the clock
   read, the call made under the analysis's grad mode (``mark()`` first for the unbacked plan; the
   bounds check, then the AOTInductor model or the eager fallback, for export), the device
   synchronized and the clock read again. Whether a request compiled is read from Dynamo's own
   graph counter before and after it (the structured trace is left off: its payloads would add to
   the compile times measured);
4. **paired** (every strategy but eager, ``paired`` passes, 1 by default): the corpus once more,
   each request run eagerly and with the strategy back to back, alternating which goes first.
   Fresh eager processes on one H200 measured steady means from 5.70 to 6.44 ms, and eager
   drifted by as much within one process, so a ratio of two processes' means carries that noise;
   the paired ratio compares both on the same requests, clocks and allocator, and is what the
   speedup target is judged on when it was measured.

The pure functions below turn what the children report into rows: set-up, graphs compiled,
recompiles during the replay (the first compile of a process that had compiled nothing is its
first compile, not a recompile) with their latency, steady latency (requests that compiled nothing:
mean, p50, p99, max), the worst request, the speedup over eager (eager's steady mean over the
strategy's, and the paired ratio), the targets each strategy meets, and which of guardscope's
plans to serve with.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from .. import plans, store, torch_compat
from ..corpus import load_corpus
from ..errors import CompileOptionsError
from ..options import production_options
from ..text import exception_line, format_duration, format_ms, format_ratio, generation_lines, missed_targets
from .isolation import child_environment, import_file, run_module
from .setup import isolated_caches
from .tokens import generation_stats

TITLES = {"eager": "eager", "compile": "plain torch.compile", **{p.name: p.bench_title for p in plans.PLANS}}
# The plain compile raises Dynamo's recompile limit as the seed article does (64; 8 by default),
# so that it recompiles instead of failing under fullgraph=True.
PLAIN_RECOMPILE_LIMIT = 64
# Long lists in bench.json (recompiling requests, fallbacks, errors) keep this many entries.
LISTED = 200


@dataclass(frozen=True)
class Criteria:
    """What a plan must achieve to be recommended (issue 7's targets by default)."""

    max_recompiles: int = 0
    min_speedup: float = 1.25
    max_setup_seconds: float = 70.0
    max_worst_ratio: float = 3.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --- pure: statistics, targets, recommendation, table ------------------------------------------


def percentile(ordered: list[float], fraction: float) -> float:
    """Linear interpolation between closest ranks (numpy's default) of sorted values."""
    if not ordered:
        raise ValueError("percentile of no values")
    position = (len(ordered) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def latency_stats(seconds: Iterable[float]) -> dict[str, Any] | None:
    """count, mean, p50, p99 and max of request latencies, in milliseconds."""
    ordered = sorted(seconds)
    if not ordered:
        return None
    return {
        "count": len(ordered),
        "mean_ms": round(1e3 * sum(ordered) / len(ordered), 4),
        "p50_ms": round(1e3 * percentile(ordered, 0.50), 4),
        "p99_ms": round(1e3 * percentile(ordered, 0.99), 4),
        "max_ms": round(1e3 * ordered[-1], 4),
    }


def paired_stats(pairs: list[list]) -> dict[str, Any] | None:
    """Eager against the strategy on the same requests in the same process (``[sample, eager
    seconds, strategy seconds]`` per request, see :func:`paired_pass`): both means and their ratio."""
    if not pairs:
        return None
    eager = sum(pair[1] for pair in pairs)
    served = sum(pair[2] for pair in pairs)
    return {
        "requests": len(pairs),
        "eager_mean_ms": round(1e3 * eager / len(pairs), 4),
        "mean_ms": round(1e3 * served / len(pairs), 4),
        "speedup": round(eager / served, 4) if served > 0 else None,
    }


def empty_row(name: str, status: str, reason: str | None, wall_seconds: float | None = None) -> dict[str, Any]:
    """A strategy's row with nothing measured (skipped, or failed before reporting)."""
    return {
        "name": name,
        "title": TITLES[name],
        "status": status,
        "reason": reason,
        "device_name": None,
        "setup_seconds": None,
        "setup_graphs": None,
        "replay_compiles": None,
        "recompiles": None,
        "first_compile": None,
        "recompile_requests": [],
        "recompile_latency": None,
        "requests": None,
        "paired": None,
        "bundle": None,
        "steady": None,
        "worst_ms": None,
        "worst_sample": None,
        "fallbacks": None,
        "fallback_requests": [],
        "errors": None,
        "error_requests": [],
        "speedup": None,
        "targets": None,
        "generation": None,
        "wall_seconds": None if wall_seconds is None else round(wall_seconds, 3),
    }


def summarize(name: str, raw: dict[str, Any], wall_seconds: float | None = None, *,
              tags: Callable[[int], tuple | None] | None = None, per_pass: int = 0) -> dict[str, Any]:
    """A strategy's row from what its process reported (see :func:`_measure`).

    ``raw["requests"]`` holds ``[sample, seconds, graphs compiled]`` per request in replay order;
    ``raw["fallbacks"]`` and ``raw["errors"]`` ``[request, text]``. A request that compiled is a
    recompile, except the first one of a strategy that compiled nothing at set-up (the plain
    compile's first request): that is its first compile. With ``tags`` (sample -> ``(request,
    step)``, the corpus's ``requests.json``) and the corpus's length ``per_pass``, the row also
    has the generation figures (:func:`guardscope.proving.tokens.generation_stats`).
    """
    requests = raw["requests"]
    errors = {request: text for request, text in raw["errors"]}
    setup_graphs = raw["setup_graphs"]

    def entry(request: int) -> dict[str, Any]:
        sample, seconds, graphs = requests[request]
        return {"request": request, "sample": sample, "latency_s": round(seconds, 4), "graphs": graphs}

    compiled = [entry(request) for request, (_, _, graphs) in enumerate(requests) if graphs]
    first = compiled[0] if compiled and not setup_graphs else None
    recompiling = compiled[1:] if first else compiled
    steady = [seconds for request, (_, seconds, graphs) in enumerate(requests)
              if not graphs and request not in errors]
    worst = max(range(len(requests)), key=lambda request: requests[request][1], default=None)
    row = empty_row(name, "ok", None, wall_seconds)
    row.update(
        device_name=raw.get("device_name"),
        setup_seconds=round(raw["setup_seconds"], 4),
        setup_graphs=setup_graphs,
        replay_compiles=sum(graphs for _, _, graphs in requests),
        recompiles=len(recompiling),
        first_compile=first,
        recompile_requests=recompiling[:LISTED],
        recompile_latency=None if not recompiling else {
            "mean_s": round(sum(e["latency_s"] for e in recompiling) / len(recompiling), 4),
            "max_s": round(max(e["latency_s"] for e in recompiling), 4),
        },
        requests=len(requests),
        steady=latency_stats(steady),
        worst_ms=None if worst is None else round(1e3 * requests[worst][1], 4),
        worst_sample=None if worst is None else requests[worst][0],
        fallbacks=len(raw["fallbacks"]) if name == "export" else None,
        fallback_requests=[{"request": r, "sample": requests[r][0], "reason": text}
                           for r, text in raw["fallbacks"][:LISTED]],
        paired=paired_stats(raw.get("paired") or []),
        bundle=raw.get("bundle_load"),
        errors=len(errors),
        error_requests=[{"request": r, "sample": requests[r][0], "error": text}
                        for r, text in raw["errors"][:LISTED]],
        generation=None if tags is None else generation_stats(requests, tags, per_pass, set(errors), latency_stats),
    )
    return row


def _target(value: float | None, limit: float, at_most: bool) -> dict[str, Any]:
    met = None if value is None else (value <= limit if at_most else value >= limit)
    return {"value": value, "limit": limit, "met": met}


def apply_targets(rows: list[dict[str, Any]], criteria: Criteria) -> list[dict[str, Any]]:
    """Fill each measured row's speedup over eager and its targets (new rows; eager has none).

    ``speedup`` is eager's steady mean over the strategy's; ``worst_ratio`` the strategy's worst
    request over eager's (see :func:`worst_ratio`). Both are None (and their targets unknown)
    without a measured eager row.
    """
    eager_row = next((r for r in rows if r["name"] == "eager"), None)
    eager = eager_row if eager_row and eager_row["status"] == "ok" else None
    eager_mean = eager["steady"]["mean_ms"] if eager and eager["steady"] else None
    result = []
    for row in rows:
        row = dict(row)
        if row["status"] == "ok":
            mean = row["steady"]["mean_ms"] if row["steady"] else None
            row["speedup"] = round(eager_mean / mean, 4) if eager_mean and mean else None
            paired = (row.get("paired") or {}).get("speedup")
            # The target is judged on the paired ratio where there is one: eager and the strategy
            # timed on the same requests in the same process, free of the drift between processes.
            judged = paired if paired is not None else row["speedup"]
            if row["name"] != "eager":
                worst, unknown = worst_ratio(row, eager_row)
                row["targets"] = {
                    "recompiles": _target(row["recompiles"], criteria.max_recompiles, at_most=True),
                    "failed_requests": _target(row["errors"], 0, at_most=True),
                    "speedup": {**_target(judged, criteria.min_speedup, at_most=False),
                                "basis": "paired" if paired is not None else "processes"},
                    "setup_seconds": _target(row["setup_seconds"], criteria.max_setup_seconds, at_most=True),
                    "worst_ratio": {**_target(worst, criteria.max_worst_ratio, at_most=True), "unknown": unknown},
                }
        result.append(row)
    return result


def worst_ratio(row: dict[str, Any], eager: dict[str, Any] | None) -> tuple[float | None, str | None]:
    """The row's worst request over eager's worst, or None and why it is unknown (no eager row,
    eager failed or skipped, a worst request that was not measured or measured 0 ms)."""
    if eager is None:
        return None, "no eager row"
    if eager["status"] != "ok":
        return None, f"eager {eager['status']}"
    if eager["worst_ms"] is None or row["worst_ms"] is None:
        return None, "no request measured"
    if eager["worst_ms"] == 0:
        return None, "eager's worst request measured 0 ms"
    return round(row["worst_ms"] / eager["worst_ms"], 4), None


def recommend(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Which of guardscope's plans to serve with: among those meeting every target, the fastest
    (highest speedup); when none does, the closest (fewest targets missed, then speedup), flagged."""
    measured = [r for r in rows if r["name"] in plans.NAMES and r["status"] == "ok" and r["targets"]]
    if not measured:
        tried = [r["name"] for r in rows if r["name"] in plans.NAMES]
        return {
            "strategy": None,
            "meets_targets": False,
            "reason": ("No plan was measured" if not tried else
                       "No plan ran to the end: " + ", ".join(f"{r['name']} {r['status']}"
                                                            for r in rows if r["name"] in plans.NAMES)),
        }

    def key(row: dict[str, Any]) -> tuple:
        return (-len(missed_targets(row)), row["targets"]["speedup"]["value"] or 0.0)

    best = max(measured, key=key)
    missed = missed_targets(best)
    if not missed:
        targets = best["targets"]
        reason = (f"it meets every target ({targets['recompiles']['value']} recompiles, "
                  f"speedup {targets['speedup']['value']:.2f}x, set-up {targets['setup_seconds']['value']:.1f} s, "
                  f"worst request {format_ratio(targets['worst_ratio']['value'])} eager's worst)")
        others = [r["name"] for r in measured if r is not best and not missed_targets(r)]
        if others:
            reason += f", the fastest of the plans that do ({', '.join([best['name'], *others])})"
        return {"strategy": best["name"], "meets_targets": True, "reason": reason}
    return {
        "strategy": best["name"],
        "meets_targets": False,
        "reason": (f"No plan meets every target; the closest is {best['name']}, which misses: "
                   + "; ".join(missed) + ". Eager serving stays the predictable choice until one does"),
    }


def bytecode_note(dont_write_bytecode: bool, torch_bytecode_cached: bool) -> str | None:
    """A note for bench.json when the strategy processes compile torch's Python source to bytecode
    at every start (``PYTHONDONTWRITEBYTECODE`` set and no cached bytecode for torch): that adds
    seconds to each process's first compile and set-up that an installed environment does not pay
    (on the H200 machine measured: importing torch, Dynamo and inductor took 12.4 s, and 4.7 s with
    bytecode cached). Pure."""
    if not dont_write_bytecode or torch_bytecode_cached:
        return None
    return ("PYTHONDONTWRITEBYTECODE is set and torch has no cached bytecode here, so every strategy's "
            "process compiled torch's Python source first: set-up and first-compile times include seconds "
            "an installed environment does not pay (unset it, or set PYTHONPYCACHEPREFIX and run once, "
            "for production-like figures)")


def build_document(
    rows: list[dict[str, Any]],
    *,
    criteria: Criteria,
    torch_version: str,
    device: str,
    options: dict[str, Any],
    corpus_path: str,
    samples: int,
    repeat: int,
    paired: int = 0,
    notes: tuple[str, ...] = (),
) -> dict[str, Any]:
    """bench.json: the measured rows with targets, the recommendation, and how it was measured."""
    rows = apply_targets(rows, criteria)
    return {
        "schema": 1,
        "torch_version": torch_version,
        "device": device,
        "device_name": next((r["device_name"] for r in rows if r["device_name"]), None),
        "compile": options,
        "corpus": {"path": corpus_path, "samples": samples},
        "repeat": repeat,
        "paired": paired,
        "criteria": criteria.to_json(),
        "strategies": rows,
        "recommendation": recommend(rows),
        "notes": list(notes),
    }


def format_table(document: dict[str, Any]) -> str:
    """The terminal table of bench.json: a row per strategy, details and targets below it."""
    header = ("strategy", "set-up", "graphs", "recompiles", "mean", "p50", "p99", "max", "worst", "speedup", "paired")
    lines: list[tuple[str, ...] | str] = [header]
    for row in document["strategies"]:
        if row["status"] != "ok":
            lines.append(f"{row['name']:<9} {row['status'].upper()}: {row['reason']}")
            continue
        steady = row["steady"] or {}
        lines.append((
            row["name"],
            format_duration(row["setup_seconds"]),
            str(row["setup_graphs"] + row["replay_compiles"]),
            str(row["recompiles"]),
            format_ms(steady.get("mean_ms")),
            format_ms(steady.get("p50_ms")),
            format_ms(steady.get("p99_ms")),
            format_ms(steady.get("max_ms")),
            format_ms(row["worst_ms"]),
            "—" if row["speedup"] is None else f"{row['speedup']:.2f}x",
            "—" if not (row.get("paired") or {}).get("speedup") else f"{row['paired']['speedup']:.2f}x",
        ))
        details = []
        if row["first_compile"]:
            details.append(f"first compile {format_duration(row['first_compile']['latency_s'])} "
                           f"(sample {row['first_compile']['sample']})")
        if row["recompile_latency"]:
            samples = [e["sample"] for e in row["recompile_requests"]]
            details.append(f"recompiles at samples {samples[:12]}{' ...' if len(samples) > 12 else ''}: "
                           f"mean {format_duration(row['recompile_latency']['mean_s'])}, "
                           f"max {format_duration(row['recompile_latency']['max_s'])}")
        if (row.get("bundle") or {}).get("status", "absent") != "absent":
            bundle = row["bundle"]
            details.append(f"compile-cache bundle {bundle['file']}: {bundle['status']}"
                           + (f" ({bundle['reason']})" if bundle.get("reason") else ""))
        if row.get("paired"):
            paired = row["paired"]
            details.append(f"paired with eager in its own process ({paired['requests']} requests): "
                           f"{format_ms(paired['mean_ms'])} against eager's {format_ms(paired['eager_mean_ms'])}")
        if row.get("generation"):
            details.extend(generation_lines(row["generation"]))
        if row["fallbacks"]:
            details.append(f"{row['fallbacks']} requests fell back to eager")
        if row["errors"]:
            details.append(f"{row['errors']} requests raised, first: {row['error_requests'][0]['error']}")
        if row["targets"]:
            missed = missed_targets(row)
            details.append("targets: " + ("all met" if not missed else "missed " + "; ".join(missed)))
        lines.extend(f"  {text}" for text in details)
    table = [line for line in lines if isinstance(line, tuple)]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    text = []
    for line in lines:
        if isinstance(line, str):
            text.append(line)
        else:
            text.append("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                                  for i, (cell, w) in enumerate(zip(line, widths))).rstrip())
    text.extend(f"note        {note}" for note in document.get("notes") or ())
    recommendation = document["recommendation"]
    flag = "" if recommendation["meets_targets"] or not recommendation["strategy"] else " (targets not met)"
    text.append(f"recommended {recommendation['strategy'] or 'none'}{flag}: {recommendation['reason']}")
    return "\n".join(text)


# --- the parent: one fresh process per strategy -------------------------------------------------


def run_strategy(
    out_dir: Path,
    name: str,
    *,
    device: str,
    backend: str,
    corpus_dir: Path | None,
    repeat: int,
    timeout: float,
    paired: int = 1,
    tags: Callable[[int], tuple | None] | None = None,
    per_pass: int = 0,
) -> dict[str, Any]:
    """Measure one strategy in a fresh process with empty compile caches; always a row (with
    generation figures when ``tags`` says each sample's request and step)."""
    from .verify import planned_status

    infeasible = planned_status(out_dir, name) if name in plans.MODULES else None
    if infeasible is not None:
        return empty_row(name, "skipped", f"emit-warmup found this fix infeasible on this model: {infeasible}")
    if name in plans.MODULES and not (out_dir / plans.MODULES[name]).is_file():
        return empty_row(name, "skipped", f"{plans.MODULES[name]} not found: run 'guardscope emit-warmup {out_dir}'")

    work = Path(tempfile.mkdtemp(prefix=f"guardscope-bench-{name}-"))
    try:
        result = work / "result.json"
        arguments = [name, str(out_dir), str(result), "--device", device, "--backend", backend,
                     "--repeat", str(repeat), "--paired", str(paired), "--work", str(work)]
        if corpus_dir is not None:
            arguments += ["--corpus", str(corpus_dir)]
        with isolated_caches() as caches:
            outcome = run_module("guardscope.proving.bench", arguments, result, timeout=timeout,
                                 what="the benchmark process", environment=child_environment(caches))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if outcome.result is None:
        return empty_row(name, "failed", outcome.failure, outcome.seconds)
    return summarize(name, outcome.result, outcome.seconds, tags=tags, per_pass=per_pass)


# --- the child ---------------------------------------------------------------------------------


def _set_up(strategy: str, module: Any, runner: Any, out_dir: Path, catalog: dict, corpus: Any,
            work: Path) -> tuple[Callable[[tuple, dict], str | None], int, dict | None]:
    """Prepare ``strategy``; return its request call (returning None, or why it fell back to
    eager), the graphs compiled outside Dynamo (the AOTInductor model) and, for a plan, what its
    compile-cache bundle load did (the generated warmup loads one when it is present, as in
    production)."""

    options = runner.options

    def eager(args: tuple, kwargs: dict) -> None:
        runner.model(*args, **kwargs)

    def compiled(args: tuple, kwargs: dict) -> None:
        runner.compiled(*args, **kwargs)

    def marked(args: tuple, kwargs: dict) -> None:
        module.mark(*args, **kwargs)
        runner.compiled(*args, **kwargs)

    if strategy == "eager":
        return eager, 0, None
    if strategy == "compile":
        return compiled, 0, None
    if strategy in plans.BUNDLED:  # the plans with a warmup (and a bundle to load)
        load = module.load_bundle(runner.compiled, options.device).to_json()
        module.warmup(runner.compiled, device=options.device, inference_mode=options.inference_mode, bundle=False)
        return (compiled if strategy == "warmup" else marked), 0, load
    # export: torch.export with the emitted Dims, AOTInductor, one call of the example.
    from .verify import module_example

    args, kwargs, *_ = runner.prepare(corpus.sample(module_example(out_dir, catalog)), mark=False)
    program = module.export(runner.model, *args, **kwargs)
    aoti = torch_compat.aoti_compile_and_load(program, str(work / "model.pt2"))
    accepts = torch_compat.export_input_checker(program)
    with runner.grad_context():
        aoti(*args, **kwargs)

    def served(args: tuple, kwargs: dict) -> str | None:
        reason = accepts(args, kwargs)
        if reason is None:
            aoti(*args, **kwargs)
        else:
            runner.model(*args, **kwargs)
        return reason

    return served, 1, None


def _measure(strategy: str, out_dir: Path, catalog: dict, corpus: Any, model: Any, *, device: str,
             backend: str, repeat: int, work: Path, paired: int = 1) -> dict[str, Any]:
    """Set up ``strategy`` and replay the corpus request by request (see the module docstring)."""
    from ..replay.session import Runner

    options = production_options(catalog, backend=backend, device=device)
    module = import_file(out_dir / plans.MODULES[strategy]) if strategy in plans.MODULES else None
    if strategy == "unbacked":
        module.configure()  # global settings, before anything compiles
    limit = (torch_compat.raised_recompile_limit(max(PLAIN_RECOMPILE_LIMIT, catalog["summary"]["compiles"]))
             if strategy == "compile" else contextlib.nullcontext())
    requests: list[list] = []
    fallbacks: list[list] = []
    errors: list[list] = []
    with limit:
        runner = Runner(model, options)

        def sync() -> None:
            torch_compat.synchronize(runner.device)

        runner.warm_device(corpus.sample(0))  # the device's own warm-up, untimed
        graphs = torch_compat.graphs_compiled()
        started = time.perf_counter()
        call, aot_graphs, bundle_load = _set_up(strategy, module, runner, out_dir, catalog, corpus, work)
        sync()
        setup_seconds = time.perf_counter() - started
        # torch.export may trace with Dynamo (strict mode): the export row counts its one model.
        setup_graphs = aot_graphs or torch_compat.graphs_compiled() - graphs
        request = 0
        for _ in range(repeat):
            for sample in corpus:
                # Moved to the device outside inference mode, as a request's tensors arrive.
                args, kwargs, *_ = runner.prepare(sample, mark=False)
                graphs = torch_compat.graphs_compiled()
                with runner.grad_context():
                    sync()
                    started = time.perf_counter()
                    try:
                        fallback = call(args, kwargs)
                        sync()
                    except Exception as exc:  # a failing request is reported, the replay goes on
                        fallback = None
                        errors.append([request, exception_line(exc, 400)])
                    seconds = time.perf_counter() - started
                if fallback is not None:
                    fallbacks.append([request, fallback])
                requests.append([sample.index, seconds, torch_compat.graphs_compiled() - graphs])
                request += 1
        paired_requests = [] if strategy == "eager" else paired_pass(
            ((sample.index, lambda sample=sample: runner.prepare(sample, mark=False)[:2])  # a fresh copy each time
             for _ in range(paired) for sample in corpus),
            lambda args, kwargs: runner.model(*args, **kwargs), call, sync=sync, grad=runner.grad_context)
    torch_compat.reset_dynamo()
    return {
        "strategy": strategy,
        "torch_version": torch_compat.torch_version(),
        "device_name": torch_compat.device_name(runner.device),
        "setup_seconds": setup_seconds,
        "setup_graphs": setup_graphs,
        "requests": requests,
        "fallbacks": fallbacks,
        "errors": errors,
        "paired": paired_requests,
        "bundle_load": bundle_load,
    }


def paired_pass(requests: Iterable[tuple[int, Callable[[], tuple[tuple, dict]]]],
                eager: Callable[[tuple, dict], Any], served: Callable[[tuple, dict], Any], *,
                sync: Callable[[], None], grad: Callable[[], Any]) -> list[list]:
    """Run every request (``(sample, arguments)``, where ``arguments()`` gives its ``(args,
    kwargs)`` on the device) both eagerly and served, back to back, the order alternating from
    request to request: ``[sample, eager seconds, served seconds]`` per request. Both halves of a
    pair see the same process, device clocks and allocator, so their ratio is free of the drift
    between processes (and within one) that separate eager and strategy processes measure.

    Each half gets its own ``arguments()``, taken before its clock starts: a forward may change what
    it receives (a ``DynamicCache`` grows by the step, a ``StaticCache`` is written in place and
    counts its length), and the second half must see the request as it came, not as the first left
    it. Requests that compiled or raised are left out (the replay reports them)."""

    pairs: list[list] = []
    for position, (sample, arguments) in enumerate(requests):
        graphs = torch_compat.graphs_compiled()
        timed: dict[str, float] = {}
        with grad():
            try:
                for side, call in ((("eager", eager), ("served", served)) if position % 2 == 0
                                   else (("served", served), ("eager", eager))):
                    args, kwargs = arguments()
                    sync()
                    started = time.perf_counter()
                    call(args, kwargs)
                    sync()
                    timed[side] = time.perf_counter() - started
            except Exception:
                continue
        if torch_compat.graphs_compiled() == graphs:
            pairs.append([sample, timed["eager"], timed["served"]])
    return pairs


# --- the run ------------------------------------------------------------------------------------


def run_bench(
    out: Path,
    catalog: dict[str, Any],
    *,
    corpus: str | Path | None = None,
    device: str = "cuda",
    strategies: tuple[str, ...] | None = None,
    backend: str = "inductor",
    repeat: int = 1,
    paired: int = 1,
    timeout: float = 1200.0,
    criteria: Any = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure serving latency under each strategy, each in a fresh process; write ``bench.json``.

    Strategies: ``eager``, ``compile`` (plain torch.compile) and each of guardscope's plans
    (:data:`guardscope.plans.NAMES`: the warmup, the mark_unbacked plan, torch.export +
    AOTInductor with an eager fallback outside the bounds), which need ``emit-warmup``. ``device``
    defaults to CUDA: on a machine without one this raises unless ``device="cpu"`` is asked for
    explicitly. ``corpus`` overrides the analysed corpus (the same requests elsewhere, e.g. on the
    GPU machine) and is passed to each strategy's process. Options are checked before the corpus
    is looked for.
    """
    import importlib.util

    import torch

    chosen = tuple(strategies or plans.STRATEGIES)
    unknown = sorted(set(chosen) - set(plans.STRATEGIES))
    if unknown:
        raise CompileOptionsError(f"unknown strategies {unknown}; choose from {', '.join(plans.STRATEGIES)}")
    if repeat < 1:
        raise CompileOptionsError(f"--repeat {repeat} must be at least 1")
    if paired < 0:
        raise CompileOptionsError(f"--paired {paired} must be 0 (off) or more")
    if timeout <= 0:
        raise CompileOptionsError(f"--timeout {timeout} must be positive")
    try:
        parsed = torch.device(device)
    except RuntimeError as exc:
        raise CompileOptionsError(f"device {device!r} is not a torch device: {exc}") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise CompileOptionsError(
            f"guardscope bench measures serving latency on a GPU (device {device!r}), but "
            f"torch.cuda.is_available() is False here (torch {torch.__version__}). Run it on a CUDA "
            "machine, or pass --device cpu to measure CPU serving (slow: every strategy compiles "
            "with inductor for the CPU; meant for testing)"
        )
    corpus_dir = store.corpus_dir_of(out, catalog, corpus)
    loaded = load_corpus(corpus_dir)  # a clear error before any subprocess starts
    samples = len(loaded)
    runs = loaded.requests  # generate() calls tagged with request and step: TTFT, TPOT per request
    options = production_options(catalog, backend=backend, device=device)
    options.validate()
    rows = []
    for name in plans.STRATEGIES:
        if name not in chosen:
            continue
        if progress is not None:
            progress(name)
        rows.append(run_strategy(
            out, name, device=device, backend=backend,
            corpus_dir=corpus_dir.resolve() if corpus is not None else None,
            repeat=repeat, paired=paired, timeout=timeout,
            tags=None if runs is None else runs.of, per_pass=samples,
        ))
    compile_options = options.compile_json()
    bytecode = bytecode_note(bool(sys.flags.dont_write_bytecode),
                             Path(importlib.util.cache_from_source(torch.__file__)).is_file())
    document = build_document(
        rows,
        criteria=criteria or Criteria(),
        torch_version=torch_compat.torch_version(),
        device=device,
        options={key: compile_options[key] for key in ("backend", "dynamic", "fullgraph", "mode", "inference_mode")},
        corpus_path=Path(os.path.relpath(corpus_dir.resolve(), out.resolve())).as_posix(),
        samples=samples,
        repeat=repeat,
        paired=paired,
        notes=(bytecode,) if bytecode else (),
    )
    store.write_document(out, store.BENCH, document)
    return document


def child_main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m guardscope.proving.bench")
    parser.add_argument("strategy", choices=plans.STRATEGIES)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("result", type=Path)
    parser.add_argument("--device", required=True)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--paired", type=int, default=1)
    parser.add_argument("--corpus", type=Path, default=None)
    parser.add_argument("--work", type=Path, required=True)
    arguments = parser.parse_args(argv)
    out, catalog, corpus, model = store.load_inputs(arguments.out_dir, arguments.corpus)
    result = _measure(arguments.strategy, out, catalog, corpus, model, device=arguments.device,
                      backend=arguments.backend, repeat=arguments.repeat, work=arguments.work,
                      paired=arguments.paired)
    store.write_json(arguments.result, result)
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
