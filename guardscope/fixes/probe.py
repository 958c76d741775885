"""Probe for topologies the corpus has not shown yet: synthetic inputs at the sizes, equalities,
layouts and dtypes Dynamo specialises on, derived from real samples.

Three steps, kept apart:

* :func:`plan_candidates` (pure): from the catalog's dynamic dimensions (grouped into classes of
  dims that are equal in every sample, e.g. an edge index's length and its scale's rows), the
  topologies' representative samples and what the corpus scan saw, list bounded *edits* on each
  representative: each dynamic class at 0, 1 and 2, pairs of classes made equal, and every
  dtype and memory layout seen for an input applied to the representatives that lack it; on the
  most common topology's representative also every pair of classes at every pair of those
  values (pairwise, not the full product). A size edit always sets a whole class: dims the
  corpus always shows equal are a relation the model may need (a mask with one entry per row
  of ``x``), and an input that breaks it is more likely to raise in the model than to show a
  topology. Only when asked (``break_relations``) is each member of a class also edited alone,
  labelled as breaking the relation.
* :func:`scan` (reads tensors, compiles nothing): dtypes and layouts seen per input, and which
  integer inputs index into which dimension (every value below that dim's size in every
  scanned sample), so synthetic index tensors stay in range.
* :func:`synthesize` (tensor ops, compiles nothing): one edited copy of a real sample. Shrinking
  keeps a prefix, growing repeats the existing rows, index tensors are wrapped into the new
  range; an edit that would index into an empty dim is invalid and dropped.

The check itself — which compiled graph accepts each synthetic sample, and the new graphs for
those none accepts — runs through :mod:`guardscope.replay` (see ``pipeline.probe``).
"""

from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from .. import store
from ..catalog.builder import CatalogBuilder
from ..corpus import CorpusWriter
from ..corpus.reader import SignatureRecord
from ..corpus.spec import respec
from ..errors import CatalogError, CompileOptionsError
from ..model import Sample
from ..options import analysis_options
from ..replay.arguments import CallBinder, describe, lookup, tensors_of
from ..replay.session import ReplaySession
from ..text import dim_words
from ..torch_compat import dtype_name

DEFAULT_VALUES = (0, 1, 2)
# Where pairs of dims are edited together: on the most common topology's representative only
# ("general", the default), on every representative ("all"), or nowhere ("none").
PAIRWISE = ("general", "all", "none")
DEFAULT_MAX_CANDIDATES = 5000
SCAN_INDEX_SAMPLES = 64  # samples read to infer index relations (plus every representative)


# --- edits (pure) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    """One change to a real sample.

    ``kind`` is ``"size"`` (every dim of ``dims`` the sample has set to ``value``), ``"equal"``
    (every dim of ``dims`` set to the size ``other`` has in the base sample), ``"dtype"`` (input
    ``path`` cast to ``value``) or ``"layout"`` (input ``path`` given the layout ``value``:
    ``("order", stride order)`` or, for an empty tensor, ``("empty", strides)``). ``breaks``
    names the dims a size edit leaves alone although the corpus always showed them equal to
    ``dims`` (only with ``break_relations``).
    """

    kind: str
    dims: tuple[str, ...] = ()
    value: Any = None
    path: str = ""
    other: tuple[str, ...] = ()
    breaks: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.kind == "size":
            broken = f", breaking {_dims_words(self.dims)} = {_dims_words(self.breaks)}" if self.breaks else ""
            return f"{_dims_words(self.dims)} = {self.value}{broken}"
        if self.kind == "equal":
            return f"{_dims_words(self.dims)} = {_dims_words(self.other)}"
        if self.kind == "dtype":
            return f"{self.path} as {self.value}"
        kind, layout = self.value
        if kind == "empty":
            return f"{self.path} empty with strides {list(layout)}"
        return f"{self.path} with stride order {list(layout)}"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind}
        if self.dims:
            data["dims"] = list(self.dims)
        if self.other:
            data["equal_to"] = list(self.other)
        if self.breaks:
            data["breaks"] = list(self.breaks)
        if self.path:
            data["input"] = self.path
        if self.value is not None:
            data["value"] = [self.value[0], list(self.value[1])] if self.kind == "layout" else self.value
        return data


def _dims_words(dims: tuple[str, ...]) -> str:
    return "/".join(dim_words(d) for d in dims)


@dataclass(frozen=True)
class Candidate:
    base_topology: int
    base_sample: int
    kind: str  # "single", "pair", "equal", "dtype", "layout", "broken"
    edits: tuple[Edit, ...]

    def describe(self) -> str:
        return ", ".join(e.describe() for e in self.edits) + f" (from sample {self.base_sample})"


@dataclass(frozen=True)
class ScanResult:
    """What the corpus showed per input path: dtypes, stride orders, index relations."""

    dtypes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    layouts: dict[str, tuple[tuple[str, tuple[int, ...]], ...]] = field(default_factory=dict)
    # integer input path -> the dim (e.g. "x.size()[0]") its values index into
    indexes: dict[str, str] = field(default_factory=dict)
    samples: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "dtypes": {p: list(v) for p, v in sorted(self.dtypes.items())},
            "layouts": {p: [[k, list(o)] for k, o in v] for p, v in sorted(self.layouts.items())},
            "indexes": dict(sorted(self.indexes.items())),
        }


def dim_classes(dimensions: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """Dynamic dims grouped with the dims equal to them in every sample, in catalog order."""
    classes: list[tuple[str, ...]] = []
    seen: set[str] = set()
    for dim in dimensions:
        if not dim["dynamic"] or dim["dim"] in seen:
            continue
        members = tuple(sorted({dim["dim"], *dim["equal_to"]}))
        seen.update(members)
        classes.append(members)
    return classes


def plan_candidates(
    catalog: dict[str, Any],
    base_shapes: dict[int, dict[str, tuple[int, ...]]],
    scan_result: ScanResult,
    *,
    values: tuple[int, ...] = DEFAULT_VALUES,
    pairwise: str = "general",
    base_layouts: dict[int, dict[str, tuple[str, tuple[int, ...]]]] | None = None,
    base_dtypes: dict[int, dict[str, str]] | None = None,
    break_relations: bool = False,
) -> list[Candidate]:
    """Every edit worth checking, per topology representative, in a deterministic order.

    ``base_shapes[sample][path]`` is a representative's tensor shapes (edits that change
    nothing are left out); layouts and dtypes likewise, for the layout and dtype edits. Size
    edits set whole classes; ``break_relations`` adds, for each class of several dims the
    representative has, each of them alone at each value (kind ``"broken"``).
    """
    if pairwise not in PAIRWISE:
        raise ValueError(f"pairwise must be one of {PAIRWISE}")
    classes = dim_classes(catalog["dimensions"])
    general = general_topology(catalog)
    candidates: list[Candidate] = []
    for topology in catalog["topologies"]:
        if topology.get("compile_id") is None:
            continue
        base = topology["first_sample"]
        shapes = base_shapes.get(base, {})

        def size_of(dims: tuple[str, ...]) -> int | None:
            for dim in dims:
                path, axis = split_dim(dim)
                if path in shapes and axis < len(shapes[path]):
                    return shapes[path][axis]
            return None

        present = [c for c in classes if size_of(c) is not None]
        for members in present:
            for value in values:
                if size_of(members) != value:
                    candidates.append(Candidate(topology["id"], base, "single", (Edit("size", members, value),)))
        if break_relations:
            for members in present:
                here = [dim for dim in members if size_of((dim,)) is not None]
                if len(here) < 2:
                    continue
                for dim in here:
                    rest = tuple(d for d in here if d != dim)
                    for value in values:
                        if size_of(members) != value:
                            edit = Edit("size", (dim,), value, breaks=rest)
                            candidates.append(Candidate(topology["id"], base, "broken", (edit,)))
        if pairwise == "all" or (pairwise == "general" and topology["id"] == general):
            for a, b in itertools.combinations(present, 2):
                for va, vb in itertools.product(values, repeat=2):
                    if size_of(a) != va and size_of(b) != vb:
                        edits = (Edit("size", a, va), Edit("size", b, vb))
                        candidates.append(Candidate(topology["id"], base, "pair", edits))
        for a, b in itertools.permutations(present, 2):
            if size_of(a) != size_of(b) and (size_of(b) or 0) >= 2:
                candidates.append(Candidate(topology["id"], base, "equal", (Edit("equal", a, other=b),)))
        for path, dtypes in sorted(scan_result.dtypes.items()):
            have = (base_dtypes or {}).get(base, {}).get(path)
            for dtype in dtypes:
                if have is not None and dtype != have and _same_family(dtype, have):
                    candidates.append(Candidate(topology["id"], base, "dtype", (Edit("dtype", path=path, value=dtype),)))
        for path, layouts in sorted(scan_result.layouts.items()):
            have = (base_layouts or {}).get(base, {}).get(path)
            for layout in layouts:
                # An order applies to a tensor with elements, strides of an empty tensor to an
                # empty one of the same rank.
                if have is not None and layout != have and layout[0] == have[0] and len(layout[1]) == len(have[1]):
                    candidates.append(Candidate(topology["id"], base, "layout", (Edit("layout", path=path, value=layout),)))
    return candidates


def raised_words(explored: dict[str, Any]) -> str:
    """``"3 raised in the model (broken 3)"``: how many checked samples raised and from which
    kind of edit, so a probe whose inputs the model rejects says so (and whether it was asked
    to break relations) rather than hiding it in a count of what was explored."""
    by_kind = explored["model_error_by_kind"]
    kinds = f" ({', '.join(f'{kind} {count}' for kind, count in by_kind.items())})" if by_kind else ""
    return f"{explored['model_error']} raised in the model{kinds}"


def general_topology(catalog: dict[str, Any]) -> int | None:
    """The topology serving most samples (ties: the earliest): the traffic a new input most
    likely resembles, and the base of the pairwise edits by default."""
    served = [t for t in catalog["topologies"] if t.get("compile_id") is not None]
    if not served:
        return None
    return max(served, key=lambda t: (t["count"], -t["id"]))["id"]


def _same_family(a: str, b: str) -> bool:
    def family(name: str) -> str:
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            return name
        if dtype == torch.bool:
            return "bool"
        return "float" if dtype.is_floating_point else "complex" if dtype.is_complex else "int"

    return family(a) == family(b)


def split_dim(dim: str) -> tuple[str, int]:
    """``"x.size()[0]"`` -> ``("x", 0)``."""
    path, _, rest = dim.rpartition(".size()[")
    return path, int(rest.rstrip("]"))


# --- reading real samples ----------------------------------------------------------------------


def stride_order(tensor: torch.Tensor) -> tuple[int, ...]:
    """Axes from the largest stride to the smallest (contiguous: 0, 1, ..., n-1)."""
    if tensor.layout != torch.strided:
        return tuple(range(tensor.dim()))
    return tuple(sorted(range(tensor.dim()), key=lambda a: (-tensor.stride(a), a)))


def layout_of(tensor: torch.Tensor) -> tuple[str, tuple[int, ...]]:
    """``("order", stride order)`` for a tensor with elements; ``("empty", strides)`` for an
    empty one, whose strides are whatever the op that made it chose (and Dynamo guards them)."""
    if tensor.numel() == 0 and tensor.layout == torch.strided:
        return ("empty", tuple(tensor.stride()))
    return ("order", stride_order(tensor))


def _integer(tensor: torch.Tensor) -> bool:
    return not tensor.is_floating_point() and not tensor.is_complex() and tensor.dtype != torch.bool


class Scanner:
    """Accumulates :class:`ScanResult` one bound sample at a time (the corpus streams)."""

    def __init__(self, index_samples: int = SCAN_INDEX_SAMPLES) -> None:
        self.dtypes: dict[str, set[str]] = {}
        self.layouts: dict[str, set[tuple[str, tuple[int, ...]]]] = {}
        self.index_samples = index_samples
        self.index_seen = 0
        # integer path -> {dim: total slack}; None once no dim bounds it
        self.bounds: dict[str, dict[str, int] | None] = {}
        self.samples = 0

    def add(self, arguments: dict[str, Any], *, for_indexes: bool = False, data: bool = True,
            samples: int = 1) -> None:
        """Scan one call (standing for ``samples`` recorded ones). Without ``data`` (a sample
        recorded as its signature: zero-filled tensors) only dtypes and layouts are read, not
        the integer values that tell which input indexes which dim."""
        self.samples += samples
        found = tensors_of(arguments)
        for path, tensor in found:
            self.dtypes.setdefault(path, set()).add(dtype_name(tensor.dtype))
            if tensor.dim() >= 2:
                self.layouts.setdefault(path, set()).add(layout_of(tensor))
        if not data or not (for_indexes or self.index_seen < self.index_samples):
            return
        self.index_seen += 1
        sizes = {f"{p}.size()[{a}]": s for p, t in found for a, s in enumerate(t.shape)}
        for path, tensor in found:
            if not _integer(tensor) or tensor.numel() == 0 or self.bounds.get(path, {}) is None:
                continue
            low, high = int(tensor.min()), int(tensor.max())
            if low < 0:
                self.bounds[path] = None
                continue
            own = {f"{path}.size()[{a}]" for a in range(tensor.dim())}
            fits = {dim: size - 1 - high for dim, size in sizes.items() if dim not in own and size > high}
            previous = self.bounds.get(path)
            merged = fits if previous is None else {d: previous[d] + fits[d] for d in previous if d in fits}
            self.bounds[path] = merged or None

    def result(self) -> ScanResult:
        indexes = {}
        for path, slack in self.bounds.items():
            if slack:
                indexes[path] = min(slack, key=lambda d: (slack[d], d))
        return ScanResult(
            dtypes={p: tuple(sorted(v)) for p, v in self.dtypes.items()},
            layouts={p: tuple(sorted(v)) for p, v in self.layouts.items() if len(v) > 1},
            indexes=indexes,
            samples=self.samples,
        )


# --- synthesis ---------------------------------------------------------------------------------


class InvalidCandidate(ValueError):
    """The edit cannot give a valid input (e.g. edges that index into zero nodes)."""


def _resize(tensor: torch.Tensor, axis: int, size: int) -> torch.Tensor:
    current = tensor.shape[axis]
    # Always a fresh tensor: a view would carry its base, and Dynamo guards a view's base too.
    if size == current:
        return tensor.clone()
    if size < current:
        return tensor.narrow(axis, 0, size).clone(memory_format=torch.contiguous_format)
    if current == 0:
        shape = list(tensor.shape)
        shape[axis] = size
        return torch.zeros(shape, dtype=tensor.dtype, device=tensor.device)
    rows = torch.arange(size, device=tensor.device) % current
    return tensor.index_select(axis, rows)


def _with_order(tensor: torch.Tensor, order: tuple[int, ...]) -> torch.Tensor:
    """The same values, laid out with ``order`` (largest stride first)."""
    if list(order) == sorted(order):
        return tensor.clone(memory_format=torch.contiguous_format)
    inverse = [order.index(a) for a in range(len(order))]
    return tensor.permute(*order).clone(memory_format=torch.contiguous_format).permute(*inverse)


def _set(arguments: dict[str, Any], path: str, new: Any) -> None:
    name, _, rest = path.partition("[")
    if not rest:
        arguments[name] = new
        return
    keys = []
    while rest:
        key, _, rest = rest.partition("]")
        rest = rest.lstrip("[")
        keys.append(int(key) if key.lstrip("-").isdigit() else key.strip("'\""))

    def replaced(container: Any, keys: list) -> Any:
        head, *tail = keys
        item = new if not tail else replaced(container[head], tail)
        if isinstance(container, tuple):
            return tuple(item if i == head else v for i, v in enumerate(container))
        copy = list(container) if isinstance(container, list) else dict(container)
        copy[head] = item
        return copy

    arguments[name] = replaced(arguments[name], keys)


def synthesize(base: Sample, bound: inspect.BoundArguments, candidate: Candidate, indexes: dict[str, str],
               index: int) -> Sample:
    """A copy of ``base`` (bound to the forward's parameters as ``bound``) with the candidate's
    edits, numbered ``index``; raises :class:`InvalidCandidate`."""
    arguments = dict(bound.arguments)
    sizes: dict[str, int] = {}
    for edit in candidate.edits:
        if edit.kind in ("size", "equal"):
            # A class may hold an optional input's dims (a mask passed as None, a shorter list):
            # the edit sets the members this sample has, so the relation holds where it applies.
            here = [dim for dim in edit.dims if _size_in(arguments, (dim,)) is not None]
            value = int(edit.value) if edit.kind == "size" else _size_in(arguments, edit.other)
            if not here or value is None:
                raise InvalidCandidate(f"{_dims_words(edit.dims + edit.other)} not in this sample")
            for dim in here:
                sizes[dim] = value
    for dim, value in sorted(sizes.items()):
        path, axis = split_dim(dim)
        _set(arguments, path, _resize(lookup(arguments, path), axis, value))
    for edit in candidate.edits:
        if edit.kind == "dtype":
            tensor = lookup(arguments, edit.path)
            _set(arguments, edit.path, tensor.to(getattr(torch, edit.value)))
        elif edit.kind == "layout":
            tensor = lookup(arguments, edit.path)
            kind, layout = edit.value
            if kind == "empty":
                if tensor.numel() != 0:
                    raise InvalidCandidate(f"{edit.path} is not empty in this sample")
                new = torch.empty_strided(tuple(tensor.shape), tuple(layout), dtype=tensor.dtype, device=tensor.device)
            else:
                new = _with_order(tensor, tuple(layout))
            _set(arguments, edit.path, new)
    # Index tensors: keep every value inside the (possibly new) size of the dim it indexes.
    for path, target in sorted(indexes.items()):
        try:
            tensor = lookup(arguments, path)
            target_path, axis = split_dim(target)
            limit = int(lookup(arguments, target_path).shape[axis])
        except (KeyError, IndexError, TypeError):
            continue
        if not isinstance(tensor, torch.Tensor) or tensor.numel() == 0:
            continue
        if limit == 0:
            raise InvalidCandidate(f"{path} indexes {target}, which this edit makes 0")
        if int(tensor.max()) >= limit:
            wrapped = tensor % limit
            if tensor.dim() >= 2 and not tensor.is_contiguous():
                wrapped = _with_order(wrapped, stride_order(tensor))
            _set(arguments, path, wrapped)
    return Sample(index, *_call_form(bound, arguments, base))


def _size_in(arguments: dict[str, Any], dims: tuple[str, ...]) -> int | None:
    """The size of the first of ``dims`` that is a tensor dimension of these arguments."""
    for dim in dims:
        path, axis = split_dim(dim)
        try:
            tensor = lookup(arguments, path)
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(tensor, torch.Tensor) and axis < tensor.dim():
            return int(tensor.shape[axis])
    return None


def _call_form(bound: inspect.BoundArguments, arguments: dict[str, Any], base: Sample) -> tuple[tuple, dict]:
    """Pass the edited arguments the way the real sample passed its own (positionally or by
    keyword): an exported program, for one, only takes the form it was exported with."""
    parameters = list(bound.signature.parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        rebound = inspect.BoundArguments(bound.signature, arguments)  # type: ignore[arg-type]
        return tuple(rebound.args), dict(rebound.kwargs)
    args = tuple(arguments[p.name] for p in parameters[: len(base.args)])
    kwargs = {name: arguments[name] for name in base.kwargs}
    return args, kwargs


# --- the probe run ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeResult:
    out_dir: Path
    document: dict[str, Any]
    corpus_dir: Path | None


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

    # Read the corpus once: dtypes and layouts seen, and which integer inputs index which dim.
    scanner = Scanner()
    bases = {t["first_sample"]: corpus.sample(t["first_sample"]) for t in served}
    binder = CallBinder(model)
    representatives = {index: binder.bound(sample.args, sample.kwargs) for index, sample in bases.items()}
    if any(bound is None for bound in representatives.values()):
        raise CatalogError("the model's forward signature does not bind the corpus samples; probe needs named inputs")
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
    scanned = scanner.result()

    def per_base(read: Callable[[Any], Any]) -> dict[int, dict[str, Any]]:
        return {
            index: {path: read(tensor) for path, tensor in tensors_of(bound.arguments)}
            for index, bound in representatives.items()
        }

    planned = plan_candidates(
        catalog,
        per_base(lambda t: tuple(t.shape)),
        scanned,
        values=values,
        pairwise=pairwise,
        base_layouts=per_base(layout_of),
        base_dtypes=per_base(lambda t: dtype_name(t.dtype)),
        break_relations=break_relations,
    )
    chosen, truncated = planned[:limit], max(0, len(planned) - limit)

    first_virtual = len(corpus)
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
    known = {t["compile_id"]: t["id"] for t in served}
    rebuilt = {metas[i].serving for i in compile_samples if i in metas}
    warnings = []
    if not rebuilt <= set(known):
        warnings.append(
            "replaying the analysis' compile samples did not rebuild its graphs (compile ids "
            f"{sorted(rebuilt - set(known))}); was the catalog made by another torch or model?"
        )
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
    by_kind: dict[str, int] = {}
    for candidate in planned:
        by_kind[candidate.kind] = by_kind.get(candidate.kind, 0) + 1
    document = {
        "schema": 1,
        "catalog_sha256": store.catalog_digest(catalog),
        "torch_version": result.torch_version,
        "bounds": {"values": list(values), "pairwise": pairwise, "max_candidates": limit,
                   "break_relations": break_relations},
        "scan": scanned.to_json(),
        "explored": {
            "bases": len(representatives),
            "planned": len(planned),
            "planned_by_kind": dict(sorted(by_kind.items())),
            "truncated": truncated,
            "invalid": sum(invalid.values()),
            "invalid_reasons": dict(sorted(invalid.items())),
            "duplicates": duplicates,
            "checked": len(synthetic),
            **outcomes,
            "model_error_by_kind": dict(sorted(errors_by_kind.items())),
        },
        "new_topologies": new_topologies,
        "model_errors": model_errors,
        "warnings": warnings,
    }
    probe_dir = out / store.PROBE_DIR
    corpus_dir = None
    if new_topologies:
        corpus_dir = probe_dir / "corpus"
        spec = respec(catalog["model"], corpus.path, corpus_dir)
        with CorpusWriter(corpus_dir, model=spec, compile=corpus.manifest.compile, overwrite=True,
                          method=corpus.manifest.method, recorded_from=corpus.manifest.recorded_model) as writer:
            for compile_id, positions in sorted(by_compile.items(), key=lambda item: item[1][0]):
                _, sample = synthetic[positions[0]]
                writer.add(*sample.args, **sample.kwargs)
    else:
        store.remove_corpus(probe_dir / "corpus")
    store.write_document(out, store.PROBE, document)
    return ProbeResult(out_dir=out, document=document, corpus_dir=corpus_dir)
