"""The set-up of a plan that has a compile-cache bundle (``guardscope bundle DIR``), measured by
``verify``: two fresh processes with new, empty cache folders compile with the bundle's backend
on its device, once without the bundle and once loading it (then replaying the corpus, so the
graphs from the cache are proven too). The parent side starts them through the verification's
own child runner (:func:`measure_bundle`); :func:`bundle_status` reads the two results. Beside
:mod:`.verify_precompiled`, the same for precompiled graphs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .. import store
from ..errors import GuardscopeError
from .setup import isolated_caches


def measure_bundle(out_dir: Path, name: str, split: list[str], run_child: Callable[..., dict[str, Any]], *,
                   timeout: float) -> dict[str, Any] | None:
    """Set-up of a plan in fresh processes with empty cache folders, without and with its bundle
    (None when the plan has no bundle). ``status``: ``used`` (every graph came from the cache),
    ``partial`` (some compiled from scratch), ``not used`` (the bundle was refused: ``reason``),
    ``not measured`` (a child could not run here, e.g. no GPU for a CUDA bundle), ``crashed``
    (a child died: the plan crashes under the production backend)."""

    try:
        manifest = store.read_bundle_manifest(out_dir, name)
    except GuardscopeError as exc:
        return {"status": "not used", "reason": str(exc), "without": None, "with": None}
    if manifest is None:
        return None
    measured: dict[str, Any] = {
        key: manifest.get(key) for key in ("file", "bytes", "torch_version", "device", "device_name", "graphs")
    }
    measured["backend"] = (manifest.get("compile") or {}).get("backend")
    for mode in ("without", "with"):
        options = [*split, "--backend", str(measured["backend"]), "--device", str(measured["device"])]
        with isolated_caches() as caches:
            measured[mode] = run_child(out_dir, name, f"{name}-{mode}-bundle",
                                       options + (["--bundle"] if mode == "with" else []),
                                       timeout=timeout, env=caches)
    status, reason = bundle_status(measured["without"], measured["with"], f"{measured['backend']} on {measured['device']}")
    measured.update(status=status, reason=reason)
    return measured


def bundle_status(without: dict[str, Any], with_: dict[str, Any], where: str) -> tuple[str, str | None]:
    """(status, reason) of a bundle from its two set-up results; see :func:`measure_bundle`. Pure."""
    for mode, run in (("without", without), ("with", with_)):
        if run["status"] == "crashed":
            return "crashed", f"set-up with {where} {mode} the bundle crashed: {run['reason']}"
    for run in (without, with_):
        if run["status"] == "skipped":
            return "not measured", run["reason"]
    load = with_.get("bundle_load") or {}
    if load.get("status") != "loaded":
        return "not used", load.get("reason") or f"the bundle was {load.get('status')}"
    cache = with_["cache"]
    if cache["fxgraph_misses"]:
        return "partial", (f"{cache['fxgraph_misses']} graph(s) compiled from scratch despite the bundle "
                           f"({cache['fxgraph_hits']} from the cache)")
    return "used", None
