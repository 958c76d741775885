"""The proof of a precompiled warmup (``guardscope precompile DIR``): a fresh process with new,
empty compile caches loads the graphs into the model on its device (timed: that is a replica's
start-up), replays the corpus through guardscope's dispatch, and reports every compile (a call
no precompiled graph accepted compiled one: the proof fails), the calls each graph served and
those that went to the ordinary compile path, and each topology's first call compared with the
model run eagerly.

The parent side (:func:`measure_precompiled`) starts that child through the verification's own
child runner; the child side (:func:`precompiled_outcome`) runs after the replay, in the child.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .. import plans, store
from .setup import isolated_caches

# How close a compiled graph's output must be to eager's: inductor fuses and reorders float
# arithmetic, so a compiled model matches eager to these, not bit for bit.
COMPILED_TOLERANCE = {"float64": (1e-7, 1e-7), "float32": (1e-4, 1e-4), "float16": (1e-2, 1e-3),
                      "bfloat16": (2e-2, 1e-2)}


def measure_precompiled(out_dir: Path, split: list[str], run_child: Callable[..., dict[str, Any]], *,
                        timeout: float) -> dict[str, Any] | None:
    """The warmup's precompiled graphs proven in a fresh process with empty caches, on the device
    and backend they were built for (None when there are none). ``status``: ``used`` (loaded,
    every call served without a compile, outputs equal), ``failed`` (a call compiled, or an
    output differs), ``not used`` (refused on load: ``reason``), ``not measured`` (it cannot run
    here, e.g. no GPU for a CUDA build), ``crashed``."""
    manifest = store.read_precompiled_manifest(out_dir, plans.WARMUP)
    if manifest is None:
        return None
    measured: dict[str, Any] = {key: manifest.get(key) for key in
                                ("file", "bytes", "torch_version", "device", "device_name", "graphs", "build_seconds",
                                 "grad_mode")}
    measured["backend"] = (manifest.get("compile") or {}).get("backend")
    options = [*split, "--backend", str(measured["backend"]), "--device", str(measured["device"]), "--precompiled"]
    with isolated_caches() as caches:
        measured["run"] = run_child(out_dir, plans.WARMUP, f"{plans.WARMUP}-precompiled", options, timeout=timeout,
                                    env=caches)
    measured["status"], measured["reason"] = precompiled_status(measured["run"])
    return measured


def precompiled_status(run: dict[str, Any]) -> tuple[str, str | None]:
    """(status, reason) of a precompiled warmup from its child's result; see :func:`measure_precompiled`. Pure."""
    if run["status"] == "crashed":
        return "crashed", f"the precompiled set-up crashed: {run['reason']}"
    if run["status"] == "skipped":
        return "not measured", run["reason"]
    load = run.get("precompiled_load") or {}
    if load.get("status") != "loaded":
        return "not used", load.get("reason") or f"the precompiled warmup was {load.get('status')}"
    served = run.get("precompiled") or {}
    if run.get("replay_recompiles"):
        return "failed", (f"{run['replay_recompiles']} call(s) no precompiled graph accepted compiled during the replay, "
                          f"first at sample {run['recompile_samples'][0]}")
    outputs = served.get("outputs") or {}
    if not outputs.get("equal", True):
        return "failed", f"outputs differ from the eager model's (largest difference {outputs.get('max_diff')})"
    return "used", None


def precompiled_outcome(compiled: Any, model: Any, runner: Any, corpus: Any, catalog: dict[str, Any]) -> dict[str, Any]:
    """In the child, after the replay: what the dispatch served, and each topology's first call
    through it against the model run eagerly (``outputs``: equal within
    :data:`COMPILED_TOLERANCE`, the largest difference)."""
    from ..fixes.whatif import output_tensors
    from ..precompiled import precompiled_forward

    dispatch = precompiled_forward(compiled)
    found: dict[str, Any] = {"stats": dispatch.stats.to_json() if dispatch is not None else None}
    equal, largest, compared = True, 0.0, 0
    for topology in catalog.get("topologies", []):
        if topology.get("probed"):
            continue
        call = runner.prepare(corpus.sample(topology["first_sample"]), mark=False)
        with runner.grad_context():
            ours, theirs = compiled(*call.args, **call.kwargs), model(*call.args, **call.kwargs)
        same, difference = _close(output_tensors(ours), output_tensors(theirs))
        equal, largest, compared = equal and same, max(largest, difference), compared + 1
    found["outputs"] = {"equal": equal, "max_diff": largest, "topologies": compared}
    return found


def _close(ours: list[tuple[str, Any]], theirs: list[tuple[str, Any]]) -> tuple[bool, float]:
    """Whether two outputs' tensors are close (:data:`COMPILED_TOLERANCE`), and the largest difference."""
    import torch

    if [path for path, _ in ours] != [path for path, _ in theirs]:
        return False, float("inf")
    equal, largest = True, 0.0
    for (_, a), (_, b) in zip(ours, theirs):
        a, b = a.detach().cpu(), b.detach().cpu()
        if a.shape != b.shape or a.dtype != b.dtype:
            return False, float("inf")
        if a.numel() == 0:
            continue
        if a.is_floating_point():
            rtol, atol = COMPILED_TOLERANCE.get(str(a.dtype).removeprefix("torch."), (0.0, 0.0))
            equal = equal and bool(torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True).all())
            largest = max(largest, float((a.double() - b.double()).abs().nan_to_num(0.0).max()))
        else:
            equal = equal and bool(torch.equal(a, b))
    return equal, largest
