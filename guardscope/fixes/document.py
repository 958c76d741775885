"""fixes.json and the modules ``emit-warmup`` writes: the three plans made for an analysis, their
code rendered, their warmup corpora recorded.

A fix that cannot work on the model (the marks make samples raise; torch cannot export it) is
recorded as ``status: infeasible`` with the whole reason, and no module is written for it (nor
left from an earlier run).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import plans, store, torch_compat
from ..corpus import CorpusWriter
from ..corpus.chains import Chains, chained_order, state_tokens_of
from ..corpus.spec import respec
from ..options import production_graph_limit, production_options
from ..text import first_line
from . import plan as planning
from .canonical import CanonicalPlan, plan_canonical
from .emit.canonicalise import render_canonicalise
from .emit.common import limit_words
from .emit.export_dims import render_export_dims
from .emit.unbacked import render_unbacked
from .emit.warmup import render_warmup
from .exporting import plan_export
from .spec_plan import plan_spec
from .warmup_plan import plan_warmup


@dataclass(frozen=True)
class Fixes:
    out_dir: Path
    files: tuple[Path, ...]
    warmup: Any
    unbacked: Any
    export: Any
    spec: Any = None  # the unbacked plan's declarative spec form (spec_plan.SpecPlan), None when not tried
    # The plans made (plans.PLANNABLE's names); unbacked and export are None when not planned.
    planned: tuple[str, ...] = plans.PLANNABLE
    # fixes.json's "probed": what --include-probed added (the topologies, the warmup without them)
    # and what --exclude-probed-size left out.
    probed: dict[str, Any] | None = None
    # Each module that compiles more graphs than production's recompile limit, and how it raises it.
    limits: tuple[str, ...] = ()
    # What torch logged while the plans were tried (pipeline.emit_warmup fills these): each
    # distinct cause of its warnings and errors as (level, cause, records), and the file of its lines.
    torch_log: tuple[tuple[str, str, int], ...] = ()
    torch_log_file: Path | None = None


def with_probed(catalog: dict[str, Any], document: dict[str, Any], first_index: int) -> dict[str, Any]:
    """The catalog with each probed topology appended (ids after the corpus's, one sample each)."""
    extended = dict(catalog)
    topologies = list(catalog["topologies"])
    for position, probed in enumerate(document.get("new_topologies", [])):
        sample = first_index + probed.get("probe_sample", position)  # its place in probe/corpus
        topologies.append({
            "id": len(topologies),
            "compile_id": probed["compile_id"],
            "first_sample": sample,
            "count": 1,
            "samples": [sample],
            "facts": probed["facts"],
            "probed": probed["id"],
        })
    extended["topologies"] = topologies
    return extended


def unbacked_summary(plan: Any, warmup_graphs: int, spec: Any = None) -> str:
    """One line on the unbacked plan for fixes.json, the report and the terminal (with its
    shapes_spec form, ``spec``, where one was tried)."""
    if plan.status != "ok":
        return f"not possible on this model: {first_line(plan.reason) or 'no reason given'}"
    line = (f"{len(plan.dims)} dims unbacked, duck sizing {'on' if plan.duck_shape else 'off'}; "
            f"{len(plan.residual)} residual warmup samples, {plan.graphs} graphs (plain warmup: {warmup_graphs})")
    if plan.frames > 1:
        line += f"; {plan.frames} frames under the marks"
    if plan.added_breaks:
        line += f", the marks add {len(plan.added_breaks)} graph break(s)"
    if plan.skipped:
        line += f"; {len(plan.skipped)} dim(s) not markable"
    if spec is not None and spec.status == "ok":
        line += (f"; as a shapes_spec (torch.compile({spec.keyword}=), every other dim static): "
                 f"{len(spec.residual)} residual warmup samples, {spec.graphs} graphs")
    elif spec is not None and spec.status == "infeasible":
        line += f"; as a shapes_spec not possible: {first_line(spec.reason)}"
    return line


def excluded_by_size(found: dict[str, Any], sizes: tuple[int, ...]) -> int | None:
    """The size of ``sizes`` one of a probed topology's edits set a dimension to (``found``: an
    entry of probe.json's ``new_topologies``), or None. Pure."""
    for edit in found.get("edits", []):
        if edit.get("kind") == "size" and edit.get("value") in sizes:
            return edit["value"]
    return None


def planned_set(only: tuple[str, ...] | None) -> tuple[str, ...]:
    """The plans emit-warmup plans, in :data:`guardscope.plans.PLANNABLE`'s order: every one
    without ``only``; else those named, the warmup always (the plan to deploy, and the yardstick of
    the others' graphs), the unbacked plan with its shapes_spec form (the spec names its dims)."""
    if not only:
        return plans.PLANNABLE
    asked = {plans.WARMUP, *only} | ({plans.UNBACKED} if plans.SHAPES_SPEC in only else set())
    return tuple(name for name in plans.PLANNABLE if name in asked)


def not_planned_reason(name: str, planned: tuple[str, ...]) -> str:
    """fixes.json's reason for a plan emit-warmup was not asked to plan: the option that plans it."""
    return (f"not planned: emit-warmup was asked (--only) for {', '.join(planned)}; run it without --only, "
            f"or add --only {name}, to plan it")


def costs_more(graphs: int, warmup_graphs: int) -> str | None:
    """``costs N graphs, the warmup M`` for a plan that compiles more graphs at set-up than the
    warmup (it is not the warmup's peer), else None. Pure."""
    return f"costs {graphs} graphs, the warmup {warmup_graphs}" if graphs > warmup_graphs else None


def emit(out: Path, catalog: dict[str, Any], corpus: Any, model: Any, *, margin: float = 0.0,
         include_probed: bool = False, exclude_probed_sizes: tuple[int, ...] = (),
         only: tuple[str, ...] | None = None, progress: Callable[[str], None] | None = None) -> Fixes:
    """Plan, render and write the three fixes for the analysis in ``out`` (see DESIGN "Emitted
    modules"): the modules, their warmup corpora and fixes.json. With ``include_probed`` the plans
    also cover the topologies ``probe`` found, but those found by setting a dimension to one of
    ``exclude_probed_sizes`` (0: an empty batch, a length-0 sequence, which production may never
    send); fixes.json's ``probed`` says which were added, which left out, and what the warmup
    costs without them.

    ``only``: the plans to make (:func:`planned_set`); the others are ``not planned`` in
    fixes.json, with the option that plans them, and their modules are removed. The warmup alone
    compiles nothing to look for a smaller cover (:func:`guardscope.fixes.warmup_plan.plan_warmup`'s
    ``measure_cover``). ``progress`` hears a line as each plan starts and ends (and the
    warmup's per topology)."""
    files = plans.MODULES
    planned = planned_set(only)
    steps = _Steps(planned, progress)
    store.refuse_foreign(out, [*files.values(), store.FIXES])
    inputs, added, excluded = _Inputs.read(out, catalog, corpus, model, include_probed, exclude_probed_sizes)
    made = _make_plans(inputs, margin, steps)
    _write_warmup_corpora(out, inputs, made)
    limits = _raised_limits(inputs.catalog, made)
    codes = _render_codes(inputs.catalog, made)
    written = _write_modules(out, codes)
    fixes = {
        "schema": 1,
        "probed": probed_section(include_probed, inputs.catalog, added, excluded, exclude_probed_sizes, made.warmup,
                                 made.without),
        "recompile_limit": {"production": production_graph_limit(inputs.catalog), "raised": limits},
        "artifacts": [
            _warmup_entry(made, codes[plans.WARMUP]),
            not_planned_entry(plans.UNBACKED, planned) if made.unbacked is None else
            _unbacked_entry(made, codes[plans.UNBACKED], planned),
            not_planned_entry(plans.EXPORT, planned) if made.export is None else
            _export_entry(made.export, codes[plans.EXPORT]),
        ],
    }
    written.append(store.write_document(out, store.FIXES, fixes))
    steps.say(f"wrote the plans: {', '.join(planned)}" + (
        f"; not planned: {', '.join(n for n in plans.PLANNABLE if n not in planned)}"
        if planned != plans.PLANNABLE else ""))
    return Fixes(out_dir=out, files=tuple(written), warmup=made.warmup, unbacked=made.unbacked, export=made.export,
                 spec=made.spec, planned=planned, probed=fixes["probed"], limits=tuple(limits.values()))


class _Steps:
    """The lines ``progress`` hears as each plan starts (``planning 2 of 4: ...``) and ends (its
    result and seconds)."""

    def __init__(self, planned: tuple[str, ...], progress: Callable[[str], None] | None) -> None:
        self.planned = planned
        self.say = progress or (lambda line: None)
        self.started = 0.0

    def begin(self, name: str, what: str) -> None:
        self.started = time.perf_counter()
        self.say(f"planning {self.planned.index(name) + 1} of {len(self.planned)}: {what}...")

    def end(self, name: str, line: str) -> None:
        self.say(f"  {name}: {line} ({time.perf_counter() - self.started:.1f} s)")


@dataclass(frozen=True)
class _Inputs:
    """What the plans are made from: the model, the catalog (with the probed topologies the plans
    cover, with --include-probed) and the corpus's own (``corpus_catalog``), the corpus and the
    probed samples, each sample by its index, the state tokens it holds, and the chains of decode
    steps (each runs on the cache its request's earlier steps extended: corpus.chains)."""
    model: Any
    catalog: dict[str, Any]
    corpus_catalog: dict[str, Any]
    corpus: Any
    probed: list[Any]
    sample_at: Callable[[int], Any]
    holds_state: Callable[[int], int | None]
    chains: Chains

    @classmethod
    def read(cls, out: Path, catalog: dict[str, Any], corpus: Any, model: Any, include_probed: bool,
             exclude_sizes: tuple[int, ...]) -> tuple[_Inputs, list[dict[str, Any]], list[dict[str, Any]]]:
        """The inputs, with the probed topologies the plans cover (probe.json's entries) and those
        ``exclude_sizes`` leaves out, with why (both empty without ``include_probed``)."""
        probed: list[Any] = []
        added: list[dict[str, Any]] = []
        excluded: list[dict[str, Any]] = []
        corpus_catalog = catalog
        if include_probed:
            document, _ = store.load_probed(out, len(corpus))
            for found in document.get("new_topologies", []):
                size = excluded_by_size(found, exclude_sizes)
                if size is None:
                    added.append(found)
                else:
                    excluded.append({"id": found["id"], "found_by": found["found_by"],
                                     "reason": f"sets a dimension to {size} (--exclude-probed-size {size})"})
            document, probed = store.load_probed(out, len(corpus), [found["id"] for found in added])
            catalog = with_probed(catalog, document, len(corpus))
        by_index = {sample.index: sample for sample in probed}

        def sample_at(index: int) -> Any:
            return by_index[index] if index in by_index else corpus.sample(index)

        @functools.lru_cache(maxsize=4096)
        def holds_state(index: int) -> int | None:
            sample = sample_at(index)
            return state_tokens_of(sample.args, sample.kwargs)

        chains = Chains(corpus.requests, holds_state, len(corpus))
        return cls(model, catalog, corpus_catalog, corpus, probed, sample_at, holds_state, chains), added, excluded

    def records(self) -> Any:
        """The corpus's records, then the probed samples."""
        return itertools.chain(self.corpus.iter_records(), self.probed)


@dataclass(frozen=True)
class _Made:
    """The plans made: the warmup, and ``without``, the warmup planned on the corpus alone (the
    warmup itself when no probed topology was added); the others None when not planned."""
    warmup: Any
    without: Any
    measure_cover: bool
    unbacked: Any = None
    export: Any = None
    spec: Any = None

    @property
    def unbacked_ok(self) -> bool:
        return self.unbacked is not None and self.unbacked.status == "ok"

    @property
    def spec_ok(self) -> bool:
        return self.spec is not None and self.spec.status == "ok"


def _make_plans(inputs: _Inputs, margin: float, steps: _Steps) -> _Made:
    """Each plan of ``steps.planned`` made in turn: the warmup (and beside it, without the probed
    topologies), the unbacked plan, the export plan, the unbacked plan's shapes_spec form."""
    model, catalog, planned = inputs.model, inputs.catalog, steps.planned
    options = production_options(inputs.corpus_catalog)
    frames = len(catalog.get("frames") or ()) or 1
    measure_cover = planned != (plans.WARMUP,)
    steps.begin(plans.WARMUP, "the warmup" + (" (compiles each topology's representative once)" if measure_cover else
                                               " from the analysis's compiles"))
    warmup_plan = plan_warmup(model, catalog["topologies"], inputs.sample_at, options, frames=frames,
                              chains=inputs.chains, measure_cover=measure_cover,
                              progress=lambda line: steps.say(f"  {line}"))
    # What the probed topologies cost: the warmup planned on the corpus alone, beside it.
    without = plan_warmup(model, inputs.corpus_catalog["topologies"], inputs.sample_at, options,
                          frames=frames, chains=inputs.chains,
                          measure_cover=measure_cover) if inputs.probed else warmup_plan
    steps.end(plans.WARMUP, f"{len(warmup_plan.steps)} samples, {warmup_plan.graphs} graphs")
    unbacked_plan = export_plan = spec_plan = None
    if plans.UNBACKED in planned:
        steps.begin(plans.UNBACKED, "the mark_unbacked plan (replays the corpus with the marks)")
        unbacked_plan = planning.residual_samples(model, inputs.records, planning.choose_unbacked(catalog), options,
                                                  catalog)
        steps.end(plans.UNBACKED, f"{unbacked_plan.graphs} graphs" if unbacked_plan.status == "ok"
                  else unbacked_plan.status)
    if plans.EXPORT in planned:
        steps.begin(plans.EXPORT, "the torch.export Dims (exports the model)")
        export_plan = plan_export(model, catalog, inputs.sample_at, margin, records=inputs.records())
        steps.end(plans.EXPORT, export_plan.status)
    # The same dims as torch's declarative spec (shapes_spec= in 2.13, dynamic_shapes= in 2.14): its own
    # replay (every other dim static).
    if unbacked_plan is not None and unbacked_plan.status == "ok" and plans.SHAPES_SPEC in planned:
        steps.begin(plans.SHAPES_SPEC, "the unbacked plan's shapes_spec form (replays the corpus under the spec)")
        spec_plan = plan_spec(model, inputs.records(), unbacked_plan, options, catalog)
        steps.end(plans.SHAPES_SPEC, f"{spec_plan.graphs} graphs" if spec_plan.status == "ok" else spec_plan.status)
    return _Made(warmup=warmup_plan, without=without, measure_cover=measure_cover, unbacked=unbacked_plan,
                 export=export_plan, spec=spec_plan)


def _write_warmup_corpora(out: Path, inputs: _Inputs, made: _Made) -> None:
    """Each plan's warmup corpus written (the unbacked plan's and its spec form's removed where
    they are not ok), tagged with requests and steps, so that its decode steps run on the state
    their earlier steps extended (the generated warmup() carries it: corpus.chains)."""
    chains, corpus = inputs.chains, inputs.corpus
    folders = [(plans.BY_NAME["warmup"].warmup_dir,
                [(step.sample, step.request if step.request is not None else f"call-{step.sample}", step.step)
                 for step in made.warmup.steps])]
    if made.unbacked_ok:
        folders.append((plans.BY_NAME["unbacked"].warmup_dir,
                        list(chained_order(made.unbacked.residual, chains.requests, inputs.holds_state,
                                           chains.calls))))
    else:
        store.remove_corpus(out / plans.BY_NAME["unbacked"].warmup_dir)
    if made.spec_ok:
        folders.append((plans.SPEC_WARMUP_DIR,
                        list(chained_order(made.spec.residual, chains.requests, inputs.holds_state, chains.calls))))
    else:
        store.remove_corpus(out / plans.SPEC_WARMUP_DIR)
    for folder, calls in folders:
        target = out / folder
        spec = respec(inputs.catalog["model"], corpus.path, target)
        with CorpusWriter(target, model=spec, compile=corpus.manifest.compile, overwrite=True,
                          method=corpus.manifest.method, recorded_from=corpus.manifest.recorded_model,
                          dynamo_config=corpus.manifest.dynamo_config or {}) as writer:
            tagged = any(tag != f"call-{index}" for index, tag, _ in calls)  # else no requests.json
            for index, tag, step in calls:
                sample = inputs.sample_at(index)
                with writer.request(tag, first_step=step) if tagged else contextlib.nullcontext():
                    writer.add(*sample.args, **sample.kwargs)


def _raised_limits(catalog: dict[str, Any], made: _Made) -> dict[str, str]:
    """fixes.json's ``recompile_limit.raised``: each module that compiles more graphs than
    production's recompile limit, and how it raises it."""
    files = plans.MODULES
    return {name: words for name, words in (
        (plans.WARMUP, limit_words(catalog, made.warmup.graphs, files[plans.WARMUP])),
        (plans.UNBACKED, limit_words(catalog, made.unbacked.graphs, files[plans.UNBACKED])
         if made.unbacked_ok else None),
        (plans.SHAPES_SPEC, limit_words(catalog, made.spec.graphs, f"{files[plans.UNBACKED]}'s shapes_spec form")
         if made.spec_ok else None),
    ) if words is not None}


def _render_codes(catalog: dict[str, Any], made: _Made) -> dict[str, str | None]:
    """Each plan's module rendered; None for an infeasible or unplanned one."""
    return {
        plans.WARMUP: render_warmup(catalog, made.warmup),
        plans.UNBACKED: render_unbacked(
            catalog, made.unbacked, plain_graphs=made.warmup.graphs,
            supports_unbacked_sources=torch_compat.supports_unbacked_sources(), spec=made.spec,
        ) if made.unbacked_ok else None,
        plans.EXPORT: render_export_dims(catalog, made.export) if made.export is not None and made.export.feasible
        else None,
    }


def _write_modules(out: Path, codes: dict[str, str | None]) -> list[Path]:
    """The modules written; an infeasible or unplanned fix's removed, so none is left from an
    earlier run."""
    written = []
    for name, code in codes.items():
        if code is None:
            store.remove_generated(out / plans.MODULES[name])
        else:
            written.append(store.write_text(out / plans.MODULES[name], code))
    return written


def _warmup_entry(made: _Made, code: str | None) -> dict[str, Any]:
    """fixes.json's entry for the warmup."""
    warmup_plan = made.warmup
    return {
        "name": "warmup",
        "file": plans.MODULES["warmup"],
        "title": plans.BY_NAME["warmup"].title,
        "status": "ok",
        "reason": None,
        "summary": (
            f"{len(warmup_plan.steps)} samples compile {warmup_plan.graphs} graphs for "
            f"{warmup_plan.topologies} topologies (one sample per topology, in corpus order: "
            f"{warmup_plan.one_per_topology} graphs)"
        ),
        "code": code,
        "details": {
            "samples": [step.sample for step in warmup_plan.steps],
            "graphs": warmup_plan.graphs,
            "one_per_topology_graphs": warmup_plan.one_per_topology,
            # False: the analysis's order taken as it is (emit-warmup --only warmup)
            "cover_measured": made.measure_cover,
            "covers": {f"T{s.topology}": [f"T{c}" for c in s.covers] for s in warmup_plan.steps if s.covers},
        },
    }


def _unbacked_entry(made: _Made, code: str | None, planned: tuple[str, ...]) -> dict[str, Any]:
    """fixes.json's entry for the unbacked plan (planned), its shapes_spec form in its details."""
    unbacked_plan, spec_plan, warmup_plan = made.unbacked, made.spec, made.warmup
    unbacked_ok = made.unbacked_ok
    return {
        "name": "unbacked",
        "file": plans.MODULES["unbacked"] if unbacked_ok else None,
        "title": plans.BY_NAME["unbacked"].title,
        "status": unbacked_plan.status,
        "reason": unbacked_plan.reason,
        "summary": unbacked_summary(unbacked_plan, warmup_plan.graphs, spec_plan),
        "code": code,
        "costs_more": costs_more(unbacked_plan.graphs, warmup_plan.graphs) if unbacked_ok
        else None,
        "details": {
            "dims": [f"{d.argument}:{d.axis}" for d in unbacked_plan.dims],
            "duck_shape": unbacked_plan.duck_shape,
            "residual_samples": list(unbacked_plan.residual),
            "graphs": unbacked_plan.graphs,
            "frames": unbacked_plan.frames,
            "added_graph_breaks": list(unbacked_plan.added_breaks),
            "not_marked": {dim: why for dim, why in unbacked_plan.skipped},
            "failed_samples": [{"sample": i, "error": e} for i, e in unbacked_plan.failed[:20]],
            **({plans.SHAPES_SPEC: {**spec_plan.to_json(), "costs_more": costs_more(spec_plan.graphs, warmup_plan.graphs)
                                   if made.spec_ok else None}} if spec_plan is not None else
               {plans.SHAPES_SPEC: {"status": plans.NOT_PLANNED,
                                    "reason": not_planned_reason(plans.SHAPES_SPEC, planned)}}
               if unbacked_ok else {}),
        },
    }


def _export_entry(export_plan: Any, code: str | None) -> dict[str, Any]:
    """fixes.json's entry for the export plan (planned)."""
    return {
        "name": "export",
        "file": plans.MODULES["export"] if export_plan.feasible else None,
        "title": plans.BY_NAME["export"].title,
        "status": export_plan.status,
        "reason": export_plan.reason,
        "summary": (
            f"{sum(d.kind == 'dim' for d in export_plan.dims)} Dims for "
            f"{sum(len(d.members) for d in export_plan.dims)} dynamic dims"
            + (f", margin {export_plan.margin:.0%}" if export_plan.margin else "")
            + (f"; {len(export_plan.outside)} topologies ({sum(o.samples for o in export_plan.outside)} "
               f"samples) outside them" if export_plan.outside else "")
            if export_plan.feasible else f"not possible on this model: {export_plan.reason}"
        ),
        "code": code,
        "details": {
            "dims": {d.name: [d.min, d.max] for d in export_plan.dims},
            "relations": {d.name: d.expression for d in export_plan.dims if d.kind != "dim"},
            "example_sample": export_plan.example_sample,
            "example_topology": export_plan.example_topology,
            "suggested_fixes": list(export_plan.fixes),
            "outside": [
                {"topology": o.topology, "sample": o.sample, "samples": o.samples, "reason": o.reason}
                for o in export_plan.outside
            ],
            "not_declared": list(export_plan.warnings),
            **({"torch_message": export_plan.torch_message} if export_plan.torch_message else {}),
        },
    }


def not_planned_entry(name: str, planned: tuple[str, ...]) -> dict[str, Any]:
    """fixes.json's entry for a plan emit-warmup was not asked to plan (no module written)."""
    reason = not_planned_reason(name, planned)
    return {"name": name, "file": None, "title": plans.BY_NAME[name].title, "status": plans.NOT_PLANNED,
            "reason": reason, "summary": reason, "code": None, "details": {}}


def probed_section(included: bool, catalog: dict[str, Any], added: list[dict[str, Any]],
                   excluded: list[dict[str, Any]], sizes: tuple[int, ...], warmup: Any, without: Any) -> dict[str, Any]:
    """fixes.json's ``probed``: each probed topology the plans cover (its id, its topology number
    in the plans, how probe found it, whether the warmup runs its sample), those left out and why,
    and the warmup with and without them (samples, graphs). Pure."""
    numbers = {t["probed"]: t["id"] for t in catalog["topologies"] if t.get("probed") is not None}
    in_warmup = {step.topology for step in warmup.steps}
    return {
        "included": bool(included),
        "topologies": len(added),
        "corpus": f"{store.PROBE_DIR}/corpus" if added else None,
        "added": [{"id": found["id"], "topology": numbers[found["id"]], "found_by": found["found_by"],
                   "in_warmup": numbers[found["id"]] in in_warmup,
                   "sizes": sorted({e["value"] for e in found.get("edits", []) if e.get("kind") == "size"})}
                  for found in added],
        "excluded": excluded,
        "exclude_sizes": sorted(sizes),
        "warmup": {"samples": len(warmup.steps), "graphs": warmup.graphs},
        "warmup_without": {"samples": len(without.steps), "graphs": without.graphs},
    }


def emit_canonical(out: Path, catalog: dict[str, Any], corpus: Any, model: Any,
                   transforms: tuple[Any, ...], *,
                   progress: Callable[[str], None] | None = None) -> tuple[CanonicalPlan, tuple[Path, ...]]:
    """Plan and write ``canonicalise.py`` and its warmup corpus ``canonical_warmup/`` (the
    transformed samples that compile the canonical graphs) for ``transforms``
    (:mod:`guardscope.fixes.canonical`); the transforms are checked before anything is written."""
    from .transforms import Call, apply_chain

    store.refuse_foreign(out, [store.CANONICALISE])
    plan = plan_canonical(catalog, corpus, model, transforms, progress=progress)
    code = render_canonicalise(catalog, plan)
    target = out / store.CANONICAL_WARMUP
    call = Call(model)
    spec = respec(catalog["model"], corpus.path, target)
    with CorpusWriter(target, model=spec, compile=corpus.manifest.compile, overwrite=True,
                      method=corpus.manifest.method, recorded_from=corpus.manifest.recorded_model,
                      dynamo_config=corpus.manifest.dynamo_config or {}) as writer:
        for index in plan.warmup:
            sample = corpus.sample(index)
            args, kwargs, _ = apply_chain(call, transforms, sample.args, sample.kwargs, index)
            writer.add(*args, **kwargs)
    return plan, (store.write_text(out / store.CANONICALISE, code), target)
