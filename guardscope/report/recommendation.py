"""The recommendation box at the top of the report: which fix to use, its proof, and the lines that
apply it."""

from __future__ import annotations

import re
from typing import Any

from .. import plans
from ..options import compile_arguments, production_graph_limit
from ..text import format_seconds
from .common import count_text, torch_version_tuple, verification_by_name
from .sections import bench_context

# --- the recommendation box ------------------------------------------------------------------

FIX_ORDER = plans.NAMES  # ties between fixes go to the earlier one
RECOMMENDATION_RULE = (
    "A fix guardscope verify passed beats one it did not pass; among those passed, the plan bench.json "
    "recommends when it names one, otherwise the plan that compiles the fewest graphs at set-up. "
    "torch.export only when it passed and nothing else did. Never a fix verify failed or crashed, nor "
    "one that serves only part of the corpus (partial), nor one not possible on this model. Before verify "
    "has run, the same rule picks provisionally among the fixes not verified, export excepted."
)


def _fix_states(fixes: dict | None, verification: dict | None) -> list[dict]:
    """Each artifact of fixes.json: ``state`` (passed, partial, failed, crashed, infeasible, not planned
    (``emit-warmup --only`` left it out) or unverified),
    the reason for it, and the graphs it compiles at set-up (verify's count, else emit-warmup's)."""
    verified = verification_by_name(verification)
    states = []
    for artifact in (fixes or {}).get("artifacts", []):
        check = verified.get(artifact["name"]) or {}
        status = check.get("status")
        if artifact.get("status") == plans.NOT_PLANNED:
            state, reason = plans.NOT_PLANNED, artifact.get("reason")
        elif artifact.get("status", "ok") != "ok" or status == "infeasible":
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
    at set-up, ties in :data:`FIX_ORDER`. Infeasible, failed, crashed and partial fixes (an export
    that serves part of the corpus) never qualify: only a full pass proves a fix."""
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
        others = ", ".join(f"{count_text(s['graphs'])} for {s['name']}" for s in rest)
        why = f"It compiles the fewest graphs at set-up: {count_text(best['graphs'])}, against {others}"
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
    return f"{count_text(count)} graph{'' if count == 1 else 's'}"


def _fix_proof(check: dict) -> str:
    """What verify measured for a fix that passed, in one sentence."""
    setup = f"set-up compiled {_graphs(check.get('setup_graphs'))} in {format_seconds(check.get('setup_seconds'))}"
    if check.get("replay_recompiles") is not None:
        replay = f"replaying its {count_text(check.get('samples_replayed'))} samples compiled nothing"
    else:
        topologies = check.get("topologies") or []
        replay = f"{sum(t['passed'] for t in topologies)}/{len(topologies)} topologies ran"
    return f"guardscope verify passed it: {setup}; {replay}."


def startup_costs(verification: dict | None, bench: dict | None) -> list[dict[str, Any]]:
    """What starting a replica with the warmup costs, each way it can start, as measured: verify's
    processes (compiling its graphs with this machine's caches; with empty caches, without and with
    its compile-cache bundle; from its precompiled graphs) and bench's rows (each process with empty
    caches). ``[{"way", "seconds", "by"}]``, only what was measured. Pure."""
    costs: list[dict[str, Any]] = []
    warmup = verification_by_name(verification).get(plans.WARMUP) or {}
    if warmup.get("setup_seconds") is not None and warmup.get("status") == "passed":
        costs.append({"way": "compiling its graphs with this machine's caches", "seconds": warmup["setup_seconds"],
                      "by": "verify"})
    bundle = warmup.get("bundle") or {}
    for mode, way in (("without", "compiling its graphs"), ("with", "from its compile-cache bundle")):
        run = bundle.get(mode) or {}
        if run.get("setup_seconds") is not None and run.get("status") == "passed":
            costs.append({"way": f"{way}, empty caches", "seconds": run["setup_seconds"], "by": "verify"})
    precompiled = warmup.get("precompiled") or {}
    if precompiled.get("status") == "used":
        costs.append({"way": "from its precompiled graphs, empty caches", "seconds": precompiled["run"]["setup_seconds"],
                      "by": "verify"})
    rows = {row.get("name"): row for row in (bench or {}).get("strategies", [])}
    for name in (plans.WARMUP, plans.PRECOMPILED):
        row = rows.get(name) or {}
        if row.get("status") == "ok" and row.get("setup_seconds") is not None:
            way = ("from its precompiled graphs" if name == plans.PRECOMPILED else "from its compile-cache bundle"
                   if (row.get("bundle") or {}).get("status") == "loaded" else "compiling its graphs")
            costs.append({"way": f"{way}, empty caches", "seconds": row["setup_seconds"],
                          "by": f"guardscope bench on {bench.get('device_name') or bench.get('device')}"})
    return costs


def recommendation_context(catalog: dict, fixes: dict | None, verification: dict | None,
                           bench: dict | None) -> dict:
    """The box at the top of the report: the fix to use (:func:`choose_fix`), its proof, what it
    costs, the code that applies it (its module's docstring usage) and why the others lost.

    ``state``: ``none`` (no fixes.json), ``proven``, ``provisional`` (not verified yet) or
    ``nothing`` (no fix qualifies)."""

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
    target = f"model.{catalog['method']}" if catalog.get("method") else "model"  # generate(): the forward
    call = f"torch.compile({target}{compile_arguments(catalog['compile'])}"  # then a per-call limit, or ")"
    limit = production_graph_limit(catalog)
    graphs = states[name]["graphs"]
    # A plan needing more graphs than production's limit: through torch 2.13's per-call limit (the
    # module's usage line says recompile_limit=N), else its warmup() raises the global one.
    beyond = None if not graphs or graphs <= limit or name == "export" else {
        "graphs": graphs, "limit": limit, "per_call": f"recompile_limit={graphs}" in code}
    bench_rows = {row["name"]: row for row in (bench_context(bench) or {}).get("rows", [])}
    context.update(
        state="proven" if choice["proven"] else "provisional",
        name=name,
        title=artifact.get("title") or name,
        file=artifact.get("file"),
        why=choice["why"],
        proof=_fix_proof(verification_by_name(verification)[name]) if choice["proven"] else None,
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
        startup=(startup := startup_costs(verification, bench) if name == plans.WARMUP else []),
        startup_precompiled=any("precompiled" in cost["way"] for cost in startup),
        compile_call=call + ")",
        beyond_limit=beyond,
        limit=limit,
        # torch 2.13 keeps a Dynamo setting made in code per thread (configure(), the limit)
        per_thread=torch_version_tuple(catalog) >= (2, 13),
        stale_options="torch.compile(" in code and call + ")" not in code and call + ", recompile_limit=" not in code,
    )
    return context
