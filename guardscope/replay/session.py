"""Replay a corpus through ``torch.compile`` and record what Dynamo did — the only module that
calls ``torch.compile``.

For every sample, in recorded order: apply the requested ``mark_unbacked`` marks, run the compiled
model (under ``torch.inference_mode`` by default, as serving code does), and ask Dynamo's cache
which compiled entry serves the sample — that entry is the sample's topology. Compiles are read
from the structured trace (:mod:`guardscope.replay.capture`), attributed to the sample that triggered
them. Every torch setting touched is restored on exit; Dynamo's caches are reset before the
replay so it starts as a fresh process would.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import time
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Iterable, Iterator, NamedTuple

import torch

from .. import torch_compat
from ..errors import CompileOptionsError
from ..corpus.reader import SignatureRecord
from ..corpus.structured import needs_lowering, to_device_structured
from ..model import CompileEvent, Sample, SampleMeta, TensorMeta, compile_order
from ..options import ReplayOptions
from ..sources import FrameArguments
from ..text import error_text
from .arguments import CallBinder, describe, lookup, tensor_meta, tensors_of
from .capture import TraceCapture
from .cudagraphs import CudagraphCapture
from .events import events_from_records


# The signatures whose descriptions a guard-only replay of a corpus with signature records
# keeps (ReplaySession's signature_cache; each takes a few kB).
SIGNATURE_CACHE = 16384
# Call templates (signature structures) whose description plan and device check a replay keeps.
PLANS_KEPT = 256


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


# --- arguments ---------------------------------------------------------------------------------


class Call(NamedTuple):
    """One sample ready to run: the call's arguments on the device, Dynamo's first-frame locals
    (for guard checks) and the arguments by forward's own names (for marks and descriptions)."""

    args: tuple
    kwargs: dict
    named: dict[str, Any]
    frame: dict[str, Any]


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        # Tensor.to costs ~15 us even when it returns the tensor itself: skip it then.
        return value if value.device == device else value.to(device)
    if type(value) is tuple:
        return tuple(_to_device(v, device) for v in value)
    if type(value) is list:
        return [_to_device(v, device) for v in value]
    if type(value) is dict:
        return {k: _to_device(v, device) for k, v in value.items()}
    return to_device_structured(value, device, _to_device)


def check_marks(model: Any, sample: Sample, marks: tuple[tuple[str, int], ...]) -> None:
    """Refuse ``--mark-unbacked`` marks that cannot apply, before anything runs: an argument
    forward does not have, a value that is not a tensor, or a dim the tensor does not have (as
    recorded in ``sample``; an optional argument the sample does not pass is not checked)."""
    if not marks:
        return
    binder = CallBinder(model)
    names = set(binder.argument_names())
    named = binder.named_or_positional(sample.args, sample.kwargs)
    for path, dim in marks:
        top = path.split("[")[0]
        if top not in names and top not in named:
            known = ", ".join(sorted(names | set(named))) or "none"
            raise CompileOptionsError(f"--mark-unbacked {path}:{dim}: forward has no argument {top!r} (it has: {known})")
        try:
            value = lookup(named, path)
        except (KeyError, IndexError, TypeError):
            continue
        if not isinstance(value, torch.Tensor):
            raise CompileOptionsError(f"--mark-unbacked {path}:{dim}: {path} is a {type(value).__name__} in sample "
                                      f"{sample.index}, not a tensor")
        if not -value.dim() <= dim < value.dim():
            raise CompileOptionsError(f"--mark-unbacked {path}:{dim}: {path} has {value.dim()} dims in sample "
                                      f"{sample.index} (shape {tuple(value.shape)}): there is no dim {dim}")


# --- the replay --------------------------------------------------------------------------------


def compile_model(model: Any, options: ReplayOptions) -> Any:
    kwargs: dict[str, Any] = {
        "backend": options.backend,
        "dynamic": options.dynamic,
        "fullgraph": options.fullgraph,
    }
    if options.mode is not None and options.backend == "inductor":
        kwargs["mode"] = options.mode
    return torch.compile(model, **kwargs)


class Runner:
    """A fresh ``torch.compile`` of ``model`` with the replay's settings and marking rules."""

    def __init__(self, model: Any, options: ReplayOptions) -> None:
        options.validate()
        owner = torch_compat.forward_owner(model)
        if owner is not None:  # a module, or the module of a compiled bound forward
            owner.to(options.device).eval()
        self.model = model
        self.options = options
        self.binder = CallBinder(model)
        self.code = self.binder.code
        self.grad_context = torch.inference_mode if options.inference_mode else torch.no_grad
        self._entries: list | None = None
        self.lookup = torch_compat.LookupOrder()
        device = torch.device(options.device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        torch_compat.reset_dynamo()
        self.compiled = compile_model(model, options)

    def prepare(self, sample: Sample, mark: bool) -> Call:
        # Outside inference mode, wherever it is called from: a tensor copied (to the device, or
        # from a mutable input) under it would be an inference tensor, whose dispatch keys no
        # request's have, and would compile a graph of its own.
        with torch.inference_mode(False):
            return self._prepare(sample, mark)

    def _prepare(self, sample: Sample, mark: bool) -> Call:
        args = _to_device(sample.args, self.device)
        kwargs = _to_device(sample.kwargs, self.device)
        named = self.binder.named_or_positional(args, kwargs)
        if mark:
            self.apply_marks(named)
        frame = self.binder.frame_locals(args, kwargs)
        if needs_lowering(args) or needs_lowering(kwargs):
            # The forward may change the objects it receives (a DynamicCache grows, a StaticCache
            # is written in place and counts its length): it runs on a copy (marks included), and
            # the call is described and guard-checked on the objects as they came in, which a
            # later run of the same sample (a warmup's coverage trials) finds unchanged.
            args, kwargs = copy.deepcopy((args, kwargs))
        return Call(args, kwargs, named, frame)

    def apply_marks(self, named: dict[str, Any]) -> None:
        """``mark_unbacked`` the options' dims of a call given by forward's argument names."""
        for path, dim in self.options.mark_unbacked:
            try:
                value = lookup(named, path)
            except (KeyError, IndexError, TypeError):
                continue  # an optional argument this call does not pass
            if isinstance(value, torch.Tensor) and value.dim() > dim:
                torch._dynamo.decorators.mark_unbacked(value, dim)

    def warm_device(self, sample: Sample) -> None:
        """One eager (uncompiled) forward of ``sample``, then wait for the device: CUDA context,
        cuBLAS handles and the caching allocator are what any server pays before its first
        request, whatever it serves with, so set-up timings start after this."""
        call = self.prepare(sample, mark=False)
        with self.grad_context():
            self.model(*call.args, **call.kwargs)
        torch_compat.synchronize(self.device)

    def run(self, sample: Sample, mark: bool = True) -> None:
        self.forget_entries()
        call = self.prepare(sample, mark)
        with self.grad_context():
            self.compiled(*call.args, **call.kwargs)

    def serving(self, sample: Sample, mark: bool = True) -> str | None:
        call = self.prepare(sample, mark)
        with self.grad_context():
            return self.serving_locals(call.frame)

    def record_arguments(self, record: SignatureRecord) -> tuple[tuple, dict, list] | None:
        """A signature record's shared arguments (its call template's; for guard checks),
        when its tensors are already where this runner runs; None otherwise (prepare one of
        its samples instead: moving them would change what is checked)."""
        if record.key is None or any(device != self.device for device in record.call.devices):
            return None
        return record.arguments()

    def serving_arguments(self, args: tuple, kwargs: dict) -> str | None:
        """:meth:`serving_locals` of a call given by its arguments (already on the device)."""
        with self.grad_context():
            return self.serving_locals(self.binder.frame_locals(args, kwargs))

    def entries(self) -> list:
        if self._entries is None:
            self._entries = torch_compat.entries_by_age(self.code)
        return self._entries

    def serving_locals(self, f_locals: dict[str, Any]) -> str | None:
        """The earliest-compiled graph accepting these frame locals (see torch_compat)."""
        return torch_compat.first_accepting(self.entries(), f_locals)

    def ran_locals(self, f_locals: dict[str, Any]) -> str | None:
        """After a call (run or skipped) with these frame locals: the graph Dynamo's
        most-recently-used-first lookup ran for it, moved to the front of that order."""
        return self.lookup.call(self.entries(), f_locals)

    def forget_entries(self) -> None:
        """A forward ran: it may have compiled a graph, so the entry list must be re-read."""
        self._entries = None

    def graphs(self) -> int:
        return len(torch_compat.cache_entries(self.code) or [])


@contextlib.contextmanager
def _replay_settings(options: ReplayOptions) -> Iterator[None]:
    settings = {} if options.duck_shape else {torch_compat.DUCK_SHAPE_SETTING: False}
    with torch_compat.raised_recompile_limit(options.recompile_limit), torch_compat.patched_config(
        settings
    ):
        yield


class _RecordPlan:
    """How the records of one call template (:class:`~guardscope.corpus.call_template.CallTemplate`) are
    described without walking their arguments: each tensor's path among forward's arguments
    and, since nothing but tensor sizes varies, the constant lengths and scalars.

    For a flat call template (every argument a tensor or a constant) whose tensors are each a
    local of Dynamo's first frame, the plan also holds that frame's layout: a record's frame
    locals are the example's with its own tensors put in (:meth:`frame`), and each tensor's
    description is made once per argument and size, with the tensor (:meth:`frame`'s
    batching: one lookup per argument and size, not an argument walk per record)."""

    # TensorMeta kept per tensor argument and size, before starting afresh.
    KEPT = 65536

    def __init__(self, paths: list[tuple[str, int]] | None, parts: list[int], lengths: tuple, scalars: tuple,
                 frame: tuple[tuple[str, ...], list, list[tuple[int, int]]] | None = None) -> None:
        self.paths = paths
        self.parts = parts
        self.lengths = lengths
        self.scalars = scalars
        self.metas: dict[tuple[int, tuple], TensorMeta] = {}
        # Each tensor's path with its position and the position of its part of a key.
        self._steps = None if paths is None else [(path, position, parts[position]) for path, position in paths]
        # The fields every description of this plan shares (SampleMeta's defaults, and these):
        # a description is this, its index, tensors and serving graph (SampleMeta.at's copy, not
        # a frozen dataclass's field-by-field __init__: this runs for every new signature).
        self._fields = SampleMeta(index=0, tensors=(), lengths=lengths, scalars=scalars, serving=None,
                                  recorded="signature").__dict__
        # The first frame's layout (its local names, the example's values, and where each
        # tensor position goes among them), when every tensor is a local of its own.
        self.framed = frame is not None and paths is not None
        self._names, self._values, self._placed = frame if frame is not None else ((), [], [])
        # Per tensor position: part of a key -> (the call template's tensor, its TensorMeta),
        # dropped whenever the call template drops its tensors (its generation changes).
        self._pairs: list[dict[tuple, tuple[Any, TensorMeta]]] = [{} for _ in parts]
        self._generation: int | None = None

    @classmethod
    def of(cls, runner: Runner, call: Any, args: tuple, kwargs: dict, tensors: list) -> _RecordPlan:
        """The plan of ``call`` from one of its argument sets."""
        named = runner.binder.named_or_positional(args, kwargs)
        example = describe(named, 0, None, None)
        positions = {id(tensor): position for position, tensor in enumerate(tensors)}
        found = tensors_of(named)
        paths: list[tuple[str, int]] | None = [(path, positions.get(id(tensor), -1)) for path, tensor in found]
        if call.has_ints or len(found) != len(tensors) or any(position < 0 for _, position in paths):
            paths = None
        frame = frame_layout(runner.binder.frame_locals(args, kwargs), tensors) if call.flat else None
        return cls(paths, call.tensor_parts, example.lengths, example.scalars, frame)

    def describe(self, key: tuple, tensors: list, index: int, serving: str) -> SampleMeta:
        metas = self.metas
        described = []
        for path, position, part in self._steps:  # type: ignore[union-attr]
            found = (position, key[part])
            meta = metas.get(found)
            if meta is None:
                if len(metas) >= self.KEPT:
                    metas.clear()
                meta = metas[found] = tensor_meta(tensors[position])
            described.append((path, meta))
        return self.described(tuple(described), index, serving)

    def described(self, tensors: tuple, index: int, serving: str) -> SampleMeta:
        """The description of sample ``index`` with these tensor descriptions."""
        made = object.__new__(SampleMeta)
        fields = made.__dict__
        fields.update(self._fields)
        fields["index"] = index
        fields["tensors"] = tensors
        fields["serving"] = serving
        return made

    def frame(self, call: Any, key: tuple) -> tuple[dict[str, Any], tuple]:
        """A record's first-frame locals (what ``binder.frame_locals`` of ``call.arguments(key)``
        gives, the same tensors included) and its tensor descriptions (:meth:`describe`'s), for a
        plan that is :attr:`framed`."""
        pairs = self._pairs
        if call.generation != self._generation:
            self._forget(call.generation)
        got = []
        for position, slot in enumerate(self.parts):
            part = key[slot]
            pair = pairs[position].get(part)
            if pair is None:
                tensor = call.tensor(slot, part)
                if call.generation != self._generation:  # it dropped its tensors to build this one
                    self._forget(call.generation)
                pair = pairs[position][part] = (tensor, tensor_meta(tensor))
            got.append(pair)
        values = self._values.copy()
        for at, position in self._placed:
            values[at] = got[position][0]
        return (dict(zip(self._names, values)),
                tuple([(path, got[position][1]) for path, position in self.paths]))  # type: ignore[union-attr]

    def _forget(self, generation: int) -> None:
        for pairs in self._pairs:
            pairs.clear()
        self._generation = generation


def frame_layout(frame: dict[str, Any], tensors: list) -> tuple[tuple[str, ...], list, list[tuple[int, int]]] | None:
    """The layout of a flat call template's first-frame locals, from one call's (``frame``, built
    from arguments whose tensors are ``tensors``): the names, the values, and for each tensor
    position the index of the local holding it; None unless each tensor is a local of its own
    (found in a container, or twice, it could not be put in by position). The other locals are
    the same objects for every call of the template (constants, defaults, the module)."""
    positions = {id(tensor): position for position, tensor in enumerate(tensors)}
    placed = [(at, positions[id(value)]) for at, value in enumerate(frame.values()) if id(value) in positions]
    if sorted(position for _, position in placed) != list(range(len(tensors))):
        return None
    if any(_holds(value, positions) for value in frame.values() if id(value) not in positions):
        return None
    return tuple(frame), list(frame.values()), placed


def _holds(value: Any, ids: dict[int, int]) -> bool:
    """Whether a container (list, tuple, dict, nested) holds an object whose id is in ``ids``."""
    if type(value) in (list, tuple):
        return any(id(item) in ids or _holds(item, ids) for item in value)
    if type(value) is dict:
        return any(id(item) in ids or _holds(item, ids) for item in value.values())
    return False


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
        after_sample: Callable[[int], None] | None = None,
        full_sample: Callable[[int], Sample] | None = None,
        signature_cache: int = 0,
    ) -> None:
        self.model = model
        # A signature-only sample that must run (it compiles, or a later frame needs data) runs
        # on the data of the full sample of its signature, from here, when there is one.
        self.full_sample = full_sample
        self.after_sample = after_sample  # called with each finished sample's index (checkpoints)
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
        # (_RecordPlan), so a new signature costs a guard check, not a rebuilt call.
        cacheable = self.skip_served and not track_lookup and signature_cache > 0
        # Oldest first (popitem(last=False) evicts in constant time: deleting a plain dict's
        # first key leaves a hole that every later next(iter(...)) walks past).
        self._by_signature: collections.OrderedDict[Any, SampleMeta] | None = (
            collections.OrderedDict() if cacheable else None)
        self._signature_cache = signature_cache
        self.signature_hits = 0
        self._plans: dict[Any, _RecordPlan] = {}  # per call template of the signature records
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> ReplaySession:
        self._stack.enter_context(_replay_settings(self.options))
        self._stack.enter_context(self.capture)
        if self.cudagraphs is not None:
            self._stack.enter_context(self.cudagraphs)
        self._stack.callback(torch_compat.reset_dynamo)
        self.runner = Runner(self.model, self.options)
        self._checking = self.runner.grad_context()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._stack.close()

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
            plan = self._plans[record.call] = _RecordPlan.of(runner, record.call, args, kwargs, tensors)
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
                    if sample.data_of is not None and self.full_sample is not None:
                        with torch.inference_mode(False):  # loaded as a request arrives: normal tensors
                            full = self.full_sample(sample.data_of)
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
        """Replay samples in order; a :class:`~guardscope.corpus.format.SignatureRecord`
        (:meth:`guardscope.corpus.format.Corpus.load_records`) stands for its samples."""
        started = time.perf_counter()
        try:
            for meta in self._replayed(samples):
                self._done(meta)
        finally:
            self.seconds += time.perf_counter() - started

    def _replayed(self, samples: Iterable[Sample | SignatureRecord], stop: int | None = None) -> Iterator[SampleMeta]:
        """Each sample's description, in order (those before sample ``stop``, when given); the
        one path of :meth:`replay` and :meth:`warm`."""
        for item in samples:
            if type(item) is SignatureRecord:
                repeat = item.repeat if stop is None else min(item.repeat, stop - item.first)
                for offset in range(repeat):
                    self.current = item.first + offset
                    yield self._record(item, offset)
                continue
            if stop is not None and item.index >= stop:
                break
            self.current = item.index
            self._set_sample(item.index)
            meta = self._run(item)
            self._set_sample(None)
            yield meta
        self.current = None

    def _done(self, meta: SampleMeta) -> None:
        self.on_sample(meta)
        if self.after_sample is not None:
            self.after_sample(meta.index)
        self.count += 1
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
    model: Any, warmup: list[Sample], probes: list[Sample], options: ReplayOptions, *, run_probes: bool = False
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
    ``"all"``.
    """
    mark = options.mark_samples == "all"
    with _replay_settings(options):
        runner = Runner(model, options)
        try:
            for sample in warmup:
                runner.run(sample, mark=mark)
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
