"""The input canonicalisation (``canonicalise.py``, from ``emit-warmup --transform``) proved in
verify's child: its ``warmup()``, then the corpus replayed through its ``canonicalise()``, every
compile a failure; and each topology's first sample run eagerly as recorded and canonicalised,
the outputs compared (see :mod:`guardscope.proving.verify`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import store
from .isolation import import_file
from .results import recompile_failures
from .results import result as _result

# The input canonicalisation emit-warmup --transform writes: verified beside the plans, not one.
CANONICAL = "canonical"


def verify_canonical(out_dir: Path, catalog: dict, corpus: Any, model: Any, holdout: float | None,
                     options: Any) -> dict:
    """canonicalise.py's warmup, then the corpus (or its holdout) replayed through its
    canonicalise(), compiles counted; then the outputs of each topology's first sample, eager,
    as recorded and canonicalised (:func:`guardscope.fixes.whatif.compare_outputs`, padded
    outputs cut back as the transforms' own record of what they padded says)."""
    from .. import torch_compat

    module = import_file(out_dir / store.CANONICALISE)
    replay = _replay_canonicalised(module, model, options, catalog, corpus, holdout)
    torch_compat.reset_dynamo()
    topologies = _compare_outputs(module, replay.runner, catalog, corpus, model)
    recompiles, raised = replay.recompiles, replay.raised
    diffs = [t["max_diff"] for t in topologies if t["max_diff"] is not None]
    equal = all(t["equal"] for t in topologies)
    reasons = []
    if recompiles:
        reasons.append(f"{len(recompiles)} compile(s) during the replay of the canonicalised corpus, first at "
                       f"sample {recompiles[0].sample} (graph {recompiles[0].compile_id})")
    if raised:
        reasons.append(f"{len(raised)} sample(s) raised once canonicalised (first, sample {raised[0][0]}: "
                       f"{raised[0][1].splitlines()[0] if raised[0][1] else ''})")
    setup_events = replay.setup_events
    return _result(
        CANONICAL,
        "failed" if reasons else "passed",
        "; ".join(reasons) or None,
        setup_graphs=sum(1 for e in setup_events if e.fail_type is None),
        setup_frames=len({e.frame_id for e in setup_events}),
        setup_seconds=round(replay.setup_seconds, 3),
        replay_recompiles=len(recompiles),
        recompile_samples=sorted({e.sample for e in recompiles}),
        failures=recompile_failures(recompiles),
        samples_replayed=replay.replayed,
        transforms=list(module.TRANSFORMS),
        outputs={"equal": equal, "max_diff": max(diffs) if diffs else None, "changes_results": not equal,
                 "topologies": topologies},
    )


@dataclass(frozen=True)
class _Replayed:
    """The replay through canonicalise(): its runner, the warmup's seconds and compiles, the
    samples replayed, those that raised once canonicalised (index, error) and the compiles."""
    runner: Any
    setup_seconds: float
    setup_events: list[Any]
    replayed: int
    raised: list[tuple[int, str]]
    recompiles: list[Any]


def _replay_canonicalised(module: Any, model: Any, options: Any, catalog: dict, corpus: Any,
                          holdout: float | None) -> _Replayed:
    """canonicalise.py's warmup, then the corpus (or its last ``holdout`` fraction; not the
    samples that raised in the analysis) replayed through its canonicalise()."""
    from .. import torch_compat
    from ..model import Sample
    from ..replay.capture import TraceCapture
    from ..replay.events import events_from_records
    from ..replay.runner import Runner

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
    return _Replayed(runner, setup_seconds, setup_events, replayed, raised,
                     [e for e in events if e.sample is not None])


def _compare_outputs(module: Any, runner: Any, catalog: dict, corpus: Any, model: Any) -> list[dict[str, Any]]:
    """Each topology's first sample run eagerly as recorded and canonicalised, the outputs
    compared (padded outputs cut back); a sample that raises is recorded as unequal, with why."""
    from ..fixes.transforms import Call as Arguments
    from ..fixes.transforms import apply_chain, parse_transforms
    from ..fixes.whatif import compare_outputs
    from ..model import Sample

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
    return topologies
