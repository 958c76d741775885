"""What every section shares: size limits that keep the page readable, the explanation of each
failure kind, and small formatters (also jinja filters)."""

from __future__ import annotations

import re

from typing import Any

from .. import plans
from ..catalog.stalls import stall_seconds

LIST_SHOWN = 200             # rows of long tables (compiles, failed samples)
GUARD_TEXTS_SHOWN = 50       # distinct guard texts listed per failure kind
DIFF_FAILURES_SHOWN = 20     # failures added or removed listed per compile in a diff

# What each failure kind means, for a reader who has never seen a Dynamo guard.
KIND_EXPLANATIONS: dict[str, tuple[str, str]] = {
    "duck_sizing": (
        "Duck sizing",
        "When two dimensions had the same size while a graph was compiled, Dynamo gave them one "
        "shared symbol and guarded that they stay equal; an input where they differ fails that "
        "guard. Turning duck sizing off (torch.fx.experimental._config.use_duck_shape = False) "
        "gives every dimension a symbol of its own.",
    ),
    "zero_one_specialization": (
        "0/1 specialization",
        "Dynamo treats sizes 0 and 1 as constants (empty tensors and broadcasting behave "
        "differently), so a graph compiled for larger sizes guards 2 <= size and a size of 0 or "
        "1 compiles a graph of its own. Marking the dimension with mark_unbacked compiles one "
        "graph for every size, 0 and 1 included.",
    ),
    "size_mismatch": (
        "Size mismatch",
        "The graph was compiled with this dimension static (a fixed size: it was 0 or 1 at "
        "compile time, or the compile was not dynamic) and the input has another size.",
    ),
    "stride_mismatch": (
        "Stride mismatch",
        "The input's memory layout (strides: a transpose, a slice, an expanded or size-0/1 view) "
        "differs from the one the graph was compiled for. Copying inputs to a fresh contiguous layout "
        "before the call removes it (x.clone(memory_format=torch.contiguous_format): .contiguous() "
        "leaves a view whose odd strides sit on size-0/1 dims as it is).",
    ),
    "dtype_mismatch": (
        "Dtype mismatch",
        "The input has another dtype (float32 vs bfloat16, int64 vs int32) than the graph was "
        "compiled for; each dtype needs its own graph. Cast at the boundary if one dtype will do.",
    ),
    "device_mismatch": (
        "Device mismatch",
        "The input lives on another device than the graph was compiled for; each device needs "
        "its own graph.",
    ),
    "dispatch_key_mismatch": (
        "Dispatch key mismatch",
        "The input is on the same device as before but is another kind of tensor inside PyTorch: "
        "usually one was created under torch.inference_mode (an inference tensor) and the other "
        "was not, and each kind needs its own graph. Create the inputs the same way for every "
        "call: all outside inference_mode, or all inside it.",
    ),
    "requires_grad_mismatch": (
        "requires_grad mismatch",
        "The input's requires_grad flag differs from the compiled graph's: a graph that records "
        "autograd differs from an inference graph. Use no_grad or inference_mode consistently.",
    ),
    "ndim_mismatch": (
        "Number of dimensions",
        "The input has a different number of dimensions than the graph was compiled for.",
    ),
    "type_mismatch": (
        "Python type mismatch",
        "An argument has another Python type (int vs float, a tensor vs a list, list vs tuple) than "
        "the graph was compiled for.",
    ),
    "optional_argument": (
        "Optional argument",
        "An optional argument was passed in some calls and left out (or None, or an empty list) "
        "in others, and every combination of present and absent arguments gets a graph of its "
        "own. Passing it always (e.g. an all-ones attention mask instead of None) keeps one "
        "graph; otherwise warm up each combination your traffic uses.",
    ),
    "list_length": (
        "List length",
        "A list or tuple argument has another length. Dynamo unrolls containers, so every length "
        "gets its own graph; one stacked tensor instead of a list avoids it.",
    ),
    "constant_value": (
        "Constant value",
        "A Python scalar, string or flag changed value. Dynamo bakes non-tensor arguments into the "
        "graph as constants; values that vary per call are better passed as tensors.",
    ),
    "scalar_value": (
        "Python number range",
        "A Python int or float argument (or a number read with .item()) was compared in the code, "
        "e.g. 0 <= n <= 1 or value > 0.45, and the graph only holds on one side of that bound. "
        "Pass the number as a tensor or mark it dynamic; when the comparison is a data-dependent "
        "branch (the graph breaks at .item()), torch.where or torch.cond keeps both sides in one "
        "graph.",
    ),
    "shape_relation": (
        "Shape relation in your code",
        "A guard from the model's own shape logic (a branch such as if x.shape[0] > 16, an "
        "assertion, a reshape): the graph took one branch and the input needs another. Marking the "
        "dimension unbacked cannot remove it; one warmup sample per branch can.",
    ),
    "operator_guard": (
        "Size check inside a torch operator",
        "A PyTorch operator, not your code, added this guard: its implementation picks another "
        "path (kernel, algorithm, broadcasting) depending on the input's size or layout, e.g. "
        "conv2d above a size threshold, and this input fell on the other side. It is not a bug in "
        "your code; warm up with one input on each side of the threshold so both graphs exist.",
    ),
    "global_state": (
        "Global state",
        "State outside the arguments changed between calls: grad mode, autocast, the default "
        "dtype, a torch function mode. Keep it fixed around the compiled model.",
    ),
    "other": (
        "Unclassified",
        "A guard guardscope could not classify, kept verbatim so nothing is lost. The raw text is "
        "torch's own; tlparse on the trace shows the guard in context.",
    ),
}

VERIFY_STATUSES = ("passed", "partial", "failed", "crashed", "infeasible", "skipped")


# --- formatting (also jinja filters) ---------------------------------------------------------

def number_text(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def option_text(value: Any) -> str:
    """A compile option as the user wrote it in Python."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(":".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v) for v in value) or "—"
    return str(value)


def percent_text(part: int, whole: int) -> str:
    if not whole:
        return "0 %"
    share = 100 * part / whole
    return f"{share:.1f} %" if share >= 0.1 or not part else "<0.1 %"


# --- context builders (pure) -----------------------------------------------------------------

def compile_seconds(timings: dict | None) -> dict[str, float]:
    return {
        c["compile_id"]: c["seconds"]
        for c in (timings or {}).get("compiles", [])
        if c.get("seconds") is not None
    }


def bench_stalls(catalog: dict, bench: dict | None) -> dict[str, float]:
    """Per analysis compile, the latency ``guardscope bench`` measured for the request that
    compiled it under the plain compile (production's backend and limits: the whole request, its
    compile included); {} without a measured plain-compile row. A request that compiled graphs of
    several frames is given to the first of them."""
    row = next((r for r in (bench or {}).get("strategies", []) if r.get("name") == plans.COMPILE
                and r.get("status") == "ok"), None)
    if row is None:
        return {}
    latency = {e["sample"]: e["latency_s"] for e in [row.get("first_compile") or {}, *row.get("recompile_requests", [])]
               if e.get("sample") is not None and e.get("latency_s") is not None}
    found: dict[str, float] = {}
    for compile_ in sorted(catalog.get("compiles", []), key=lambda c: (c["sample"] if c["sample"] is not None else -1,
                                                                          c["compile_id"])):
        if compile_["sample"] in latency and compile_.get("fail_type") is None:
            found.setdefault(compile_["compile_id"], latency.pop(compile_["sample"]))
    return found


def compile_costs(catalog: dict, timings: dict | None, bench: dict | None = None) -> dict[str, Any]:
    """What each compile cost, in the currency the report can stand behind: production's stall
    as its recorder timed it (``production_compiles``, backend production's) where the corpus
    recorded it; else the compiling requests' latency ``guardscope bench`` measured with
    production's backend (``bench.json``); else the analysis's own compile seconds
    (``timings.json``, with the analysis's backend: eager by default, which says little of
    production's inductor stall). ``seconds``: compile id -> seconds; ``source``:
    ``"production"`` | ``"bench"`` | ``"analysis"`` | None (no figures); ``label``: the words for
    them; ``analysis_seconds``: the analysis's own total, always."""
    analysis = compile_seconds(timings)
    recorded = stall_seconds(catalog.get("production_compiles"))
    analysis_backend = (catalog.get("compile") or {}).get("backend")
    own = {"analysis_seconds": sum(analysis.values()) if analysis else None, "analysis_backend": analysis_backend}
    if recorded:
        backend = (catalog.get("production_compiles") or {}).get("backend") or "production's backend"
        return {"seconds": recorded, "source": "production", "backend": backend,
                "label": f"production's compile stall ({backend}, as its recorder timed it)", **own}
    measured = bench_stalls(catalog, bench)
    if measured:
        backend = ((bench or {}).get("compile") or {}).get("backend") or "production's backend"
        where = (bench or {}).get("device_name") or (bench or {}).get("device") or "this machine"
        return {"seconds": measured, "source": "bench", "backend": backend,
                "label": f"the compiling request's latency guardscope bench measured ({backend} on {where}; "
                         "production did not record its own)", **own}
    return {"seconds": analysis, "source": "analysis" if analysis else None, "backend": analysis_backend,
            "label": f"the analysis's compile time ({analysis_backend} backend, this machine; not production's stall)",
            **own}


def topology_of_compile(catalog: dict) -> dict[str, int]:
    return {t["compile_id"]: t["id"] for t in catalog["topologies"] if t.get("compile_id") is not None}


def torch_version_tuple(catalog: dict) -> tuple[int, ...]:
    """(major, minor) of the torch the analysis ran with (the catalog's ``torch_version``)."""
    return tuple(int(part) for part in re.findall(r"\d+", str(catalog.get("torch_version", "")))[:2])


def verification_by_name(verification: dict | None) -> dict[str, dict]:
    return {a["name"]: a for a in (verification or {}).get("artifacts", [])}


def count_text(value: Any) -> str:
    return "n/a" if value is None else number_text(value)
