"""SVG geometry (pure): the compile timeline and the CUDA-graph strip and histograms, as coordinates
the template draws."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable

from ..catalog.buckets import skip_effect
from ..text import format_samples, format_seconds, format_tick
from .common import LIST_SHOWN, compile_costs, topology_of_compile

# Size limits that keep the page readable (and under 2 MB) for corpora of 10,000+ samples.
TIMELINE_BINS = 600          # per-sample times: at most this many x-bins (max per bin)
TIMELINE_MARKERS = 300       # compile markers: at most this many, binned the same way
TIMELINE_LABELS = 24         # spikes labelled with topology and sample (the costliest first)


def _nice_step(span: float, most: int) -> int:
    """The smallest 1-2-5 step that cuts ``span`` into at most ``most`` intervals."""
    step = 1
    while span / step > most:
        for factor in (2, 2.5, 2):
            step = int(step * factor)
            if span / step <= most:
                break
    return step


def _log_ticks(low: float, high: float) -> tuple[float, float, list[float]]:
    """A 1-2-5 log axis covering [low, high]; decades only when that would be too many ticks."""
    ladder = [m * 10.0 ** e for e in range(-7, 5) for m in (1, 2, 5)]
    bottom = max([v for v in ladder if v <= low * 1.0000001] or ladder[:1])
    top = min([v for v in ladder if v >= high / 1.0000001] or ladder[-1:])
    if top <= bottom:
        top = next(v for v in ladder if v > bottom)
    ticks = [v for v in ladder if bottom / 1.0000001 <= v <= top * 1.0000001]
    if len(ticks) > 7:
        bottom = 10.0 ** math.floor(math.log10(bottom) + 1e-9)
        top = 10.0 ** math.ceil(math.log10(top) - 1e-9)
        ticks = [10.0 ** e for e in range(round(math.log10(bottom)), round(math.log10(top)) + 1)]
    return bottom, top, ticks


def _spread_labels(wanted: list[float], widths: list[float], left: float, right: float,
                   gap: float = 8) -> list[float] | None:
    """Centres for labels on one row, as close to ``wanted`` (sorted) as overlap allows."""
    if sum(widths) + gap * (len(widths) - 1) > right - left:
        return None
    placed: list[float] = []
    edge = left
    for x, w in zip(wanted, widths):
        start = max(x - w / 2, edge)
        placed.append(start + w / 2)
        edge = start + w + gap
    edge = right
    for i in range(len(placed) - 1, -1, -1):
        end = min(placed[i] + widths[i] / 2, edge)
        placed[i] = end - widths[i] / 2
        edge = end - widths[i] - gap
    return placed


def _label_text(marker: dict) -> str:
    """``T3 #12``: the topology the new graph serves and the sample; ``+`` when binned."""
    lead = marker["lead"]
    return f"{lead['topology'] or ''} #{lead['sample']}".strip() + ("+" if marker["count"] > 1 else "")


def _compile_rows(catalog: dict, seconds: dict, per_sample: dict[int, float]) -> list[dict]:
    """One row per compile: its sample, topology, compile time and the failures that caused it."""
    topology = topology_of_compile(catalog)
    compiles = []
    for c in catalog["compiles"]:
        kinds = sorted({cause for f in c["failures"] for cause in f.get("causes", [f["kind"]])})
        tid = topology.get(c["compile_id"])
        compiles.append({
            "sample": c["sample"],
            "compile_id": c["compile_id"],
            "topology": f"T{tid}" if tid is not None else None,
            "seconds": seconds.get(c["compile_id"]),
            # A compiling call took at least its compile time, whatever per-sample clock says.
            "value": max(filter(None, (per_sample.get(c["sample"]), seconds.get(c["compile_id"]))), default=None),
            "kinds": kinds,
            "first": not c["failures"],
        })
    return compiles


def _y_axis(values: list[float], top: int, plot_h: int) -> tuple[list[float], Callable[[float | None], float]]:
    """The log y axis's ticks and its ``y_of``; without values, a flat row mid-plot and no ticks."""
    if not values:
        def flat(value: float | None) -> float:
            return round(top + plot_h / 2, 1)
        return [], flat
    y_low, y_high, y_ticks = _log_ticks(min(values), max(values))
    span = math.log10(y_high) - math.log10(y_low)

    def y_of(value: float | None) -> float:
        value = min(max(value or y_low, y_low), y_high)
        return round(top + plot_h * (1 - (math.log10(value) - math.log10(y_low)) / span), 1)
    return y_ticks, y_of


def _sample_path(per_sample: dict[int, float], n: int, bin_size: int,
                 x_of: Callable[[float], float], y_of: Callable[[float | None], float]) -> list[str]:
    """Per-sample line: the slowest sample in each bin, so a spike never disappears in aggregation."""
    path: list[str] = []
    worst_per_bin: dict[int, float] = {}
    for sample, value in per_sample.items():
        b = sample // bin_size
        worst_per_bin[b] = max(worst_per_bin.get(b, 0.0), value)
    previous = None
    for b in sorted(worst_per_bin):
        x = x_of(min(b * bin_size + (bin_size - 1) / 2, n - 1))
        path.append(f"{'L' if previous == b - 1 else 'M'}{x} {y_of(worst_per_bin[b])}")
        previous = b
    return path


def _markers(compiles: list[dict], marker_bin: int,
             x_of: Callable[[float], float], y_of: Callable[[float | None], float]) -> list[dict]:
    """Compile markers: binned like the line when there are too many to draw one by one."""
    binned: dict[int, list[dict]] = defaultdict(list)
    for c in compiles:
        binned[c["sample"] // marker_bin].append(c)
    markers = []
    for b in sorted(binned):
        group = binned[b]
        lead = max(group, key=lambda c: (c["value"] or 0, -c["sample"]))
        title = (
            f"{len(group)} compiles at samples {format_samples(c['sample'] for c in group)}; "
            f"slowest {format_seconds(lead['seconds'])} (compile {lead['compile_id']})"
            if len(group) > 1 else
            f"sample {lead['sample']}: compile {lead['compile_id']} for {lead['topology'] or 'no topology'}, "
            f"{format_seconds(lead['seconds'])}" + ("" if lead["first"] else f" — {', '.join(lead['kinds'])}")
        )
        markers.append({
            "x": x_of(lead["sample"]),
            "y": y_of(lead["value"]),
            "first": lead["first"] and len(group) == 1,
            "title": title,
            "lead": lead,
            "count": len(group),
        })
    return markers


def _spike_labels(markers: list[dict], width: int) -> list[dict]:
    """Labels: the costliest spikes first, spread over up to two rows above the plot."""
    candidates = sorted(markers, key=lambda m: (-(m["lead"]["value"] or 0), m["lead"]["sample"]))
    labels: list[dict] = []
    for count in range(min(len(candidates), TIMELINE_LABELS), 0, -1):
        chosen = sorted(candidates[:count], key=lambda m: m["x"])
        rows = [chosen[0::2], chosen[1::2]]  # alternate rows, so neighbours never collide
        texts = [[_label_text(m) for m in row] for row in rows]
        placements = [
            _spread_labels([m["x"] for m in row], [len(t) * 7.2 + 4 for t in row_texts], 4, width - 4)
            for row, row_texts in zip(rows, texts)
        ]
        if all(p is not None for p in placements):
            for r, (row, row_texts, places) in enumerate(zip(rows, texts, placements)):
                for m, text, x in zip(row, row_texts, places):
                    labels.append({"text": text, "x": round(x, 1), "y": 18 + 20 * r,
                                   "to_x": m["x"], "to_y": m["y"]})
            break
    return sorted(labels, key=lambda label: (label["y"], label["x"]))


def timeline_context(catalog: dict, timings: dict | None, bench: dict | None = None) -> dict:
    """Geometry of the timeline SVG: sample index on x, seconds on a log y axis.

    With per-sample times (``timings["samples"]``) the line is the slowest sample of each
    x-bin; compile markers sit on top. Without them the compile events stand alone, one
    lollipop per compile at its compile time. Without any timings the markers sit on one row.
    """
    width, height = 960, 320
    left, right, top, bottom = 78, 16, 74, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    n = max(catalog["corpus"]["samples"], 1)
    costs = compile_costs(catalog, timings, bench)
    per_sample = {s["sample"]: s["seconds"] for s in (timings or {}).get("samples", []) if s.get("seconds")}

    def x_of(sample: float) -> float:
        return round(left + (plot_w * sample / (n - 1) if n > 1 else plot_w / 2), 1)

    compiles = _compile_rows(catalog, costs["seconds"], per_sample)
    values = [v for v in per_sample.values() if v > 0] + [c["value"] for c in compiles if c["value"]]
    timed = bool(values)
    y_ticks, y_of = _y_axis(values, top, plot_h)
    bin_size = max(1, math.ceil(n / TIMELINE_BINS))
    path = _sample_path(per_sample, n, bin_size, x_of, y_of) if per_sample else []
    marker_bin = max(1, math.ceil(n / TIMELINE_MARKERS)) if len(compiles) > TIMELINE_MARKERS else 1
    markers = _markers(compiles, marker_bin, x_of, y_of)
    x_step = _nice_step(n - 1, 10) if n > 1 else 1
    return {
        "width": width,
        "height": height,
        "left": left,
        "top": top,
        "plot_w": plot_w,
        "plot_h": plot_h,
        "baseline": top + plot_h,
        "mode": "samples" if per_sample else ("compiles" if timed else "untimed"),
        "cost_source": costs["source"],
        "cost_label": costs["label"],
        "path": " ".join(path),
        "bin_size": bin_size,
        "marker_bin": marker_bin,
        "markers": markers,
        "labels": _spike_labels(markers, width),
        "x_ticks": [{"x": x_of(s), "text": f"{s:,}"} for s in range(0, n, x_step)],
        "y_ticks": [{"y": y_of(v), "text": format_tick(v)} for v in y_ticks],
        "samples": n,
        "compiles": compiles[:LIST_SHOWN],
        "compiles_hidden": max(len(compiles) - LIST_SHOWN, 0),
    }


CUDAGRAPH_STRIP_BINS = 300   # the per-sample strip of CUDA graph events: at most this many bins
VERDICT_TITLES = {
    "none_needed": "No padding needed",
    "pad": "Pad to buckets",
    "skip_dynamic_graphs": "Skip CUDA graphs for dynamic shapes",
}
# What ``expected`` counted (the catalog's cudagraphs.expected.model), for the stat captions.
EXPECTED_CAPTIONS = {
    "per_shape": ("one warm-up per shape of each graph", "shapes seen twice or more"),
    "static_partitions": ("one per graph that ran: its static partitions", "one per graph that ran twice"),
    "skipped": ("none: graphs with symbolic sizes skip CUDA graphs", "none"),
}


def _strip(samples: dict[str, list[int]], total: int) -> dict:
    """Geometry of a strip chart: one row per event kind, a mark per bin holding any."""
    width, left, row_h = 960, 120, 22
    plot_w = width - left - 12
    bin_size = max(1, math.ceil(total / CUDAGRAPH_STRIP_BINS))
    bins = max(1, math.ceil(total / bin_size))
    rows = []
    for position, (label, members) in enumerate(samples.items()):
        counts: Counter = Counter(sample // bin_size for sample in members)
        marks = []
        for b in sorted(counts):
            first, last = b * bin_size, min((b + 1) * bin_size, total) - 1
            where = f"sample {first}" if first == last else f"samples {first}–{last}"
            marks.append({
                "x": round(left + plot_w * b / bins, 1),
                "w": round(max(plot_w / bins, 1.5), 1),
                "title": f"{label}: {counts[b]} at {where}",
            })
        rows.append({"label": label, "y": 8 + position * row_h, "count": len(members), "marks": marks})
    return {"width": width, "height": 16 + len(rows) * row_h, "left": left, "row_h": row_h - 6,
            "rows": rows, "bin_size": bin_size}


def _histogram_bars(bins: list[list[int]], bounds: list[int]) -> dict:
    """A small bar chart of one dim group's sizes with its chosen bucket bounds marked."""
    width, height, pad = 300, 56, 4
    if not bins:
        return {"width": width, "height": height, "bars": [], "bounds": []}
    low, high = bins[0][0], bins[-1][1]
    span = max(high - low + 1, 1)
    # Bins merge runs of sizes: height is samples per size, so a wide bin does not look heavy.
    tallest = max(c / (b - a + 1) for a, b, c in bins)

    def x_of(value: float) -> float:
        return round(pad + (width - 2 * pad) * (value - low) / span, 1)

    bars = [{
        "x": x_of(a), "w": round(max(x_of(b + 1) - x_of(a) - 0.5, 1.0), 1),
        "h": round((height - 14) * c / (b - a + 1) / tallest, 1),
        "y": round(height - 12 - (height - 14) * c / (b - a + 1) / tallest, 1),
        "title": f"{a}{'' if a == b else f'–{b}'}: {c} samples",
    } for a, b, c in bins]
    marks = [{"x": x_of(bound + 1), "label": str(bound),
              "anchor": "end" if x_of(bound + 1) > width - 12 else "middle"} for bound in bounds]
    return {"width": width, "height": height, "bars": bars, "bounds": marks}


def _graph_rows(catalog: dict, expected: dict, recorded: dict | None) -> list[dict]:
    """One row per graph: its expected and recorded shapes and recordings, and its topology."""
    topology = topology_of_compile(catalog)
    graphs: dict[str, dict] = {}
    for source, rows in (("expected", expected["by_graph"]), ("recorded", (recorded or {}).get("by_graph", []))):
        for row in rows:
            entry = graphs.setdefault(row["graph"], {"graph": row["graph"], "expected": None, "recorded": None})
            entry[source] = {"new_shapes": row["new_shapes"], "recordings": row["recordings"]}
    return [
        {**entry, "topology": f"T{topology[g]}" if g in topology else "—"}
        for g, entry in sorted(graphs.items(), key=lambda item: [int(n) for n in re.findall(r"\d+", item[0])] or [1 << 30])
    ]


def _recorded_strip(recorded: dict | None, total: int) -> dict | None:
    """The strip of new shapes, recordings and skips per sample; None when nothing was recorded."""
    if recorded is None:
        return None
    rows = {"new shape": recorded["new_shapes"]["samples"], "recording": recorded["recordings"]["samples"]}
    rows["skip"] = sorted({s for skip in recorded["skips"] for s in skip["samples"]})
    return _strip(rows, total)


def _padding_groups(padding: dict, chosen_bounds: dict) -> list[dict]:
    """One entry per dim group: its sizes, the chosen bounds, its histogram and the options tried."""
    groups = []
    for group in padding["groups"]:
        bounds = chosen_bounds.get(group["name"], [])
        groups.append({
            "name": group["name"],
            "others": [d for d in group["dims"] if d != group["name"]],
            "paddable": ("yes" if padding["paddable_confirmed"] else "assumed") if group["paddable"] else "no",
            "distinct": group["distinct_sizes"],
            "special": ", ".join(str(v) for v in group["special_sizes"]) or "—",
            "range": f"{group['histogram'][0][0]}–{group['histogram'][-1][1]}" if group["histogram"] else "—",
            "bounds": ", ".join(str(b) for b in bounds) or "—",
            "chart": _histogram_bars(group["histogram"], bounds),
            "options": [{
                "buckets": o["buckets"], "bounds": ", ".join(str(b) for b in o["bounds"]),
                "shapes": o["shapes"], "max_per_graph": o["max_per_graph"],
                "waste": f"{100 * o['padding_waste']:.1f} %",
            } for o in group["options"]],
        })
    return groups


def _padding_context(padding: dict) -> dict:
    """The padding advice: the verdict, the chosen buckets when within budget, and the groups."""
    chosen = padding.get("chosen")
    within = chosen is not None and chosen["max_per_graph"] <= padding["shapes_per_graph"]
    return {
        "verdict": padding["verdict"],
        "title": VERDICT_TITLES.get(padding["verdict"], padding["verdict"]),
        "reasons": list(padding["reasons"]),
        "budget": padding["shapes_per_graph"],
        "baseline": padding["baseline"],
        "chosen": chosen if within else None,
        "waste": f"{100 * chosen['padding_waste']:.1f} %" if within else None,
        "waste_limit": f"{100 * padding['waste_limit']:.0f} %",
        "confirmed": padding["paddable_confirmed"],
        "search": padding["search"],
        "unknown": list(padding.get("unknown_paddable", [])),
        "groups": _padding_groups(padding, chosen["bounds"] if within else {}),
    }


def _recorded_context(recorded: dict | None) -> dict | None:
    """What the recorded run saw: counts, the first skips and hints; None when not recorded."""
    if recorded is None:
        return None
    return {
        "new_shapes": recorded["new_shapes"]["count"],
        "recordings": recorded["recordings"]["count"],
        "skips": [{"reason": s["reason"], "count": s["count"], "samples": format_samples(s["samples"])}
                  for s in recorded["skips"][:LIST_SHOWN]],
        "skip_count": sum(s["count"] for s in recorded["skips"]),
        "hints": [{"text": h["text"], "count": h["count"], "samples": format_samples(h["samples"])}
                  for h in recorded["hints"][:LIST_SHOWN]],
    }


def cudagraphs_context(catalog: dict, timings: dict | None) -> dict | None:
    """The CUDA graphs section: recordings and skips per sample, and the padding advice."""
    section = catalog.get("cudagraphs")
    if section is None:
        return None
    expected, recorded, padding = section["expected"], section.get("recorded"), section["padding"]
    graph_rows = _graph_rows(catalog, expected, recorded)
    times = [r for r in (timings or {}).get("cudagraph_recordings", []) if r.get("seconds") is not None]
    slowest = max(times, key=lambda r: r["seconds"], default=None)
    strip = _recorded_strip(recorded, catalog["corpus"]["samples"])
    settings = section.get("settings") or {}
    return {
        "observed": section["observed"],
        "note": section.get("note"),
        # cudagraph_skip_dynamic_graphs was set for the analysis: say what it does on this torch
        "partitioned": bool(settings.get("graph_partition")),
        "skip_setting": skip_effect(bool(settings.get("graph_partition"))) if settings.get("skip_dynamic_graphs") else None,
        "expected_captions": EXPECTED_CAPTIONS[expected.get("model", "per_shape")],
        "expected": {"skips": 0, **expected},  # (catalogs before the skip model had no skips)
        "recorded": _recorded_context(recorded),
        "capture_seconds": sum(r["seconds"] for r in times) if times else None,
        "slowest_capture": slowest,
        "graphs": graph_rows,
        "strip": strip,
        "padding": _padding_context(padding),
    }
