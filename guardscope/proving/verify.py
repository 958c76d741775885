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
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from .. import plans, store
from ..catalog.caveats import forward_skipped, small_corpus_warning
from ..catalog.classify import classify_reasons
from ..catalog.frames import hit_recompile_limit
from ..errors import CompileOptionsError, GuardscopeError
from ..options import production_backend, production_options
from ..text import first_line
from .isolation import child_environment, import_file, run_module, watch_parent
from .results import OK_STATUSES, PARTIAL, result as _result
from .setup import cache_dirs_empty, set_up_plan
from .verify_export import verify_export
from .verify_bundle import measure_bundle
from .verify_precompiled import measure_precompiled, precompiled_outcome
from .verify_replicas import replica_results

# The input canonicalisation emit-warmup --transform writes: verified beside the plans, not one.
CANONICAL = "canonical"
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


def _replay_split(corpus: Any, holdout: float | None, probed: list[Any] = (), replica: str | None = None
                  ) -> Iterator[Any]:
    """The corpus, or its last ``holdout`` fraction, streamed shard by shard as recorded
    (samples, and signature records standing for several); then the probed samples the fixes
    cover (numbered after the corpus). With ``replica``, a fleet's corpus: that replica's calls
    only (a record's calls are one replica's), and no probed samples."""
    start = 0 if holdout is None else int(len(corpus) * (1.0 - holdout))
    if replica is None:
        yield from corpus.iter_records(start)
        yield from probed
        return
    from ..corpus.fleet_samples import replica_of_samples

    found = replica_of_samples(corpus)
    if found is None or replica not in found[0]:
        raise GuardscopeError(f"the corpus {corpus.path} holds no calls of replica {replica!r}")
    names, codes = found
    wanted = names.index(replica)
    for item in corpus.iter_records(start):
        if codes[getattr(item, "first", getattr(item, "index", 0))] == wanted:
            yield item


def _samples(items: Iterator[Any], accepts: Any) -> Iterator[Any]:
    """Each sample of ``items``; of a signature record, those ``accepts(record)`` (a guard check
    on the record's shared arguments) does not answer for: equal signatures pass the same
    guards, so a record accepted once is accepted for all its samples, and the samples of an
    accepted signature need not be built. Yields (samples to run, accepted without running)."""
    from ..corpus.reader import SignatureRecord
    from ..replay.session import SIGNATURE_CACHE

    known: dict = {}  # the most recently accepted signatures (a million would take a gigabyte)
    for item in items:
        if type(item) is not SignatureRecord:
            yield item, 0
            continue
        key = (item.call, item.key)
        if item.key is not None and (key in known or accepts(item)):
            if key not in known:
                if len(known) >= SIGNATURE_CACHE:
                    del known[next(iter(known))]
                known[key] = None
            yield None, item.repeat
            continue
        for offset in range(item.repeat):
            yield item.sample(offset), 0


def _verify_compiled(name: str, out_dir: Path, corpus: Any, model: Any, holdout: float | None,
                     options: Any, *, setup: dict[str, Any] | None = None, replica: str | None = None) -> dict:
    """Set up the plan, replay the corpus, count compiles. ``setup`` (a set-up measurement:
    ``{"use_bundle": bool}``) adds the cache counters, the bundle load and whether the cache
    folders were empty at start to the result."""
    from .. import torch_compat
    from ..corpus.chains import CarriedState, carries_state
    from ..replay.capture import TraceCapture
    from ..replay.events import events_from_records

    measured: dict[str, Any] = {}
    # A decode step runs on the KV cache its request's previous step extended through the
    # compiled model, as generate() hands it on (corpus.chains): its layout is then production's
    # backend's, not the recording's. Such calls all run: a skipped one would extend nothing.
    stateful = carries_state(corpus)
    carried = CarriedState.for_requests(corpus.requests) if stateful else None
    if setup is not None:
        measured["cache_dirs_empty"] = cache_dirs_empty()
    # Dynamo's own recompile limit stays as in production: an artifact that needs more graphs
    # than the default allows must raise it itself.
    with TraceCapture() as capture:
        capture.set_sample(None)
        precompiled = bool(setup and setup.get("use_precompiled"))
        module, runner, setup_seconds, load = set_up_plan(
            name, out_dir, model, options, use_bundle=bool(setup and setup["use_bundle"]),
            warm_sample=corpus.sample(0) if len(corpus) else None, use_precompiled=precompiled)
        if setup is not None:
            measured.update({"cache": torch_compat.compile_cache_counters(),
                             "precompiled_load" if precompiled else "bundle_load": load,
                             "backend": options.backend, "device": options.device})
        # Every graph the set-up compiled, in every frame (a model with graph breaks compiles
        # several frames; counting the first frame's cache alone would undercount them).
        setup_events = events_from_records(capture.records).events
        setup_graphs = sum(1 for e in setup_events if e.fail_type is None)
        setup_frames = len({e.frame_id for e in setup_events})
        replayed = 0
        _, probed = store.probed_samples(out_dir, len(corpus)) if replica is None else (None, [])
        # Samples the analysis saw raise in the model raise here too: that is the model, not the plan.
        raised_before = {f["sample"] for f in store.read_catalog(out_dir).get("failed_samples", [])}
        raised = 0

        def accepts(record: Any) -> bool:
            # With fullgraph the model is one frame: a record its guards accept cannot compile.
            shared = runner.record_arguments(record) if options.fullgraph and not stateful else None
            if shared is None:
                return False
            if name == "unbacked":  # marked as its samples would be (the same marks every time)
                module.mark(*shared[0], **shared[1])
            return runner.serving_arguments(shared[0], shared[1]) is not None

        for sample, accepted in _samples(_replay_split(corpus, holdout, probed, replica), accepts):
            if sample is None:
                replayed += accepted
                continue
            capture.set_sample(sample.index)
            call = runner.prepare(sample, mark=False)
            args, kwargs = carried.carry(sample.index, call.args, call.kwargs) if carried else (call.args, call.kwargs)
            if name == "unbacked":
                module.mark(*args, **kwargs)
            with runner.grad_context():
                # With fullgraph the model is one frame: a sample its guards accept cannot compile.
                accepted = options.fullgraph and not stateful and runner.serving_locals(call.frame)
                if not accepted:
                    runner.forget_entries()
                    try:
                        runner.compiled(*args, **kwargs)
                    except Exception:
                        if sample.index not in raised_before:
                            raise  # a sample that ran in the analysis: the plan broke it
                        raised += 1
            replayed += 1
        capture.set_sample(None)
    if precompiled:
        measured["precompiled"] = precompiled_outcome(runner.compiled, runner.model, runner, corpus,
                                                      store.read_catalog(out_dir))
    events = events_from_records(capture.records).events
    # A sample that raises in the model fails its compile as it did in the analysis: the model's.
    recompiles = [e for e in events if e.sample is not None
                  and not (e.fail_type is not None and e.sample in raised_before and not hit_recompile_limit(e))]
    # Calls past Dynamo's recompile limit start no compile; the trace records them as failed ones.
    # In the set-up they are warmup calls left without their graph (production runs them eagerly).
    setup_limited = [e for e in setup_events if hit_recompile_limit(e)]
    limited = [e for e in recompiles if hit_recompile_limit(e)]
    failures = [
        {"sample": e.sample, "compile_id": e.compile_id, "frame": e.frame_id,
         "reasons": [f"{f.kind.value}: {f.raw}" for f in classify_reasons(e.reasons)]}
        for e in recompiles
    ]
    torch_compat.reset_dynamo()
    measured.setdefault("backend", options.backend)
    if carried is not None:  # state arguments run on the live cache, and those kept as recorded
        measured["carried_state"] = {"carried": carried.carried, "kept": carried.kept}
    reasons = []
    if setup_limited:
        reasons.append(f"the set-up reached Dynamo's recompile limit {len(setup_limited)} time(s): those warmup calls "
                       "got no graph (compile the model with a recompile_limit of at least the graphs it needs)")
    if recompiles:
        compiled = [e for e in recompiles if e not in limited]
        first = recompiles[0]
        reasons.append(
            f"{len(compiled)} compile(s) during the replay"
            + (f" and {len(limited)} call(s) past the recompile limit (run eagerly)" if limited else "")
            + f", first at sample {first.sample} "
            f"(graph {first.compile_id}{'' if first.frame_id == 0 else ', a later frame'})")
    return _result(
        name,
        "passed" if not reasons else "failed",
        "; ".join(reasons) or None,
        setup_graphs=setup_graphs,
        setup_frames=setup_frames,
        setup_seconds=round(setup_seconds, 3),
        replay_recompiles=len(recompiles),
        setup_limit_hits=len(setup_limited),
        recompile_samples=sorted({e.sample for e in recompiles}),
        failures=failures,
        samples_replayed=replayed,
        raised_as_recorded=raised,
        probed_replayed=len(probed),
        **measured,
    )


def _verify_canonical(out_dir: Path, catalog: dict, corpus: Any, model: Any, holdout: float | None,
                      options: Any) -> dict:
    """canonicalise.py's warmup, then the corpus (or its holdout) replayed through its
    canonicalise(), compiles counted; then the outputs of each topology's first sample, eager,
    as recorded and canonicalised (:func:`guardscope.fixes.whatif.compare_outputs`, padded
    outputs cut back as the transforms' own record of what they padded says)."""
    from .. import torch_compat
    from ..fixes.transforms import Call as Arguments
    from ..fixes.transforms import apply_chain, parse_transforms
    from ..fixes.whatif import compare_outputs
    from ..model import Sample
    from ..replay.capture import TraceCapture
    from ..replay.events import events_from_records
    from ..replay.runner import Runner

    module = import_file(out_dir / store.CANONICALISE)
    failed_before = {f["sample"] for f in catalog.get("failed_samples", [])}
    start = 0 if holdout is None else int(len(corpus) * (1.0 - holdout))
    raised: list[tuple[int, str]] = []
    replayed = 0
    with TraceCapture() as capture:
        capture.set_sample(None)
        runner = Runner(model, options)
        started = time.perf_counter()
        module.warmup(runner.compiled, device=options.device, grad_mode=options.grad_mode)
        torch_compat.synchronize(runner.device)
        setup_seconds = time.perf_counter() - started
        setup_events = events_from_records(capture.records).events
        for sample in corpus:
            if sample.index < start or sample.index in failed_before:
                continue
            capture.set_sample(sample.index)
            try:
                args, kwargs = module.canonicalise(*sample.args, **sample.kwargs)
                call = runner.prepare(Sample(sample.index, args, kwargs), mark=False)
                with runner.grad_context():
                    runner.forget_entries()
                    runner.compiled(*call.args, **call.kwargs)
            except Exception as exc:  # noqa: BLE001 - a sample the canonicalisation breaks: the result says so
                raised.append((sample.index, f"{type(exc).__name__}: {exc}"))
            replayed += 1
        capture.set_sample(None)
    events = events_from_records(capture.records).events
    recompiles = [e for e in events if e.sample is not None]
    torch_compat.reset_dynamo()

    chain = parse_transforms(module.TRANSFORMS)
    arguments = Arguments(model)
    topologies = []
    for topology in catalog["topologies"]:
        sample = corpus.sample(topology["first_sample"])
        entry: dict[str, Any] = {"topology": topology["id"], "sample": sample.index}
        try:
            _, _, applied = apply_chain(arguments, chain, sample.args, sample.kwargs, sample.index)
            args, kwargs = module.canonicalise(*sample.args, **sample.kwargs)
            outputs = []
            for run_args, run_kwargs in ((sample.args, sample.kwargs), (args, kwargs)):
                call = runner.prepare(Sample(sample.index, run_args, run_kwargs), mark=False)
                with runner.grad_context():
                    outputs.append(runner.model(*call.args, **call.kwargs))
            entry.update(compare_outputs(outputs[0], outputs[1], [p for a in applied for p in a.padded]))
        except Exception as exc:  # noqa: BLE001 - recorded per topology
            entry.update(equal=False, max_diff=None, cut=[], note=f"raised: {type(exc).__name__}: {exc}")
        topologies.append(entry)
    diffs = [t["max_diff"] for t in topologies if t["max_diff"] is not None]
    equal = all(t["equal"] for t in topologies)
    reasons = []
    if recompiles:
        reasons.append(f"{len(recompiles)} compile(s) during the replay of the canonicalised corpus, first at "
                       f"sample {recompiles[0].sample} (graph {recompiles[0].compile_id})")
    if raised:
        reasons.append(f"{len(raised)} sample(s) raised once canonicalised (first, sample {raised[0][0]}: "
                       f"{raised[0][1].splitlines()[0] if raised[0][1] else ''})")
    return _result(
        CANONICAL,
        "failed" if reasons else "passed",
        "; ".join(reasons) or None,
        setup_graphs=sum(1 for e in setup_events if e.fail_type is None),
        setup_frames=len({e.frame_id for e in setup_events}),
        setup_seconds=round(setup_seconds, 3),
        replay_recompiles=len(recompiles),
        recompile_samples=sorted({e.sample for e in recompiles}),
        failures=[{"sample": e.sample, "compile_id": e.compile_id, "frame": e.frame_id,
                   "reasons": [f"{f.kind.value}: {f.raw}" for f in classify_reasons(e.reasons)]} for e in recompiles],
        samples_replayed=replayed,
        transforms=list(module.TRANSFORMS),
        outputs={"equal": equal, "max_diff": max(diffs) if diffs else None, "changes_results": not equal,
                 "topologies": topologies},
    )


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
        result = _verify_canonical(out, catalog, corpus, model, arguments.holdout,
                                   production_options(catalog, backend=arguments.prove_backend))
    elif arguments.backend is None:
        result = _verify_compiled(arguments.artifact, out, corpus, model, arguments.holdout,
                                  production_options(catalog, backend=arguments.prove_backend),
                                  replica=arguments.replica)
    else:
        try:
            options = production_options(catalog, backend=arguments.backend, device=arguments.device)
            options.validate()
        except CompileOptionsError as exc:
            result = _result(arguments.artifact, "skipped", str(exc))
        else:
            result = _verify_compiled(arguments.artifact, out, corpus, model, arguments.holdout, options,
                                      setup={"use_bundle": arguments.bundle, "use_precompiled": arguments.precompiled})
    store.write_json(arguments.result, result)
    return 0


if __name__ == "__main__":
    watch_parent()  # the parent gone (killed), this process and its own children end too
    sys.exit(child_main(sys.argv[1:]))
