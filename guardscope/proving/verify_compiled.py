"""A plan proved in verify's child (warmup, unbacked, the unbacked plan's shapes_spec form): the
plan set up (measured, with a bundle or precompiled graphs when asked), the corpus replayed, every
compile during the replay a failure (see :mod:`guardscope.proving.verify`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from .. import store
from ..catalog.frames import hit_recompile_limit
from ..errors import GuardscopeError
from .results import recompile_failures
from .results import result as _result
from .setup import cache_dirs_empty, set_up_plan
from .verify_precompiled import precompiled_outcome


def verify_compiled(name: str, out_dir: Path, corpus: Any, model: Any, holdout: float | None,
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
        _, probed = store.probed_samples(out_dir, len(corpus)) if replica is None else (None, [])
        # Samples the analysis saw raise in the model raise here too: that is the model, not the plan.
        raised_before = {f["sample"] for f in store.read_catalog(out_dir).get("failed_samples", [])}
        replay = _PlanReplay(name, module, runner, capture, carried, raised_before,
                             one_frame=options.fullgraph and not stateful)
        replayed, raised = replay.replay(_replay_split(corpus, holdout, probed, replica))
        capture.set_sample(None)
    if precompiled:
        measured["precompiled"] = precompiled_outcome(runner.compiled, runner.model, runner, corpus,
                                                      store.read_catalog(out_dir))
    events = events_from_records(capture.records).events
    torch_compat.reset_dynamo()
    measured.setdefault("backend", options.backend)
    if carried is not None:  # state arguments run on the live cache, and those kept as recorded
        measured["carried_state"] = {"carried": carried.carried, "kept": carried.kept}
    return _compiled_result(name, setup_events, events, raised_before, setup_seconds=setup_seconds,
                            replayed=replayed, raised=raised, probed=len(probed), measured=measured)


@dataclass
class _PlanReplay:
    """The corpus replayed through the plan set up: each sample carried on the live state its
    request's earlier steps extended (``carried``), marked as the unbacked plan marks it, and
    compiled unless, the model being ``one_frame`` (fullgraph, no carried state), the graphs'
    guards accept it. A sample that raised in the analysis (``raised_before``) may raise again."""
    name: str
    module: Any
    runner: Any
    capture: Any
    carried: Any
    raised_before: set[int]
    one_frame: bool

    def accepts(self, record: Any) -> bool:
        # With fullgraph the model is one frame: a record its guards accept cannot compile.
        shared = self.runner.record_arguments(record) if self.one_frame else None
        if shared is None:
            return False
        if self.name == "unbacked":  # marked as its samples would be (the same marks every time)
            self.module.mark(*shared[0], **shared[1])
        return self.runner.serving_arguments(shared[0], shared[1]) is not None

    def replay(self, items: Iterator[Any]) -> tuple[int, int]:
        """``items`` replayed: the samples replayed (or accepted without running) and those that
        raised as they did in the analysis."""
        replayed = raised = 0
        for sample, accepted in _samples(items, self.accepts):
            if sample is None:
                replayed += accepted
                continue
            raised += self.run(sample)
            replayed += 1
        return replayed, raised

    def run(self, sample: Any) -> bool:
        """One sample run (when its guards do not accept it already); True when it raised as it
        did in the analysis, re-raised when the plan broke a sample that ran there."""
        runner = self.runner
        self.capture.set_sample(sample.index)
        call = runner.prepare(sample, mark=False)
        args, kwargs = (self.carried.carry(sample.index, call.args, call.kwargs) if self.carried
                        else (call.args, call.kwargs))
        if self.name == "unbacked":
            self.module.mark(*args, **kwargs)
        with runner.grad_context():
            # With fullgraph the model is one frame: a sample its guards accept cannot compile.
            accepted = self.one_frame and runner.serving_locals(call.frame)
            if not accepted:
                runner.forget_entries()
                try:
                    runner.compiled(*args, **kwargs)
                except Exception:
                    if sample.index not in self.raised_before:
                        raise  # a sample that ran in the analysis: the plan broke it
                    return True
        return False


def _compiled_result(name: str, setup_events: list[Any], events: list[Any], raised_before: set[int], *,
                     setup_seconds: float, replayed: int, raised: int, probed: int,
                     measured: dict[str, Any]) -> dict[str, Any]:
    """The plan's result from the compiles of its set-up and of the replay (failed when the set-up
    reached Dynamo's recompile limit or the replay compiled), with what was replayed and
    ``measured``."""
    # A sample that raises in the model fails its compile as it did in the analysis: the model's.
    recompiles = [e for e in events if e.sample is not None
                  and not (e.fail_type is not None and e.sample in raised_before and not hit_recompile_limit(e))]
    # Calls past Dynamo's recompile limit start no compile; the trace records them as failed ones.
    # In the set-up they are warmup calls left without their graph (production runs them eagerly).
    setup_limited = [e for e in setup_events if hit_recompile_limit(e)]
    limited = [e for e in recompiles if hit_recompile_limit(e)]
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
        setup_graphs=sum(1 for e in setup_events if e.fail_type is None),
        setup_frames=len({e.frame_id for e in setup_events}),
        setup_seconds=round(setup_seconds, 3),
        replay_recompiles=len(recompiles),
        setup_limit_hits=len(setup_limited),
        recompile_samples=sorted({e.sample for e in recompiles}),
        failures=recompile_failures(recompiles),
        samples_replayed=replayed,
        raised_as_recorded=raised,
        probed_replayed=probed,
        **measured,
    )


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
    from ..corpus.fleet.samples import replica_of_samples

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
