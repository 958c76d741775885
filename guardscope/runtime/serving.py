"""Serve a compiled model with a guardscope plan: no blocking recompiles, and a corpus of what fell back.

``guardscope emit-warmup DIR`` writes fixes proven on a recorded corpus. In production, inputs
will come that the corpus never held (a new topology), and each would stop the process to
recompile. :func:`serve` applies a plan from ``DIR`` and then serves so that such an input runs
the original model eagerly instead, once, without compiling — and records it, so the next
``guardscope analyze`` sees it::

    import guardscope.runtime

    served = guardscope.runtime.serve(model, "out/", fallback_dir="fallbacks/")
    with served:
        for request in requests:
            reply(served(**request))
    print(served.stats)        # calls, fallbacks, recorded, dropped, ...

This module sets serving up: it chooses the plan (:func:`choose_plan`, pure), makes the
recorders, compiles the model and applies the plan, and returns the
:class:`~guardscope.runtime.served_model.ServedModel`, whose module says how each call is served.
The plan's own logic stays in the generated modules, which are imported from ``DIR`` by path and
called as their docstrings say.
"""

from __future__ import annotations

import itertools
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .. import plans, store, torch_compat
from ..corpus.spec import respec
from ..corpus.storage.weights import model_print
from ..errors import ServeError
from ..model import INFERENCE_MODE, NO_GRAD
from ..options import production_fields, production_options
from ..proving.isolation import import_file
from ..replay.compiling import compile_model
from .background import DEFAULT_SWITCH_INTERVAL, PROCESS, background_strategy, check_background_options
from .child_compile import ChildCompiler
from .recording import FallbackRecorder
from .traffic import TrafficRecorder
from .served_model import ServedModel

PLANS = plans.SERVED


# --- choosing the plan (pure) --------------------------------------------------------------------


def choose_plan(
    requested: str, fixes: dict[str, Any] | None, verification: dict[str, Any] | None
) -> tuple[str, str | None]:
    """The plan to apply and a warning (or None), from ``fixes.json`` and ``verification.json``.

    ``"auto"`` takes the first of ``warmup``, ``unbacked`` that ``guardscope verify`` passed:
    the warmup set needs no per-call marks and its graphs keep every specialization; the
    ``mark_unbacked`` plan compiles fewer graphs but turns duck sizing off (for the process before
    torch 2.13, on each compiling thread on 2.13) and marks every call. Without ``verification.json`` it takes
    ``warmup`` and warns that the plan is unproven. An explicit plan is taken as asked, with a
    warning when verification failed it.
    """
    if requested not in ("auto", *PLANS):
        raise ServeError(f"plan {requested!r} is not one of auto, {', '.join(PLANS)}")
    statuses = {}
    if verification is not None:
        statuses = {
            entry.get("name"): entry.get("status")
            for entry in verification.get("artifacts", [])
            if isinstance(entry, dict)
        }
    if requested != "auto":
        status = statuses.get(requested)
        if status is not None and status != "passed":
            return requested, f"plan {requested!r} did not pass 'guardscope verify' ({status})"
        return requested, None
    if fixes is None:
        raise ServeError(
            "no fixes.json in the plan directory: run 'guardscope emit-warmup DIR' first, "
            "or pass plan='warmup' or plan='unbacked'"
        )
    emitted = {entry.get("name") for entry in fixes.get("artifacts", [])
               if isinstance(entry, dict) and entry.get("status", "ok") == "ok"}  # not an infeasible one
    available = [name for name in PLANS if name in emitted]
    if not available:
        raise ServeError("fixes.json lists no warmup or unbacked plan: re-run 'guardscope emit-warmup DIR'")
    if verification is None:
        return available[0], (
            f"serving plan {available[0]!r}, which was not verified: run 'guardscope verify DIR' "
            "to prove it on the corpus first"
        )
    passed = [name for name in available if statuses.get(name) == "passed"]
    if not passed:
        found = ", ".join(f"{name} {statuses.get(name) or 'not verified'}" for name in available)
        raise ServeError(
            f"no plan passed 'guardscope verify' ({found}); see DIR/verification.json and the "
            "report, or pass plan='warmup' or plan='unbacked' to serve one anyway"
        )
    return passed[0], None


# --- serve ---------------------------------------------------------------------------------------


def _import_plan(path: Path) -> Any:
    if not path.is_file():
        raise ServeError(f"{path} not found: run 'guardscope emit-warmup {path.parent}' first")

    return import_file(path)


def _model_device(model: Any) -> str | None:
    """The device of a module's first parameter or buffer (None: no tensors, or a function)."""
    if not isinstance(model, torch.nn.Module):
        return None
    tensor = next(itertools.chain(model.parameters(), model.buffers()), None)
    return str(tensor.device) if tensor is not None else None


def _recorders(spec_for: Any, recorded: dict[str, Any], fallback_dir: str | Path | None,
               traffic_dir: str | Path | None, flush_every: float, *, fallback: dict[str, Any],
               traffic_options: dict[str, Any]) -> tuple[Any, Any]:
    """serve()'s recorders, each where its folder was given: the fallback recorder, then the
    traffic recorder, marked as serving calls only from the first call on (the warmup's compiles
    are start-up, not calls' stalls); the first closed if the second cannot be made."""
    recorder = traffic = None
    if fallback_dir is not None:
        recorder = FallbackRecorder(fallback_dir, model=spec_for(fallback_dir), flush_every=flush_every,
                                    **fallback, **recorded)
    try:
        if traffic_dir is not None:
            traffic = TrafficRecorder(traffic_dir, model=spec_for(traffic_dir), flush_every=flush_every,
                                      **traffic_options, **recorded)
            traffic.marks_calls()
    except BaseException:
        if recorder is not None:
            recorder.close()
        raise
    return recorder, traffic


def serve(
    model: Any,
    plan_dir: str | Path,
    *,
    plan: str = "auto",
    backend: str = "inductor",
    device: str | None = None,
    inference_mode: bool | None = None,
    grad_mode: str | None = None,
    fallback_dir: str | Path | None = None,
    max_samples: int = 1000,
    max_bytes: int = 256 * 2**20,
    repeat_rate: float = 0.01,
    flush_every: float = 30.0,
    overwrite_fallback: bool = False,
    model_spec: str | None = None,
    eager_on_recompile: bool = True,
    traffic_dir: str | Path | None = None,
    traffic_full_per_signature: int = 1,
    traffic_max_bytes: int = 256 * 2**20,
    overwrite_traffic: bool = False,
    background_compile: bool | str = False,
    max_background_compiles: int = 8,
    background_switch_interval: float | None = DEFAULT_SWITCH_INTERVAL,
    background_timeout: float = 600.0,
    background_gc_freeze: bool = True,
    background_yield: bool = True,
) -> ServedModel:
    """Compile ``model`` as analysed in ``plan_dir``, apply a plan, and return a
    :class:`ServedModel` whose calls never compile.

    ``plan_dir`` is a ``guardscope analyze`` output after ``guardscope emit-warmup`` (the analysed
    corpus need not be deployed); ``plan="auto"`` picks the plan as :func:`choose_plan` says. The
    warmup starts from its precompiled graphs where ``guardscope precompile`` made them for this
    torch, device, backend and grad mode, else from its compile-cache bundle, else by compiling.
    Every keyword, its default and what it changes: docs/runtime.md's table of ``serve()``'s
    options (``inference_mode=True``/``False`` is the older spelling of ``grad_mode``'s
    ``"inference_mode"``/``"grad"``). Raises :class:`~guardscope.errors.ServeError` (or
    ``CatalogError``) for a plan directory it cannot serve, before anything is compiled.
    """
    started = time.perf_counter()
    plan_dir = Path(plan_dir)
    if isinstance(model, torch.nn.Module) and torch_compat.compiled_module_original(model) is not None:
        raise ServeError("the model is already compiled: pass the model itself, serve() compiles it")
    catalog, chosen, notes = _read_plan(plan_dir, plan)
    for note in notes:
        warnings.warn(note, RuntimeWarning, stacklevel=2)
    strategy = background_strategy(background_compile, backend)
    background = None if strategy is None else _checked_background(
        max_background_compiles, background_switch_interval, background_gc_freeze, background_yield,
        background_timeout)
    options = _options(catalog, model, backend, device, grad_mode, inference_mode)
    module = _import_plan(plan_dir / plans.MODULES[chosen])
    spec_for = _spec_for(catalog, plan_dir, model_spec)
    # What both recorded corpora say of the model and how production compiles it.
    recorded = {"compile": production_fields(catalog["compile"]), "method": catalog.get("method"),
                "recorded_from": model_print(model), "grad_mode": options.grad_mode}
    recorder, traffic = _recorders(spec_for, recorded, fallback_dir, traffic_dir, flush_every,
                                   fallback={"max_samples": max_samples, "max_bytes": max_bytes,
                                             "repeat_rate": repeat_rate, "overwrite": overwrite_fallback},
                                   traffic_options={"full_per_signature": traffic_full_per_signature,
                                                    "max_bytes": traffic_max_bytes, "overwrite": overwrite_traffic})
    try:
        compiled = _compile_with_plan(model, module, chosen, options)
        child = None if strategy != PROCESS else ChildCompiler(
            plan_dir=plan_dir, plan=chosen, spec_for=spec_for, compile=recorded["compile"],
            method=catalog.get("method"), backend=options.backend, device=options.device,
            grad_mode=options.grad_mode, timeout=background_timeout)
    except BaseException:
        for made in (recorder, traffic):
            if made is not None:
                made.close()
        raise
    unbacked = chosen == "unbacked"
    return ServedModel(
        model=model, compiled=compiled, plan=chosen, plan_dir=plan_dir, options=options,
        mark=module.mark if unbacked else None, configure=module.configure if unbacked else None,
        recorder=recorder, traffic=traffic, eager_on_recompile=eager_on_recompile,
        setup_seconds=time.perf_counter() - started, warnings=notes, background=background, child=child,
    )


def _read_plan(plan_dir: Path, plan: str) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    """The catalog, the plan chosen (:func:`choose_plan`) and the warnings to give: the choice's
    and the installed torch's, where either has one."""
    catalog = store.read_catalog(plan_dir)
    fixes = store.read_document(plan_dir, store.FIXES)
    verification = store.read_document(plan_dir, store.VERIFICATION)
    chosen, warning = choose_plan(plan, fixes, verification)
    return catalog, chosen, tuple(w for w in (warning, torch_compat.check_supported_version()) if w)


def _checked_background(max_compiles: int, switch_interval: float | None, gc_freeze: bool, yield_to_serving: bool,
                        timeout: Any) -> Any:
    """The background compiles' settings, checked (:class:`ServeError` for a timeout that is not
    seconds > 0)."""
    background = check_background_options(max_compiles=max_compiles, switch_interval=switch_interval,
                                          gc_freeze=gc_freeze, yield_to_serving=yield_to_serving)
    if not (type(timeout) in (int, float) and timeout > 0):
        raise ServeError(f"background_timeout must be seconds > 0, got {timeout!r}")
    return background


def _options(catalog: dict[str, Any], model: Any, backend: str, device: str | None, grad_mode: str | None,
             inference_mode: bool | None) -> Any:
    """The analysed production compile options with serve()'s overrides, checked: ``device`` by
    default the model's, ``grad_mode`` from the older ``inference_mode`` spelling where only it is given."""
    if device is None:
        device = _model_device(model)
    if grad_mode is None and inference_mode is not None:
        grad_mode = INFERENCE_MODE if inference_mode else NO_GRAD
    options = production_options(catalog, backend=backend, device=device, grad_mode=grad_mode)
    options.validate()
    return options


def _spec_for(catalog: dict[str, Any], plan_dir: Path, model_spec: str | None) -> Callable[[str | Path], str]:
    """The model spec a corpus recorded in a folder names: ``model_spec``, else the catalog's
    model re-expressed relative to that folder."""
    corpus_dir = plan_dir / catalog["corpus"]["path"]
    return lambda folder: model_spec or respec(catalog["model"], corpus_dir, Path(folder))


def _compile_with_plan(model: Any, module: Any, chosen: str, options: Any) -> Any:
    """The model compiled with the plan applied (the unbacked plan configured first, then the
    plan's warmup run); :class:`ServeError` where this torch does not expose Dynamo's cache
    entries, which serving checks each call against."""
    if chosen == "unbacked":
        module.configure()
    compiled = compile_model(model, options)
    module.warmup(compiled, device=options.device, grad_mode=options.grad_mode)
    if torch_compat.cache_entries(torch_compat.code_of(model)) is None:
        raise ServeError(
            f"torch {torch_compat.torch_version()} does not expose Dynamo's cache entries "
            "(torch._dynamo.eval_frame._debug_get_cache_entry_list), which guardscope.runtime "
            "checks each call against"
        )
    return compiled


__all__ = ["choose_plan", "serve"]
