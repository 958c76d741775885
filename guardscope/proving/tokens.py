"""Generation figures for ``guardscope bench``: time to first token, time per output token, the
requests that compiled and the worst request, from a replay whose calls are tagged with their
request and step (the corpus's ``requests.json``: ``TrafficRecorder.request`` around
``model.generate()`` with its forward wrapped by ``TrafficRecorder.wrap``).

``generate()`` calls the forward once for the prompt (the prefill, step 0: its latency is the
time to the first token) and once per further token (decode steps 1, 2...: their mean is the
time per output token). The bench replays those forward calls one by one, as recorded, so the
figures are the forward's own; sampling and the rest of ``generate()``'s loop are not in them.

Pure: no torch, no files.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Tag = tuple[Any, int]  # (request, step)


def generation_stats(
    calls: list[list],
    tag_of: Callable[[int], Tag | None],
    per_pass: int,
    errors: set[int],
    stats: Callable[[list[float]], dict[str, Any] | None],
) -> dict[str, Any] | None:
    """The generation figures of one strategy's replay, or None when no call is tagged.

    ``calls`` holds ``[sample, seconds, graphs compiled]`` per replayed call in order (the bench
    child's ``requests``); ``tag_of(sample)`` gives ``(request, step)`` or None; ``per_pass`` is the
    corpus's length (a replay ``repeat`` times over makes each request once per pass); ``errors``
    the positions of calls that raised; ``stats`` turns seconds into count/mean/p50/p99/max.

    A request's prefill (step 0) is its first token: counted in ``ttft`` unless it compiled or
    raised. Decode steps that compiled nothing make ``tpot``. A request that compiled in any of
    its calls is counted apart, with the seconds of its compiling calls; the worst request is the
    one whose calls took longest in all.
    """
    requests: dict[tuple[int, Any], dict[str, Any]] = {}
    for position, (sample, seconds, graphs) in enumerate(calls):
        tag = tag_of(sample)
        if tag is None:
            continue
        request, step = tag
        key = (position // per_pass if per_pass else 0, request)
        entry = requests.setdefault(key, {"request": request, "pass": key[0], "seconds": 0.0, "calls": 0,
                                          "graphs": 0, "compile_seconds": 0.0, "first_sample": sample,
                                          "prefill": None, "decode": []})
        entry["seconds"] += seconds
        entry["calls"] += 1
        if graphs:
            entry["graphs"] += graphs
            entry["compile_seconds"] += seconds
        elif position in errors:
            continue
        elif step == 0:
            entry["prefill"] = seconds
        else:
            entry["decode"].append(seconds)
    if not requests:
        return None
    entries = list(requests.values())
    compiling = [e for e in entries if e["graphs"]]
    worst = max(entries, key=lambda e: e["seconds"])
    return {
        "requests": len(entries),
        "calls": sum(e["calls"] for e in entries),
        "ttft": stats([e["prefill"] for e in entries if e["prefill"] is not None]),
        "tpot": stats([seconds for e in entries for seconds in e["decode"]]),
        "request_time": stats([e["seconds"] for e in entries]),
        "compiling_requests": len(compiling),
        "compile_calls_seconds": round(sum(e["compile_seconds"] for e in compiling), 4),
        "longest_compile_request": None if not compiling else _brief(
            max(compiling, key=lambda e: e["compile_seconds"])),
        "worst_request": _brief(worst),
    }


def _brief(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "request": entry["request"],
        "pass": entry["pass"],
        "first_sample": entry["first_sample"],
        "calls": entry["calls"],
        "graphs": entry["graphs"],
        "seconds": round(entry["seconds"], 4),
        "compile_seconds": round(entry["compile_seconds"], 4),
    }
