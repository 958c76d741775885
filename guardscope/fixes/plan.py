"""Plans for the fixes ``emit-warmup`` writes: which dims go unbacked, which ``torch.export``
Dims to declare (which samples warm up is :mod:`guardscope.fixes.warmup_plan`'s), and the check
that every name reaching generated code is a plain identifier.

The selection logic is pure (catalog dicts in, plans out). The question that needs Dynamo —
"which samples still compile under the unbacked configuration?" — is asked through
:mod:`guardscope.replay`, the only module that calls ``torch.compile``.
"""

from __future__ import annotations

import keyword
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

from ..errors import CatalogError
from ..replay.session import SIGNATURE_CACHE, ReplayOptions, replay


def check_identifier(name: str, what: str = "argument name") -> str:
    """Names that reach generated code must be plain identifiers (never corpus-controlled code)."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise CatalogError(f"{what} {name!r} is not a Python identifier; guardscope will not emit code for it")
    return name


# --- mark_unbacked -----------------------------------------------------------------------------


@dataclass(frozen=True)
class UnbackedDim:
    argument: str  # an argument name, or a path inside one (``cache.layers[0].keys``)
    axis: int
    reason: str  # where it came from: the topology and guard, or the corpus range

    @property
    def nested(self) -> bool:
        """A dim of a tensor inside an argument (a KV cache's keys, a graph batch's fields)."""
        return not self.argument.isidentifier()


# An argument path the generated mark() walks (attributes, list positions, string keys); it reaches
# generated code as a string literal and is parsed there, never evaluated.
_ARGUMENT_PATH = re.compile(r"([A-Za-z_]\w*)(?:\.[A-Za-z_]\w*|\[\d+\]|\['\w+'\])*")


@dataclass(frozen=True)
class UnbackedPlan:
    dims: tuple[UnbackedDim, ...]
    duck_shape: bool
    duck_reason: str | None
    residual: tuple[int, ...] = ()  # corpus samples that still compile under the configuration
    graphs: int = 0  # graphs the configuration compiles over the corpus, every frame counted
    # Dims the plan cannot mark, with why: a nested argument, or a value a later frame computed
    # inside the model (only the inputs of a call can be marked).
    skipped: tuple[tuple[str, str], ...] = field(default=())
    frames: int = 1  # frames the model compiles to under the configuration
    added_breaks: tuple[str, ...] = ()  # graph breaks the marks add ("location: reason")
    failed: tuple[tuple[int, str], ...] = ()  # samples that raise once marked, with the error
    status: str = "ok"  # "infeasible": the configuration breaks the model (see reason)
    reason: str | None = None


def _topology_of(catalog: dict[str, Any]) -> dict[int, int]:
    return {s: t["id"] for t in catalog["topologies"] for s in t["samples"]}


def _frame_labels(catalog: dict[str, Any]) -> dict[int, str]:
    return {f["frame"]: f.get("label") or f"frame {f['frame']}" for f in catalog.get("frames", [])}


def choose_unbacked(catalog: dict[str, Any]) -> UnbackedPlan:
    """Mark every varying input dim that was 0/1-specialized (or is ever 0 or 1 in the corpus);
    turn duck sizing off when it caused a recompile.

    Only a call's inputs can be marked: a 0/1 specialization in a later frame (after a graph
    break) on a value the model computed is listed in ``skipped`` with its frame, as is a dim of
    a dim of a tensor inside an argument (a KV cache's keys, a graph batch's ``batch``) is marked
    through its path, and left out with torch's reason when marking it breaks the model (see
    :func:`residual_samples`)."""
    sample_topology = _topology_of(catalog)
    inputs = {d["dim"] for d in catalog["dimensions"]}
    labels = _frame_labels(catalog)
    reasons: dict[str, str] = {}
    skipped: dict[str, str] = {}
    duck_reason = None
    for compiled in catalog["compiles"]:
        topology = sample_topology.get(compiled["sample"])
        frame = compiled.get("frame", 0)
        for failure in compiled["failures"]:
            where = f"T{topology}, sample {compiled['sample']}: guard {failure['guard']!r}"
            if "zero_one_specialization" in failure["causes"]:
                for dim in failure["dims"]:
                    if frame == 0 and dim in inputs:
                        reasons.setdefault(dim, f"0/1 specialization ({where})")
                    elif frame != 0:
                        skipped.setdefault(dim, f"a value computed inside the model in {labels.get(frame, f'frame {frame}')} "
                                                f"(compile {compiled['compile_id']}), not an input: mark_unbacked cannot reach it")
            if "duck_sizing" in failure["causes"] and duck_reason is None:
                duck_reason = f"duck sizing ({where})"
    for stats in catalog["dimensions"]:
        if stats["dynamic"] and (stats["ever_zero"] or stats["ever_one"]):
            seen = "0" if stats["ever_zero"] else "1"
            reasons.setdefault(
                stats["dim"], f"varies {stats['min']}..{stats['max']} in the corpus and is {seen} in some samples"
            )
    dims = []
    for dim in sorted(reasons, key=_dim_order(catalog)):
        argument, _, rest = dim.rpartition(".size()[")
        path = _ARGUMENT_PATH.fullmatch(argument)
        if path is None or not rest.endswith("]") or not rest[:-1].isdigit():
            skipped.setdefault(dim, "not a tensor dim reachable from forward's arguments by attributes, "
                                    "positions and keys: mark it in your own code")
            continue
        check_identifier(path.group(1))
        dims.append(UnbackedDim(argument, int(rest[:-1]), reasons[dim]))
    return UnbackedPlan(
        dims=tuple(dims), duck_shape=duck_reason is None, duck_reason=duck_reason,
        skipped=tuple(sorted(skipped.items(), key=lambda item: _dim_order(catalog)(item[0]))),
    )


def _dim_order(catalog: dict[str, Any]) -> Callable[[str], tuple[int, str]]:
    arguments = {name: i for i, name in enumerate(catalog.get("arguments", []))}

    def key(dim: str) -> tuple[int, str]:
        return (arguments.get(dim.split(".")[0].split("[")[0], len(arguments)), dim)

    return key


def residual_samples(
    model: Any, corpus: Callable[[], Iterable[Any]], plan: UnbackedPlan, options: ReplayOptions,
    catalog: dict[str, Any],
) -> UnbackedPlan:
    """Replay the corpus (``corpus()`` gives its samples, or its records:
    :meth:`Corpus.iter_records`) with the unbacked configuration; samples that still compile form
    the plan's residual warmup (strides, dtypes, list lengths... that no mark removes).

    Marks can change how the model compiles: a size Dynamo no longer knows can break the graph
    where the model branches on it (the plan then says which breaks it adds and how many frames
    result), or fail to compile at all under ``fullgraph=True``. A sample that ran in the
    analysis but raises once marked makes the plan infeasible: it is not written, and the reason
    keeps torch's whole message. When the plan marks dims inside arguments (a KV cache's keys) and
    samples raise, the corpus is replayed again without those: if that runs, they are left out
    with torch's reason (the usual case: code inside the model that needs the cache's length as a
    known number), and the plan marks the rest."""
    tried = _replay_marked(model, corpus(), plan, options, catalog)
    nested = [d for d in plan.dims if d.nested]
    if tried.status == "ok" or not nested:
        return tried
    outer = replace(plan, dims=tuple(d for d in plan.dims if not d.nested))
    retried = _replay_marked(model, corpus(), outer, options, catalog) if outer.dims else None
    if retried is None or retried.status != "ok":
        return tried
    sample, error = tried.failed[0]
    why = (f"marking it unbacked breaks the model ({len(tried.failed)} samples raise; first, sample {sample}: "
           f"{error.splitlines()[0] if error else error})")
    skipped = dict(retried.skipped)
    for dim in nested:
        skipped.setdefault(f"{dim.argument}.size()[{dim.axis}]", why)
    return replace(retried, skipped=tuple(sorted(skipped.items(), key=lambda item: _dim_order(catalog)(item[0]))))


def replay_for_residual(model: Any, records: Iterable[Any], options: ReplayOptions,
                        catalog: dict[str, Any]) -> tuple[Any, list[int], list[tuple[int, str]]]:
    """Replay the corpus guard-only under a plan's ``options`` (each signature of a corpus recorded
    by signature checked once): the replay's result, the samples that compiled (its residual
    warmup: a sample that raises in the model is none, warmup() would raise with it), and the
    samples that ran in the analysis but raise under the plan, with the error."""
    errors: list[tuple[int, str]] = []
    failed_before = {f["sample"] for f in catalog.get("failed_samples", [])}
    raised: set[int] = set(failed_before)

    def collect(meta: Any) -> None:
        if meta.error is not None:
            raised.add(meta.index)
            if meta.index not in failed_before:
                errors.append((meta.index, meta.error))

    result = replay(model, records, options, on_sample=collect, guard_only=True, signature_cache=SIGNATURE_CACHE)
    compiled = sorted({e.sample for e in result.events if e.sample is not None and e.sample not in raised})
    return result, compiled, errors


def _replay_marked(model: Any, records: Iterable[Any], plan: UnbackedPlan, options: ReplayOptions,
                   catalog: dict[str, Any]) -> UnbackedPlan:
    marked = replace(
        options,
        duck_shape=plan.duck_shape,
        mark_unbacked=tuple((d.argument, d.axis) for d in plan.dims),
        mark_samples="all",
    )
    result, compiled, errors = replay_for_residual(model, records, marked, catalog)
    known = {(b.get("location"), b.get("reason")) for b in catalog.get("graph_breaks", [])}
    added = sorted({f"{b.location or '?'}: {b.reason}" for b in result.graph_breaks if (b.location, b.reason) not in known})
    plan = replace(plan, residual=tuple(compiled), graphs=sum(1 for e in result.events if e.fail_type is None),
                   frames=len({e.frame_id for e in result.events}) or 1, added_breaks=tuple(added),
                   failed=tuple(errors))
    if errors:
        sample, error = errors[0]
        replayed = result.samples
        plan = replace(plan, status="infeasible", reason=(
            f"{len(errors)} of {replayed} replayed samples raise once these dims are marked unbacked "
            f"(first, sample {sample}): {error}"))
    return plan


# --- torch.export Dims -------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportDim:
    """One name of the export spec, one line of ``export_dims.py``.

    ``kind`` is ``"dim"`` (a ``Dim`` with ``min``..``max``), ``"static"`` (torch specialised the
    size: ``min == max`` is the value) or ``"derived"`` (``coefficient * root + offset`` over a root
    Dim, as torch's ``_DerivedDim``; its range follows the root's). A root torch introduced for
    derived dims has no members of its own.
    """

    name: str
    min: int
    max: int
    members: tuple[tuple[str, int], ...]  # (argument, axis) sharing this name
    note: str  # where it came from: the corpus range, then each suggested fix of torch's
    kind: str = "dim"
    root: str | None = None
    coefficient: int = 1
    offset: int = 0

    @property
    def expression(self) -> str:
        """The right-hand side of its line in ``export_dims.py``."""
        if self.kind == "static":
            return str(self.min)
        if self.kind == "derived":
            text = self.root if self.coefficient == 1 else f"{self.coefficient} * {self.root}"
            if self.offset:
                text += f" + {self.offset}" if self.offset > 0 else f" - {-self.offset}"
            return text
        return f"Dim({self.name!r}, min={self.min}, max={self.max})"

    def describe(self) -> str:
        """Short form for the CLI: ``x_0[1..8]``, ``x_1=64``, ``x_2=2*_x_2[4..200]``."""
        if self.kind == "static":
            return f"{self.name}={self.min}"
        relation = "=" + self.expression.replace(" ", "") if self.kind == "derived" else ""
        return f"{self.name}{relation}[{self.min}..{self.max}]"


@dataclass(frozen=True)
class OutsideTopology:
    """A topology whose representative the exported program does not take, and why."""

    topology: int
    sample: int
    samples: int  # corpus samples in the topology
    reason: str


@dataclass(frozen=True)
class ExportPlan:
    """The export spec. ``status`` is ``"ok"`` or ``"infeasible"`` (torch.export cannot export
    the model: ``reason`` says why in plain words with a remedy, ``torch_message`` is torch's
    whole message); ``fixes`` are torch's suggested fixes applied, ``outside`` the topologies the
    exported program does not take."""

    dims: tuple[ExportDim, ...]
    arguments: tuple[str, ...]
    example_sample: int
    margin: float
    warnings: tuple[str, ...] = ()
    status: str = "ok"
    reason: str | None = None
    torch_message: str | None = None
    fixes: tuple[str, ...] = ()
    outside: tuple[OutsideTopology, ...] = ()
    example_topology: int | None = None

    @property
    def feasible(self) -> bool:
        return self.status == "ok"


def choose_export_dims(catalog: dict[str, Any], margin: float = 0.0) -> ExportPlan:
    """The corpus's spec, before torch has a say: one ``Dim`` per class of dynamic dims equal in
    every sample where both are present, bounds from the corpus; static dims stay static."""
    order = _dim_order(catalog)
    stats = {d["dim"]: d for d in catalog["dimensions"]}
    seen: set[str] = set()
    dims: list[ExportDim] = []
    warnings: list[str] = []
    for name in sorted(stats, key=order):
        item = stats[name]
        if not item["dynamic"] or name in seen:
            continue
        group = sorted({name, *item["equal_to"]}, key=order)
        seen.update(group)
        members = []
        for dim in group:
            argument, _, rest = dim.partition(".size()[")
            if not argument.isidentifier() or not rest.rstrip("]").isdigit():
                warnings.append(f"{dim}: nested argument, left out of DYNAMIC_SHAPES")
                continue
            members.append((check_identifier(argument), int(rest.rstrip("]"))))
        if not members:
            continue
        low = min(stats[d]["min"] for d in group)
        high = max(stats[d]["max"] for d in group)
        high = max(int(math.ceil(high * (1.0 + margin))), low + 1)
        note = f"corpus range {low}..{max(stats[d]['max'] for d in group)}"
        if len(members) > 1:
            note += "; equal in every sample: " + ", ".join(f"{a} dim {x}" for a, x in members)
        if low <= 1:
            size = "0" if any(stats[d]["ever_zero"] for d in group) else "1"
            note += f"; the corpus has inputs where it is {size} (guardscope verify checks export takes them)"
        dims.append(
            ExportDim(name=check_identifier(f"{members[0][0]}_{members[0][1]}", "Dim name"),
                      min=low, max=high, members=tuple(members), note=note)
        )
    largest = max(catalog["topologies"], key=lambda t: (t["count"], -t["id"])) if catalog["topologies"] else None
    arguments = tuple(check_identifier(a) for a in catalog.get("arguments", []) if a not in ("args", "kwargs"))
    return ExportPlan(
        dims=tuple(dims),
        arguments=arguments,
        example_sample=largest["first_sample"] if largest else 0,
        margin=margin,
        warnings=tuple(warnings),
        example_topology=largest["id"] if largest else None,
    )


def choose_example(topologies: list[dict[str, Any]], structures: dict[int, Any], unsuited: set[int]) -> dict[str, Any]:
    """The topology whose representative to export with, so that the program takes most of the
    corpus: of the call structure most samples share (``structures[id]``: which arguments are
    passed or None, dtypes... — a program takes only calls structured like its example), the
    largest topology whose representative has no dynamic dim of size 0 or 1 (``unsuited``:
    torch.export specialises an example's 0 or 1 to a constant)."""
    weight: dict[Any, int] = {}
    for topology in topologies:
        key = structures[topology["id"]]
        weight[key] = weight.get(key, 0) + topology["count"]
    first = {}
    for topology in topologies:
        first.setdefault(structures[topology["id"]], topology["id"])
    common = max(weight, key=lambda key: (weight[key], -first[key]))
    candidates = [t for t in topologies if structures[t["id"]] == common]
    return min(candidates, key=lambda t: (t["id"] in unsuited, -t["count"], t["id"]))


def call_difference(example: dict[str, str], call: dict[str, str]) -> str | None:
    """Why a call is structured unlike the exported example, in words, or None when alike. Both
    map each argument the call binds, in forward's order, to a description of its value."""
    differences = []
    for name in [*call, *(n for n in example if n not in call)]:
        if name not in example:
            differences.append(f"passes {name}, which the exported example does not")
        elif name not in call:
            differences.append(f"does not pass {name}, which the exported example passes")
        elif call[name] != example[name]:
            differences.append(f"{name} is {call[name]} (in the exported example: {example[name]})")
    return "; ".join(differences) or None


# torch's "Suggested fixes:" lines (torch.fx.experimental.symbolic_shapes prettify_results, torch
# 2.3 - 2.14), read as torch.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes does:
#   name = Dim('name', min=3, max=6)   a range (min omitted when it is 2, torch's default)
#   name = 4                           specialised to a constant
#   name = 2*root + 1                  derived from a root Dim (an increasing linear relation)
SUGGESTED_FIXES = "Suggested fixes:"
RANGE_FIX = re.compile(r"^(\w+) = Dim\('(\w+)'(?:, min=(\d+))?(?:, max=(\d+))?\)$")
STATIC_FIX = re.compile(r"^(\w+) = (\d+)$")
DERIVED_FIX = re.compile(r"^(\w+) = (?:(\d+)\*)?([A-Za-z_]\w*)(?: ([+-]) (\d+))?$")


@dataclass(frozen=True)
class SuggestedFix:
    """One line of torch's suggested fixes: ``kind`` ``"dim"`` (``min``/``max``, None where torch
    left it out), ``"static"`` (``value``) or ``"derived"`` (``coefficient * root + offset``)."""

    name: str
    kind: str
    text: str  # the line as torch wrote it
    min: int | None = None
    max: int | None = None
    value: int | None = None
    root: str | None = None
    coefficient: int = 1
    offset: int = 0


def parse_suggested_fixes(message: str) -> tuple[SuggestedFix, ...]:
    """The fixes of a torch.export constraint violation (the lines after ``Suggested fixes:`` up
    to a blank line). Raises ValueError for a line that is none of the three forms."""
    if SUGGESTED_FIXES not in message:
        raise ValueError("torch's message has no suggested fixes")
    fixes = []
    for line in message.split(SUGGESTED_FIXES, 1)[1].strip("\n").splitlines():
        line = line.strip()
        if not line:
            break
        if match := RANGE_FIX.match(line):
            name, named, low, high = match.groups()
            if named != name:
                raise ValueError(f"cannot read torch's suggested fix {line!r}")
            fixes.append(SuggestedFix(name, "dim", line, min=None if low is None else int(low),
                                      max=None if high is None else int(high)))
        elif match := STATIC_FIX.match(line):
            fixes.append(SuggestedFix(match.group(1), "static", line, value=int(match.group(2))))
        elif match := DERIVED_FIX.match(line):
            name, coefficient, root, sign, offset = match.groups()
            fixes.append(SuggestedFix(name, "derived", line, root=root, coefficient=int(coefficient or 1),
                                      offset=int(offset or 0) * (-1 if sign == "-" else 1)))
        else:
            raise ValueError(f"cannot read torch's suggested fix {line!r}")
        check_identifier(fixes[-1].name, "Dim name")
    if not fixes:
        raise ValueError("torch's suggested fixes are empty")
    return tuple(fixes)


def apply_suggested_fixes(dims: tuple[ExportDim, ...], fixes: tuple[SuggestedFix, ...],
                          round_number: int) -> tuple[ExportDim, ...]:
    """The spec after torch's suggested fixes, each noted on the line it changed.

    A bound torch left out keeps the corpus's: torch leaves out a minimum of 2, its own default,
    and the corpus may hold smaller sizes its size-oblivious reasoning serves; but when the fix
    would change nothing else, torch did mean a minimum of 2 (else it would not have rejected
    the Dim), and the fix gets it. A root torch
    introduces gets the range that covers its derived dims' corpus ranges, within torch's
    bounds. Derived dims follow their root: a static root makes them static, a derived root is
    composed into theirs. Roots come before the dims derived from them. Raises ValueError for a
    fix of an unknown name.
    """
    by_name = {dim.name: dim for dim in dims}
    source = f"torch's suggested fix (round {round_number})"
    fixed: dict[str, ExportDim] = {}
    new_roots: dict[str, ExportDim] = {}
    for fix in fixes:
        dependents = [f for f in fixes if f.kind == "derived" and f.root == fix.name]
        if fix.name not in by_name:
            if fix.kind != "dim" or not dependents:
                raise ValueError(f"torch suggested {fix.text!r} for {fix.name}, which guardscope did not declare")
            low = min(max(-(-(by_name[f.name].min - f.offset) // f.coefficient), 0) for f in dependents)
            high = max((by_name[f.name].max - f.offset) // f.coefficient for f in dependents)
            low = low if fix.min is None else fix.min
            high = high if fix.max is None else fix.max
            new_roots[fix.name] = ExportDim(
                name=fix.name, min=low, max=max(high, low + 1), members=(),
                note=f"{source}: {fix.text}; the root of " + ", ".join(f.name for f in dependents))
            continue
        dim = by_name[fix.name]
        note = f"{dim.note}; {source}: {fix.text}"
        if fix.kind == "dim":
            high = dim.max if fix.max is None else fix.max
            if fix.min is not None:
                low = fix.min
            elif dim.kind == "dim" and high == dim.max:  # nothing else changes: torch meant its default
                low = max(dim.min, 2)
            else:
                low = dim.min
            fixed[fix.name] = replace(dim, kind="dim", min=low, max=max(high, low + 1), root=None,
                                      coefficient=1, offset=0, note=note)
        elif fix.kind == "static":
            fixed[fix.name] = replace(dim, kind="static", min=fix.value, max=fix.value, root=None,
                                      coefficient=1, offset=0, note=note)
        else:
            if fix.root not in by_name and not any(f.name == fix.root for f in fixes):
                raise ValueError(f"torch suggested {fix.text!r} over {fix.root}, which guardscope did not declare")
            fixed[fix.name] = replace(dim, kind="derived", root=fix.root, coefficient=fix.coefficient,
                                      offset=fix.offset, note=note)
    spec = {**new_roots, **{dim.name: fixed.get(dim.name, dim) for dim in dims}}
    resolved = {name: _resolve(spec, dim) for name, dim in spec.items()}
    ordered: dict[str, ExportDim] = {}
    for dim in dims:
        current = resolved[dim.name]
        if current.kind == "derived":
            ordered.setdefault(current.root, resolved[current.root])
        ordered.setdefault(current.name, current)
    return tuple(ordered.values())


def _resolve(spec: dict[str, ExportDim], dim: ExportDim) -> ExportDim:
    """A derived dim over a root Dim, its range the root's mapped; static over a static root."""
    if dim.kind != "derived":
        return dim
    root = _resolve(spec, spec[dim.root])
    if root.kind == "derived":  # composed: a(b*x + c) + d over b's root
        dim = replace(dim, root=root.root, coefficient=dim.coefficient * root.coefficient,
                      offset=dim.coefficient * root.offset + dim.offset)
        root = spec[dim.root]
    low, high = (dim.coefficient * bound + dim.offset for bound in (root.min, root.max))
    if root.kind == "static":
        return replace(dim, kind="static", min=low, max=low, root=None, coefficient=1, offset=0)
    return replace(dim, min=low, max=high)
