"""What the bench's strategy processes report, turned into ``bench.json`` and its terminal table. Pure.

From each strategy's report (:mod:`guardscope.proving.bench_child`) a row: set-up, graphs
compiled, recompiles during the replay (the first compile of a process that had compiled nothing
is its first compile, not a recompile) with their latency, steady latency (requests that compiled
nothing: mean, p50, p99, max), the worst request, the speedup over eager (eager's steady mean over
the strategy's, and the paired ratio), the targets each strategy meets, and which of guardscope's
plans to serve with; then the document and the table the command prints.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable

from .. import plans
from ..text import format_duration, format_ms, format_ratio, generation_lines, missed_targets
from .tokens import generation_stats

TITLES = {"eager": "eager", "compile": "plain torch.compile", **{p.name: p.bench_title for p in plans.PLANS},
          plans.PRECOMPILED: "guardscope warmup, precompiled"}
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
    seconds, strategy seconds]`` per request, see
    :func:`guardscope.proving.bench_child.paired_pass`): both means and their ratio."""
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
        "precompiled": None,
        "first_request_ms": None,
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
        "limits": None,
        "limit_failed": None,
        "uncompiled": None,
        "uncompiled_requests": [],
        "wall_seconds": None if wall_seconds is None else round(wall_seconds, 3),
    }


def summarize(name: str, raw: dict[str, Any], wall_seconds: float | None = None, *,
              tags: Callable[[int], tuple | None] | None = None, per_pass: int = 0) -> dict[str, Any]:
    """A strategy's row from what its process reported (see
    :func:`guardscope.proving.bench_child._measure`).

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
        precompiled=raw.get("precompiled_load"),
        first_request_ms=round(1e3 * requests[0][1], 4) if requests else None,
        errors=len(errors),
        error_requests=[{"request": r, "sample": requests[r][0], "error": text}
                        for r, text in raw["errors"][:LISTED]],
        generation=None if tags is None else generation_stats(requests, tags, per_pass, set(errors), latency_stats),
    )
    if raw.get("limits") is not None:  # the plain compile, under production's recompile limits
        row.update(
            limits=raw["limits"],
            limit_failed=len(raw["limit_failed"]),
            uncompiled=len(raw["uncompiled"]),
            uncompiled_requests=[{"request": r, "sample": requests[r][0]} for r in raw["uncompiled"][:LISTED]],
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


def limit_line(row: dict[str, Any]) -> str:
    """The plain compile's row under production's recompile limits: what reaching them did."""
    limits = row["limits"]
    head = f"under production's limits (recompile_limit {limits['recompile_limit']}, {limits['source']})"
    if not row["limit_failed"] and not row["uncompiled"]:
        return f"{head}: no request reached them"
    parts = []
    if row["limit_failed"]:
        parts.append(f"{row['limit_failed']} requests FAILED with FailOnRecompileLimitHit")
    if row["uncompiled"]:
        samples = [e["sample"] for e in row["uncompiled_requests"]]
        parts.append(f"{row['uncompiled']} ran without a compiled graph (samples {samples[:12]}"
                     f"{' ...' if row['uncompiled'] > 12 else ''})")
    return f"{head}: " + ", ".join(parts)


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
        if row.get("precompiled"):
            load = row["precompiled"]
            details.append(f"precompiled warmup {load['file']}: {load['graphs']} graphs loaded in "
                           f"{format_duration(load['seconds'])}, nothing traced or compiled at set-up")
        if row.get("first_request_ms") is not None and row["name"] in (plans.WARMUP, plans.PRECOMPILED):
            details.append(f"first request {format_ms(row['first_request_ms'])} after set-up "
                           f"(ready {format_duration(row['setup_seconds'])} after the model was on the device)")
        if row.get("paired"):
            paired = row["paired"]
            details.append(f"paired with eager in its own process ({paired['requests']} requests): "
                           f"{format_ms(paired['mean_ms'])} against eager's {format_ms(paired['eager_mean_ms'])}")
        if row.get("generation"):
            details.extend(generation_lines(row["generation"]))
        if row.get("limits"):
            details.append(limit_line(row))
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
