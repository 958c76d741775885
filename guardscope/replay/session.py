"""Replay a corpus through ``torch.compile`` and record what Dynamo did: the replay loop.

For every sample, in recorded order: apply the requested ``mark_unbacked`` marks, run the compiled
model (under ``torch.inference_mode`` by default, as serving code does), and ask Dynamo's cache
which compiled entry serves the sample — that entry is the sample's topology. Compiles are read
from the structured trace (:mod:`guardscope.replay.capture`), attributed to the sample that triggered
them. Every torch setting touched is restored on exit; Dynamo's caches are reset before the
replay so it starts as a fresh process would. One call is run by :mod:`guardscope.replay.runner`,
under the settings and compile of :mod:`guardscope.replay.compiling`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import time
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Iterable, Iterator

import torch

from .. import torch_compat
from ..corpus.reader import SignatureRecord
from ..corpus.traffic_log.columns import RecordColumns
from ..model import CompileEvent, Sample, SampleMeta, ServedRows, compile_order
from ..options import ReplayOptions
from ..sources import FrameArguments
from ..text import error_text
from .arguments import describe
from .capture import TraceCapture
from .column_check import COLUMN_BATCH, ColumnChecks, ColumnStats
from .compiling import replay_settings
from .cudagraphs import CudagraphCapture
from .events import events_from_records
from .record_plan import RecordPlan
from .runner import Runner


# The signatures whose descriptions a guard-only replay of a corpus with signature records
# keeps (ReplaySession's signature_cache; each takes a few kB).
SIGNATURE_CACHE = 16384
# Call templates (signature structures) whose description plan and device check a replay keeps.
PLANS_KEPT = 256
# Whether a guard-only replay checks the signature records of a call template over columns
# (guardscope.replay.column_check) rather than record by record; the catalog is the same.
COLUMN_CHECKS = True


@dataclass
class ReplayResult:
    events: list[CompileEvent]
    unparsed: dict[str, int]
    samples: int
    seconds: float
    arguments: tuple[str, ...] = ()
    frame_arguments: FrameArguments | None = None
    graph_breaks: tuple[Any, ...] = ()
    frames_followed: bool = True  # False: this torch hides what frames after a graph break ran
    replay_mode: str = "full"
    dropped_records: int = 0
    unreadable_cudagraph_records: int = 0
    torch_version: str = field(default_factory=torch_compat.torch_version)
    # Signature records checked over columns, and one by one where a graph's guards could not be
    # translated (None: no record was checked over columns).
    column_checks: ColumnStats | None = None


class ReplaySession:
    """A replay that can be fed shard by shard: settings, trace capture and one compiled model
    live for the whole session, and are restored or reset on exit.

    ``warm(samples, stop)`` replays the samples before ``stop`` as ``replay`` did, reporting none
    (a resumed analysis rebuilds the Dynamo state its finished samples left); ``replay(samples)``
    runs and reports.

    With ``guard_only``, a sample that an existing graph's guards accept is not run: it cannot
    recompile. That is only sound when the model compiles to one frame, so it applies with
    ``fullgraph=True``; otherwise every sample runs (later frames see runtime values). With CUDA
    graphs (``options.uses_cudagraphs``) every sample runs too: CUDA Graph Trees record per
    distinct size at run time, and each sample's recordings and skips are captured
    (:class:`guardscope.replay.cudagraphs.CudagraphCapture`) into its ``SampleMeta.cudagraph``.

    With ``track_lookup`` each sample's ``SampleMeta.ran`` is the graph that really ran it:
    Dynamo tries graphs most-recently-used first (:class:`guardscope.torch_compat.LookupOrder`),
    so that can be a later graph than ``serving``, the earliest-compiled accepting one. CUDA
    Graph Trees belong to the graph that runs, so the CUDA graph predictions use ``ran``.
    """

    def __init__(
        self,
        model: Any,
        options: ReplayOptions,
        *,
        on_sample: Callable[[SampleMeta], None],
        trace_stream: IO[str] | None = None,
        progress: Callable[[int], None] | None = None,
        guard_only: bool = False,
        cudagraph_stream: IO[str] | None = None,
        track_lookup: bool = False,
        full_sample: Callable[[int], Sample | None] | None = None,
        signature_cache: int = 0,
        safe_point: Callable[[], None] | None = None,
        on_rows: Callable[[ServedRows], None] | None = None,
    ) -> None:
        self.model = model
        # Samples served over columns are handed over as columns (ServedRows) when this is given,
        # else one description each through on_sample.
        self.on_rows = on_rows
        # Called between two samples (after the previous one is reported): where a held
        # Ctrl-C or SIGTERM is delivered (guardscope.replay.resumable.HeldSignals).
        self._safe_point = safe_point
        # A signature-only sample that must run (it compiles, or a later frame needs data) runs
        # on the data of the full sample of its signature, from here, when there is one.
        self.full_sample = full_sample
        self.track_lookup = track_lookup
        self.options = options
        self.on_sample = on_sample
        self.progress = progress
        self.skip_served = guard_only and options.fullgraph and not options.uses_cudagraphs
        self.capture = TraceCapture(trace_stream)
        self.cudagraphs = CudagraphCapture(cudagraph_stream) if options.uses_cudagraphs else None
        self.count = 0
        self.seconds = 0.0
        self.current: int | None = None  # the sample being replayed, for crash reports
        self._marked_first = False
        # Frames after graph breaks see values computed in the forward, so every sample runs
        # (no guard-only skipping) and each call's graphs in those frames are recorded.
        self.frames = None if self.skip_served else torch_compat.FrameRecorder()
        # Guard-only replay without lookup tracking: equal signatures pass the same frame-0
        # guards, and the earliest-compiled graph accepting a signature stays the same as graphs
        # are added, so with ``signature_cache`` > 0 each signature's description is kept (the
        # newest ``signature_cache`` ones) and reused for later samples of that signature
        # without preparing or checking them: samples recorded as their signature (corpus
        # format 3), whose signature comes with them. Given as the corpus's SignatureRecords,
        # those of a call template are checked on arguments shared by all its records (CallTemplate:
        # tensors built once per argument and size) and described from their plan
        # (RecordPlan), so a new signature costs a guard check, not a rebuilt call.
        cacheable = self.skip_served and not track_lookup and signature_cache > 0
        # Oldest first (popitem(last=False) evicts in constant time: deleting a plain dict's
        # first key leaves a hole that every later next(iter(...)) walks past).
        self._by_signature: collections.OrderedDict[Any, SampleMeta] | None = (
            collections.OrderedDict() if cacheable else None)
        self._signature_cache = signature_cache
        self.signature_hits = 0
        self._plans: dict[Any, RecordPlan] = {}  # per call template of the signature records
        # Signature records of a call template checked a batch at a time (same answers, same
        # order of compiles): where the signature cache applies and nothing is marked.
        self._columns_on = cacheable and COLUMN_CHECKS and not options.mark_unbacked
        self._columns: ColumnChecks | None = None
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> ReplaySession:
        self._stack.enter_context(replay_settings(self.options))
        self._stack.enter_context(self.capture)
        if self.cudagraphs is not None:
            self._stack.enter_context(self.cudagraphs)
        self._stack.callback(torch_compat.reset_dynamo)
        self.runner = Runner(self.model, self.options)
        self._checking = self.runner.grad_context()
        if self._columns_on:
            self._columns = ColumnChecks(self.runner)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._stack.close()

    @property
    def takes_columns(self) -> bool:
        """Whether signature records are checked over columns: a traffic log may then be read
        as :class:`~guardscope.corpus.traffic_log.columns.RecordColumns` (``Corpus.load_columns``)."""
        return self._columns is not None

    def scan_plans(self) -> dict[Any, Any]:
        """What a worker reading a traffic log's rows can check of them against the graphs
        compiled so far, per call template (:meth:`.column_check.ColumnChecks.scan_plans`)."""
        return self._columns.scan_plans() if self._columns is not None else {}

    def _mark(self) -> bool:
        if not self.options.mark_unbacked:
            return False
        if self.options.mark_samples == "all":
            return True
        first, self._marked_first = not self._marked_first, True
        return first

    def _set_sample(self, index: int | None) -> None:
        self.capture.set_sample(index)
        if self.cudagraphs is not None:
            self.cudagraphs.set_sample(index)

    def warm(self, samples: Iterable[Sample | SignatureRecord], stop: int) -> None:
        """Replay the samples before sample ``stop`` exactly as :meth:`replay` replayed them,
        reporting none: a resumed analysis rebuilding the Dynamo state its finished samples left.

        Every call leaves state, not only the calls that compile: Dynamo moves the graph a call
        ran to the front of its frame's lookup order, and a guard manager counts each failed
        check against the guard that failed and re-sorts its guards by those counts (fail fast),
        so which failure a later recompile reports for a graph (its kind in the catalog) depends
        on every guard check before it, this replay's own serving checks included. So every
        sample runs again, through the same path (signature cache, marks and the emulated
        lookup order are rebuilt on the way); the trace files already hold what they logged, so
        the records are kept in memory for the catalog but not written again.
        """
        streams = self.capture.stream, self.cudagraphs.stream if self.cudagraphs is not None else None
        self.capture.stream = None
        if self.cudagraphs is not None:
            self.cudagraphs.stream = None
        try:
            for _ in self._replayed(samples, stop):
                pass
        finally:
            self.capture.stream = streams[0]
            if self.cudagraphs is not None:
                self.cudagraphs.stream = streams[1]

    def _run(self, sample: Sample, mark: bool | None = None, key: Any = None) -> SampleMeta:
        meta = self._forward(sample, self._mark() if mark is None else mark, key)
        if self.cudagraphs is not None:
            meta = dataclasses.replace(meta, cudagraph=self.cudagraphs.take())
        return meta

    def _forward(self, sample: Sample, mark: bool, key: Any = None) -> SampleMeta:
        """``key``: the signature-cache key a caller looked up already (and missed)."""
        # Only samples that carry their signature (recorded as one) are looked up and kept:
        # taking a full sample's signature costs about as much as checking its guards.
        if key is None and self._cacheable(sample.signature is not None, mark):
            key = sample.signature
            known = self._cached(key, sample.index)
            if known is not None:
                return known
        meta = self._forward_call(sample, mark)
        if key is not None:
            self._keep(key, meta)
        return meta

    def _cached(self, key: Any, index: int) -> SampleMeta | None:
        known = self._by_signature.get(key)  # type: ignore[union-attr]
        if known is None:
            return None
        self.signature_hits += 1
        return known.at(index)

    def _cacheable(self, signature: bool, mark: bool) -> bool:
        return (self._by_signature is not None and signature
                and not (mark and self.options.mark_samples != "all"))

    def _keep(self, key: Any, meta: SampleMeta) -> None:
        cache = self._by_signature
        if cache is not None and meta.serving is not None and meta.error is None:
            if len(cache) >= self._signature_cache:
                cache.popitem(last=False)  # the oldest
            cache[key] = meta if meta.ran_on is None else dataclasses.replace(meta, ran_on=None)

    def _record(self, record: SignatureRecord, offset: int) -> SampleMeta:
        """Sample ``offset`` of a signature record: from the signature cache; else, when the
        record has a call template, checked against the graphs' guards on its shared arguments
        (marked, when every sample is); else run as a sample of its own (materialised, or on its
        full sample's data)."""
        index = record.first + offset
        mark = self._mark()
        key = None
        if self._cacheable(True, mark):
            key = record.signature if record.key is None else (record.call, record.key)
            known = self._cached(key, index)
            if known is not None:
                return known
            if record.key is not None:  # marks, if any, apply to every sample: to the shared ones too
                meta = self._check_record(record, index, mark)
                if meta is not None:
                    self._keep(key, meta)
                    return meta
        self._set_sample(index)
        meta = self._run(record.sample(offset), mark, key)
        self._set_sample(None)
        return meta

    def _check_record(self, record: SignatureRecord, index: int, mark: bool) -> SampleMeta | None:
        """A call template's record checked against the graphs' guards without building its
        arguments anew; None when no graph accepts it (it must run) or its tensors are not on
        the replay's device."""
        runner = self.runner
        plan = self._plans.get(record.call)
        if plan is not None and plan.framed and not mark:
            f_locals, described = plan.frame(record.call, record.key)
            with self._checking:  # runner.grad_context(), one instance entered record after record
                serving = runner.serving_locals(f_locals)
            return None if serving is None else plan.described(described, index, serving)
        if plan is None:
            shared = runner.record_arguments(record)
            if shared is None:
                return None
        else:  # a plan is made only for a call template whose tensors are on the replay's device
            shared = record.call.arguments(record.key)
        args, kwargs, tensors = shared
        named = None
        if mark:
            named = runner.binder.named_or_positional(args, kwargs)
            runner.apply_marks(named)
        if plan is None:
            if len(self._plans) >= PLANS_KEPT:  # a corpus of ever new structures: start afresh
                self._plans.clear()
            plan = self._plans[record.call] = RecordPlan.of(runner, record.call, args, kwargs, tensors)
        serving = runner.serving_arguments(args, kwargs)
        if serving is None:
            return None
        if plan.paths is None:  # ints among the arguments: describe them as they are
            named = runner.binder.named_or_positional(args, kwargs) if named is None else named
            return describe(named, index, serving, None, recorded="signature")
        return plan.describe(record.key, tensors, index, serving)

    def _forward_call(self, sample: Sample, mark: bool) -> SampleMeta:
        runner = self.runner
        call = runner.prepare(sample, mark)
        error = None
        graphs: tuple[str, ...] = ()
        # A signature-only sample: its description says so, and what it ran on if it runs.
        fields: dict[str, Any] = {} if sample.signature is None else {"recorded": "signature"}
        with runner.grad_context():
            serving = runner.serving_locals(call.frame) if self.skip_served else None
            if serving is None:
                if fields:
                    # On the data of the full sample of its signature when there is one, else on
                    # the tensors materialised from the signature.
                    full = None
                    if sample.data_of is not None and self.full_sample is not None:
                        with torch.inference_mode(False):  # loaded as a request arrives: normal tensors
                            full = self.full_sample(sample.data_of)  # None: its shard is skipped
                    if full is not None:
                        call = runner.prepare(full, mark)
                        fields["ran_on"] = "full"
                    else:
                        fields["ran_on"] = "materialised"
                runner.forget_entries()
                recording = self.frames.recording() if self.frames is not None else contextlib.nullcontext([])
                try:
                    with recording as ran:
                        runner.compiled(*call.args, **call.kwargs)
                except Exception as exc:  # a failing sample is recorded, the replay goes on
                    if torch_compat.is_recompile_limit_error(exc):
                        # fullgraph turns "recompile limit reached" into an error; the sample
                        # is not analysed (no graph serves it), not broken.
                        return describe(call.named, sample.index, None, None, **fields)
                    error = error_text(exc)
                serving = None if error else runner.serving_locals(call.frame)
                graphs = self._later_frames(ran)
            # A call that raised still moved the graph it ran to the front of Dynamo's order.
            if self.track_lookup:
                fields["ran"] = runner.ran_locals(call.frame)
        return describe(call.named, sample.index, serving, error, graphs=graphs, **fields)

    def _later_frames(self, ran: list[tuple[Any, str]]) -> tuple[str, ...]:
        """The graphs a call ran through in frames after the first, each once, oldest first."""
        first = self.runner.code
        found = {compile_id for code, compile_id in ran if code is not first}
        return tuple(sorted(found, key=compile_order))

    @property
    def lookup_order(self) -> list[str]:
        """Dynamo's lookup order as emulated so far (a checkpoint keeps it: a resume checks it)."""
        return list(self.runner.lookup.order)

    def replay(self, samples: Iterable[Sample | SignatureRecord]) -> None:
        """Replay samples in order; a :class:`~guardscope.corpus.storage.format.SignatureRecord`
        (:meth:`guardscope.corpus.storage.format.Corpus.load_records`) stands for its samples."""
        started = time.perf_counter()
        try:
            for meta in self._replayed(samples):
                if type(meta) is ServedRows:
                    self._done_rows(meta)
                else:
                    self._done(meta)
        finally:
            self.seconds += time.perf_counter() - started

    def _replayed(self, samples: Iterable[Sample | SignatureRecord | RecordColumns],
                  stop: int | None = None) -> Iterator[SampleMeta | ServedRows]:
        """Each sample's description, in order (those before sample ``stop``, when given), and
        samples served over columns as :class:`~guardscope.model.ServedRows`; the one path of
        :meth:`replay` and :meth:`warm`."""
        batch: list[SignatureRecord] = []
        for item in samples:
            if type(item) is RecordColumns:
                if batch:
                    yield from self._batched(batch, stop)
                    batch = []
                if self._columns is not None:
                    yield from self._column_rows(item, stop)
                    continue
                for record in item.records():  # column checks are off: record by record
                    yield from self._one_by_one([record], stop)
                continue
            if self._columns is not None and type(item) is SignatureRecord and item.key is not None:
                if batch and (item.call is not batch[0].call or len(batch) >= COLUMN_BATCH):
                    yield from self._batched(batch, stop)
                    batch = []
                batch.append(item)
                continue
            if batch:
                yield from self._batched(batch, stop)
                batch = []
            if type(item) is SignatureRecord:
                repeat = item.repeat if stop is None else min(item.repeat, stop - item.first)
                for offset in range(repeat):
                    self.current = item.first + offset
                    yield self._record(item, offset)
                    if self._safe_point is not None:
                        self._safe_point()
                continue
            if stop is not None and item.index >= stop:
                break
            self.current = item.index
            self._set_sample(item.index)
            meta = self._run(item)
            self._set_sample(None)
            yield meta
            if self._safe_point is not None:
                self._safe_point()
        if batch:
            yield from self._batched(batch, stop)
        self.current = None

    def _batched(self, records: list[SignatureRecord], stop: int | None) -> Iterator[SampleMeta | ServedRows]:
        """Consecutive signature records of one call template: :meth:`_column_rows` of them
        when it is flat and tensors-only (what columns hold), else one by one."""
        call = records[0].call
        if not call.flat or call.has_ints:
            yield from self._one_by_one(records, stop)
            return
        yield from self._column_rows(RecordColumns.of_records(records), stop)

    def _column_rows(self, chunk: RecordColumns, stop: int | None) -> Iterator[SampleMeta | ServedRows]:
        """Consecutive rows of one call template, in order: the graphs' guards checked over the
        rows' columns (:mod:`.column_check`), the rows served handed on as
        :class:`~guardscope.model.ServedRows`; the first row no graph accepts goes the
        record-by-record way (it runs and compiles), then the graphs compiled since are tried on
        the rows still unserved."""
        if stop is not None:
            chunk = chunk.before(stop)  # type: ignore[assignment]
            if chunk is None:
                return
        call = chunk.call
        plan = self._plans.get(call)
        start = 0
        if plan is None:  # the first row makes the plan (and checks the device) the usual way
            yield from self._one_by_one([chunk.record(0)], stop)
            start, plan = 1, self._plans.get(call)
        found = self._columns.batch(chunk, plan) if (  # type: ignore[union-attr]
            plan is not None and start < len(chunk)) else None
        if found is None:
            yield from self._one_by_one([chunk.record(row) for row in range(start, len(chunk))], stop)
            return
        while start < len(chunk):
            found.find()
            miss = found.first_unserved(start)
            if miss > start:
                rows = found.served(start, miss)
                self._columns.stats.samples += rows.samples  # type: ignore[union-attr]
                self.signature_hits += rows.samples - (miss - start)
                self.current = rows.end - 1
                yield rows
                if self._safe_point is not None:
                    self._safe_point()
            if miss == len(chunk):
                return
            yield from self._one_by_one([chunk.record(miss)], stop)
            start = miss + 1

    def _one_by_one(self, records: list[SignatureRecord], stop: int | None) -> Iterator[SampleMeta]:
        for record in records:
            repeat = record.repeat if stop is None else min(record.repeat, stop - record.first)
            for offset in range(repeat):
                self.current = record.first + offset
                yield self._record(record, offset)
                if self._safe_point is not None:
                    self._safe_point()

    def _done(self, meta: SampleMeta) -> None:
        self.on_sample(meta)
        self.count += 1
        if self.progress is not None:
            self.progress(self.count)

    def _done_rows(self, rows: ServedRows) -> None:
        if self.on_rows is None:
            for meta in rows.metas():
                self._done(meta)
            return
        self.on_rows(rows)
        self.count += rows.samples
        if self.progress is not None:
            self.progress(self.count)

    def compile_samples(self, before: int | None = None) -> list[int]:
        """Samples whose call compiled a graph so far (those before sample ``before``), in order
        (a checkpoint keeps them: a resume checks that its replay rebuilt the same)."""
        samples: list[int] = []
        for record in self.capture.records:
            if record.name == "compilation_metrics" and record.sample is not None and record.sample not in samples:
                if before is None or record.sample < before:
                    samples.append(record.sample)
        return samples

    @property
    def compiles(self) -> int:
        """Compiles so far, every frame counted (for progress)."""
        return self.capture.compiles

    def result(self) -> ReplayResult:
        parsed = events_from_records(self.capture.records)
        return ReplayResult(
            events=parsed.events,
            unparsed=parsed.unparsed,
            samples=self.count,
            seconds=self.seconds,
            arguments=self.runner.binder.argument_names(),
            frame_arguments=self.runner.binder.frame_arguments(),
            graph_breaks=tuple(parsed.graph_breaks),
            frames_followed=self.frames is None or self.frames.available,
            replay_mode="guards" if self.skip_served else "full",
            dropped_records=self.capture.dropped + (self.cudagraphs.dropped if self.cudagraphs else 0),
            unreadable_cudagraph_records=self.cudagraphs.unreadable if self.cudagraphs else 0,
            column_checks=self._columns.stats if self._columns is not None and (
                self._columns.stats.samples or self._columns.stats.calls) else None,
        )


def replay(
    model: Any,
    samples: Iterable[Sample],
    options: ReplayOptions,
    *,
    on_sample: Callable[[SampleMeta], None],
    trace_stream: IO[str] | None = None,
    progress: Callable[[int], None] | None = None,
    guard_only: bool = False,
    signature_cache: int = 0,
) -> ReplayResult:
    """Replay ``samples`` (or a corpus's records) through ``torch.compile(model)`` in one
    :class:`ReplaySession`."""
    with ReplaySession(model, options, on_sample=on_sample, trace_stream=trace_stream,
                       progress=progress, guard_only=guard_only, signature_cache=signature_cache) as session:
        session.replay(samples)
        return session.result()


def coverage_after_warmup(
    model: Any, warmup: list[Sample], probes: list[Sample], options: ReplayOptions, *, run_probes: bool = False,
    carry: Any = None,
) -> tuple[list[bool], int]:
    """Run ``warmup`` in order through a fresh compile, then tell for each probe whether it would
    run without compiling anything. Returns (accepted per probe, graphs the warmup compiled in
    every frame).

    A model that compiles to one frame is judged by that frame's guards alone (no forward: about
    10 us a probe). With ``run_probes`` (a model whose graph breaks into several frames: later
    frames see values computed from the data) each probe runs under torch's
    ``fail_on_recompile`` stance, which raises instead of compiling a graph in any frame; a probe
    that runs through is covered, and nothing new is compiled either way. Marks from
    ``options.mark_unbacked`` apply to warmup samples and probes alike when ``mark_samples`` is
    ``"all"``. ``carry`` (a :class:`guardscope.corpus.chains.CarriedState`) runs the warmup's
    decode steps on the state their request's previous step extended, as production does.
    """
    mark = options.mark_samples == "all"
    with replay_settings(options):
        runner = Runner(model, options)
        try:
            for sample in warmup:
                runner.run(sample, mark=mark, carry=carry)
            if not run_probes:
                return [runner.serving(probe, mark=mark) is not None for probe in probes], runner.graphs()
            graphs = torch_compat.cache_entry_total()
            accepted = []
            for probe in probes:
                call = runner.prepare(probe, mark)
                with runner.grad_context(), torch_compat.fail_on_recompile():
                    try:
                        runner.compiled(*call.args, **call.kwargs)
                    except Exception:  # a compile it would need (or the sample raises): not covered
                        accepted.append(False)
                    else:
                        accepted.append(True)
            return accepted, graphs
        finally:
            torch_compat.reset_dynamo()
