"""Compile-cache bundles: the compile-cache artifacts saved and loaded, the cache counters, and
what a cache was made with (a compiled module's backend and settings, the device).

* ``torch.compiler.save_cache_artifacts`` / ``load_cache_artifacts`` (public since 2.7, same
  signature in 2.11 and 2.13) and the cache counters in ``torch._dynamo.utils.counters``
  (``inductor.fxgraph_cache_hit/miss``, ``aot_autograd.autograd_cache_hit/miss``): compile-cache
  bundles. The backend and inductor settings of a compiled module are read from its Dynamo
  context (``OptimizedModule.dynamo_ctx.callback``, unwrapped through
  ``_torchdynamo_orig_backend`` down to ``torch._TorchCompileInductorWrapper``/``_TorchCompileWrapper``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .versions import torch_version


def _cache_api(name: str) -> Callable[..., Any]:
    function = getattr(torch.compiler, name, None)
    if function is None:  # pragma: no cover - torch < 2.7
        from ..errors import CompileOptionsError

        raise CompileOptionsError(
            f"torch {torch_version()} has no torch.compiler.{name}; compile-cache bundles need torch >= 2.7"
        )
    return function


def _artifact_counts(info: Any) -> dict[str, int]:
    artifacts = getattr(info, "artifacts", None) or {}
    return {str(kind): len(keys) for kind, keys in sorted(artifacts.items()) if keys}


def save_compile_cache() -> tuple[bytes, dict[str, int]] | None:
    """Every compile-cache artifact this process created (inductor graphs, AOTAutograd entries,
    autotuning, PGO...) as bytes, with a count per kind; None when nothing was recorded (a
    backend without caches, or caches disabled)."""
    saved = _cache_api("save_cache_artifacts")()
    if saved is None:
        return None
    data, info = saved
    return bytes(data), _artifact_counts(info)


def load_compile_cache(data: bytes) -> dict[str, int] | None:
    """Write the artifacts of :func:`save_compile_cache` into this process's cache folders
    (``TORCHINDUCTOR_CACHE_DIR``...); the count per kind, or None when torch cannot read them."""
    info = _cache_api("load_cache_artifacts")(data)
    return None if info is None else _artifact_counts(info)


CACHE_COUNTERS = {
    "fxgraph_hits": ("inductor", "fxgraph_cache_hit"),
    "fxgraph_misses": ("inductor", "fxgraph_cache_miss"),
    "aot_autograd_hits": ("aot_autograd", "autograd_cache_hit"),
    "aot_autograd_misses": ("aot_autograd", "autograd_cache_miss"),
}


def compile_cache_counters() -> dict[str, int]:
    """Inductor FX-graph and AOTAutograd cache hits and misses so far in this process: a graph
    compiled from a cache is a hit, one generated from scratch a miss."""
    counters = torch._dynamo.utils.counters
    return {name: int(counters[group][key]) for name, (group, key) in CACHE_COUNTERS.items()}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    return repr(value)


def compiled_settings(compiled: Any) -> dict[str, Any] | None:
    """``{"backend", "dynamic", "options", "mode", "beyond_mode", "recompile_limit",
    "isolate_recompiles"}`` of a ``torch.compile``d module or
    function (a compiled function keeps its context in its closure), as far as torch exposes them
    (``options``: inductor's config changes from ``mode=``/``options=``, ``mode`` the mode they hold
    (:func:`_inductor_mode`; None for another backend), ``beyond_mode`` the changes that mode does
    not make; ``recompile_limit``: torch 2.13's per-call limit, on the frame converter, None when
    not given; ``isolate_recompiles``: 2.13's ``isolate_recompiles=True``, an id on the context);
    None for an object torch does not describe."""
    context = getattr(compiled, "dynamo_ctx", None)
    if context is None and getattr(compiled, "_torchdynamo_orig_callable", None) is not None:
        for cell in getattr(compiled, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if hasattr(value, "callback") and hasattr(value, "__enter__"):
                context = value
                break
    backend = getattr(context, "callback", None)
    per_call = getattr(backend, "_recompile_limit", None)
    for _ in range(16):  # unwrap convert_frame's wrappers down to torch.compile's own object
        inner = getattr(backend, "_torchdynamo_orig_backend", None)
        if inner is None:
            break
        backend = inner
    name = getattr(backend, "compiler_name", None)
    if not isinstance(name, str):
        return None
    options = getattr(backend, "config", None)
    if options is None:
        options = getattr(backend, "kwargs", {})
    plain = _plain(options)
    mode = _inductor_mode(plain) if name == "inductor" else None
    isolated = getattr(context, "_isolate_recompiles_id", -1)
    return {"backend": name, "dynamic": getattr(backend, "dynamic", None), "options": plain,
            "mode": mode, "beyond_mode": _beyond_mode(plain, mode) if name == "inductor" else {},
            "recompile_limit": per_call if isinstance(per_call, int) else None,
            "isolate_recompiles": isinstance(isolated, int) and isolated >= 0}


def _beyond_mode(options: Any, mode: str | None) -> dict[str, Any]:
    """Inductor's config changes that ``mode`` does not make: what ``options=`` added."""
    if not isinstance(options, dict):
        return {}
    try:
        from torch._inductor import list_mode_options

        made = list_mode_options().get(mode or "default") or {}
    except Exception:  # pragma: no cover - a torch without the listing
        made = {}
    return {key: value for key, value in sorted(options.items()) if made.get(key, object()) != value}


def _inductor_mode(options: Any) -> str | None:
    """The ``mode=`` whose settings inductor's config holds (the one holding the most of them:
    ``max-autotune`` over ``reduce-overhead``), ``"default"`` when it holds none; torch keeps the
    settings, not the mode's name, so ``options={"triton.cudagraphs": True}`` reads as
    ``reduce-overhead``, which it is. None when torch lists no modes."""
    try:
        from torch._inductor import list_mode_options

        modes = list_mode_options()
    except Exception:  # pragma: no cover - a torch without the listing
        return None
    if not isinstance(options, dict):
        return "default"
    held = [(len(settings), mode) for mode, settings in modes.items()
            if settings and mode != "lite" and all(options.get(key) == value for key, value in settings.items())]
    return max(held)[1] if held else "default"


def cache_device_name(device: Any) -> str:
    """What a compile cache depends on of a device: the GPU's name, or the CPU architecture
    (:func:`device_name` is the accelerator's name alone, None on the CPU)."""
    target = torch.device(device)
    if target.type == "cuda":
        return str(torch.cuda.get_device_name(target))
    import platform

    return f"{target.type} ({platform.machine() or 'unknown'})"
