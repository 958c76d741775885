"""Probe for topologies the corpus has not shown yet: synthetic inputs at the sizes, equalities,
layouts and dtypes Dynamo specialises on, derived from real samples.

Three steps, kept apart: :func:`guardscope.fixes.probe_plan.plan_candidates` (pure: the edits
worth checking on each topology's representative), :class:`guardscope.fixes.probe_scan.Scanner`
(what the corpus shows: dtypes, layouts, index relations) and
:func:`guardscope.fixes.probe_synthesis.synthesize` (one edited copy of a real sample). This module
runs them: :func:`run` checks which compiled graph accepts each synthetic sample, and compiles the
new graphs for those none accepts, through :mod:`guardscope.replay` (see ``pipeline.probe``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .. import store
from ..catalog.builder import CatalogBuilder
from ..corpus import CorpusWriter
from ..corpus.reader import SignatureRecord
from ..corpus.spec import respec
from ..errors import CatalogError, CompileOptionsError
from ..options import analysis_options
from ..replay.arguments import CallBinder, describe, tensors_of
from ..replay.session import ReplaySession
from ..torch_compat import dtype_name
from .probe_plan import DEFAULT_VALUES, PAIRWISE, Candidate, plan_candidates
from .probe_scan import Scanner, layout_of
from .probe_synthesis import InvalidCandidate, synthesize

DEFAULT_MAX_CANDIDATES = 5000


@dataclass(frozen=True)
class ProbeResult:
    out_dir: Path
    document: dict[str, Any]
    corpus_dir: Path | None


def raised_words(explored: dict[str, Any]) -> str:
    """``"3 raised in the model (broken 3)"``: how many checked samples raised and from which
    kind of edit, so a probe whose inputs the model rejects says so (and whether it was asked
    to break relations) rather than hiding it in a count of what was explored."""
    by_kind = explored["model_error_by_kind"]
    kinds = f" ({', '.join(f'{kind} {count}' for kind, count in by_kind.items())})" if by_kind else ""
    return f"{explored['model_error']} raised in the model{kinds}"


def check_request(values: tuple[int, ...] | None, pairwise: str, max_candidates: int | None) -> tuple[tuple[int, ...], int]:
    """The probe's options checked (before anything is loaded): the sorted sizes to try and the
    candidate limit, or :class:`CompileOptionsError`."""
    values = tuple(sorted(set(values if values is not None else DEFAULT_VALUES)))
    if not values or min(values) < 0:
        raise CompileOptionsError(f"probe values {list(values)} must be sizes >= 0")
    if pairwise not in PAIRWISE:
        raise CompileOptionsError(f"pairwise {pairwise!r} is not one of {', '.join(PAIRWISE)}")
    limit = DEFAULT_MAX_CANDIDATES if max_candidates is None else max_candidates
    if limit < 1:
        raise CompileOptionsError(f"--max-candidates {limit} must be at least 1")
    return values, limit


def run(
    out: Path,
    catalog: dict[str, Any],
    corpus: Any,
    model: Any,
    *,
    values: tuple[int, ...] | None = None,
    pairwise: str = "general",
    max_candidates: int | None = None,
    break_relations: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
) -> ProbeResult:
    """Look for topologies the corpus of the analysis in ``out`` has not shown yet.

    Synthesises edited copies of each topology's representative, checks each against the
    analysis' compiled graphs (rebuilt by replaying its compile samples; a synthetic sample a
    graph accepts is not run) and compiles the ones none accepts: each new graph is a topology
    the corpus never showed. Writes ``probe/probe.json`` (what was explored, what was found) and
    ``probe/corpus/`` (one synthetic sample per new topology, a corpus that ``emit-warmup
    --include-probed`` covers).

    Edits keep the dims the corpus always shows equal equal; ``break_relations`` also edits
    them apart (candidates of kind ``"broken"``), and ``explored.model_error_by_kind`` says how
    many of each kind raised in the model.
    """
    values, limit = check_request(values, pairwise, max_candidates)
    options = analysis_options(catalog)
    options.validate()
    served = [t for t in catalog["topologies"] if t.get("compile_id") is not None]
    if not served:
        raise CatalogError("the analysis has no compiled topology to probe from")
    binder = CallBinder(model)
    bases, representatives = _representatives(corpus, served, binder)
    scanned = _scan(corpus, binder, bases, representatives, progress)
    planned = plan_candidates(
        catalog,
        _per_base(representatives, lambda t: tuple(t.shape)),
        scanned,
        values=values,
        pairwise=pairwise,
        base_layouts=_per_base(representatives, layout_of),
        base_dtypes=_per_base(representatives, lambda t: dtype_name(t.dtype)),
        break_relations=break_relations,
    )
    chosen, truncated = planned[:limit], max(0, len(planned) - limit)
    synthetic = _synthesize(chosen, bases, representatives, binder, scanned, len(corpus))
    checked = _check(model, options, catalog, corpus, synthetic.samples, progress)
    outcomes = _Outcomes.tally(synthetic.samples, checked.metas, {t["compile_id"] for t in served})
    new_topologies = _new_topologies(outcomes.by_compile, synthetic.samples, checked.catalog)
    document = {
        "schema": 1,
        "catalog_sha256": store.catalog_digest(catalog),
        "torch_version": checked.torch_version,
        "bounds": {"values": list(values), "pairwise": pairwise, "max_candidates": limit,
                   "break_relations": break_relations},
        "scan": scanned.to_json(),
        "explored": _explored(len(representatives), planned, truncated, synthetic, outcomes),
        "new_topologies": new_topologies,
        "model_errors": outcomes.model_errors,
        "warnings": _rebuild_warnings(checked, served),
    }
    corpus_dir = _write_probe_corpus(out, catalog, corpus, synthetic.samples, outcomes.by_compile)
    store.write_document(out, store.PROBE, document)
    return ProbeResult(out_dir=out, document=document, corpus_dir=corpus_dir)


def _explored(bases: int, planned: list[Candidate], truncated: int, synthetic: _Synthetic,
              outcomes: _Outcomes) -> dict[str, Any]:
    """probe.json's ``explored``: the candidates planned (by kind), left out by the limit, not
    made, alike another, checked, and what the checked ones did."""
    by_kind: dict[str, int] = {}
    for candidate in planned:
        by_kind[candidate.kind] = by_kind.get(candidate.kind, 0) + 1
    return {
        "bases": bases,
        "planned": len(planned),
        "planned_by_kind": dict(sorted(by_kind.items())),
        "truncated": truncated,
        "invalid": sum(synthetic.invalid.values()),
        "invalid_reasons": dict(sorted(synthetic.invalid.items())),
        "duplicates": synthetic.duplicates,
        "checked": len(synthetic.samples),
        **outcomes.counts,
        "model_error_by_kind": dict(sorted(outcomes.errors_by_kind.items())),
    }


def _representatives(corpus: Any, served: list[dict[str, Any]], binder: CallBinder
                     ) -> tuple[dict[int, Any], dict[int, Any]]:
    """Each served topology's representative sample (its first), by index, and its arguments
    bound to the forward's signature; :class:`CatalogError` where they do not bind."""
    bases = {t["first_sample"]: corpus.sample(t["first_sample"]) for t in served}
    representatives = {index: binder.bound(sample.args, sample.kwargs) for index, sample in bases.items()}
    if any(bound is None for bound in representatives.values()):
        raise CatalogError("the model's forward signature does not bind the corpus samples; probe needs named inputs")
    return bases, representatives


def _scan(corpus: Any, binder: CallBinder, bases: dict[int, Any], representatives: dict[int, Any],
          progress: Callable[[str, int, int], None] | None) -> Any:
    """The corpus read once: the dtypes and layouts it shows, and which integer inputs index
    which dim (``progress`` hears ``scan`` every thousand samples)."""
    scanner = Scanner()
    for index, bound in representatives.items():
        scanner.add(bound.arguments, for_indexes=True, data=bases[index].recorded == "full")
    done = 0
    for item in corpus.iter_records():
        recorded = type(item) is not SignatureRecord
        if recorded:
            args, kwargs, repeat = item.args, item.kwargs, 1
        else:
            # No data, and every sample of the record alike: scanned once, on its arguments
            # shared when it is a call template's.
            if item.key is not None:
                args, kwargs, _ = item.arguments()
            else:
                first = item.sample(0)
                args, kwargs = first.args, first.kwargs
            repeat = item.repeat
        bound = binder.bound(args, kwargs)
        if bound is not None:
            scanner.add(bound.arguments, data=recorded, samples=repeat)
        if progress is not None and (done + repeat) // 1000 > done // 1000:
            progress("scan", done + repeat, len(corpus))
        done += repeat
    return scanner.result()


def _per_base(representatives: dict[int, Any], read: Callable[[Any], Any]) -> dict[int, dict[str, Any]]:
    """``read`` of each tensor of each representative, by sample index and argument path."""
    return {
        index: {path: read(tensor) for path, tensor in tensors_of(bound.arguments)}
        for index, bound in representatives.items()
    }


@dataclass(frozen=True)
class _Synthetic:
    """The synthetic samples to check, each with its candidate; how many candidates could not be
    made, by reason, and how many made a sample already made."""
    samples: list[tuple[Candidate, Any]]
    invalid: dict[str, int]
    duplicates: int


def _synthesize(chosen: list[Candidate], bases: dict[int, Any], representatives: dict[int, Any],
                binder: CallBinder, scanned: Any, first_virtual: int) -> _Synthetic:
    """One sample per chosen candidate (indexes from ``first_virtual``, after the corpus's), but
    those that cannot be made and those alike a sample already made."""
    synthetic: list[tuple[Candidate, Any]] = []
    invalid: dict[str, int] = {}
    seen_keys: set = set()
    duplicates = 0
    for candidate in chosen:
        bound = representatives[candidate.base_sample]
        try:
            sample = synthesize(bases[candidate.base_sample], bound, candidate, scanned.indexes,
                                first_virtual + len(synthetic))
        except InvalidCandidate as exc:
            reason = str(exc).split(",")[0]
            invalid[reason] = invalid.get(reason, 0) + 1
            continue
        meta = describe(binder.bound(sample.args, sample.kwargs).arguments, 0, None, None)
        key = (meta.tensors, meta.lengths, meta.scalars)
        if key in seen_keys:
            duplicates += 1
            continue
        seen_keys.add(key)
        synthetic.append((candidate, sample))
    return _Synthetic(synthetic, invalid, duplicates)


@dataclass(frozen=True)
class _Checked:
    """The check's replay: each sample's meta by index, the catalog built from them, the compile
    samples replayed and the torch that ran it."""
    metas: dict[int, Any]
    catalog: Any
    compile_samples: list[int]
    torch_version: str


def _check(model: Any, options: Any, catalog: dict[str, Any], corpus: Any,
           synthetic: list[tuple[Candidate, Any]], progress: Callable[[str, int, int], None] | None) -> _Checked:
    """The analysis' graphs rebuilt by replaying its compile samples, then each synthetic sample
    checked against them (guards only: one a graph accepts is not run; the others compile)."""
    metas: dict[int, Any] = {}
    builder = CatalogBuilder()

    def on_sample(meta: Any) -> None:
        metas[meta.index] = meta
        builder.add_sample(meta)

    compile_samples = [c["sample"] for c in catalog["compiles"] if c.get("fail_type") is None and c["sample"] is not None]
    with ReplaySession(model, options, on_sample=on_sample, guard_only=True,
                       progress=(lambda done: progress("check", done, len(compile_samples) + len(synthetic)))
                       if progress else None) as session:
        session.replay(corpus.sample(index) for index in compile_samples)
        session.replay(sample for _, sample in synthetic)
        result = session.result()
    probed = builder.build(
        events=result.events, torch_version=result.torch_version, corpus_path="", model=catalog["model"],
        compile_options=options.compile_json(), replay_mode=result.replay_mode, arguments=result.arguments,
    )
    return _Checked(metas, probed, compile_samples, result.torch_version)


def _rebuild_warnings(checked: _Checked, served: list[dict[str, Any]]) -> list[str]:
    """probe.json's warning when replaying the compile samples made other graphs than the
    analysis's (another torch or model)."""
    known = {t["compile_id"]: t["id"] for t in served}
    rebuilt = {checked.metas[i].serving for i in checked.compile_samples if i in checked.metas}
    warnings = []
    if not rebuilt <= set(known):
        warnings.append(
            "replaying the analysis' compile samples did not rebuild its graphs (compile ids "
            f"{sorted(rebuilt - set(known))}); was the catalog made by another torch or model?"
        )
    return warnings


@dataclass(frozen=True)
class _Outcomes:
    """What each synthetic sample did: the counts (accepted by a known graph, compiled a new one,
    raised in the model, not analysed), the first model errors and their count by candidate
    kind, and the synthetic samples' positions by the new graph each compiled."""
    counts: dict[str, int]
    model_errors: list[dict[str, Any]]
    errors_by_kind: dict[str, int]
    by_compile: dict[str, list[int]]

    @classmethod
    def tally(cls, synthetic: list[tuple[Candidate, Any]], metas: dict[int, Any], known: set[str]) -> _Outcomes:
        outcomes = {"accepted": 0, "new_graph": 0, "model_error": 0, "not_analysed": 0}
        model_errors: list[dict[str, Any]] = []
        errors_by_kind: dict[str, int] = {}
        by_compile: dict[str, list[int]] = {}
        for position, (candidate, sample) in enumerate(synthetic):
            meta = metas[sample.index]
            if meta.error is not None:
                outcomes["model_error"] += 1
                errors_by_kind[candidate.kind] = errors_by_kind.get(candidate.kind, 0) + 1
                if len(model_errors) < 20:
                    model_errors.append({"found_by": candidate.describe(), "error": meta.error})
            elif meta.serving is None:
                outcomes["not_analysed"] += 1
            elif meta.serving in known:
                outcomes["accepted"] += 1
            else:
                outcomes["new_graph"] += 1
                by_compile.setdefault(meta.serving, []).append(position)
        return cls(outcomes, model_errors, errors_by_kind, by_compile)


def _new_topologies(by_compile: dict[str, list[int]], synthetic: list[tuple[Candidate, Any]],
                    probed: Any) -> list[dict[str, Any]]:
    """probe.json's ``new_topologies``: one per new graph, in the order the candidates found
    them, with the first candidate that did and its facts."""
    facts = {t.compile_id: list(t.facts) for t in probed.topologies}
    new_topologies = []
    for number, (compile_id, positions) in enumerate(sorted(by_compile.items(), key=lambda item: item[1][0])):
        candidate, _ = synthetic[positions[0]]
        new_topologies.append({
            "id": f"P{number}",
            "compile_id": compile_id,
            "probe_sample": number,
            "facts": facts.get(compile_id, []),
            "found_by": candidate.describe(),
            "base_topology": candidate.base_topology,
            "base_sample": candidate.base_sample,
            "edits": [edit.to_json() for edit in candidate.edits],
            "candidates": len(positions),
        })
    return new_topologies


def _write_probe_corpus(out: Path, catalog: dict[str, Any], corpus: Any, synthetic: list[tuple[Candidate, Any]],
                        by_compile: dict[str, list[int]]) -> Path | None:
    """``probe/corpus/``: the first synthetic sample of each new topology, in their order (none,
    and an earlier run's removed, when there is none)."""
    probe_dir = out / store.PROBE_DIR
    if not by_compile:
        store.remove_corpus(probe_dir / "corpus")
        return None
    corpus_dir = probe_dir / "corpus"
    spec = respec(catalog["model"], corpus.path, corpus_dir)
    with CorpusWriter(corpus_dir, model=spec, compile=corpus.manifest.compile, overwrite=True,
                      method=corpus.manifest.method, recorded_from=corpus.manifest.recorded_model,
                      dynamo_config=corpus.manifest.dynamo_config or {}) as writer:
        for compile_id, positions in sorted(by_compile.items(), key=lambda item: item[1][0]):
            _, sample = synthetic[positions[0]]
            writer.add(*sample.args, **sample.kwargs)
    return corpus_dir
