"""Making compile-cache bundles: each plan compiled with the production backend in a fresh
process whose inductor and triton cache folders are new and empty, its caches saved beside its
module (``DIR/<plan>.compile-cache.bin`` + ``.json``). Loading one is :mod:`guardscope.bundle`'s
job, in the generated modules.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any, Callable

from .. import plans, store
from ..bundle import FORMAT, plan_hash
from ..errors import BundleError, CompileOptionsError, GuardscopeError
from ..options import BACKENDS, production_options
from .isolation import child_environment, run_module, watch_parent
from .setup import cache_dirs_empty, isolated_caches, set_up_plan

# --- making one ----------------------------------------------------------------------------------


def make_bundle(out_dir: str | Path, artifact: str, *, backend: str, device: str, timeout: float,
                corpus: str | Path | None = None) -> dict[str, Any]:
    """Compile ``artifact``'s plan in a fresh process with empty caches and write its bundle and
    manifest into ``out_dir``; returns the manifest. Raises :class:`BundleError` when it fails."""

    out = Path(out_dir)
    result_path = out / f".bundle-{artifact}.json"
    with isolated_caches() as caches:
        where = ["--corpus", str(Path(corpus).resolve())] if corpus is not None else []
        outcome = run_module("guardscope.proving.bundling", [artifact, str(out), str(result_path), "--backend", backend,
                                                   "--device", device, *where], result_path, timeout=timeout,
                             what="the process", environment=child_environment(caches))
    if outcome.timed_out:
        raise BundleError(f"compiling the {artifact} plan for its bundle took over {timeout:.0f} s; "
                          "raise --timeout")
    if outcome.result is None:
        raise BundleError(f"compiling the {artifact} plan for its bundle failed: {outcome.failure}")
    if "error" in outcome.result:
        raise BundleError(outcome.result["error"])
    return outcome.result


def _make_in_child(out: Path, artifact: str, backend: str, device: str, corpus: Path | None = None) -> dict[str, Any]:
    """Run the plan with the production backend in this (fresh) process and save its caches."""
    from .. import torch_compat

    if not cache_dirs_empty():
        return {"error": "the compile-cache folders are not empty: start this through 'guardscope bundle', "
                         "which gives the compile new, empty ones"}
    _, catalog, corpus, model = store.load_inputs(out, corpus)
    options = production_options(catalog, backend=backend, device=device)
    module, runner, seconds, _ = set_up_plan(artifact, out, model, options, use_bundle=False,
                                             warm_sample=corpus.sample(0) if len(corpus) else None)
    saved = torch_compat.save_compile_cache()
    if saved is None:
        return {"error": f"torch saved no compile-cache artifacts after compiling the {artifact} plan with backend "
                         f"{backend!r}: bundles need a backend with caches (inductor), and inductor's caches on "
                         "(TORCHINDUCTOR_FORCE_DISABLE_CACHES, TORCHINDUCTOR_FX_GRAPH_CACHE=0 turn them off)"}
    data, artifacts = saved
    manifest = {
        **artifact_manifest(artifact, store.bundle_files(artifact), data, module, options, runner),
        "inference_mode": options.inference_mode,
        "graphs": runner.graphs(),
        "artifacts": artifacts,
        "cache": torch_compat.compile_cache_counters(),
        "compile_seconds": round(seconds, 3),
    }
    write_artifact(out, store.bundle_files(artifact), data, manifest)
    return manifest


def artifact_manifest(artifact: str, files: tuple[str, str], data: bytes, module: Any, options: Any,
                      runner: Any) -> dict[str, Any]:
    """What every artifact saved beside a plan's module states first (a bundle, precompiled graphs):
    its format, file, size and checksum, the plan it was made for, and the torch, device and
    compile settings it was made with, as :func:`guardscope.bundle.check_manifest` reads them."""
    import torch

    from .. import __version__, torch_compat

    return {
        "format": FORMAT,
        "artifact": artifact,
        "file": files[0],
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "plan_hash": plan_hash(module.PLAN, module.WARMUP_DIR),
        "torch_version": str(torch.__version__),
        "device": options.device,
        "device_name": torch_compat.cache_device_name(runner.device),
        "compile": {"backend": options.backend, "dynamic": options.dynamic, "fullgraph": options.fullgraph,
                    "mode": options.mode},
        "compiled": torch_compat.compiled_settings(runner.compiled),
        "grad_mode": options.grad_mode,
        "guardscope_version": __version__,
    }


def write_artifact(out: Path, files: tuple[str, str], data: bytes, manifest: dict[str, Any]) -> None:
    """The artifact's bytes, then its manifest (a manifest never names bytes not yet written)."""
    store.write_bytes(out / files[0], data)
    store.write_json(out / files[1], manifest)


def production_backend(catalog: dict[str, Any], corpus_dir: Path) -> str:
    """The backend production compiles with: the corpus manifest's ``compile.backend``, else
    inductor (an analysis runs with eager, so the catalog's backend is not it)."""
    from ..corpus import read_manifest

    return str(read_manifest(corpus_dir).compile.get("backend") or "inductor")


def make_bundles(
    out: Path,
    catalog: dict[str, Any],
    *,
    corpus: str | Path | None = None,
    artifacts: tuple[str, ...] | None = None,
    backend: str | None = None,
    device: str | None = None,
    timeout: float = 3600.0,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Compile each bundleable plan (:data:`guardscope.plans.BUNDLED`) with the production backend
    on ``device`` in a fresh process with empty compile caches, and save its compile-cache bundle
    beside its module: ``DIR/<plan>.compile-cache.bin`` + ``.json``. Run it on a machine of the
    production kind. ``corpus`` overrides the analysed corpus (looked for only when the backend
    is not given, and by each child). Returns the manifests."""
    chosen = artifacts or plans.BUNDLED
    unknown = sorted(set(chosen) - set(plans.BUNDLED))
    if unknown:
        raise CompileOptionsError(f"unknown plans {unknown}; bundles are made for {', '.join(plans.BUNDLED)}")
    missing = [plans.MODULES[name] for name in chosen if not (out / plans.MODULES[name]).is_file()]
    if missing:
        raise BundleError(f"{', '.join(missing)} not found in {out}: run 'guardscope emit-warmup {out}' first")
    backend = backend or production_backend(catalog, store.corpus_dir_of(out, catalog, corpus))
    if backend not in BACKENDS:
        raise CompileOptionsError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    device = device or catalog["compile"].get("device") or "cpu"
    manifests = []
    for name in chosen:
        if progress is not None:
            progress(name)
        manifests.append(make_bundle(out, name, backend=backend, device=device, timeout=timeout, corpus=corpus))
    return manifests


def child_main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m guardscope.proving.bundling")
    parser.add_argument("artifact", choices=plans.BUNDLED)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("result", type=Path)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--corpus", type=Path, default=None)
    arguments = parser.parse_args(argv)
    try:
        result = _make_in_child(arguments.out_dir, arguments.artifact, arguments.backend, arguments.device,
                                arguments.corpus)
    except GuardscopeError as exc:
        result = {"error": str(exc)}
    store.write_json(arguments.result, result)
    return 0


if __name__ == "__main__":
    watch_parent()  # the parent gone (killed), this process and its own children end too
    sys.exit(child_main(sys.argv[1:]))
