"""What-if replays: what each input transform (:mod:`guardscope.fixes.transforms`) would save, and
whether it changes the model's answers.

For each transform alone, then for the cumulative chain in the order given, the corpus is
replayed with every sample transformed (through the analysis's own compile options; guard-only
where that is sound, as for the analysis) and the row records the graphs and frames compiled,
the seconds those compiles took, the padding's cost in % of the corpus's input elements, the
samples that raised, and the set-up of the row's warmup: the transformed samples that compiled a
graph in that replay (one per graph, in corpus order: run in that order they compile the same
graphs), run again through a fresh compile (Dynamo reset, the same options) in the same process
and timed from the first call to the last. Then, for each topology of the analysis, its first
sample runs eagerly (no compile) as recorded and transformed, and the outputs are compared: every
tensor in the output, a padded output cut back to its unpadded part on each dim where its size is
a padded size and the recorded output's the size before (``--output-slice`` style: logits, a KV
cache's keys), else whole; with the largest difference and a tolerance for the output's dtype
(``torch.testing``'s defaults). A row whose outputs differ changes the results.

The first row is the corpus as recorded, replayed the same way in the same process, so its
compile seconds compare with the others' (the analysis's timings.json measured them in another
process, colder).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ..corpus.values.structured import parts
from ..model import Sample
from ..options import analysis_options
from ..replay.runner import Runner
from ..replay.session import replay
from ..text import error_text
from .transforms import (
    Call,
    Padded,
    Transform,
    apply_chain,
    check_transforms,
    input_elements,
)

# (rtol, atol) per output dtype: torch.testing.assert_close's defaults. Other dtypes compare exactly.
TOLERANCES = {
    torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7), torch.complex64: (1.3e-6, 1e-5), torch.complex128: (1e-7, 1e-7),
}
AS_RECORDED = "as recorded"


def rows_of(transforms: tuple[Transform, ...]) -> list[tuple[str, tuple[Transform, ...]]]:
    """(label, chain) of every row after the first: each transform alone, then the cumulative
    chains of two or more in the order given."""
    rows = [(t.spec, (t,)) for t in transforms]
    rows += [(" + ".join(t.spec for t in transforms[:n]), transforms[:n]) for n in range(2, len(transforms) + 1)]
    return rows


# --- the replay of a transformed corpus ----------------------------------------------------------


@dataclass
class _Cost:
    before: int = 0
    after: int = 0
    over: int = 0


def _transformed(corpus: Any, call: Call, chain: tuple[Transform, ...], cost: _Cost) -> Iterator[Sample]:
    for sample in corpus:
        args, kwargs, applied = apply_chain(call, chain, sample.args, sample.kwargs, sample.index)
        cost.before += input_elements(sample.args, sample.kwargs)
        cost.after += input_elements(args, kwargs)
        cost.over += sum(a.over for a in applied)
        yield Sample(sample.index, args, kwargs)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _warmup_setup(model: Any, corpus: Any, call: Call, chain: tuple[Transform, ...], options: Any,
                  events: list[Any]) -> dict[str, Any]:
    """The warmup of a row's replay: one transformed sample per graph it compiled (the samples
    that compiled, in corpus order), replayed through a fresh compile of ``model`` (the replay
    resets Dynamo) with the same options, every sample run. Its graphs (every frame) and the
    seconds from its first call to its last: the set-up a server would pay before its first
    request. ``graphs`` is the row replay's count, for the comparison."""
    compiled = [e for e in events if e.fail_type is None]
    indices = sorted({e.sample for e in compiled if e.sample is not None})
    found = {"graphs": len(compiled), "warmup_samples": len(indices), "warmup_graphs": 0,
             "warmup_setup_seconds": 0.0}
    if not indices:
        return found
    samples = []
    for index in indices:
        sample = corpus.sample(index)
        args, kwargs, _ = apply_chain(call, chain, sample.args, sample.kwargs, index)
        samples.append(Sample(index, args, kwargs))
    result = replay(model, samples, options, on_sample=lambda meta: None)
    found["warmup_graphs"] = sum(1 for e in result.events if e.fail_type is None)
    found["warmup_setup_seconds"] = round(result.seconds, 6)
    return found


def _replay_row(model: Any, corpus: Any, call: Call, chain: tuple[Transform, ...], options: Any,
                failed_before: set[int]) -> dict[str, Any]:
    cost = _Cost()
    raised: list[tuple[int, str]] = []

    def collect(meta: Any) -> None:
        if meta.error is not None and meta.index not in failed_before:
            raised.append((meta.index, meta.error))

    result = replay(model, _transformed(corpus, call, chain, cost), options, on_sample=collect, guard_only=True)
    events = result.events
    warmup = _warmup_setup(model, corpus, call, chain, options, events)
    notes = []
    if warmup["warmup_graphs"] != warmup["graphs"]:
        notes.append(f"its warmup compiled {_count(warmup['warmup_graphs'], 'graph')} run alone, "
                     f"against {warmup['graphs']} in the replay")
    if cost.over:
        notes.append(f"{_count(cost.over, 'size')} beyond the largest bucket left as they were")
    if raised:
        sample, error = raised[0]
        notes.append(f"{_count(len(raised), 'sample')} raised once transformed (first, sample {sample}: "
                     f"{error.splitlines()[0] if error else error})")
    return {
        "graphs": sum(1 for e in events if e.fail_type is None),
        "frames": len({e.frame_id for e in events}) or 1,
        "compile_seconds": round(sum(e.seconds or 0.0 for e in events), 6),
        "padding_percent": round(100.0 * (cost.after - cost.before) / cost.before, 3) if cost.before else 0.0,
        "warmup_samples": warmup["warmup_samples"],
        "warmup_graphs": warmup["warmup_graphs"],
        "warmup_setup_seconds": warmup["warmup_setup_seconds"],
        "raised": len(raised),
        "notes": notes,
    }


# --- outputs --------------------------------------------------------------------------------------


def output_tensors(value: Any, path: str = "output") -> list[tuple[str, torch.Tensor]]:
    """(path, tensor) for every tensor in a model's output: nested lists, tuples, dicts (a
    transformers ``ModelOutput`` among them) and objects a corpus codec knows (a KV cache)."""
    if isinstance(value, torch.Tensor):
        return [(path, value)]
    found: list[tuple[str, torch.Tensor]] = []
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found += output_tensors(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            found += output_tensors(item, f"{path}[{key!r}]")
    else:
        for suffix, item in parts(value) or ():
            found += output_tensors(item, f"{path}{suffix}")
    return found


def _cut(tensor: torch.Tensor, shape: tuple[int, ...], padded: list[Padded]) -> tuple[torch.Tensor, bool]:
    """``tensor`` (an output of the transformed call) cut back to the unpadded part of each dim
    where it differs from ``shape`` (the output as recorded) by a padding: the dim's size is a
    padded size and the recorded size the size before it (a padding of the same dim first)."""
    if tensor.dim() != len(shape):
        return tensor, False
    cut = False
    for dim, (size, recorded) in enumerate(zip(tensor.shape, shape)):
        if size == recorded:
            continue
        found = sorted({(p.dim != dim, p.side) for p in padded if p.before == recorded and p.after == size})
        if found:
            side = found[0][1]
            tensor = tensor.narrow(dim, 0 if side == "right" else size - recorded, recorded)
            cut = True
    return tensor, cut


def compare_outputs(original: Any, transformed: Any, padded: list[Padded]) -> dict[str, Any]:
    """Whether two outputs are equal (each tensor within its dtype's tolerance, padded outputs
    cut back), the largest absolute difference and what was cut."""
    left, right = output_tensors(original), output_tensors(transformed)
    if [p for p, _ in left] != [p for p, _ in right]:
        return {"equal": False, "max_diff": None, "cut": [],
                "note": f"the outputs differ in structure ({len(left)} tensors against {len(right)})"}
    equal, largest, cut_paths = True, 0.0, []
    for (path, a), (_, b) in zip(left, right):
        b, cut = _cut(b, tuple(a.shape), padded)
        if cut:
            cut_paths.append(path)
        if a.shape != b.shape:
            return {"equal": False, "max_diff": None, "cut": cut_paths,
                    "note": f"{path} has shape {tuple(b.shape)} transformed, {tuple(a.shape)} as recorded"}
        a, b = a.detach().cpu(), b.detach().cpu()
        if a.dtype != b.dtype:
            equal = False  # a transform that changes the output's dtype changes the result
            b = b.to(a.dtype)
        if a.numel() == 0:
            continue
        if a.is_floating_point() or a.is_complex():
            rtol, atol = TOLERANCES.get(a.dtype, (0.0, 0.0))
            equal = equal and bool(torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True).all())
            difference = (a.to(torch.complex128 if a.is_complex() else torch.float64)
                          - b.to(torch.complex128 if b.is_complex() else torch.float64)).abs()
            difference = torch.nan_to_num(difference, nan=0.0, posinf=float("inf"))
        else:
            equal = equal and bool(torch.equal(a, b))
            difference = (a.to(torch.float64) - b.to(torch.float64)).abs()
        largest = max(largest, float(difference.max()))
    return {"equal": equal, "max_diff": largest, "cut": cut_paths, "note": None}


class _Outputs:
    """Each topology's first sample run eagerly (no compile), as recorded and transformed."""

    def __init__(self, model: Any, corpus: Any, catalog: dict[str, Any], options: Any, call: Call) -> None:
        self.runner = Runner(model, options)  # a fresh compile wrapper that never runs: its eager model and device
        self.call = call
        self.samples = {t["id"]: corpus.sample(t["first_sample"]) for t in catalog["topologies"]}
        self.recorded = {topology: self._run(sample) for topology, sample in self.samples.items()}

    def _run(self, sample: Sample) -> tuple[Any, str | None]:
        prepared = self.runner.prepare(sample, mark=False)
        try:
            with self.runner.grad_context():
                return self.runner.model(*prepared.args, **prepared.kwargs), None
        except Exception as exc:  # noqa: BLE001 - reported, never fatal
            return None, error_text(exc)

    def compare(self, chain: tuple[Transform, ...]) -> list[dict[str, Any]]:
        found = []
        for topology, sample in sorted(self.samples.items()):
            args, kwargs = copy.deepcopy((sample.args, sample.kwargs))
            args, kwargs, applied = apply_chain(self.call, chain, args, kwargs, sample.index)
            output, error = self._run(Sample(sample.index, args, kwargs))
            original, original_error = self.recorded[topology]
            entry = {"topology": topology, "sample": sample.index}
            if original_error is not None:
                entry.update(equal=None, max_diff=None, cut=[], note=f"raises as recorded: {original_error.splitlines()[0]}")
            elif error is not None:
                entry.update(equal=False, max_diff=None, cut=[], note=f"raises once transformed: {error.splitlines()[0]}")
            else:
                entry.update(compare_outputs(original, output, [p for a in applied for p in a.padded]))
            found.append(entry)
        return found


def _outputs_summary(topologies: list[dict[str, Any]]) -> dict[str, Any]:
    compared = [t for t in topologies if t["equal"] is not None]
    diffs = [t["max_diff"] for t in compared if t["max_diff"] is not None]
    equal = bool(compared) and all(t["equal"] for t in compared)
    return {"outputs_equal": equal if compared else None, "max_diff": max(diffs) if diffs else None,
            "changes_results": bool(compared) and not equal}


# --- the whole document ----------------------------------------------------------------------------


def run(catalog: dict[str, Any], corpus: Any, model: Any, transforms: tuple[Transform, ...], *,
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The what-if document of ``transforms`` on the analysis ``catalog`` of ``corpus``. The
    transforms are checked on the corpus's first sample before anything runs."""
    call = check_transforms(model, transforms, corpus.sample(0))
    options = analysis_options(catalog)
    failed_before = {f["sample"] for f in catalog.get("failed_samples", [])}
    outputs = _Outputs(model, corpus, catalog, options, call)
    rows = []
    for label, chain in [(AS_RECORDED, ()), *rows_of(transforms)]:
        if progress is not None:
            progress(label)
        row = _replay_row(model, corpus, call, chain, options, failed_before)
        topologies = outputs.compare(chain) if chain else []
        # The corpus as recorded is the reference the other rows' outputs are compared with.
        summary = _outputs_summary(topologies) if chain else {"outputs_equal": None, "max_diff": None,
                                                               "changes_results": False}
        rows.append({"label": label, "transforms": [t.spec for t in chain], **row, **summary,
                     "topologies": topologies})
    return {
        "schema": 1,
        "transforms": [t.spec for t in transforms],
        "compile": options.compile_json(),
        "samples": len(corpus),
        "topologies": len(catalog["topologies"]),
        "rows": rows,
    }

