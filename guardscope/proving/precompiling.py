"""Making precompiled warmups: the warmup plan's graphs compiled ahead of time, one fullgraph graph
per warmup step in the plan's order, with production's backend, options and grad mode, in a fresh
process whose compile caches are new and empty; saved beside the plan as
``DIR/warmup.precompiled.bin`` + ``.json``. Loading one is :mod:`guardscope.precompiled`'s job,
in the generated warmup module.

What cannot be precompiled is said in one line (:func:`precompile_refusal` before any process
starts, the child for what only torch can tell) and nothing is written: the compile-cache bundle,
when there is one, stays the warm start.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import plans, store
from ..errors import CompileOptionsError, GuardscopeError, PrecompileError
from ..options import BACKENDS, production_options
from ..precompiled import forward_module
from .bundling import artifact_manifest, production_backend, write_artifact
from .isolation import child_environment, import_file, run_module
from .setup import cache_dirs_empty, isolated_caches

ARTIFACT = plans.WARMUP  # the plan that is precompiled: its steps are whole calls, no per-call marks


def precompile_refusal(catalog: dict[str, Any], fix: dict[str, Any] | None) -> str | None:
    """Why this analysis's warmup cannot be precompiled, known before anything compiles, or None. Pure."""
    if fix is not None and fix.get("status") == "infeasible":
        return f"emit-warmup found the warmup infeasible ({fix.get('reason')})"
    breaks = catalog.get("graph_breaks") or []
    frames = catalog.get("frames") or []
    if breaks or len(frames) > 1:
        where = "; ".join(str(b.get("reason") or b.get("location") or b)[:120] for b in breaks[:2]) if breaks else \
            ", ".join(str(f.get("label")) for f in frames[1:3])
        return (f"the model has graph breaks ({len(frames)} frames: {where}); torch's AOT compile needs one "
                "fullgraph graph per call")
    if catalog.get("method"):
        return (f"production compiles the method {catalog['method']!r}, not the module: torch's AOT compile "
                "precompiles a torch.compile'd nn.Module's forward")
    return None


def make_precompiled(out: Path, catalog: dict[str, Any], *, corpus: str | Path | None = None,
                     backend: str | None = None, device: str | None = None, timeout: float = 3600.0) -> dict[str, Any]:
    """Precompile the warmup plan in DIR in a fresh process with empty compile caches and write
    ``warmup.precompiled.bin`` and its manifest beside ``warmup.py``; returns the manifest.
    Raises :class:`PrecompileError` with the one-line reason when it cannot be."""
    module = plans.MODULES[ARTIFACT]
    if not (out / module).is_file():
        raise PrecompileError(f"{module} not found in {out}: run 'guardscope emit-warmup {out}' first")
    refusal = precompile_refusal(catalog, store.fix_entry(out, ARTIFACT))
    if refusal is not None:
        raise PrecompileError(f"the warmup cannot be precompiled: {refusal}")
    backend = backend or production_backend(catalog, store.corpus_dir_of(out, catalog, corpus))
    if backend not in BACKENDS:
        raise CompileOptionsError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    device = device or catalog["compile"].get("device") or "cpu"
    result_path = out / f".precompile-{ARTIFACT}.json"
    where = ["--corpus", str(Path(corpus).resolve())] if corpus is not None else []
    with isolated_caches() as caches:
        outcome = run_module("guardscope.proving.precompiling", [str(out), str(result_path), "--backend", backend,
                                                                 "--device", device, *where], result_path,
                             timeout=timeout, what="the process", environment=child_environment(caches))
    if outcome.timed_out:
        raise PrecompileError(f"precompiling the warmup took over {timeout:.0f} s; raise --timeout")
    if outcome.result is None:
        raise PrecompileError(f"precompiling the warmup failed: {outcome.failure}")
    if "error" in outcome.result:
        raise PrecompileError(f"the warmup cannot be precompiled: {outcome.result['error']}")
    return outcome.result


def _step_dynamic(dynamic: bool | None, step: int) -> bool | None:
    """``dynamic=`` for a step's trace: production's; under Dynamo's default (None) the first graph
    static and later ones dynamic, as automatic dynamic makes a recompile's changed dims (a
    fully dynamic graph accepts at least what that one would)."""
    if dynamic is None:
        return None if step == 0 else True
    return dynamic


def _build_in_child(out: Path, backend: str, device: str, corpus_dir: Path | None) -> dict[str, Any]:
    """Trace and compile every warmup step ahead of time in this (fresh) process and save them."""
    from .. import torch_compat
    from ..corpus import load_corpus
    from ..replay.runner import Runner

    if not cache_dirs_empty():
        return {"error": "the compile-cache folders are not empty: start this through 'guardscope precompile', "
                         "which gives the compile new, empty ones"}
    for reason in (torch_compat.aot_compile_missing(), torch_compat.inductor_caches_off()):
        if reason is not None:
            return {"error": reason}
    _, catalog, corpus, model = store.load_inputs(out, corpus_dir)
    options = production_options(catalog, backend=backend, device=device)
    module = import_file(out / plans.MODULES[ARTIFACT])
    warmup = load_corpus(module.WARMUP_DIR)
    if warmup.requests is not None:
        return {"error": "its steps carry model state (generate()'s KV cache, handed from step to step): torch's "
                         "AOT compile traces each call alone"}
    with torch_compat.applied_settings(dict(options.dynamo_config)):
        runner = Runner(model, replace(options, fullgraph=True))
        if len(corpus):
            runner.warm_device(corpus.sample(0))
        steps = []
        for step, sample in enumerate(warmup):
            call = runner.prepare(sample, mark=False)
            dynamic = _step_dynamic(options.dynamic, step)
            contexts = [lambda: torch_compat.grad_context(options.grad_mode),
                        lambda dynamic=dynamic: torch_compat.dynamic_shapes(dynamic)]
            steps.append((call.args, call.kwargs, contexts))
        started = time.perf_counter()
        try:
            graphs = torch_compat.aot_compile_module(runner.compiled, steps)
            graph_bytes = torch_compat.save_aot_module(runner.compiled)
        except Exception as exc:  # noqa: BLE001 - torch's refusal (a graph break, a backend that cannot serialize...)
            text = str(exc).strip().splitlines()
            return {"error": f"torch's AOT compile refused it with backend {backend!r}: {type(exc).__name__}: "
                             f"{text[0] if text else ''}"}
        torch_compat.synchronize(runner.device)
        seconds = time.perf_counter() - started
        # torch can save graphs it cannot load back (a module whose __setstate__ needs state the
        # saved guards leave out, as PyG's MessagePassing): load them once here, or refuse.
        try:
            torch_compat.load_aot_graphs(Runner(model, replace(options, fullgraph=True)).compiled, graph_bytes)
        except Exception as exc:  # noqa: BLE001 - torch's loader, whatever it raises
            text = str(exc).strip().splitlines()
            return {"error": f"torch saved its graphs but cannot load them back: {type(exc).__name__}: "
                             f"{text[0] if text else ''}"}
    # The kernels compiled for the graphs travel with them: a new replica would compile them again.
    carried = {name: store.read_cache_files(folder) for name, folder in torch_compat.kernel_cache_dirs().items()}
    data = torch_compat.pack_artifact(graph_bytes, carried)
    kernels = sum(len(files) for files in carried.values())
    files = store.precompiled_files(ARTIFACT)
    manifest = {
        **artifact_manifest(ARTIFACT, files, data, module, replace(options, fullgraph=True), runner),
        "model_module": forward_module(torch_compat.forward_owner(model) or model),
        "graphs": len(graphs),
        "kernel_files": kernels,
        "steps": [int(step[0]) for step in module.STEPS],
        "build_seconds": round(seconds, 3),
    }
    write_artifact(out, files, data, manifest)
    return manifest


def child_main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m guardscope.proving.precompiling")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("result", type=Path)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--corpus", type=Path, default=None)
    arguments = parser.parse_args(argv)
    try:
        result = _build_in_child(arguments.out_dir, arguments.backend, arguments.device, arguments.corpus)
    except GuardscopeError as exc:
        result = {"error": str(exc)}
    store.write_json(arguments.result, result)
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
