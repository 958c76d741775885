"""The report's section contexts (pure: loaded JSON in, plain dicts out), one function per section."""

from __future__ import annotations

from collections import Counter, defaultdict

from .. import plans, store
from ..catalog.diff import diff_catalogs
from ..corpus.spec import model_label
from ..text import (
    guard_reading,
    compile_failure_cause,
    format_duration,
    format_ms,
    format_runs,
    format_samples,
    format_seconds,
    generation_lines,
    guard_text,
    missed_targets,
    production_lines,
    sample_runs,
)
from .common import (
    GUARD_TEXTS_SHOWN,
    KIND_EXPLANATIONS,
    LIST_SHOWN,
    VERIFY_STATUSES,
    compile_costs,
    count_text,
    option_text,
    percent_text,
    torch_version_tuple,
    verification_by_name,
)
from .diff_page import diff_context
from .fleet import seen_text


def verdict_context(verification: dict | None) -> dict | None:
    """Overall result of ``guardscope verify``: passed only when every artifact passed (or could
    not apply), partial when one serves only part of the corpus."""
    if verification is None:
        return None
    artifacts = verification.get("artifacts", [])
    counts = Counter(a["status"] for a in artifacts)
    if not artifacts:
        status = "skipped"
    elif counts["failed"] or counts["crashed"]:
        status = "failed"
    elif counts["partial"]:
        status = "partial"
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


def production_context(catalog: dict, timings: dict | None = None, bench: dict | None = None) -> dict | None:
    """The headline: what production lives through under its recompile limits (None for a
    catalog written before guardscope modelled them), and, where a frame reaches its limit, the
    fix that needs no plan: raising the limit to the graphs the traffic needs, with what that
    costs (every graph compiled while serving, the seconds the analysis measured compiling them)."""
    production = catalog.get("production")
    if production is None:
        return None
    context = {"lines": production_lines(production),
               "lost": bool(production["failed_samples"] or production["eager_samples"]),
               "failed": len(production["failed_samples"]), "eager": len(production["eager_samples"]),
               "raise_limit": None}
    reaching = [frame for frame in production["frames"] if frame["reached_at"] is not None]
    if reaching:
        needed = max(frame["graphs_needed"] for frame in reaching)
        costs = compile_costs(catalog, timings, bench)
        version = torch_version_tuple(catalog)
        context["raise_limit"] = {
            "graphs": needed,
            "compiles": sum(1 for c in catalog.get("compiles", []) if c.get("fail_type") is None),
            "seconds": format_duration(sum(costs["seconds"].values())) if costs["seconds"] else None,
            "source": costs["source"],
            "backend": costs["backend"],
            "per_call": version >= (2, 13),
        }
    return context


def summary_context(catalog: dict, timings: dict | None, verification: dict | None, bench: dict | None = None) -> dict:
    summary = catalog["summary"]
    costs = compile_costs(catalog, timings, bench)
    seconds = costs["seconds"]
    timed = [c for c in catalog["compiles"] if c["compile_id"] in seconds]
    worst = max(timed, key=lambda c: seconds[c["compile_id"]], default=None)
    compile_options = {k: option_text(v) for k, v in sorted(catalog["compile"].items()) if k not in ("backend", "device")}
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
        "cost_source": costs["source"],
        "cost_label": costs["label"],
        "cost_backend": costs["backend"],
        "analysis_seconds": costs["analysis_seconds"],
        "analysis_backend": costs["analysis_backend"],
        "stalls_recorded": catalog.get("production_compiles") is not None,
        "replica_stalls": [{"replica": name or "this process", **figures} for name, figures in
                           sorted(((catalog.get("production_compiles") or {}).get("replicas") or {}).items())],
        "failed_samples": [
            {"sample": f["sample"], "error": f["error"]} for f in catalog.get("failed_samples", [])[:LIST_SHOWN]
        ],
        "failed_count": summary.get("failed_samples", len(catalog.get("failed_samples", []))),
        "unparsed": dict(sorted(summary.get("unparsed", {}).items())),
        "skipped_shards": [{"file": s["file"], "error": s["error"]} for s in catalog.get("skipped_shards", [])],
        "not_analysed": format_samples(catalog.get("not_analysed", [])) if catalog.get("not_analysed") else None,
        "not_analysed_count": len(catalog.get("not_analysed", [])),
        "verdict": verdict_context(verification),
        "signatures": catalog["corpus"].get("signatures"),
    }


def compile_failed_context(catalog: dict) -> dict | None:
    """The frames Dynamo stopped compiling after a compile of them failed (catalog.json's
    ``skipped_frames``), None when there are none. ``forward``: the first frame's, with where every
    sample went (graphs, raised, not analysed, eager: together the corpus), which the report
    leads with: in production one such request turns the whole compile off, silently."""
    skipped = catalog.get("skipped_frames") or []
    if not skipped:
        return None
    total = catalog["corpus"]["samples"]
    frames = [{
        **entry,
        "cause": compile_failure_cause(entry),
        "eager_count": None if entry["eager_samples"] is None else len(entry["eager_samples"]),
        "eager": None if entry["eager_samples"] is None else format_samples(entry["eager_samples"]),
        "eager_share": None if entry["eager_samples"] is None else percent_text(len(entry["eager_samples"]), total),
    } for entry in skipped]
    forward = next((f for f in frames if f["frame"] == 0), None)
    return {
        "frames": frames,
        "forward": forward,
        "samples": total,
        "served": sum(t["count"] for t in catalog["topologies"]),
        "topologies": len(catalog["topologies"]),
        "raised": len(catalog.get("failed_samples", [])),
        "not_analysed": len(catalog.get("not_analysed", [])),
    }


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
            text = guard_text(failure)
            entry = texts.setdefault(text, {
                "text": text,
                "guard": failure.get("guard"),
                "user_source": failure.get("user_source"),
                "hint": failure.get("hint"),
                # An operator's own guard is an expression torch derived inside the operator: it
                # gets a reading in words and the operator that made it.
                "operator": failure.get("operator") if kind == "operator_guard" else None,
                "reading": guard_reading(failure.get("guard")) if kind == "operator_guard" else None,
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


def topologies_context(catalog: dict, timings: dict | None, bench: dict | None = None) -> list[dict]:
    seconds = compile_costs(catalog, timings, bench)["seconds"]
    compile_sample = {c["compile_id"]: c["sample"] for c in catalog["compiles"]}
    total = catalog["corpus"]["samples"]
    return [_topology_context(t, total, compile_sample, seconds) for t in catalog["topologies"]]


def _topology_context(t: dict, total: int, compile_sample: dict, seconds: dict) -> dict:
    runs = sample_runs(t["samples"])  # millions of members at scale: their runs found once
    return {
        "id": t["id"],
        "label": f"T{t['id']}",
        "count": t["count"],
        "share": percent_text(t["count"], total),
        "first_sample": t["first_sample"],
        "compile_id": t.get("compile_id"),
        "later_graphs": list(t.get("graphs") or [])[1:],
        "compile_sample": compile_sample.get(t.get("compile_id")),
        "seconds": seconds.get(t.get("compile_id")),
        "facts": list(t["facts"]),
        "members": format_runs(runs),
        "runs": len(runs),
        "first_seen": seen_text(t.get("first_seen")),
        "last_seen": seen_text(t.get("last_seen")),
    }


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
        ("graphs from the cache", count_text(caches[0].get("fxgraph_hits")), count_text(caches[1].get("fxgraph_hits"))),
        ("graphs compiled from scratch", count_text(caches[0].get("fxgraph_misses")), count_text(caches[1].get("fxgraph_misses"))),
        ("cache folders empty at start", *("yes" if run.get("cache_dirs_empty") else "no" for run in (without, with_))),
        ("recompiles on replay", count_text(without.get("replay_recompiles")), count_text(with_.get("replay_recompiles"))),
    ]
    return context


# Verified artifacts that are no plan of their own (fixes.json has no entry for them).
TITLES = {plans.SHAPES_SPEC: "declarative spec form of the mark_unbacked configuration (in unbacked.py)"}


def spec_title(fixes: dict | None, verification: dict | None) -> str:
    """The title of the unbacked plan's declarative form, naming the torch.compile keyword it was
    proven under (verification.json), else the one emit-warmup wrote it for (fixes.json):
    ``dynamic_shapes=`` (torch 2.14) or ``shapes_spec=`` (torch 2.13)."""
    keyword = verification_by_name(verification).get(plans.SHAPES_SPEC, {}).get("keyword")
    if keyword is None:
        unbacked = next((a for a in (fixes or {}).get("artifacts", []) if a.get("name") == plans.UNBACKED), {})
        keyword = ((unbacked.get("details") or {}).get(plans.SHAPES_SPEC) or {}).get("keyword")
    if keyword is None:
        return TITLES[plans.SHAPES_SPEC]
    return f"declarative spec form of the mark_unbacked configuration: torch.compile({keyword}=unbacked.shapes_spec())"


def fixes_context(fixes: dict | None, verification: dict | None, bundles: dict | None = None) -> list[dict]:
    """One entry per artifact in fixes.json, then any verified artifact fixes.json lacks."""
    verified = verification_by_name(verification)
    artifacts = list((fixes or {}).get("artifacts", []))
    known = {a["name"] for a in artifacts}
    artifacts += [{"name": name} for name in verified if name not in known]
    result = []
    for artifact in artifacts:
        check = verified.get(artifact["name"])
        result.append({
            "name": artifact["name"],
            "title": artifact.get("title") or (spec_title(fixes, verification) if artifact["name"] == plans.SHAPES_SPEC
                                               else TITLES.get(artifact["name"], artifact["name"])),
            "file": artifact.get("file"),
            "summary": artifact.get("summary"),
            "code": artifact.get("code"),
            "details": {str(k): option_text(v) for k, v in (artifact.get("details") or {}).items()},
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


def bench_context(bench: dict | None) -> dict | None:
    """The latency table of ``guardscope bench`` (bench.json), None when it was not run."""
    if bench is None:
        return None

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
            "generation": [line[0].upper() + line[1:] for line in generation_lines(row["generation"])]
            if row.get("generation") else [],
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
        "compile": {k: option_text(v) for k, v in sorted((bench.get("compile") or {}).items())},
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
            "stale": probe.get("catalog_sha256") != store.catalog_digest(catalog),
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

    labels = tuple(fidelity.get("labels") or ("default analysis", "production backend"))
    result = diff_catalogs(catalog, fidelity["catalog"], ignore=tuple(fidelity.get("ignore", ())), labels=labels)
    context = diff_context(result, title=f"Fidelity: {labels[0]} vs {labels[1]}")
    context["ignored"] = list(fidelity.get("ignore", ()))
    return context


def input_fixes_context(whatif: dict | None, fixes: dict | None, verification: dict | None) -> dict | None:
    """"Fixes at the input" (whatif.json): each transform chain's row, the cheapest chain that keeps
    the outputs equal (fewest graphs, then least padding, then fewest transforms), how it compares
    with the warmup and unbacked plans (graphs, set-up: the chain's warmup measured by whatif, the
    plans' by verify), and the catalog's advice in words."""
    if whatif is None:
        return None

    def outputs(row: dict) -> str:
        if not row["transforms"]:
            return "the reference"
        if row.get("outputs_equal") is None:
            return "not compared"
        diff = "" if row.get("max_diff") is None else f" (max diff {row['max_diff']:.3g})"
        return ("equal" if row["outputs_equal"] else "differ") + diff

    rows = [{
        "label": row["label"], "transforms": list(row["transforms"]), "graphs": row["graphs"], "frames": row["frames"],
        "compile": format_duration(row.get("compile_seconds")), "padding": f"{row.get('padding_percent', 0.0):.1f} %",
        "warmup": row.get("warmup_samples"), "setup": format_duration(row.get("warmup_setup_seconds")),
        "outputs": outputs(row), "changes_results": bool(row.get("changes_results")),
        "notes": list(row.get("notes") or []),
    } for row in whatif.get("rows", [])]
    raw = whatif.get("rows", [])
    recorded = next((row for row in raw if not row["transforms"]), None)
    keeping = [row for row in raw if row["transforms"] and row.get("outputs_equal") and not row.get("raised")]
    best = min(keeping, key=lambda r: (r["graphs"], r.get("padding_percent", 0.0), len(r["transforms"])), default=None)
    verified = verification_by_name(verification)
    compared = []
    for artifact in (fixes or {}).get("artifacts", []):
        graphs = (artifact.get("details") or {}).get("graphs")
        if artifact["name"] not in (plans.WARMUP, plans.UNBACKED) or graphs is None or artifact.get("status") != "ok":
            continue
        check = verified.get(artifact["name"]) or {}
        compared.append({"name": artifact["name"], "graphs": graphs, "setup": format_duration(check.get("setup_seconds"))})
    return {
        "rows": rows,
        "best": None if best is None else {
            "label": best["label"], "graphs": best["graphs"], "padding": f"{best.get('padding_percent', 0.0):.1f} %",
            "compile": format_duration(best.get("compile_seconds")), "warmup": best.get("warmup_samples"),
            "setup": format_duration(best.get("warmup_setup_seconds")),
            "max_diff": "n/a" if best.get("max_diff") is None else f"{best['max_diff']:.3g}",
        },
        "recorded_graphs": None if recorded is None else recorded["graphs"],
        "recorded_compile": None if recorded is None else format_duration(recorded.get("compile_seconds")),
        "recorded_setup": None if recorded is None else format_duration(recorded.get("warmup_setup_seconds")),
        "plans": compared,
        "advice": [{"applies": a["applies"], "subject": a["subject"], "spec": a["spec"], "text": a["text"]}
                   for a in whatif.get("advice", [])],
        "suggested": bool(whatif.get("suggested")),
        "samples": whatif.get("samples"),
    }
