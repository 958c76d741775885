"""Prove each emitted artifact on the corpus, each in a fresh subprocess.

``verify(out_dir)`` starts ``python -m guardscope.proving.verify ARTIFACT DIR RESULT`` once per
artifact: a crash or segfault (AOTInductor has segfaulted on the seed model) becomes a ``crashed``
result for that artifact, never the end of the others. The child compiles the model with the
catalog's options, applies the artifact as its docstring says, replays the corpus and reports:

* warmup / unbacked: graphs compiled during set-up, set-up seconds, and every compile during the
  replay (a recompile: the artifact failed) with its sample and guard failures. With
  ``fullgraph`` a sample the existing graphs' guards accept is not run — it cannot compile.
* export: ``torch.export`` with the artifact's Dims, then every topology's representative
  through the exported program, compared with eager.
* canonical (``canonicalise.py``, from ``emit-warmup --transform``; verified when it exists):
  its ``warmup()``, then the whole corpus replayed through its ``canonicalise()``, every compile
  a failure; and each topology's first sample run eagerly as recorded and canonicalised, the
  outputs compared as ``whatif`` compares them (the result's ``outputs``: recorded, not judged).

When a plan has a compile-cache bundle (``guardscope bundle DIR``), two more fresh children, each
with new, empty cache folders, measure its set-up with the bundle's backend and device: once
without the bundle and once loading it (then replaying the corpus, so the bundled graphs are
proven too). The result's ``bundle`` holds both, with inductor's cache hits and misses.

When the warmup has precompiled graphs (``guardscope precompile DIR``), one more fresh child
loads them and replays the corpus through them (:mod:`.verify_precompiled`): the warmup
result's ``precompiled``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

from .. import plans, store
from ..catalog.caveats import forward_skipped, small_corpus_warning
from ..errors import CompileOptionsError
from ..options import production_backend, production_options
from ..text import first_line
from .isolation import child_environment, run_module, watch_parent
from .results import OK_STATUSES, PARTIAL, result as _result
from .verify_export import verify_export
from .verify_bundle import measure_bundle
from .verify_canonical import CANONICAL, verify_canonical
from .verify_compiled import verify_compiled
from .verify_precompiled import measure_precompiled
from .verify_replicas import replica_results

# The unbacked plan's declarative spec form (unbacked.py's shapes_spec(), handed to torch.compile as
# shapes_spec= on torch 2.13, dynamic_shapes= on 2.14): verified beside the plans when emit-warmup
# made one, and compared with the marks' verdict. The artifact keeps its name whatever the keyword.
SHAPES_SPEC = plans.SHAPES_SPEC
ARTIFACTS = (*plans.NAMES, SHAPES_SPEC, CANONICAL)


def verdict(results: list[dict[str, Any]]) -> str:
    """The verdict on a set of results: ``failed`` when one failed or crashed or none passed,
    ``partial`` when one serves only part of the corpus, else ``passed``."""
    statuses = {r["status"] for r in results}
    if not statuses <= {*OK_STATUSES, PARTIAL} or not statuses & {"passed", PARTIAL}:
        return "failed"
    return PARTIAL if PARTIAL in statuses else "passed"


def verify_fixes(
    out: Path,
    corpus_dir: Path,
    *,
    artifacts: tuple[str, ...] | None = None,
    holdout: float | None = None,
    timeout: float = 3600.0,
    progress: Callable[[str], None] | None = None,
    bundle: bool = True,
    backend: str | None = None,
    everything: bool = False,
) -> dict[str, Any]:
    """Verify each emitted fix in a fresh subprocess; write ``verification.json``.

    Without ``artifacts``, what the user would deploy (:func:`deployed_artifacts`): the warmup and
    the plans that compile no more graphs at set-up, or that bench recommends; a plan that compiles
    more (the shapes_spec form, often) is ``skipped`` saying so, unless ``everything``.

    The plans are proven with ``backend``, by default production's (:func:`production_backend`):
    a graph's guards are Dynamo's whatever the backend, but what a call receives may not be (a KV
    cache is the model's own output, its strides the backend's), so a proof holds for the backend
    it ran with, which the document names (``backend``, ``backend_source``).

    With ``bundle``, a plan that has a compile-cache bundle also gets its set-up measured with
    and without it, each in a fresh process with empty cache folders (the result's ``bundle``).
    Fixes not verified this time keep their last result. Returns the document:
    ``{"schema": 1, "verdict": ..., "passed": bool, "warnings": [...], "artifacts": [...]}``
    (:func:`verdict`; ``passed`` only for a full pass; ``warnings``: what a pass does not prove,
    a corpus too small for its risk estimate).
    """
    if holdout is not None and not 0.0 < holdout < 1.0:
        raise CompileOptionsError(f"--holdout {holdout} must be a fraction between 0 and 1")
    chosen, left_out = (artifacts, {}) if artifacts else deployed_artifacts(out, everything=everything)
    unknown = sorted(set(chosen) - set(ARTIFACTS))
    if unknown:
        raise CompileOptionsError(f"unknown artifacts {unknown}; choose from {', '.join(ARTIFACTS)}")
    catalog = store.read_catalog(out)
    proving, source = (backend, "asked") if backend else production_backend(catalog)
    results = []
    for name in chosen:
        if progress is not None:
            progress(name)
        results.append(run_artifact(out, name, holdout=holdout, timeout=timeout, bundle=bundle, corpus=corpus_dir,
                                    backend=proving))
    previous = store.read_document(out, store.VERIFICATION) if artifacts else None
    if previous is not None:
        kept = [r for r in previous.get("artifacts", []) if r.get("name") not in chosen]
        results = sorted(kept + results, key=lambda r: ARTIFACTS.index(r["name"]))
    if left_out:
        results = sorted(results + [_result(name, "skipped", why) for name, why in left_out.items()],
                         key=lambda r: ARTIFACTS.index(r["name"]))
    compare_spec(results)
    small = None if forward_skipped(catalog.get("skipped_frames", [])) else small_corpus_warning(catalog.get("risk") or {})
    found = verdict(results)
    document = {
        "schema": 1,
        "holdout": holdout,
        "backend": proving,
        "backend_source": source,
        "verdict": found,
        "passed": found == "passed",
        "warnings": [small] if small else [],
        "artifacts": results,
    }
    store.write_document(out, store.VERIFICATION, document)
    return document


def deployed_artifacts(out: Path, *, everything: bool = False) -> tuple[tuple[str, ...], dict[str, str]]:
    """What ``verify`` proves by default, and why it leaves the rest out: (artifacts, {artifact:
    reason}).

    What the user would deploy: the warmup, and its peers, the compiled plans (unbacked, the
    shapes_spec form) that compile no more graphs at set-up than it, or the plan bench.json
    recommends; the export and ``canonicalise.py`` when emit-warmup wrote them (they compile
    nothing at set-up). A plan that compiles more graphs than the warmup (a shapes_spec form of
    140 graphs beside a warmup of 4) costs more to prove than the others together and is not
    the one to deploy: it is left out, unless ``everything``. A plan whose graphs fixes.json does
    not count is proven."""
    spec = spec_entry(out)
    chosen = (*plans.NAMES, *([SHAPES_SPEC] if spec is not None else []),
              *([CANONICAL] if (out / store.CANONICALISE).is_file() else []))
    # What emit-warmup --only left out has nothing to prove, whatever is asked: skipped with why.
    unplanned = not_planned(out)
    chosen = tuple(name for name in chosen if name not in unplanned)
    if everything:
        return chosen, unplanned
    graphs: dict[str, int] = {}
    for name in (plans.WARMUP, plans.UNBACKED):
        entry = store.fix_entry(out, name) or {}
        count = (entry.get("details") or {}).get("graphs")
        if entry.get("status", "ok") == "ok" and isinstance(count, int):
            graphs[name] = count
    if spec is not None and spec.get("status") == "ok" and isinstance(spec.get("graphs"), int):
        graphs[SHAPES_SPEC] = spec["graphs"]
    if plans.WARMUP not in graphs:
        return chosen, unplanned
    benched = ((store.read_document(out, store.BENCH) or {}).get("recommendation") or {}).get("strategy")
    budget = graphs[plans.WARMUP]
    left_out = {
        name: (f"not proven by default: it compiles {count} graphs at set-up, more than the warmup's {budget} "
               f"(the plan to deploy); 'guardscope verify {out} --all' or '--artifact {name}' proves it")
        for name, count in graphs.items() if count > budget and name != benched
    }
    return tuple(name for name in chosen if name not in left_out), {**unplanned, **left_out}


def not_planned(out_dir: Path) -> dict[str, str]:
    """The artifacts fixes.json says emit-warmup did not plan (``--only``), with its reason (the
    option that plans them): the plans, and the unbacked plan's shapes_spec form."""
    unplanned = {}
    for name in plans.NAMES:
        entry = store.fix_entry(out_dir, name) or {}
        if entry.get("status") == plans.NOT_PLANNED:
            unplanned[name] = str(entry.get("reason") or plans.NOT_PLANNED)
    spec = ((store.fix_entry(out_dir, plans.UNBACKED) or {}).get("details") or {}).get(SHAPES_SPEC) or {}
    if plans.UNBACKED in unplanned or spec.get("status") == plans.NOT_PLANNED:
        unplanned[SHAPES_SPEC] = unplanned.get(plans.UNBACKED) or str(spec.get("reason") or plans.NOT_PLANNED)
    return unplanned


def spec_entry(out_dir: Path) -> dict[str, Any] | None:
    """fixes.json's word on the unbacked plan's shapes_spec form, None where it was not tried or
    this torch has none (then there is nothing to verify)."""
    entry = store.fix_entry(out_dir, plans.UNBACKED)
    spec = ((entry or {}).get("details") or {}).get(SHAPES_SPEC)
    return spec if spec and spec.get("status") in ("ok", "infeasible") else None


def spec_keyword_mismatch(spec: dict[str, Any]) -> str | None:
    """Why unbacked.py's usage line does not work on the installed torch, None where it does: the
    keyword fixes.json says it was written with (``shapes_spec`` when it says none: written before
    torch 2.14) against the one this torch takes (:func:`guardscope.torch_compat.spec_support`)."""
    from .. import torch_compat

    written = spec.get("keyword") or torch_compat.KEYWORD_SHAPES_SPEC
    support = torch_compat.spec_support()
    if support.keyword == written:
        return None
    usage = f"{plans.MODULES[plans.UNBACKED]}'s usage line says torch.compile({written}=...)"
    if support.keyword is None:
        return f"{usage}, but {first_line(support.reason or '')}"
    return f"{usage}, which torch {torch_compat.torch_version()} does not take (it takes {support.keyword}=)"


def compare_spec(results: list[dict[str, Any]]) -> None:
    """Say on the shapes_spec result whether it holds as the marks do (``same_as_unbacked``), and
    where not, why (its own reason: the dims it leaves static)."""
    by_name = {r["name"]: r for r in results}
    spec, marks = by_name.get(SHAPES_SPEC), by_name.get(plans.UNBACKED)
    if spec is None or marks is None or spec["status"] in ("skipped", "infeasible"):
        return
    spec["unbacked_status"] = marks["status"]
    spec["same_as_unbacked"] = spec["status"] == marks["status"]
    if not spec["same_as_unbacked"] and spec["status"] == "passed":
        spec["reason"] = f"passed where the mark_unbacked module {marks['status']}: {marks.get('reason') or ''}".rstrip(": ")


def _run_child(out_dir: Path, name: str, tag: str, options: list[str], *, timeout: float,
               env: dict[str, str] | None = None) -> dict[str, Any]:
    """``python -m guardscope.proving.verify NAME DIR RESULT OPTIONS`` in a fresh interpreter (see
    :func:`guardscope.proving.isolation.run_module`); any death of it becomes a ``crashed`` result."""
    result_path = out_dir / f".verify-{tag}.json"
    outcome = run_module("guardscope.proving.verify", [name, str(out_dir), str(result_path), *options], result_path,
                         timeout=timeout, what="the verification process",
                         environment=child_environment(env))
    if outcome.result is not None:
        return outcome.result
    return _result(name, "crashed", outcome.failure,
                   setup_seconds=None if outcome.timed_out else round(outcome.seconds, 3))


def run_artifact(out_dir: Path, name: str, *, holdout: float | None, timeout: float,
                 bundle: bool = True, corpus: Path | None = None, backend: str = "inductor") -> dict[str, Any]:
    """Verify one artifact in a fresh interpreter, the plans compiled with ``backend``; with
    ``bundle``, also measure the set-up of its compile-cache bundle (when it has one) with and
    without it."""
    if name == CANONICAL:
        if not (out_dir / store.CANONICALISE).is_file():
            return _result(name, "skipped", f"{store.CANONICALISE} not found: run 'guardscope emit-warmup "
                           f"{out_dir} --transform SPEC...'")
        options = (["--holdout", str(holdout)] if holdout is not None else []) + (
            ["--corpus", str(Path(corpus).resolve())] if corpus is not None else []) + ["--prove-backend", backend]
        return _run_child(out_dir, name, name, options, timeout=timeout)
    unplanned = not_planned(out_dir).get(name)
    if unplanned is not None:
        return _result(name, "skipped", unplanned)
    if name == SHAPES_SPEC:
        spec = spec_entry(out_dir)
        if spec is None or not (out_dir / plans.MODULES[plans.UNBACKED]).is_file():
            return _result(name, "skipped", f"no declarative spec form in {plans.MODULES[plans.UNBACKED]}: run "
                                            f"'guardscope emit-warmup {out_dir}' with torch 2.13 or later")
        if spec["status"] != "ok":
            return _result(name, "infeasible", spec.get("reason"))
        stale = spec_keyword_mismatch(spec)
        if stale is not None:
            return _result(name, "failed", f"{stale}: run 'guardscope emit-warmup {out_dir}' again with this torch",
                           keyword=spec.get("keyword") or "shapes_spec")
    planned = planned_status(out_dir, plans.SOURCE_PLAN[name])
    if planned is not None:
        return _result(name, "infeasible", planned)
    module = plans.MODULES[plans.SOURCE_PLAN[name]]
    if not (out_dir / module).is_file():
        return _result(name, "skipped", f"{module} not found: run 'guardscope emit-warmup {out_dir}'")
    split = ["--holdout", str(holdout)] if holdout is not None else []
    if corpus is not None:
        split += ["--corpus", str(Path(corpus).resolve())]
    result = _run_child(out_dir, name, name, [*split, "--prove-backend", backend], timeout=timeout)
    if name == SHAPES_SPEC:  # the torch.compile keyword it was proven under
        from .. import torch_compat

        result["keyword"] = torch_compat.spec_keyword()
    if bundle and name in plans.BUNDLED and result["status"] != "crashed":
        measured = measure_bundle(out_dir, name, split, _run_child, timeout=timeout)
        if measured is not None:
            result["bundle"] = measured
            recompiles = (measured.get("with") or {}).get("replay_recompiles")
            if measured["status"] == "crashed":
                # the plan itself died under the production backend: it is not proven to work
                result["status"] = "crashed"
                result["reason"] = measured["reason"]
            elif recompiles and result["status"] == "passed":
                result["status"] = "failed"
                result["reason"] = (f"after loading its compile-cache bundle ({measured['backend']}, "
                                    f"{measured['device']}) the replay recompiled {recompiles} time(s), first at "
                                    f"sample {measured['with']['recompile_samples'][0]}")
    if bundle and name == plans.WARMUP and result["status"] != "crashed":
        _add_precompiled(result, measure_precompiled(out_dir, split, _run_child, timeout=timeout))
    where = Path(corpus) if corpus is not None else store.corpus_dir_of(out_dir, store.read_catalog(out_dir), None)
    replicas = replica_results(out_dir, where, result, holdout, lambda replica: _run_child(
        out_dir, name, f"{name}-replica", [*split, "--prove-backend", backend, "--replica", replica], timeout=timeout))
    if replicas is not None:
        result["replicas"] = replicas
        if result["status"] == "passed" and any(r["status"] != "passed" for r in replicas.values()):
            result["status"] = "failed"
            failing = sorted(n for n, r in replicas.items() if r["status"] != "passed")
            result["reason"] = (f"replayed alone, {len(failing)} of {len(replicas)} replicas compile: "
                                + ", ".join(failing))
    return result


def _add_precompiled(result: dict[str, Any], measured: dict[str, Any] | None) -> None:
    """The precompiled warmup's proof on the warmup's result; a precompiled warmup that compiles,
    differs or crashes fails the warmup (it is what a replica would deploy)."""
    if measured is None:
        return
    result["precompiled"] = measured
    if measured["status"] in ("failed", "crashed") and result["status"] == "passed":
        result["status"] = "failed"
        result["reason"] = f"its precompiled graphs ({measured['backend']}, {measured['device']}): {measured['reason']}"


def planned_status(out_dir: Path, name: str) -> str | None:
    """Why ``emit-warmup`` found this fix infeasible (fixes.json says so; no module was written),
    or None."""
    entry = store.fix_entry(out_dir, name)
    if entry is None or entry.get("status") != "infeasible":
        return None
    return str(entry.get("reason") or "emit-warmup found it infeasible")


# --- the child ---------------------------------------------------------------------------------


def child_main(argv: list[str]) -> int:
    import argparse


    parser = argparse.ArgumentParser(prog="python -m guardscope.proving.verify")
    parser.add_argument("artifact", choices=ARTIFACTS)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("result", type=Path)
    parser.add_argument("--holdout", type=float, default=None)
    parser.add_argument("--backend", default=None, help="set-up measurement: compile with this backend")
    parser.add_argument("--device", default=None, help="set-up measurement: on this device")
    parser.add_argument("--bundle", action="store_true", help="set-up measurement: load the plan's bundle")
    parser.add_argument("--precompiled", action="store_true",
                        help="set-up measurement: load the warmup's precompiled graphs")
    parser.add_argument("--corpus", type=Path, default=None, help="the corpus, when not where the analysis found it")
    parser.add_argument("--prove-backend", default=None, help="compile the plan with this backend (production's)")
    parser.add_argument("--replica", default=None, help="a fleet's corpus: replay this replica's calls only")
    arguments = parser.parse_args(argv)
    out, catalog, corpus, model = store.load_inputs(arguments.out_dir, arguments.corpus)
    if arguments.artifact == "export":
        result = verify_export(out, catalog, corpus, model)
    elif arguments.artifact == CANONICAL:
        result = verify_canonical(out, catalog, corpus, model, arguments.holdout,
                                  production_options(catalog, backend=arguments.prove_backend))
    elif arguments.backend is None:
        result = verify_compiled(arguments.artifact, out, corpus, model, arguments.holdout,
                                 production_options(catalog, backend=arguments.prove_backend),
                                 replica=arguments.replica)
    else:
        try:
            options = production_options(catalog, backend=arguments.backend, device=arguments.device)
            options.validate()
        except CompileOptionsError as exc:
            result = _result(arguments.artifact, "skipped", str(exc))
        else:
            result = verify_compiled(arguments.artifact, out, corpus, model, arguments.holdout, options,
                                     setup={"use_bundle": arguments.bundle, "use_precompiled": arguments.precompiled})
    store.write_json(arguments.result, result)
    return 0


if __name__ == "__main__":
    watch_parent()  # the parent gone (killed), this process and its own children end too
    sys.exit(child_main(sys.argv[1:]))
