"""The corpus replay of an analysis: shard by shard, checkpointed into the analysis folder so an
interrupted run keeps its finished samples and resumes to the same result.

Every ``checkpoint_every`` seconds, when interrupted (Ctrl-C, SIGTERM) and once every sample is
done, the checkpoint (:mod:`guardscope.checkpoint`) records where the replay stands: every sample
before ``next_sample`` is done and in the catalog builder, and the trace files were this long
after it. A resume cuts the trace files back to that length and replays the finished samples
again as the interrupted run replayed them, reporting none (:meth:`ReplaySession.warm`). Every
call leaves Dynamo state that later compiles report, not only the calls that compile (the lookup
order; guards re-sorted by how often each failed, which decides the failure a recompile reports),
so the state is rebuilt, not approximated, and the catalog equals an uninterrupted run's. The
checkpoint's compiling samples and emulated lookup order check that: a model that does not
replay the same way twice is warned about.
"""

from __future__ import annotations

import contextlib
import gc
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable

from .. import checkpoint, store, torch_compat
from ..corpus.reader import records_from
from ..errors import ShardError
from ..options import ReplayOptions
from .engines import EmbeddedEngine
from .session import SIGNATURE_CACHE, ReplayResult, ReplaySession


@dataclass(frozen=True)
class CorpusReplay:
    """What the replay of a corpus left: the replay's result, the replay seconds of this run and
    of the runs it resumed, shards skipped as corrupt, and warnings."""

    result: ReplayResult
    seconds: float
    skipped_shards: tuple[dict[str, str], ...]
    warnings: tuple[str, ...]


def _unless_skipped(full_sample: Callable[[int], Any]) -> Callable[[int], Any]:
    """``full_sample``, None where the sample's shard does not load (skipped with its error)."""

    def loaded(index: int) -> Any:
        try:
            return full_sample(index)
        except ShardError:
            return None

    return loaded


class HeldSignals:
    """Ctrl-C and SIGTERM delivered between samples, never inside one.

    Python runs a signal's handler between two bytecodes of whatever runs then, and during a
    sample that is Dynamo tracing or compiling: the CLI's ``KeyboardInterrupt`` raised inside
    fake-tensor dispatch comes back as Dynamo's ``Unsupported: TypeError when making fake tensor
    call``, a sample error instead of an interrupt (the analysis then exits 1 saying the model
    raised). So while installed (the main thread only: elsewhere Python delivers no signal) the
    two signals' Python handlers are wrapped: a signal is held and its handler runs at the next
    :meth:`safe_point` (the session calls it after each sample) or when the replay ends. A
    second signal while one is held runs its handler at once, so a compile that hangs can still
    be stopped (``notice`` is told so at the first one).

    Inside :meth:`holding` even a second signal waits: the catalog builder and the progress a
    checkpoint saves move together there, and an interrupt between the two would checkpoint a
    sample the builder holds as still to do (its resume would count that sample twice, a corpus
    of 300 samples catalogued as 301)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, notice: Callable[[str], None] | None = None) -> None:
        self._handlers: dict[int, Callable[..., Any]] = {}
        self._holding = False
        self._pending: tuple[int, Any] | None = None
        self._notice = notice

    @contextlib.contextmanager
    def installed(self) -> Any:
        if threading.current_thread() is threading.main_thread():
            for number in self.SIGNALS:
                handler = signal.getsignal(number)
                if callable(handler):  # not SIG_DFL or SIG_IGN: those are left as they are
                    self._handlers[number] = handler
                    signal.signal(number, self._arrived)
        handlers = dict(self._handlers)
        try:
            yield self
        finally:
            for number, handler in self._handlers.items():
                signal.signal(number, handler)
            self._handlers.clear()
            if self._pending is not None:  # held to the end of the replay: delivered now
                (number, frame), self._pending = self._pending, None
                handlers[number](number, frame)

    def _arrived(self, number: int, frame: Any) -> None:
        if self._pending is None or self._holding:
            if self._pending is None and self._notice is not None:
                self._notice(f"{signal.Signals(number).name} received: stopping after the current sample "
                             "(send it again to stop at once)")
            self._pending = (number, frame)
        else:
            self._pending = None
            self._handlers[number](number, frame)

    def safe_point(self) -> None:
        """Run the held signal's handler, if one arrived: between two samples."""
        if self._pending is not None and not self._holding:
            (number, frame), self._pending = self._pending, None
            self._handlers[number](number, frame)

    @contextlib.contextmanager
    def holding(self) -> Any:
        self._holding = True
        try:
            yield
        finally:
            self._holding = False


class ShardCollector:
    """Python's cyclic garbage collection, paced by shards during a replay.

    A replay allocates tens of container objects a sample (descriptions, signatures, built
    arguments) that live a shard or, kept by the catalog builder and the signature cache, the
    whole analysis; the collector's automatic full passes over that growing heap cost a quarter
    of a signature corpus's analysis. Automatic collection is paused instead: after each shard
    the young generations are collected, and the whole heap every ``FULL_EVERY`` shards (a
    full pass over a large heap costs tens of milliseconds), so cyclic garbage is still freed.
    What the replay starts with, then what survives each full pass, is frozen (``gc.freeze``):
    the next full passes walk only what the shards since added, not again the hundreds of
    thousands of objects torch, Dynamo and the catalog so far hold (a third of a second a pass
    at a million requests). Frozen objects are still freed when no longer referenced; one that
    becomes part of a reference cycle waits for ``close()``, which unfreezes what it froze and
    restores the collector as it was (nothing is frozen when something else had frozen objects
    before).
    """

    FULL_EVERY = 512

    def __init__(self) -> None:
        self._enabled = gc.isenabled()
        self._shards = 0
        self._freezing = gc.get_freeze_count() == 0
        gc.disable()
        if self._freezing:
            gc.freeze()  # what the replay starts with: torch, Dynamo, the model

    def shard_done(self) -> None:
        self._shards += 1
        if self._shards % self.FULL_EVERY:
            gc.collect(1)
            return
        gc.collect(2)
        if self._freezing:
            gc.freeze()

    def close(self) -> None:
        if self._freezing:
            gc.unfreeze()
        if self._enabled:
            gc.enable()


class _SizedStream:
    """A trace stream that knows whether it was written to since its size was last read: a
    replay takes the size after every sample (for the checkpoint), but a sample that compiled
    nothing wrote nothing, so flushing and asking the file (``tell``) again is skipped then."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self._size = store.stream_size(stream)
        self._written = False

    def write(self, text: str) -> int:
        self._written = True
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def size(self) -> int | None:
        """Bytes written so far (:func:`guardscope.store.stream_size`)."""
        if self._written:
            self._written = False
            self._size = store.stream_size(self.stream)
        return self._size


def _sized(stream: IO[str] | None) -> _SizedStream | None:
    return None if stream is None else _SizedStream(stream)


def _size(stream: _SizedStream | None) -> int | None:
    return None if stream is None else stream.size()


def fingerprint(corpus: Any, spec: str, options: ReplayOptions, replay_mode: str) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: the same corpus, model, options and torch."""
    return {
        "shards": [shard.sha256 for shard in corpus.manifest.shards],
        "model": spec,
        "options": options.compile_json(),
        "replay_mode": replay_mode,
        "torch": torch_compat.torch_version(),
    }


def _rebuild_warnings(session: ReplaySession, state: dict[str, Any], started: int) -> list[str]:
    """What a resumed replay of the finished samples rebuilt that the interrupted run had not: a
    model that does not replay the same way twice (random, or reading the clock) makes a catalog
    that no rerun, interrupted or not, reproduces."""
    compiled, kept = session.compile_samples(before=started), state.get("compile_samples", [])
    order, kept_order = session.lookup_order, state.get("lookup_order", [])
    if compiled == kept and order == kept_order:
        return []
    found = (f"compiles at samples {compiled} where the interrupted run compiled at {kept}" if compiled != kept
             else f"Dynamo's lookup order {order} where the interrupted run had {kept_order}")
    return [(f"the resumed replay of the {started} finished samples made {found}: the model does not "
             "replay the same way twice, so this catalog may differ from an uninterrupted run's")]


def replay_corpus(
    corpus: Any,
    model: Any,
    options: ReplayOptions,
    out: Path,
    *,
    builder: Any,
    fingerprint: dict[str, Any],
    state: dict[str, Any] | None,
    replay_mode: str,
    checkpoint_every: float,
    skip_bad_shards: bool,
    track_lookup: bool,
    progress: Callable[[int, int], None] | None = None,
    notice: Callable[[str], None] | None = None,
    engine: Any = None,
) -> CorpusReplay:
    """Replay ``corpus`` into ``builder`` (its ``add_sample`` receives each sample's description),
    resuming from ``state`` (a checkpoint read by :func:`guardscope.checkpoint.read_checkpoint`) when
    given. ``progress(done, compiles)`` is called after each sample; ``notice(line)`` when Ctrl-C or
    SIGTERM arrives (it stops the replay after the current sample: :class:`HeldSignals`)."""
    resume = state is not None
    done_before = builder.samples
    if progress is not None and done_before:
        progress(done_before, 0)
    with store.open_trace_stream(out, append=resume, keep_bytes=(state or {}).get("trace_bytes")) as trace_stream, (
        store.open_trace_stream(out, append=resume, name=store.CUDAGRAPH_LOG,
                                keep_bytes=(state or {}).get("cudagraph_bytes"))
        if options.uses_cudagraphs else contextlib.nullcontext()
    ) as cudagraph_stream:
        # Their sizes after each finished sample, read only when something was written.
        trace_sized, cudagraph_sized = _sized(trace_stream), _sized(cudagraph_stream)
        checkpoints = _Checkpoints(out, builder, fingerprint, state, trace_sized, cudagraph_sized, checkpoint_every,
                                   HeldSignals(notice))
        with checkpoints.held.installed(), ReplaySession(
            model,
            options,
            on_sample=checkpoints.recorded,
            on_rows=checkpoints.recorded_rows,
            trace_stream=trace_sized,  # type: ignore[arg-type]  # written and flushed only
            progress=(lambda count: progress(done_before + count, checkpoints.session.compiles)) if progress else None,
            guard_only=replay_mode in ("auto", "guards"),
            cudagraph_stream=cudagraph_sized,  # type: ignore[arg-type]
            track_lookup=track_lookup,
            safe_point=checkpoints.held.safe_point,
            # A full sample in a corrupt shard that is skipped: its signature's later calls run on
            # tensors materialised from the signature instead.
            full_sample=_unless_skipped(corpus.full_sample) if skip_bad_shards else corpus.full_sample,
            # Signatures recur where the corpus records them (format 3): check each once.
            signature_cache=SIGNATURE_CACHE if corpus.manifest.format_version >= 3 else 0,
        ) as session:
            checkpoints.session = session
            _replay_shards(corpus, checkpoints, skip_bad_shards, engine)
            # Every sample is done: an interruption from here on resumes straight to the catalog.
            checkpoints.checkpoint()
        result = session.result()
    seconds = (state["seconds"] if state else 0.0) + result.seconds
    return CorpusReplay(result=result, seconds=seconds, skipped_shards=tuple(checkpoints.skipped),
                        warnings=tuple(checkpoints.warnings))


class _Checkpoints:
    """Where a replay stands and its checkpoints: the next sample and the trace streams' sizes
    after the last finished one, the topologies' members streamed so far (:data:`store.MEMBERS`:
    per topology, and that file's size), the shards skipped and the warnings so far; the
    checkpoint written every ``checkpoint_every`` seconds, with the signals held while the
    builder and that position move together (:class:`HeldSignals`). ``session`` is set once the
    replay session is open."""

    def __init__(self, out: Path, builder: Any, fingerprint: dict[str, Any], state: dict[str, Any] | None,
                 trace_sized: _SizedStream | None, cudagraph_sized: _SizedStream | None, checkpoint_every: float,
                 held: HeldSignals) -> None:
        self.out, self.builder, self.fingerprint, self.state = out, builder, fingerprint, state
        self.trace_sized, self.cudagraph_sized = trace_sized, cudagraph_sized
        self.checkpoint_every = checkpoint_every
        self.held = held
        self.session: ReplaySession = None  # type: ignore[assignment]  # set once it is open
        self.skipped: list[dict[str, str]] = list(state["skipped_shards"]) if state else []
        self.warnings: list[str] = []
        self.next = state["next_sample"] if state else 0
        self.time = time.monotonic()
        self.trace, self.cudagraphs = _size(trace_sized), _size(cudagraph_sized)
        self.member_counts = builder.member_counts() if state else {}
        self.members_bytes = (state or {}).get("members_bytes", 0)
        if state and "members_bytes" not in state:  # a version 2 checkpoint held them itself
            self.members_bytes = checkpoint.append_members(out, builder.members_after({}), keep_bytes=0)

    def checkpoint(self) -> None:
        self.time = time.monotonic()
        # Only the members found since the last checkpoint are written: appended.
        self.members_bytes = checkpoint.append_members(self.out, self.builder.members_after(self.member_counts),
                                                       keep_bytes=self.members_bytes)
        self.member_counts = self.builder.member_counts()
        checkpoint.write_checkpoint(self.out, {
            "fingerprint": self.fingerprint,
            "next_sample": self.next,
            "compile_samples": self.session.compile_samples(before=self.next),
            "lookup_order": self.session.lookup_order,
            "members_bytes": self.members_bytes,
            "builder": self.builder.to_state(members=False),
            "skipped_shards": self.skipped,
            "seconds": (self.state["seconds"] if self.state else 0.0) + self.session.seconds,
            "trace_bytes": self.trace,
            "cudagraph_bytes": self.cudagraphs,
        })

    def advanced(self, next_sample: int) -> None:
        """The checkpoint's next sample and stream sizes after the builder took a sample or rows
        (under ``held``: the two move together), and a checkpoint when one is due."""
        self.next = next_sample
        self.trace = self.trace_sized.size() if self.trace_sized is not None else None
        if self.cudagraph_sized is not None:
            self.cudagraphs = self.cudagraph_sized.size()
        if time.monotonic() - self.time >= self.checkpoint_every:
            self.checkpoint()

    def recorded(self, meta: Any) -> None:
        with self.held.holding():
            self.builder.add_sample(meta)
            self.advanced(meta.index + 1)

    def recorded_rows(self, rows: Any) -> None:
        with self.held.holding():
            self.builder.add_rows(rows)
            self.advanced(rows.end)


def _replay_shards(corpus: Any, checkpoints: _Checkpoints, skip_bad_shards: bool, engine: Any) -> None:
    """The corpus replayed shard by shard from where ``checkpoints`` stands: a resume first replays
    the finished samples again (``session.warm``) and warns where they compile otherwise than the
    interrupted run's; a corrupt shard is skipped (``skip_bad_shards``) or raises; an interruption
    checkpoints what finished since the last checkpoint."""
    session, state, skipped = checkpoints.session, checkpoints.state, checkpoints.skipped
    started = checkpoints.next
    skipped_before = {entry["file"] for entry in skipped}
    rebuilt_checked = False

    def rebuilt() -> None:
        # Once the finished samples are replayed again: did they compile as before?
        nonlocal rebuilt_checked
        if state and not rebuilt_checked:
            rebuilt_checked = True
            checkpoints.warnings.extend(_rebuild_warnings(session, state, started))

    collector = ShardCollector()
    reader = engine if engine is not None else EmbeddedEngine()
    shards = [shard for shard in corpus.manifest.shards
              if not (shard.first + shard.samples <= started and shard.file in skipped_before)]
    if session.takes_columns:
        reader.start(corpus, shards, session.scan_plans)
    try:
        for shard in shards:
            end = shard.first + shard.samples
            try:
                # A traffic log's rows of flat call templates as columns, when checked so.
                records = reader.records(corpus, shard, session.takes_columns)
            except ShardError as exc:
                if not skip_bad_shards or shard.first < started:
                    raise  # (a finished shard that no longer loads cannot be replayed again)
                skipped.append({"file": shard.file, "error": str(exc)})
                checkpoints.warnings.append(f"skipped shard {shard.file}: {exc}")
                checkpoints.next = end
                continue
            if shard.first < started:  # finished before the interruption
                session.warm(records, stop=started)
            if end > started:
                rebuilt()
                session.replay(records_from(records, checkpoints.next))
            # The shard's records (their signatures' JSON arrays) are garbage now: freed
            # before the collector runs, so it does not walk them.
            records = []
            collector.shard_done()
        rebuilt()
    except (KeyboardInterrupt, SystemExit):
        if checkpoints.next > started:
            checkpoints.checkpoint()  # keep what finished since the last checkpoint
        raise
    finally:
        collector.close()
