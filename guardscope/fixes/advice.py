"""Advice from the catalog: which input transforms (:mod:`guardscope.fixes.transforms`) its
failure kinds suggest, in the order of the cumulative chain, and which ones do not apply, in words.

- ``dtype_mismatch`` on an argument: cast it to its most common dtype (the dtype the topologies'
  samples had most often; uint8 among floating dtypes is scaled by 1/255, as pixels are).
- ``stride_mismatch`` on an argument: make it contiguous.
- ``size_mismatch`` or ``zero_one_specialization`` on a dim: pad it, but only where padding can
  keep the answers: a dim with a mask of the same size (``attention_mask``) is padded to a
  multiple with the mask extended by zeros; the batch (dim 0, when no argument is an index list)
  is bucketed, its padded rows cut from the outputs. An index or edge list (``edge_index``: its
  values index another tensor's rows), values per edge, rows that an index list points into and
  any other dim with no mask cannot be padded: the padded part would take part in the result.

Pure: the catalog's JSON in, :class:`Advice` out.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

# Dtype names in guard text (``expected Float, actual Byte``) -> torch's names.
_GUARD_DTYPES = {
    "Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Byte": "uint8",
    "Char": "int8", "Short": "int16", "Int": "int32", "Long": "int64", "Bool": "bool",
}
_FLOATING = ("float16", "bfloat16", "float32", "float64")
_FACT_DTYPE = re.compile(r"^(?P<input>\S+) is (?P<dtype>[a-z]+\d*)$")
_DIM = re.compile(r"^(?P<input>.+)\.size\(\)\[(?P<axis>\d+)\]$")
_SIZE_KINDS = ("size_mismatch", "zero_one_specialization")
_LARGEST_MULTIPLE = 64


@dataclass(frozen=True)
class Advice:
    """One suggestion: ``spec`` is the transform to replay (None where none applies) and ``text``
    says why, or why not."""

    subject: str  # what it is about: an argument, or ARG dim N
    spec: str | None
    text: str

    @property
    def applies(self) -> bool:
        return self.spec is not None

    def to_json(self) -> dict:
        return {"subject": self.subject, "spec": self.spec, "applies": self.applies, "text": self.text}


def _failures(catalog: dict) -> list[dict]:
    return [failure for compile_ in catalog.get("compiles", []) for failure in compile_.get("failures", [])]


def _dtypes(catalog: dict, argument: str) -> Counter:
    """Samples per dtype of ``argument``: the topologies' facts (``images is uint8``) weighted by
    their sample counts; else the dtypes the guards name."""
    counts: Counter = Counter()
    for topology in catalog.get("topologies", []):
        for fact in topology.get("facts", []):
            found = _FACT_DTYPE.match(fact)
            if found and found["input"] == argument:
                counts[found["dtype"]] += topology.get("count", 1)
    if not counts:
        for failure in _failures(catalog):
            if failure["kind"] == "dtype_mismatch" and argument in failure.get("inputs", []):
                for name in (failure.get("expected"), failure.get("actual")):
                    if name in _GUARD_DTYPES:
                        counts[_GUARD_DTYPES[name]] += 1
    return counts


def _cast(catalog: dict, argument: str) -> Advice:
    counts = _dtypes(catalog, argument)
    if not counts:
        return Advice(argument, None, "its dtypes differ, but the catalog does not say which: name one with "
                      f"--transform cast:{argument}:DTYPE")
    dtype = min(counts.items(), key=lambda item: (-item[1], item[0]))[0]
    others = sorted(d for d in counts if d != dtype)
    scale = dtype in _FLOATING and "uint8" in counts
    return Advice(argument, f"cast:{argument}:{dtype}" + (":scale" if scale else ""),
                  f"it arrives as {', '.join(others)} besides {dtype} ({counts[dtype]} of {sum(counts.values())} "
                  f"samples); cast to {dtype}" + (" (uint8 divided by 255, as pixels are)" if scale else ""))


def _is_index_list(argument: str) -> bool:
    return bool(re.search(r"index|indices|edge", argument)) and "mask" not in argument


def _is_mask(argument: str) -> bool:
    return "mask" in argument


def _power_of_two_at_least(size: int) -> int:
    power = 1
    while power < size:
        power *= 2
    return power


def _padding(catalog: dict, dimension: dict, has_index_lists: bool, index_dims: set[str]) -> Advice:
    argument, axis = dimension["input"], dimension["axis"]
    subject = f"{argument} dim {axis}"
    related = [_DIM.match(d) for d in dimension.get("equal_to", [])]
    related = [(m["input"], int(m["axis"])) for m in related if m]
    masks = sorted(name for name, other in related if _is_mask(name) and other == axis)
    largest = dimension.get("max") or 1
    if _is_index_list(argument):
        what = "edges" if "edge" in argument else "index entries"
        harm = ("a padded edge would connect real nodes" if "edge" in argument
                else "a padded index would point at a real row")
        return Advice(subject, None, f"{what} cannot be padded without a mask: {harm}")
    if dimension["dim"] in index_dims:
        lists = sorted(name for name, _ in related if _is_index_list(name))
        return Advice(subject, None, f"one value per entry of {', '.join(lists)}: it grows only with "
                      "them, and they cannot be padded without a mask")
    if masks:
        multiple = min(_LARGEST_MULTIPLE, _power_of_two_at_least(largest))
        return Advice(subject, f"pad:{argument}:{axis}:multiple={multiple}:with={masks[0]}",
                      f"pad to a multiple of {multiple} and extend {masks[0]} with zeros, so the mask hides "
                      "the padding")
    if axis == 0 and not has_index_lists:
        start = 2 if dimension.get("ever_one") or (dimension.get("min") or 0) <= 1 else 1
        buckets = [start]
        while buckets[-1] < largest:
            buckets.append(buckets[-1] * 2)
        companions = sorted(name for name, other in related if other == 0)
        return Advice(subject, f"pad:{argument}:0:buckets={','.join(map(str, buckets))}"
                      + "".join(f":with={name}" for name in companions[:1]),
                      f"bucket the batch to {', '.join(map(str, buckets))} rows; the padded rows are cut from "
                      "the outputs (rows of a batch do not see each other in most models: the replay checks)")
    if axis == 0 and has_index_lists:
        return Advice(subject, None, "rows that index lists point into or sum over cannot be padded without a "
                      "mask: padded rows would enter every sum, mean or softmax over them")
    return Advice(subject, None, "no mask says which part is real: padding it changes what the model computes "
                  "over it (a convolution, a sum or a mean sees the padded values)")


def advise(catalog: dict) -> list[Advice]:
    """The catalog's advice in the order of the cumulative chain: casts, then layouts, then
    paddings; the ones that do not apply among them, in the same order."""
    failures = _failures(catalog)
    arguments = list(catalog.get("arguments") or [])

    def order(name: str) -> tuple[int, str]:
        return (arguments.index(name), name) if name in arguments else (len(arguments), name)

    def inputs_of(kind: str) -> list[str]:
        return sorted({name for f in failures if f["kind"] == kind for name in f.get("inputs", [])}, key=order)

    advice = [_cast(catalog, name) for name in inputs_of("dtype_mismatch")]
    advice += [Advice(name, f"contiguous:{name}", "it arrives in more than one memory layout (channels-last or "
                      "permuted views); make it contiguous") for name in inputs_of("stride_mismatch")]
    dimensions = {d["dim"]: d for d in catalog.get("dimensions", [])}
    sized = {dim for f in failures if f["kind"] in _SIZE_KINDS for dim in f.get("dims", []) if dim in dimensions}
    has_index_lists = any(_is_index_list(name) for name in arguments)
    index_dims = {other for dim, d in dimensions.items() if _is_index_list(d["input"]) for other in d.get("equal_to", [])
                  if not _is_index_list(dimensions.get(other, {}).get("input", ""))}
    for dim in sorted(sized, key=lambda d: (order(dimensions[d]["input"]), dimensions[d]["axis"])):
        if _is_mask(dimensions[dim]["input"]):
            continue  # padded as its argument's companion
        advice.append(_padding(catalog, dimensions[dim], has_index_lists, index_dims))
    return advice


def suggested_chain(advice: list[Advice]) -> tuple[str, ...]:
    """The specs of the advice that applies, in order."""
    return tuple(a.spec for a in advice if a.spec is not None)
