"""The data model every stage shares: frozen dataclasses and str enums, no behaviour beyond
conversion to the JSON forms written into ``catalog.json``.
"""

from __future__ import annotations

import enum
from array import array
import re
from dataclasses import dataclass, field
from typing import Any, Sequence


def compile_order(compile_id: str | None) -> tuple[int, ...]:
    """Sort key of a compile id: ``"3/12"`` -> ``(3, 12)`` (frame, then compile within it); an
    id without numbers sorts last."""
    return tuple(int(part) for part in re.findall(r"\d+", compile_id or "")) or (1 << 30,)


# Autograd's mode around a served call, as a corpus manifest's ``grad_mode``, ``--grad-mode`` and
# ``catalog.json``'s ``compile.grad_mode`` name it: Dynamo guards on it, so a replay runs under
# production's (torch_compat.grad_context).
INFERENCE_MODE = "inference_mode"
NO_GRAD = "no_grad"
GRAD = "grad"
GRAD_MODES = (INFERENCE_MODE, NO_GRAD, GRAD)


class FailureKind(str, enum.Enum):
    """Why a cached graph rejected an input. Values are the ``kind`` strings of ``catalog.json``."""

    DUCK_SIZING = "duck_sizing"
    ZERO_ONE_SPECIALIZATION = "zero_one_specialization"
    SIZE_MISMATCH = "size_mismatch"
    STRIDE_MISMATCH = "stride_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    DEVICE_MISMATCH = "device_mismatch"
    DISPATCH_KEY_MISMATCH = "dispatch_key_mismatch"
    REQUIRES_GRAD_MISMATCH = "requires_grad_mismatch"
    NDIM_MISMATCH = "ndim_mismatch"
    TYPE_MISMATCH = "type_mismatch"
    OPTIONAL_ARGUMENT = "optional_argument"
    LIST_LENGTH = "list_length"
    CONSTANT_VALUE = "constant_value"
    SCALAR_VALUE = "scalar_value"
    SHAPE_RELATION = "shape_relation"
    OPERATOR_GUARD = "operator_guard"
    GLOBAL_STATE = "global_state"
    OTHER = "other"


@dataclass(frozen=True)
class Sample:
    """The arguments of one recorded forward call, with its position in the corpus.

    A sample recorded as its signature only (corpus format 3) carries that ``signature`` and
    arguments materialised from it (zero-filled tensors of the recorded sizes, strides, offsets,
    dtypes and aliasing); ``data_of`` names the corpus sample recorded in full with the same
    signature, when there is one.
    """

    index: int
    args: tuple
    kwargs: dict
    signature: tuple | None = None
    data_of: int | None = None

    @property
    def recorded(self) -> str:
        """How it was recorded: ``"full"`` (its tensors) or ``"signature"`` (its signature only)."""
        return "full" if self.signature is None else "signature"


# The fields of one guard failure in catalog.json (GuardFailure.to_json), all compared by
# ``guardscope diff`` unless ignored; GUARD_TEXT is the guard's own text, which backends and torch
# versions print differently.
FAILURE_FIELDS = ("kind", "causes", "against", "inputs", "dims", "guard", "expected", "actual",
                  "user_source", "hint", "operator", "raw")
IGNORABLE = FAILURE_FIELDS[1:]
GUARD_TEXT = ("guard", "raw")


@dataclass(frozen=True)
class GuardFailure:
    """One guard of one cached graph that an input failed.

    ``causes`` lists every reason the guard exists (a ``2 <= n <= 64`` guard is both 0/1
    specialization and a user branch); ``kind`` is the first, the one that names the fix.
    """

    kind: FailureKind
    causes: tuple[FailureKind, ...]
    against: str | None  # compile id of the cache entry that rejected the input, e.g. "0/3"
    inputs: tuple[str, ...]  # forward argument paths involved, e.g. ("cei", "lei")
    dims: tuple[str, ...]  # dimensions involved, torch's spelling, e.g. ("cei.size()[1]",)
    guard: str  # the guard expression alone
    expected: str | None
    actual: str | None
    user_source: str | None  # "model.py:16 in forward" and the line, when torch gives one
    hint: str | None  # torch's own advice, verbatim
    raw: str
    # The torch operator whose implementation added the guard, when torch names it, e.g.
    # "conv (_subclasses/fake_impls.py:1811)"; user_source stays the line that called it.
    operator: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "causes": [c.value for c in self.causes],
            "against": self.against,
            "inputs": list(self.inputs),
            "dims": list(self.dims),
            "guard": self.guard,
            "expected": self.expected,
            "actual": self.actual,
            "user_source": self.user_source,
            "hint": self.hint,
            "operator": self.operator,
            "raw": self.raw,
        }


@dataclass(frozen=True)
class CompileEvent:
    """One Dynamo compilation as captured from the structured trace, before classification.

    ``reasons`` are the raw recompile-reason strings (one per rejecting cache entry); ``guards``
    are the guard lines of the entry this compile produced, used to describe its topology.
    """

    compile_id: str
    frame_id: int
    frame_compile_id: int
    sample: int | None
    co_name: str | None
    seconds: float | None
    reasons: tuple[str, ...] = ()
    guards: tuple[str, ...] = ()
    fail_type: str | None = None
    fail_reason: str | None = None
    location: str | None = None  # the compiled code's file and first line, e.g. "utils/loop.py:611"


@dataclass(frozen=True)
class GraphBreak:
    """Where a compile stopped tracing and why: the rest of that frame runs as a frame of its own
    (a resume function), with its own guards and recompiles."""

    compile_id: str  # the compile that broke
    location: str | None  # the user code where it broke, e.g. "tests/real_models.py:222"
    reason: str  # torch's summary, e.g. "Unsupported Tensor.item() call with capture_scalar_outputs=False"
    sample: int | None = None


class CudagraphEventKind(str, enum.Enum):
    """What CUDA Graph Trees (``mode="reduce-overhead"``) did during one call."""

    NEW_SHAPE = "new_shape"  # a compiled graph met sizes it had no CUDA graph for: a new tree, warmed up
    RECORDING = "recording"  # a CUDA graph was captured (the second call with those sizes, or a re-record)
    SKIP = "skip"  # "skipping cudagraphs due to ...": the graph runs without CUDA graphs
    HINT = "hint"  # torch's advice: too many distinct sizes, or why it re-recorded


@dataclass(frozen=True)
class CudagraphEvent:
    """One CUDA graph event, attributed to the sample whose call caused it.

    ``detail`` is the sizes key for a new shape (torch's symint key, e.g. ``(12, 30)``), the
    reason for a skip, the text of a hint, and empty for a recording. ``seconds`` is the capture
    time of a recording when torch timed it (it varies run to run: it goes to timings.json).
    """

    kind: CudagraphEventKind
    detail: str = ""
    compile_id: str | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class TensorMeta:
    """What Dynamo guards on for one tensor argument."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str
    device: str
    requires_grad: bool


@dataclass(frozen=True)
class SampleMeta:
    """The guard-relevant description of one sample, keyed by argument path (``x``, ``xs[0]``).

    ``serving`` is the compile id of the earliest-compiled cache entry accepting the sample (its
    topology, stable whatever the replay's history); ``ran`` is the one Dynamo's
    most-recently-used-first lookup really ran, when the replay tracks it (CUDA graphs belong to
    that graph); ``error`` is set when the forward raised.
    """

    index: int
    tensors: tuple[tuple[str, TensorMeta], ...]
    lengths: tuple[tuple[str, int], ...]  # list/tuple/dict arguments and their lengths
    scalars: tuple[tuple[str, str], ...]  # non-tensor leaves as "type:repr"
    serving: str | None
    error: str | None = None
    cudagraph: tuple[CudagraphEvent, ...] = ()  # filled only when the replay uses CUDA graphs
    ran: str | None = None  # filled only when the replay tracks Dynamo's lookup order
    # The graphs the call ran through in frames after the first (graph breaks), each the
    # earliest-compiled accepting one of its frame, oldest first; empty for a one-frame model.
    graphs: tuple[str, ...] = ()
    # How the sample was recorded (Sample.recorded): "full", or "signature" (its signature
    # only); for a signature sample whose forward ran, "ran_on" says on what: "full" (the data of
    # the full sample of its signature, Sample.data_of) or "materialised" (zero-filled tensors
    # built from the signature); None when it did not run (a graph's guards accepted it).
    recorded: str = "full"
    ran_on: str | None = None

    def at(self, index: int) -> SampleMeta:
        """The same description for sample ``index`` (a copy, without re-checking the fields:
        a replay gives every sample of a recurring signature its signature's description)."""
        copied = object.__new__(SampleMeta)
        copied.__dict__.update(self.__dict__)
        copied.__dict__["index"] = index
        return copied


@dataclass(frozen=True)
class ServedRows:
    """Consecutive signature samples whose graphs were found a column at a time (a guard-only
    replay's column checks, :mod:`guardscope.replay.column_check`), handed over as columns, not
    one :class:`SampleMeta` per sample.

    Row ``r`` stands for samples ``first[r]`` to ``first[r] + count[r] - 1``, all served by graph
    ``graphs[graph[r]]``; ``shapes``: for each tensor argument path, in the order a description
    lists them, a ``rows x ndim`` array of the rows' sizes; ``describe(r)``: the description of
    row ``r``'s first sample (what the samples share but their index). Arrays are numpy's."""

    first: Any
    count: Any
    graph: Any
    graphs: tuple[str, ...]
    shapes: tuple[tuple[str, Any], ...]
    describe: Any  # Callable[[int], SampleMeta]

    @property
    def samples(self) -> int:
        return int(self.count.sum())

    @property
    def end(self) -> int:
        """The sample after the last one the rows stand for."""
        return int(self.first[-1] + self.count[-1])

    def metas(self) -> Any:
        """Every sample's description, in order (what a replay without column consumers reports)."""
        for row, (first, count) in enumerate(zip(self.first.tolist(), self.count.tolist())):
            meta = self.describe(row)
            yield meta
            for index in range(first + 1, first + count):
                yield meta.at(index)


@dataclass(frozen=True)
class DimensionStats:
    """One input dimension across the corpus."""

    dim: str
    input: str
    axis: int
    min: int
    max: int
    ever_zero: bool
    ever_one: bool
    equal_to: tuple[str, ...]  # dims equal to this one in every sample where both are present

    @property
    def dynamic(self) -> bool:
        return self.min != self.max

    def to_json(self) -> dict[str, Any]:
        return {
            "dim": self.dim,
            "input": self.input,
            "axis": self.axis,
            "min": self.min,
            "max": self.max,
            "dynamic": self.dynamic,
            "ever_zero": self.ever_zero,
            "ever_one": self.ever_one,
            "equal_to": list(self.equal_to),
        }


@dataclass(frozen=True)
class Topology:
    """A class of inputs that needs a compiled graph of its own, named by the graph serving it."""

    id: int
    compile_id: str | None  # the first frame's graph
    first_sample: int
    samples: Sequence[int]  # a tuple, or the builder's array('q')
    facts: tuple[str, ...]
    # Every graph its samples run through: the first frame's, then those of frames after graph
    # breaks (oldest first). One entry, compile_id, for a model that compiles to one frame.
    graphs: tuple[str, ...] = ()
    # A fleet's analysis (several replicas' traffic): its calls per replica name, those that saw it.
    replicas: dict[str, int] | None = None
    # A traffic log whose rows carry timestamps: when its first call was recorded and its last
    # (ISO 8601, UTC, to the microsecond).
    first_seen: str | None = None
    last_seen: str | None = None

    @property
    def count(self) -> int:
        return len(self.samples)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "compile_id": self.compile_id,
            "graphs": list(self.graphs or ((self.compile_id,) if self.compile_id else ())),
            "first_sample": self.first_sample,
            "count": self.count,
            # An analysis's builder holds them as an array of 8-byte ints (json_text.dumps writes it).
            "samples": self.samples if type(self.samples) is array else list(self.samples),
            "facts": list(self.facts),
            **({"replicas": dict(self.replicas)} if self.replicas is not None else {}),
            **({"first_seen": self.first_seen, "last_seen": self.last_seen} if self.first_seen is not None else {}),
        }


@dataclass(frozen=True)
class ClassifiedCompile:
    """A compile event with its failures classified."""

    event: CompileEvent
    failures: tuple[GuardFailure, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "sample": self.event.sample,
            "compile_id": self.event.compile_id,
            "frame": self.event.frame_id,
            "co_name": self.event.co_name,
            # Measured times vary run to run; they live in timings.json so that catalog.json
            # stays byte-for-byte reproducible.
            "seconds": None,
            "fail_type": self.event.fail_type,
            "failures": [f.to_json() for f in self.failures],
        }


@dataclass(frozen=True)
class FailedSample:
    index: int
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"sample": self.index, "error": self.error}


@dataclass(frozen=True)
class Catalog:
    """The result of ``analyze``: what ``catalog.json`` holds."""

    torch_version: str
    corpus_path: str
    samples: int
    model: str
    compile: dict[str, Any]
    compiles: tuple[ClassifiedCompile, ...]
    topologies: tuple[Topology, ...]
    dimensions: tuple[DimensionStats, ...]
    failed_samples: tuple[FailedSample, ...] = ()
    arguments: tuple[str, ...] = ()  # forward's parameter names, in order
    # Samples no compiled graph accepted while their frame still compiled (the recompile limit);
    # those run eagerly after a failed compile are in skipped_frames.
    not_analysed: tuple[int, ...] = ()
    skipped_shards: tuple[dict[str, str], ...] = ()  # {"file", "error"} with --skip-bad-shards
    replay_mode: str = "full"
    unparsed: dict[str, int] = field(default_factory=dict)
    # CUDA graphs (a compile mode that uses them): recordings, skips, padding buckets. A plain
    # JSON dict built by catalog.CatalogBuilder; absent from catalog.json otherwise.
    cudagraphs: dict[str, Any] | None = None
    # Every frame Dynamo compiled and every graph break (plain JSON dicts, catalog.frame_summaries
    # and catalog.break_summaries): one frame and no break for a model that compiles whole.
    frames: tuple[dict[str, Any], ...] = ()
    graph_breaks: tuple[dict[str, Any], ...] = ()
    # How a wrapped forward's frame names the arguments (None for a plain forward).
    frame_arguments: Any = None
    # Samples recorded as their signature only (corpus format 3), a plain JSON dict built by
    # catalog.CatalogBuilder: how many, and what those that ran were run on; None when every
    # sample was recorded in full.
    signatures: dict[str, Any] | None = None
    # What a sample index counts: "calls" (the i-th call production served), or "rows" for an
    # old traffic log (version 1) that gathered a signature's repeats without their places, whose
    # indices are its rows' order; catalog.json's corpus.indices, written only then.
    indices: str = "calls"
    # Frames Dynamo stopped compiling after a compile of them failed (plain JSON dicts,
    # catalog.skipped_frames): every later call ran that frame eagerly. Absent from catalog.json
    # when none was.
    skipped_frames: tuple[dict[str, Any], ...] = ()
    # The model's method production compiles (``torch.compile(model.forward)``), as the corpus
    # says; None: what the model spec gives is compiled itself. Absent from catalog.json then.
    method: str | None = None
    # The requests of a corpus whose calls were tagged (requests.json): how many, and the request
    # and step of each compile's sample. A plain JSON dict; absent from catalog.json otherwise.
    requests: dict[str, Any] | None = None
    # What production lives through under its recompile limits (catalog.limits): a plain JSON
    # dict; absent from catalog.json when not computed.
    production: dict[str, Any] | None = None
    # A fleet's analysis: the calls of each replica (name -> calls, by name); None for one
    # replica's corpus, and absent from catalog.json then.
    replicas: dict[str, int] | None = None
    # A fleet's analysis: the graphs each replica's own process compiles (name -> graphs, every
    # frame): its calls replayed alone, its first call's graph included (guardscope.replay.replicas).
    # The fleet's union is summary.compiles. None, and absent from catalog.json, for one replica.
    replica_compiles: dict[str, int] | None = None
    # What each compile stalled production, as the recording process observed it (compiles.jsonl;
    # catalog.stalls): a plain JSON dict; None, and absent from catalog.json, when not recorded.
    production_compiles: dict[str, Any] | None = None

    SCHEMA = 1

    @property
    def graphs(self) -> tuple[ClassifiedCompile, ...]:
        """Compiles that produced a graph (a failed attempt, e.g. past the recompile limit, did not)."""
        return tuple(c for c in self.compiles if c.event.fail_type is None)

    @property
    def recompiles(self) -> tuple[ClassifiedCompile, ...]:
        """Compiles of a frame that had a graph already (a frame's first compile is not one)."""
        return tuple(c for c in self.graphs if c.event.frame_compile_id > 0)

    @staticmethod
    def samples_of(compiles: tuple[ClassifiedCompile, ...]) -> list[int]:
        """The samples that caused these compiles, each once, in corpus order."""
        return sorted({c.event.sample for c in compiles if c.event.sample is not None})

    def failure_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for compiled in self.compiles:
            for failure in compiled.failures:
                for cause in failure.causes:
                    counts[cause.value] = counts.get(cause.value, 0) + 1
        return dict(sorted(counts.items()))

    TIME_SPLITS = (0.5, 0.8)

    def risk(self) -> dict[str, Any]:
        """How likely the next request needs a graph the corpus never compiled.

        * Good-Turing: the chance that the next sample belongs to a topology not seen yet is
          estimated by the share of samples whose topology was seen exactly once (n1 / n).
        * Time split: had the corpus been cut at ``fraction`` and a warmup of one sample per
          topology seen before the cut been run, the samples after the cut that still compile.
          The replay ran in corpus order, so these are exactly its compiles after the cut.
        """
        served = sum(len(t.samples) for t in self.topologies if t.compile_id is not None)
        singletons = sum(1 for t in self.topologies if t.compile_id is not None and len(t.samples) == 1)
        splits = []
        for fraction in self.TIME_SPLITS:
            cut = int(self.samples * fraction)
            later = [c.event.sample for c in self.graphs if c.event.sample is not None and c.event.sample >= cut]
            later = sorted(set(later))
            topologies = sorted(t.id for t in self.topologies if t.first_sample >= cut)
            splits.append({
                "fraction": fraction,
                "plan_samples": cut,
                "replayed_samples": self.samples - cut,
                "recompiles": len(later),  # samples that compile (in any frame)
                "recompile_samples": later,
                "new_topologies": topologies,
            })
        return {
            "samples": served,
            "singleton_topologies": singletons,
            "unseen_topology_probability": round(singletons / served, 6) if served else None,
            "time_split": splits,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.SCHEMA,
            "torch_version": self.torch_version,
            "corpus": {"path": self.corpus_path, "samples": self.samples,
                       **({"signatures": self.signatures} if self.signatures is not None else {}),
                       **({"indices": self.indices} if self.indices != "calls" else {})},
            "model": self.model,
            **({"method": self.method} if self.method is not None else {}),
            **({"replicas": dict(self.replicas)} if self.replicas is not None else {}),
            **({"replica_compiles": dict(self.replica_compiles)} if self.replica_compiles is not None else {}),
            "arguments": list(self.arguments),
            "compile": dict(sorted(self.compile.items())),
            "replay_mode": self.replay_mode,
            "summary": {
                "compiles": len(self.graphs),
                "recompiles": len(self.recompiles),
                "failed_compiles": len(self.compiles) - len(self.graphs),
                "compile_samples": self.samples_of(self.graphs),
                "recompile_samples": self.samples_of(self.recompiles),
                "frames": len(self.frames) or 1,
                "graph_breaks": len(self.graph_breaks),
                "failures_by_kind": self.failure_counts(),
                "topologies": len(self.topologies),
                "failed_samples": len(self.failed_samples),
                "not_analysed": len(self.not_analysed),
                "skipped_shards": len(self.skipped_shards),
                "unparsed": dict(sorted(self.unparsed.items())),
            },
            **({"production": self.production} if self.production is not None else {}),
            **({"production_compiles": self.production_compiles} if self.production_compiles is not None else {}),
            "risk": self.risk(),
            "compiles": [c.to_json() for c in self.compiles],
            "frames": [dict(f) for f in self.frames],
            "graph_breaks": [dict(b) for b in self.graph_breaks],
            **({"frame_arguments": self.frame_arguments.to_json()} if self.frame_arguments is not None else {}),
            "topologies": [t.to_json() for t in self.topologies],
            "dimensions": [d.to_json() for d in self.dimensions],
            "failed_samples": [f.to_json() for f in self.failed_samples],
            "not_analysed": list(self.not_analysed),
            "skipped_shards": [dict(s) for s in self.skipped_shards],
            **({"skipped_frames": [dict(s) for s in self.skipped_frames]} if self.skipped_frames else {}),
            **({"requests": self.requests} if self.requests is not None else {}),
            **({"cudagraphs": self.cudagraphs} if self.cudagraphs is not None else {}),
        }
