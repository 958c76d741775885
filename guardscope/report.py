"""The HTML guard report: the analysis folder's JSON files -> one self-contained ``report.html``.

Context builders are pure (loaded JSON in, plain dicts out); one jinja Environment with
autoescape renders them through ``templates/report.html``, so guard text, paths and user code
always reach the page as text. The page has inline CSS and SVG only: no scripts, nothing fetched
from the network, and nothing that changes between two renders of the same files (no clocks, no
absolute paths beyond those already in the JSON).

:func:`read_inputs` and :func:`write_report` are the only functions here that touch the disk;
the writing itself goes through :mod:`guardscope.output`.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from . import output
from .modelspec import model_label
from .resources import templates_dir

if TYPE_CHECKING:
    from .diff import CatalogDiff

TEMPLATES = templates_dir()
REPORT = "report.html"

# Size limits that keep the page readable (and under 2 MB) for corpora of 10,000+ samples.
TIMELINE_BINS = 600          # per-sample times: at most this many x-bins (max per bin)
TIMELINE_MARKERS = 300       # compile markers: at most this many, binned the same way
TIMELINE_LABELS = 24         # spikes labelled with topology and sample (the costliest first)
SAMPLE_RANGES_SHOWN = 200    # a member list shows this many runs, then "and N more"
LIST_SHOWN = 200             # rows of long tables (compiles, failed samples)
GUARD_TEXTS_SHOWN = 50       # distinct guard texts listed per failure kind
DIFF_FAILURES_SHOWN = 20     # failures added or removed listed per compile in a diff

# What each failure kind means, for a reader who has never seen a Dynamo guard.
KIND_EXPLANATIONS: dict[str, tuple[str, str]] = {
    "duck_sizing": (
        "Duck sizing",
        "When two dimensions had the same size while a graph was compiled, Dynamo gave them one "
        "shared symbol and guarded that they stay equal; an input where they differ fails that "
        "guard. Turning duck sizing off (torch.fx.experimental._config.use_duck_shape = False) "
        "gives every dimension a symbol of its own.",
    ),
    "zero_one_specialization": (
        "0/1 specialization",
        "Dynamo treats sizes 0 and 1 as constants (empty tensors and broadcasting behave "
        "differently), so a graph compiled for larger sizes guards 2 <= size and a size of 0 or "
        "1 compiles a graph of its own. Marking the dimension with mark_unbacked compiles one "
        "graph for every size, 0 and 1 included.",
    ),
    "unbacked": (
        "Unbacked dimension",
        "A dimension marked with mark_unbacked is compiled without an example size, so its graph "
        "serves every size. A failure here involves such a dimension: usually a call whose inputs "
        "were not marked (marks apply per call) or a guard the model's own code needs on it.",
    ),
    "size_mismatch": (
        "Size mismatch",
        "The graph was compiled with this dimension static (a fixed size: it was 0 or 1 at "
        "compile time, or the compile was not dynamic) and the input has another size.",
    ),
    "stride_mismatch": (
        "Stride mismatch",
        "The input's memory layout (strides: a transpose, a slice, an expanded or size-0/1 view) "
        "differs from the one the graph was compiled for. Making inputs contiguous before the call "
        "removes it.",
    ),
    "dtype_mismatch": (
        "Dtype mismatch",
        "The input has another dtype (float32 vs bfloat16, int64 vs int32) than the graph was "
        "compiled for; each dtype needs its own graph. Cast at the boundary if one dtype will do.",
    ),
    "device_mismatch": (
        "Device mismatch",
        "The input lives on another device than the graph was compiled for; each device needs "
        "its own graph.",
    ),
    "dispatch_key_mismatch": (
        "Dispatch key mismatch",
        "The input is on the same device as before but is another kind of tensor inside PyTorch: "
        "usually one was created under torch.inference_mode (an inference tensor) and the other "
        "was not, and each kind needs its own graph. Create the inputs the same way for every "
        "call: all outside inference_mode, or all inside it.",
    ),
    "requires_grad_mismatch": (
        "requires_grad mismatch",
        "The input's requires_grad flag differs from the compiled graph's: a graph that records "
        "autograd differs from an inference graph. Use no_grad or inference_mode consistently.",
    ),
    "ndim_mismatch": (
        "Number of dimensions",
        "The input has a different number of dimensions than the graph was compiled for.",
    ),
    "type_mismatch": (
        "Python type mismatch",
        "An argument has another Python type (a tensor vs None, int vs float, list vs tuple) than "
        "the graph was compiled for.",
    ),
    "optional_argument": (
        "Optional argument",
        "An optional argument was passed in some calls and left out (or None, or an empty list) "
        "in others, and every combination of present and absent arguments gets a graph of its "
        "own. Passing it always (e.g. an all-ones attention mask instead of None) keeps one "
        "graph; otherwise warm up each combination your traffic uses.",
    ),
    "list_length": (
        "List length",
        "A list or tuple argument has another length. Dynamo unrolls containers, so every length "
        "gets its own graph; one stacked tensor instead of a list avoids it.",
    ),
    "constant_value": (
        "Constant value",
        "A Python scalar, string or flag changed value. Dynamo bakes non-tensor arguments into the "
        "graph as constants; values that vary per call are better passed as tensors.",
    ),
    "scalar_value": (
        "Python number range",
        "A Python int or float argument (or a number read with .item()) was compared in the code, "
        "e.g. 0 <= n <= 1 or value > 0.45, and the graph only holds on one side of that bound. "
        "Pass the number as a tensor or mark it dynamic; when the comparison is a data-dependent "
        "branch (the graph breaks at .item()), torch.where or torch.cond keeps both sides in one "
        "graph.",
    ),
    "shape_relation": (
        "Shape relation in your code",
        "A guard from the model's own shape logic (a branch such as if x.shape[0] > 16, an "
        "assertion, a reshape): the graph took one branch and the input needs another. Marking the "
        "dimension unbacked cannot remove it; one warmup sample per branch can.",
    ),
    "operator_guard": (
        "Size check inside a torch operator",
        "A PyTorch operator, not your code, added this guard: its implementation picks another "
        "path (kernel, algorithm, broadcasting) depending on the input's size or layout, e.g. "
        "conv2d above a size threshold, and this input fell on the other side. It is not a bug in "
        "your code; warm up with one input on each side of the threshold so both graphs exist.",
    ),
    "global_state": (
        "Global state",
        "State outside the arguments changed between calls: grad mode, autocast, the default "
        "dtype, a torch function mode. Keep it fixed around the compiled model.",
    ),
    "other": (
        "Unclassified",
        "A guard guardscope could not classify, kept verbatim so nothing is lost. The raw text is "
        "torch's own; tlparse on the trace shows the guard in context.",
    ),
}

VERIFY_STATUSES = ("passed", "failed", "crashed", "infeasible", "skipped")


# --- reading ---------------------------------------------------------------------------------

def read_inputs(out_dir: str | Path) -> dict[str, Any]:
    """Load an analysis folder: ``catalog`` (required), ``timings``, ``fixes``, ``verification``,
    ``bench`` (``None`` when the file does not exist). Keys match :func:`render_report`'s arguments."""
    out = Path(out_dir)
    inputs: dict[str, Any] = {"catalog": output.read_catalog(out)}
    optional = {
        "timings": (output.TIMINGS, f"re-run 'guardscope analyze CORPUS --out {out} --force'"),
        "fixes": (output.FIXES, f"re-run 'guardscope emit-warmup {out}'"),
        "verification": (output.VERIFICATION, f"re-run 'guardscope verify {out}'"),
        "bench": (output.BENCH, f"re-run 'guardscope bench {out}'"),
    }
    optional["probe"] = (f"{output.PROBE_DIR}/{output.PROBE_FILE}", f"re-run 'guardscope probe {out}'")
    optional["fidelity"] = ("fidelity.json", f"re-run 'guardscope fidelity {out}'")
    for key, (name, fix) in optional.items():
        path = out / name
        inputs[key] = output.read_json(path, fix) if path.is_file() else None
    if inputs["fidelity"] is not None:
        checked = out / "fidelity" / output.CATALOG
        inputs["fidelity"] = dict(inputs["fidelity"], catalog=output.read_catalog(checked.parent) if checked.is_file() else None)
    inputs["bundles"] = read_bundles(out)
    return inputs


def read_bundles(out_dir: str | Path) -> dict[str, Any] | None:
    """The compile-cache bundle manifests in ``out_dir`` by plan (``guardscope bundle``), or None."""
    from .bundle import ARTIFACTS, read_manifest

    return {plan: manifest for plan in ARTIFACTS if (manifest := read_manifest(out_dir, plan))} or None


# --- formatting (also jinja filters) ---------------------------------------------------------

def format_seconds(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 100:
        return f"{value:.0f} s"
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"


def _tick_text(value: float) -> str:
    value = float(f"{value:.6g}")
    if value >= 1:
        return f"{value:g} s"
    if value >= 1e-3:
        return f"{value * 1e3:g} ms"
    return f"{value * 1e6:g} µs"


def sample_runs(samples: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted sample indices as runs of consecutive indices: [1, 2, 3, 5] -> [(1, 3), (5, 5)]."""
    runs: list[tuple[int, int]] = []
    for index in sorted(set(samples)):
        if runs and index == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], index)
        else:
            runs.append((index, index))
    return runs


def format_samples(samples: Iterable[int], limit: int = SAMPLE_RANGES_SHOWN) -> str:
    """``1–3, 5, 7–9`` for at most ``limit`` runs, then ``… and N more``."""
    runs = sample_runs(samples)
    shown = runs[:limit]
    text = ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in shown)
    hidden = sum(b - a + 1 for a, b in runs[limit:])
    if hidden:
        text += f" … and {hidden:,} more"
    return text or "none"


def _number(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _option(value: Any) -> str:
    """A compile option as the user wrote it in Python."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(":".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v) for v in value) or "—"
    return str(value)


def _percent(part: int, whole: int) -> str:
    if not whole:
        return "0 %"
    share = 100 * part / whole
    return f"{share:.1f} %" if share >= 0.1 or not part else "<0.1 %"


# --- context builders (pure) -----------------------------------------------------------------

def _compile_seconds(timings: dict | None) -> dict[str, float]:
    return {
        c["compile_id"]: c["seconds"]
        for c in (timings or {}).get("compiles", [])
        if c.get("seconds") is not None
    }


def _topology_of_compile(catalog: dict) -> dict[str, int]:
    return {t["compile_id"]: t["id"] for t in catalog["topologies"] if t.get("compile_id") is not None}


def _verification_by_name(verification: dict | None) -> dict[str, dict]:
    return {a["name"]: a for a in (verification or {}).get("artifacts", [])}


def verdict_context(verification: dict | None) -> dict | None:
    """Overall result of ``guardscope verify``: passed only when every artifact passed."""
    if verification is None:
        return None
    artifacts = verification.get("artifacts", [])
    counts = Counter(a["status"] for a in artifacts)
    if not artifacts:
        status = "skipped"
    elif counts["failed"] or counts["crashed"]:
        status = "failed"
    elif counts["passed"]:
        status = "passed"
    else:
        status = "skipped"
    parts = [f"{counts[s]} {s}" for s in VERIFY_STATUSES if counts[s]]
    return {
        "status": status,
        "text": ", ".join(parts) or "no artifacts verified",
        "artifacts": [{"name": a["name"], "status": a["status"]} for a in artifacts],
    }


def summary_context(catalog: dict, timings: dict | None, verification: dict | None) -> dict:
    summary = catalog["summary"]
    seconds = _compile_seconds(timings)
    timed = [c for c in catalog["compiles"] if c["compile_id"] in seconds]
    worst = max(timed, key=lambda c: seconds[c["compile_id"]], default=None)
    compile_options = {k: _option(v) for k, v in sorted(catalog["compile"].items()) if k not in ("backend", "device")}
    return {
        "corpus_path": catalog["corpus"]["path"],
        "samples": catalog["corpus"]["samples"],
        "model": model_label(catalog["model"]),
        "model_spec": catalog["model"],
        "torch_version": catalog["torch_version"],
        "backend": catalog["compile"].get("backend"),
        "device": catalog["compile"].get("device"),
        "replay_mode": catalog.get("replay_mode"),
        "compile_options": compile_options,
        "compiles": summary["compiles"],
        "recompiles": summary["recompiles"],
        "frames": summary.get("frames", 1),
        "recompile_samples": format_samples(summary["recompile_samples"]),
        "topologies": summary["topologies"],
        "failures": sum(summary["failures_by_kind"].values()),
        "total_compile_seconds": sum(seconds[c["compile_id"]] for c in timed) if timed else None,
        "worst": None if worst is None else {
            "seconds": seconds[worst["compile_id"]],
            "compile_id": worst["compile_id"],
            "sample": worst["sample"],
        },
        "replay_seconds": (timings or {}).get("replay_seconds"),
        "has_timings": timings is not None,
        "failed_samples": [
            {"sample": f["sample"], "error": f["error"]} for f in catalog.get("failed_samples", [])[:LIST_SHOWN]
        ],
        "failed_count": summary.get("failed_samples", len(catalog.get("failed_samples", []))),
        "unparsed": dict(sorted(summary.get("unparsed", {}).items())),
        "skipped_shards": [{"file": s["file"], "error": s["error"]} for s in catalog.get("skipped_shards", [])],
        "not_analysed": format_samples(catalog.get("not_analysed", [])) if catalog.get("not_analysed") else None,
        "not_analysed_count": len(catalog.get("not_analysed", [])),
        "verdict": verdict_context(verification),
    }


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


def timeline_context(catalog: dict, timings: dict | None) -> dict:
    """Geometry of the timeline SVG: sample index on x, seconds on a log y axis.

    With per-sample times (``timings["samples"]``) the line is the slowest sample of each
    x-bin; compile markers sit on top. Without them the compile events stand alone, one
    lollipop per compile at its compile time. Without any timings the markers sit on one row.
    """
    width, height = 960, 320
    left, right, top, bottom = 78, 16, 74, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    n = max(catalog["corpus"]["samples"], 1)
    seconds = _compile_seconds(timings)
    topology = _topology_of_compile(catalog)
    per_sample = {s["sample"]: s["seconds"] for s in (timings or {}).get("samples", []) if s.get("seconds")}

    def x_of(sample: float) -> float:
        return round(left + (plot_w * sample / (n - 1) if n > 1 else plot_w / 2), 1)

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

    values = [v for v in per_sample.values() if v > 0] + [c["value"] for c in compiles if c["value"]]
    timed = bool(values)
    if timed:
        y_low, y_high, y_ticks = _log_ticks(min(values), max(values))
        span = math.log10(y_high) - math.log10(y_low)

        def y_of(value: float | None) -> float:
            value = min(max(value or y_low, y_low), y_high)
            return round(top + plot_h * (1 - (math.log10(value) - math.log10(y_low)) / span), 1)
    else:
        y_ticks = []

        def y_of(value: float | None) -> float:
            return round(top + plot_h / 2, 1)

    # Per-sample line: the slowest sample in each bin, so a spike never disappears in aggregation.
    bin_size = max(1, math.ceil(n / TIMELINE_BINS))
    path = []
    if per_sample:
        worst_per_bin: dict[int, float] = {}
        for sample, value in per_sample.items():
            b = sample // bin_size
            worst_per_bin[b] = max(worst_per_bin.get(b, 0.0), value)
        previous = None
        for b in sorted(worst_per_bin):
            x = x_of(min(b * bin_size + (bin_size - 1) / 2, n - 1))
            path.append(f"{'L' if previous == b - 1 else 'M'}{x} {y_of(worst_per_bin[b])}")
            previous = b

    # Compile markers: binned like the line when there are too many to draw one by one.
    marker_bin = max(1, math.ceil(n / TIMELINE_MARKERS)) if len(compiles) > TIMELINE_MARKERS else 1
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

    # Labels: the costliest spikes first, spread over up to two rows above the plot.
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
        "path": " ".join(path),
        "bin_size": bin_size,
        "marker_bin": marker_bin,
        "markers": markers,
        "labels": sorted(labels, key=lambda label: (label["y"], label["x"])),
        "x_ticks": [{"x": x_of(s), "text": f"{s:,}"} for s in range(0, n, x_step)],
        "y_ticks": [{"y": y_of(v), "text": _tick_text(v)} for v in y_ticks],
        "samples": n,
        "compiles": compiles[:LIST_SHOWN],
        "compiles_hidden": max(len(compiles) - LIST_SHOWN, 0),
    }


def _guard_text(failure: dict) -> str:
    """The raw text without its leading ``0/1: `` (the graph it failed against, shown apart)."""
    raw = failure.get("raw") or failure.get("guard") or ""
    prefix = f"{failure.get('against')}: "
    return raw[len(prefix):] if failure.get("against") and raw.startswith(prefix) else raw


def _compile_key(compile_id: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in compile_id.replace("/", " ").split())


def failures_context(catalog: dict) -> list[dict]:
    """Failures grouped by cause (a failure with two causes counts under both), largest first."""
    by_kind: dict[str, list[tuple[dict, int]]] = defaultdict(list)
    for c in catalog["compiles"]:
        for failure in c["failures"]:
            for cause in failure.get("causes") or [failure["kind"]]:
                by_kind[cause].append((failure, c["sample"]))
    kinds = []
    for kind, items in by_kind.items():
        texts: dict[str, dict] = {}
        for failure, sample in items:
            text = _guard_text(failure)
            entry = texts.setdefault(text, {
                "text": text,
                "guard": failure.get("guard"),
                "user_source": failure.get("user_source"),
                "hint": failure.get("hint"),
                "also": [k for k in failure.get("causes", []) if k != kind],
                "count": 0,
                "against": Counter(),
                "samples": set(),
            })
            entry["count"] += 1
            entry["against"][failure.get("against") or "?"] += 1
            entry["samples"].add(sample)
        guards = sorted(texts.values(), key=lambda e: (-e["count"], e["text"]))
        for entry in guards:
            entry["against"] = ", ".join(
                f"{graph} ×{count}" if count > 1 else graph
                for graph, count in sorted(entry["against"].items(), key=lambda kv: _compile_key(kv[0]))
            )
            entry["samples"] = format_samples(entry["samples"], limit=40)
        title, explanation = KIND_EXPLANATIONS.get(kind, (kind.replace("_", " ").capitalize(), KIND_EXPLANATIONS["other"][1]))
        kinds.append({
            "kind": kind,
            "title": title,
            "explanation": explanation,
            "count": len(items),
            "recompiles": len({sample for _, sample in items}),
            "inputs": sorted({name for failure, _ in items for name in failure.get("inputs", [])}),
            "guards": guards[:GUARD_TEXTS_SHOWN],
            "guards_hidden": max(len(guards) - GUARD_TEXTS_SHOWN, 0),
            "distinct": len(guards),
        })
    kinds.sort(key=lambda k: (-k["count"], k["kind"]))
    most = max((k["count"] for k in kinds), default=1)
    for k in kinds:
        k["bar"] = round(100 * k["count"] / most, 1)
    return kinds


def topologies_context(catalog: dict, timings: dict | None) -> list[dict]:
    seconds = _compile_seconds(timings)
    compile_sample = {c["compile_id"]: c["sample"] for c in catalog["compiles"]}
    total = catalog["corpus"]["samples"]
    return [{
        "id": t["id"],
        "label": f"T{t['id']}",
        "count": t["count"],
        "share": _percent(t["count"], total),
        "first_sample": t["first_sample"],
        "compile_id": t.get("compile_id"),
        "later_graphs": list(t.get("graphs") or [])[1:],
        "compile_sample": compile_sample.get(t.get("compile_id")),
        "seconds": seconds.get(t.get("compile_id")),
        "facts": list(t["facts"]),
        "members": format_samples(t["samples"]),
        "runs": len(sample_runs(t["samples"])),
    } for t in catalog["topologies"]]


def frames_context(catalog: dict, fidelity: dict | None) -> dict | None:
    """Frames and graph breaks, when the model compiles to more than one frame."""
    frames = catalog.get("frames") or []
    if len(frames) < 2:
        return None
    backend = catalog["compile"].get("backend")
    return {
        "frames": [{**f, "samples": format_samples(f["compile_samples"])} for f in frames],
        "breaks": list(catalog.get("graph_breaks") or []),
        "backend": backend,
        "fidelity_hint": fidelity is None and backend != "inductor",
    }


def dimensions_context(catalog: dict) -> list[dict]:
    return [{
        "dim": d["dim"],
        "min": d["min"],
        "max": d["max"],
        "dynamic": d["dynamic"],
        "ever_zero": d["ever_zero"],
        "ever_one": d["ever_one"],
        "equal_to": list(d.get("equal_to", [])),
    } for d in catalog.get("dimensions", [])]


# A bundle's verification status -> the badge style it borrows.
BUNDLE_BADGES = {"used": "passed", "partial": "skipped", "not used": "failed", "not measured": "skipped",
                 "crashed": "crashed"}


def _count(value: Any) -> str:
    return "n/a" if value is None else _number(value)


def bundle_context(manifest: dict | None, measured: dict | None) -> dict | None:
    """A plan's compile-cache bundle: how it was made (its manifest) and, once verified, set-up
    without and with it in fresh processes with empty caches (rows of label, without, with)."""
    if manifest is None and measured is None:
        return None
    made = manifest or {}
    known = {**(measured or {}), **{k: v for k, v in made.items() if v is not None}}
    context = {
        "file": known.get("file"),
        "size": f"{known['bytes'] / 1e6:.1f} MB" if known.get("bytes") is not None else "n/a",
        "torch_version": known.get("torch_version"),
        "device": known.get("device"),
        "device_name": known.get("device_name"),
        "backend": (made.get("compile") or {}).get("backend") or known.get("backend"),
        "graphs": known.get("graphs"),
        "compile_seconds": made.get("compile_seconds"),
        "status": None,
        "badge": None,
        "reason": None,
        "rows": [],
    }
    if measured is None:
        return context
    context.update(status=measured.get("status"), badge=BUNDLE_BADGES.get(measured.get("status"), "skipped"),
                   reason=measured.get("reason"))
    without, with_ = measured.get("without") or {}, measured.get("with") or {}
    if without.get("setup_seconds") is None or with_.get("setup_seconds") is None:
        return context
    caches = [run.get("cache") or {} for run in (without, with_)]
    load = with_.get("bundle_load") or {}
    context["rows"] = [
        ("set-up (load + warmup)", format_seconds(without["setup_seconds"]), format_seconds(with_["setup_seconds"])),
        ("bundle load", "—", format_seconds(load.get("seconds")) + ("" if load.get("status") == "loaded"
                                                                     else f" ({load.get('status')})")),
        ("graphs from the cache", _count(caches[0].get("fxgraph_hits")), _count(caches[1].get("fxgraph_hits"))),
        ("graphs compiled from scratch", _count(caches[0].get("fxgraph_misses")), _count(caches[1].get("fxgraph_misses"))),
        ("cache folders empty at start", *("yes" if run.get("cache_dirs_empty") else "no" for run in (without, with_))),
        ("recompiles on replay", _count(without.get("replay_recompiles")), _count(with_.get("replay_recompiles"))),
    ]
    return context


def fixes_context(fixes: dict | None, verification: dict | None, bundles: dict | None = None) -> list[dict]:
    """One entry per artifact in fixes.json, then any verified artifact fixes.json lacks."""
    verified = _verification_by_name(verification)
    artifacts = list((fixes or {}).get("artifacts", []))
    known = {a["name"] for a in artifacts}
    artifacts += [{"name": name} for name in verified if name not in known]
    result = []
    for artifact in artifacts:
        check = verified.get(artifact["name"])
        result.append({
            "name": artifact["name"],
            "title": artifact.get("title") or artifact["name"],
            "file": artifact.get("file"),
            "summary": artifact.get("summary"),
            "code": artifact.get("code"),
            "details": {str(k): _option(v) for k, v in (artifact.get("details") or {}).items()},
            "verification": None if check is None else {
                "status": check["status"],
                "reason": check.get("reason"),
                "setup_graphs": check.get("setup_graphs"),
                "setup_seconds": check.get("setup_seconds"),
                "replay_recompiles": check.get("replay_recompiles"),
                "recompile_samples": format_samples(check.get("recompile_samples") or []),
                "samples_replayed": check.get("samples_replayed"),
                "failures": [
                    {"sample": f["sample"], "reasons": list(f.get("reasons", []))}
                    for f in (check.get("failures") or [])[:LIST_SHOWN]
                ],
                "failures_hidden": max(len(check.get("failures") or []) - LIST_SHOWN, 0),
                "topologies": [
                    {"id": t["id"], "passed": t["passed"], "error": t.get("error"),
                     "status": t.get("status") or ("passed" if t["passed"] else "failed")}
                    for t in check.get("topologies") or []
                ],
            },
            "bundle": bundle_context((bundles or {}).get(artifact["name"]), (check or {}).get("bundle")),
        })
    return result


# --- the recommendation box ------------------------------------------------------------------

FIX_ORDER = ("warmup", "unbacked", "export")  # ties between fixes go to the earlier one
RECOMMENDATION_RULE = (
    "A fix guardscope verify passed beats one it did not pass; among those passed, the plan bench.json "
    "recommends when it names one, otherwise the plan that compiles the fewest graphs at set-up. "
    "torch.export only when it passed and nothing else did. Never a fix verify failed or crashed, nor "
    "one not possible on this model. Before verify has run, the same rule picks provisionally among "
    "the fixes not verified, export excepted."
)


def _fix_states(fixes: dict | None, verification: dict | None) -> list[dict]:
    """Each artifact of fixes.json: ``state`` (passed, failed, crashed, infeasible or unverified),
    the reason for it, and the graphs it compiles at set-up (verify's count, else emit-warmup's)."""
    verified = _verification_by_name(verification)
    states = []
    for artifact in (fixes or {}).get("artifacts", []):
        check = verified.get(artifact["name"]) or {}
        status = check.get("status")
        if artifact.get("status", "ok") != "ok" or status == "infeasible":
            state, reason = "infeasible", artifact.get("reason") or check.get("reason")
        elif status in (None, "skipped"):
            state, reason = "unverified", check.get("reason")
        else:
            state, reason = status, check.get("reason")
        graphs = check.get("setup_graphs")
        states.append({
            "name": artifact["name"],
            "state": state,
            "reason": reason,
            "graphs": graphs if graphs is not None else (artifact.get("details") or {}).get("graphs"),
        })
    return states


def choose_fix(fixes: dict | None, verification: dict | None, bench: dict | None) -> dict:
    """The fix the report recommends (:data:`RECOMMENDATION_RULE`): ``name`` (None when no fix
    qualifies), ``proven`` (verify passed it), ``why`` it won, and ``fixes``, every fix's state.

    Candidates in turn, the first non-empty set deciding: the fixes verify passed other than
    export; export when verify passed it; the fixes not yet verified other than export (a
    provisional choice). Within the set: bench.json's recommended plan, else the fewest graphs
    at set-up, ties in :data:`FIX_ORDER`. Infeasible, failed and crashed fixes never qualify."""
    states = _fix_states(fixes, verification)
    benched = ((bench or {}).get("recommendation") or {}).get("strategy")
    tiers = (
        [s for s in states if s["state"] == "passed" and s["name"] != "export"],
        [s for s in states if s["state"] == "passed" and s["name"] == "export"],
        [s for s in states if s["state"] == "unverified" and s["name"] != "export"],
    )
    tier = next((t for t in tiers if t), [])
    if not tier:
        return {"name": None, "proven": False, "why": None, "fixes": states}

    def rank(s: dict) -> tuple:
        order = FIX_ORDER.index(s["name"]) if s["name"] in FIX_ORDER else len(FIX_ORDER)
        return (s["name"] != benched, s["graphs"] is None, s["graphs"] or 0, order, s["name"])

    best, *rest = sorted(tier, key=rank)
    if best["name"] == benched:
        why = "Recommended by guardscope bench"
    elif not rest:
        why = "The only fix verify passed" if best["state"] == "passed" else "The only fix not ruled out yet"
    else:
        others = ", ".join(f"{_count(s['graphs'])} for {s['name']}" for s in rest)
        why = f"It compiles the fewest graphs at set-up: {_count(best['graphs'])}, against {others}"
    return {"name": best["name"], "proven": best["state"] == "passed", "why": why, "fixes": states}


def usage_code(code: str | None) -> str:
    """The usage example of a generated module: the first indented block of its docstring."""
    docstring = re.match(r'\s*"""(.*?)"""', code or "", re.S)
    block: list[str] = []
    for line in (docstring.group(1) if docstring else "").splitlines():
        if line.startswith("    ") or (block and not line.strip()):
            block.append(line[4:])
        elif block:
            break
    return "\n".join(block).strip("\n")


def _graphs(count: int | None) -> str:
    return f"{_count(count)} graph{'' if count == 1 else 's'}"


def _fix_proof(check: dict) -> str:
    """What verify measured for a fix that passed, in one sentence."""
    setup = f"set-up compiled {_graphs(check.get('setup_graphs'))} in {format_seconds(check.get('setup_seconds'))}"
    if check.get("replay_recompiles") is not None:
        replay = f"replaying its {_count(check.get('samples_replayed'))} samples compiled nothing"
    else:
        topologies = check.get("topologies") or []
        replay = f"{sum(t['passed'] for t in topologies)}/{len(topologies)} topologies ran"
    return f"guardscope verify passed it: {setup}; {replay}."


def recommendation_context(catalog: dict, fixes: dict | None, verification: dict | None,
                           bench: dict | None) -> dict:
    """The box at the top of the report: the fix to use (:func:`choose_fix`), its proof, what it
    costs, the code that applies it (its module's docstring usage) and why the others lost.

    ``state``: ``none`` (no fixes.json), ``proven``, ``provisional`` (not verified yet) or
    ``nothing`` (no fix qualifies)."""
    from .emit.common import base_context

    context: dict[str, Any] = {"state": "none", "rule": RECOMMENDATION_RULE, "others": [], "unverified": False}
    artifacts = {a["name"]: a for a in (fixes or {}).get("artifacts", [])}
    if not artifacts:
        return context
    choice = choose_fix(fixes, verification, bench)
    states = {s["name"]: s for s in choice["fixes"]}
    name = choice["name"]
    others = [{
        "name": s["name"],
        "state": s["state"],
        "reason": s["reason"],
        "graphs": s["graphs"],
        "export_held_back": s["name"] == "export" and s["state"] in ("passed", "unverified"),
    } for s in choice["fixes"] if s["name"] != name]
    context.update(others=others, unverified=any(s["state"] == "unverified" for s in choice["fixes"]))
    if name is None:
        context["state"] = "nothing"
        return context
    artifact = artifacts[name]
    code = usage_code(artifact.get("code"))
    call = f"torch.compile(model{base_context(catalog)['compile_call']})"
    bench_rows = {row["name"]: row for row in (bench_context(bench) or {}).get("rows", [])}
    context.update(
        state="proven" if choice["proven"] else "provisional",
        name=name,
        title=artifact.get("title") or name,
        file=artifact.get("file"),
        why=choice["why"],
        proof=_fix_proof(_verification_by_name(verification)[name]) if choice["proven"] else None,
        bench=None if bench is None else {
            "device": bench.get("device_name") or bench.get("device"),
            "row": bench_rows.get(name),
            "recommended": ((bench.get("recommendation") or {}).get("strategy")),
        },
        graphs=states[name]["graphs"],
        duck_off=(artifact.get("details") or {}).get("duck_shape") is False,
        warmup_graphs=None if name == "warmup" or states.get("warmup", {}).get("state") in (None, "infeasible")
        else states["warmup"]["graphs"],
        code=code,
        compile_call=call,
        stale_options="torch.compile(" in code and call not in code,
    )
    return context


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


def cudagraphs_context(catalog: dict, timings: dict | None) -> dict | None:
    """The CUDA graphs section: recordings and skips per sample, and the padding advice."""
    section = catalog.get("cudagraphs")
    if section is None:
        return None
    total = catalog["corpus"]["samples"]
    topology = _topology_of_compile(catalog)
    expected, recorded, padding = section["expected"], section.get("recorded"), section["padding"]
    graphs: dict[str, dict] = {}
    for source, rows in (("expected", expected["by_graph"]), ("recorded", (recorded or {}).get("by_graph", []))):
        for row in rows:
            entry = graphs.setdefault(row["graph"], {"graph": row["graph"], "expected": None, "recorded": None})
            entry[source] = {"new_shapes": row["new_shapes"], "recordings": row["recordings"]}
    graph_rows = [
        {**entry, "topology": f"T{topology[g]}" if g in topology else "—"}
        for g, entry in sorted(graphs.items(), key=lambda item: [int(n) for n in re.findall(r"\d+", item[0])] or [1 << 30])
    ]
    times = [r for r in (timings or {}).get("cudagraph_recordings", []) if r.get("seconds") is not None]
    slowest = max(times, key=lambda r: r["seconds"], default=None)
    strip = None
    if recorded is not None:
        rows = {"new shape": recorded["new_shapes"]["samples"], "recording": recorded["recordings"]["samples"]}
        rows["skip"] = sorted({s for skip in recorded["skips"] for s in skip["samples"]})
        strip = _strip(rows, total)
    chosen = padding.get("chosen")
    within = chosen is not None and chosen["max_per_graph"] <= padding["shapes_per_graph"]
    chosen_bounds = chosen["bounds"] if within else {}
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
    from .buckets import skip_effect

    settings = section.get("settings") or {}
    return {
        "observed": section["observed"],
        "note": section.get("note"),
        # cudagraph_skip_dynamic_graphs was set for the analysis: say what it does on this torch
        "partitioned": bool(settings.get("graph_partition")),
        "skip_setting": skip_effect(bool(settings.get("graph_partition"))) if settings.get("skip_dynamic_graphs") else None,
        "expected_captions": EXPECTED_CAPTIONS[expected.get("model", "per_shape")],
        "expected": {"skips": 0, **expected},  # (catalogs before the skip model had no skips)
        "recorded": None if recorded is None else {
            "new_shapes": recorded["new_shapes"]["count"],
            "recordings": recorded["recordings"]["count"],
            "skips": [{"reason": s["reason"], "count": s["count"], "samples": format_samples(s["samples"])}
                      for s in recorded["skips"][:LIST_SHOWN]],
            "skip_count": sum(s["count"] for s in recorded["skips"]),
            "hints": [{"text": h["text"], "count": h["count"], "samples": format_samples(h["samples"])}
                      for h in recorded["hints"][:LIST_SHOWN]],
        },
        "capture_seconds": sum(r["seconds"] for r in times) if times else None,
        "slowest_capture": slowest,
        "graphs": graph_rows,
        "strip": strip,
        "padding": {
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
            "groups": groups,
        },
    }


def bench_context(bench: dict | None) -> dict | None:
    """The latency table of ``guardscope bench`` (bench.json), None when it was not run."""
    if bench is None:
        return None
    from .bench import format_duration, format_ms, missed_targets

    rows = []
    for row in bench.get("strategies", []):
        steady = row.get("steady") or {}
        first = row.get("first_compile")
        latency = row.get("recompile_latency")
        rows.append({
            "name": row["name"],
            "title": row.get("title") or row["name"],
            "status": row["status"],
            "reason": row.get("reason"),
            "setup": format_duration(row.get("setup_seconds")),
            "graphs": None if row.get("setup_graphs") is None else row["setup_graphs"] + row["replay_compiles"],
            "recompiles": row.get("recompiles"),
            "recompile_samples": format_samples(e["sample"] for e in row.get("recompile_requests") or []),
            "recompile_mean": format_duration(latency["mean_s"]) if latency else None,
            "recompile_max": format_duration(latency["max_s"]) if latency else None,
            "first_compile": None if not first else {"latency": format_duration(first["latency_s"]),
                                                     "sample": first["sample"]},
            "steady": {key: format_ms(steady.get(f"{key}_ms")) for key in ("mean", "p50", "p99", "max")},
            "worst": format_ms(row.get("worst_ms")),
            "speedup": None if row.get("speedup") is None else f"{row['speedup']:.2f}×",
            "paired": None if not (row.get("paired") or {}).get("speedup") else {
                "speedup": f"{row['paired']['speedup']:.2f}×",
                "requests": row["paired"]["requests"],
                "mean": format_ms(row["paired"]["mean_ms"]),
                "eager_mean": format_ms(row["paired"]["eager_mean_ms"]),
            },
            "bundle": None if (row.get("bundle") or {}).get("status", "absent") == "absent" else row["bundle"],
            "fallbacks": row.get("fallbacks"),
            "errors": row.get("errors"),
            "first_error": (row.get("error_requests") or [{}])[0].get("error"),
            "has_targets": bool(row.get("targets")),
            "missed": missed_targets(row) if row.get("targets") else [],
        })
    recommendation = bench.get("recommendation") or {}
    return {
        "device": bench.get("device_name") or bench.get("device"),
        "torch_version": bench.get("torch_version"),
        "compile": {k: _option(v) for k, v in sorted((bench.get("compile") or {}).items())},
        "corpus_path": (bench.get("corpus") or {}).get("path"),
        "samples": (bench.get("corpus") or {}).get("samples"),
        "repeat": bench.get("repeat"),
        "criteria": bench.get("criteria") or {},
        "rows": rows,
        "notes": list(bench.get("notes") or []),
        "recommended": recommendation.get("strategy"),
        "meets_targets": bool(recommendation.get("meets_targets")),
        "reason": recommendation.get("reason"),
    }


def catalog_digest(catalog: dict) -> str:
    """A digest of the catalog's content, to tell which analysis other results belong to."""
    import hashlib

    return hashlib.sha256(output.dumps(catalog).encode()).hexdigest()


def risk_context(catalog: dict, probe: dict | None) -> dict:
    """Good-Turing estimate, time splits (both from the catalog) and the probe's findings."""
    risk = catalog.get("risk") or {}
    probability = risk.get("unseen_topology_probability")
    splits = [
        {
            "percent": f"{split['fraction']:.0%}",
            "plan_samples": split["plan_samples"],
            "replayed_samples": split["replayed_samples"],
            "recompiles": split["recompiles"],
            "recompile_samples": split["recompile_samples"],
            "new_topologies": ", ".join(f"T{t}" for t in split["new_topologies"]),
        }
        for split in risk.get("time_split", [])
    ]
    found = None
    if probe is not None:
        explored = probe["explored"]
        found = {
            "sizes": ", ".join(str(v) for v in probe["bounds"]["values"]),
            "stale": probe.get("catalog_sha256") != catalog_digest(catalog),
            "pairwise": probe["bounds"]["pairwise"],
            "explored": explored,
            "by_kind": ", ".join(f"{k} {v}" for k, v in explored["planned_by_kind"].items()),
            "invalid_reasons": sorted(explored["invalid_reasons"].items()),
            "topologies": probe["new_topologies"],
            "warnings": probe.get("warnings", []),
            "model_errors": probe.get("model_errors", []),
        }
    return {
        "available": bool(risk),
        "samples": risk.get("samples"),
        "singletons": risk.get("singleton_topologies"),
        "probability": None if probability is None else f"{probability:.2%}",
        "splits": splits,
        "probe": found,
    }


def fidelity_context(catalog: dict, fidelity: dict | None) -> dict | None:
    """The default analysis against the production-backend one (``guardscope fidelity``),
    diffed again from both catalogs so the section always matches the files beside it."""
    if fidelity is None or fidelity.get("catalog") is None:
        return None
    from .diff import diff_catalogs

    labels = tuple(fidelity.get("labels") or ("default analysis", "production backend"))
    result = diff_catalogs(catalog, fidelity["catalog"], ignore=tuple(fidelity.get("ignore", ())), labels=labels)
    context = diff_context(result, title=f"Fidelity: {labels[0]} vs {labels[1]}")
    context["ignored"] = list(fidelity.get("ignore", ()))
    return context


def build_context(catalog: dict, *, timings: dict | None, fixes: dict | None,
                  verification: dict | None, trace_dir: str = output.TRACE_DIR,
                  probe: dict | None = None, fidelity: dict | None = None,
                  bench: dict | None = None, bundles: dict | None = None) -> dict:
    return {
        "fidelity": fidelity_context(catalog, fidelity),
        "risk": risk_context(catalog, probe),
        "title": f"guardscope report: {model_label(catalog['model'])}",
        "summary": summary_context(catalog, timings, verification),
        "timeline": timeline_context(catalog, timings),
        "failure_kinds": failures_context(catalog),
        "topologies": topologies_context(catalog, timings),
        "frames": frames_context(catalog, fidelity),
        "dimensions": dimensions_context(catalog),
        "fixes": fixes_context(fixes, verification, bundles),
        "recommendation": recommendation_context(catalog, fixes, verification, bench),
        "cudagraphs": cudagraphs_context(catalog, timings),
        "has_fixes": fixes is not None,
        "has_verification": verification is not None,
        "bench": bench_context(bench),
        "bench_file": output.BENCH,
        "trace_dir": trace_dir.rstrip("/"),
        "trace_file": output.TRACE_FILE,
        "catalog_file": output.CATALOG,
        "timings_file": output.TIMINGS,
        "fixes_file": output.FIXES,
        "verification_file": output.VERIFICATION,
    }


# --- rendering -------------------------------------------------------------------------------

ENVIRONMENT = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
ENVIRONMENT.filters.update(seconds=format_seconds, number=_number, samples=format_samples)


def render_report(catalog: dict, *, timings: dict | None, fixes: dict | None,
                  verification: dict | None, trace_dir: str = output.TRACE_DIR,
                  probe: dict | None = None, fidelity: dict | None = None,
                  bench: dict | None = None, bundles: dict | None = None) -> str:
    """The report page for already-loaded JSON (see :func:`read_inputs`). Reads and writes nothing."""
    context = build_context(catalog, timings=timings, fixes=fixes, verification=verification,
                            trace_dir=trace_dir, probe=probe, fidelity=fidelity, bench=bench,
                            bundles=bundles)
    return ENVIRONMENT.get_template("report.html").render(context)


def write_report(out_dir: str | Path) -> Path:
    """Render ``out_dir/report.html`` from the JSON files in ``out_dir``; returns its path."""
    out = Path(out_dir)
    return output.write_text(out / REPORT, render_report(**read_inputs(out)))


# --- the diff of two analyses ----------------------------------------------------------------

def diff_context(diff: CatalogDiff, *, title: str = "What changed") -> dict:
    """What ``templates/_diff.html`` needs, from a :class:`guardscope.diff.CatalogDiff`.

    The partial reads one variable, ``diff`` (this dict), so any page can include it: the
    standalone ``diff.html``, or a section of another page (pass its own ``title``)."""
    from . import diff as words

    headline = diff.headline()

    def failure(f: dict, mark: str) -> dict:
        return {"mark": mark, "kind": f["kind"], "against": words.against_words(f),
                "guard": f.get("guard"), "text": _guard_text(f)}

    def side(label: str, run: dict, counts: dict) -> dict:
        return {"label": label, "rows": [
            ("torch", run["torch_version"]), ("backend", run["backend"]), ("device", run["device"]),
            ("model", run["model"]), ("samples", _number(counts["samples"])),
        ]}

    count_names = ("samples", "compiles", "recompiles", "failures", "topologies", "failed_samples", "not_analysed")
    changed_topologies = [t for t in diff.topologies if t.status != "unchanged"]
    return {
        "title": title,
        "identical": diff.identical,
        "headline": headline,
        "changes": headline.partition(": ")[2],
        "labels": {"old": diff.labels[0], "new": diff.labels[1]},
        "sides": [side(diff.labels[0], diff.old_run, diff.old_counts),
                  side(diff.labels[1], diff.new_run, diff.new_counts)],
        "warnings": list(diff.warnings),
        "ignore": list(diff.ignore),
        "context": [{"field": c.field, "old": words.value_words(c.old), "new": words.value_words(c.new)}
                    for c in diff.context],
        "counts": [{
            "name": name.replace("_", " "),
            "value": words.arrow(diff.old_counts[name], diff.new_counts[name]),
            "changed": diff.old_counts[name] != diff.new_counts[name],
        } for name in count_names],
        "compiles": [{
            "status": c.status,
            "label": words.compile_label(c),
            "words": words.compile_words(c),
            "failures": [failure(f, mark) for mark, f in words.failure_changes(c)[:DIFF_FAILURES_SHOWN]],
            "failures_hidden": max(len(c.removed_failures) + len(c.added_failures) - DIFF_FAILURES_SHOWN, 0),
        } for c in diff.compiles[:LIST_SHOWN]],
        "compiles_hidden": max(len(diff.compiles) - LIST_SHOWN, 0),
        "failure_kinds": [{
            "kind": kind,
            "title": KIND_EXPLANATIONS.get(kind, (kind.replace("_", " ").capitalize(), ""))[0],
            "old": old, "new": new,
            "delta": f"{new - old:+,}" if new != old else "",
        } for kind, old, new in diff.failures_by_kind],
        "topologies": [{
            "status": t.status,
            "anchor": f"diff-{t.status}-{(t.new or t.old).id}",
            "label": words.topology_label(t),
            "words": words.topology_words(t),
            "facts": list(t.facts),
            "gained": format_samples(t.gained) if t.old and t.gained else None,
            "lost": format_samples(t.lost) if t.new and t.lost else None,
            "members": format_samples(t.gained or t.lost) if not (t.old and t.new) else None,
        } for t in changed_topologies[:LIST_SHOWN]],
        "topologies_hidden": max(len(changed_topologies) - LIST_SHOWN, 0),
        "unchanged": [{
            "label": words.topology_label(t),
            "count": t.new.count,
            "facts": "; ".join(t.facts),
        } for t in diff.topologies_with("unchanged")],
        "moved": diff.moved_samples,
        "moves": [{
            "old": words.place_words(m.old, m.old_note),
            "new": words.place_words(m.new, m.new_note),
            "count": len(m.samples),
            "samples": format_samples(m.samples),
        } for m in diff.moves[:LIST_SHOWN]],
        "moves_hidden": max(len(diff.moves) - LIST_SHOWN, 0),
        "dimensions": [{
            "dim": d.dim,
            "status": d.status,
            "fields": [{"field": f, "old": words.value_words(a), "new": words.value_words(b)} for f, a, b in d.fields],
        } for d in diff.dimensions[:LIST_SHOWN]],
        "dimensions_hidden": max(len(diff.dimensions) - LIST_SHOWN, 0),
        "errors": [{"sample": e.sample, "old": e.old, "new": e.new} for e in diff.errors[:LIST_SHOWN]],
        "errors_hidden": max(len(diff.errors) - LIST_SHOWN, 0),
    }


def render_diff(diff: CatalogDiff) -> str:
    """The self-contained ``diff.html`` page for a diff. Reads and writes nothing."""
    context = diff_context(diff)
    return ENVIRONMENT.get_template("diff.html").render(
        title=f"guardscope diff: {diff.labels[0]} → {diff.labels[1]}", diff=context)


def write_diff_html(path: str | Path, diff: CatalogDiff) -> Path:
    """Write :func:`render_diff`'s page to ``path`` (atomically); returns the path."""
    return output.write_text(path, render_diff(diff))
