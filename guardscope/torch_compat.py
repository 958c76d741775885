"""Every touch of torch internals, in one place, each gated on what the installed torch has.

guardscope supports torch 2.9 to 2.14. Private APIs used here, and why:

* ``torch._logging._internal.trace_log`` / ``TorchLogsFormatter(trace=True)``: the structured
  trace that tlparse reads (``TORCH_TRACE``). Attaching our own handler captures it in-process.
* ``torch._dynamo.eval_frame._debug_get_cache_entry_list``: the cache entries of a code object,
  each with its ``compile_id`` and ``guard_manager``; ``guard_manager.check(f_locals)`` evaluates
  an entry's guards without running anything (about 5-15 us).
* ``torch._dynamo.config.recompile_limit`` (named ``cache_size_limit`` before 2.6; 2.9+ keeps the
  old name as an alias) and ``accumulated_recompile_limit``.
* ``torch.fx.experimental._config.use_duck_shape``: duck sizing.
* ``torch.compiler.save_cache_artifacts`` / ``load_cache_artifacts`` (public since 2.7, same
  signature in 2.11 and 2.13) and the cache counters in ``torch._dynamo.utils.counters``
  (``inductor.fxgraph_cache_hit/miss``, ``aot_autograd.autograd_cache_hit/miss``): compile-cache
  bundles. The backend and inductor settings of a compiled module are read from its Dynamo
  context (``OptimizedModule.dynamo_ctx.callback``, unwrapped through
  ``_torchdynamo_orig_backend`` down to ``torch._TorchCompileInductorWrapper``/``_TorchCompileWrapper``).
"""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from typing import Any, Callable, Iterator

import torch

TESTED_RANGE = ((2, 9), (2, 14))


def torch_version() -> str:
    return str(torch.__version__).split("+")[0]


def version_tuple(version: str | None = None) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version or torch_version())
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def check_supported_version() -> str | None:
    """Return a warning text when the installed torch is outside the tested range."""
    current = version_tuple()
    low, high = TESTED_RANGE
    if low <= current <= high:
        return None
    return (
        f"torch {torch_version()} is outside the range guardscope is tested on "
        f"({low[0]}.{low[1]}-{high[0]}.{high[1]}); guard texts it cannot parse are kept as 'other'"
    )


# --- structured trace -------------------------------------------------------------------------


def trace_logger() -> logging.Logger:
    """The ``torch.__trace`` logger tlparse's input is written to."""
    from torch._logging import _internal

    return _internal.trace_log


def trace_formatter() -> logging.Formatter:
    """The formatter torch itself uses for ``TORCH_TRACE`` files, so tlparse can read ours."""
    from torch._logging import _internal

    return _internal.TorchLogsFormatter(trace=True)


# --- Dynamo state ------------------------------------------------------------------------------


def reset_dynamo() -> None:
    """Forget every compiled graph and counter, so a replay starts from a cold process."""
    torch._dynamo.reset()


def _recompile_limit_names() -> tuple[str, str]:
    config = torch._dynamo.config
    # torch >= 2.6 renamed cache_size_limit to recompile_limit (the old name stays an alias).
    if hasattr(config, "recompile_limit"):
        return "recompile_limit", "accumulated_recompile_limit"
    return "cache_size_limit", "accumulated_cache_size_limit"  # pragma: no cover - torch < 2.6


@contextlib.contextmanager
def raised_recompile_limit(limit: int) -> Iterator[None]:
    """Raise Dynamo's per-frame and accumulated recompile limits; restore them on exit."""
    config = torch._dynamo.config
    names = _recompile_limit_names()
    saved = {name: getattr(config, name) for name in names}
    try:
        for name in names:
            setattr(config, name, max(limit, saved[name]))
        yield
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


@contextlib.contextmanager
def patched_config(settings: dict[str, Any]) -> Iterator[None]:
    """Apply ``{"torch.fx.experimental._config.use_duck_shape": False, ...}``; restore on exit."""
    import importlib

    saved: list[tuple[Any, str, Any]] = []
    try:
        for dotted, value in settings.items():
            module_name, _, attr = dotted.rpartition(".")
            module = importlib.import_module(module_name)
            saved.append((module, attr, getattr(module, attr)))
            setattr(module, attr, value)
        yield
    finally:
        for module, attr, value in reversed(saved):
            setattr(module, attr, value)


DUCK_SHAPE_SETTING = "torch.fx.experimental._config.use_duck_shape"


# --- cache entries and guards ------------------------------------------------------------------


def code_of(model: Any) -> Any:
    """The code object Dynamo compiles for ``model(...)``: ``forward`` for an nn.Module."""
    if isinstance(model, torch.nn.Module):
        return type(model).forward.__code__
    function = getattr(model, "__func__", model)
    return getattr(function, "__code__", None)


def cache_entries(code: Any) -> list[tuple[str, Callable[[dict[str, Any]], bool]]] | None:
    """``[(compile_id, check)]`` for a code object, in lookup order; None if torch hides them."""
    getter = getattr(torch._dynamo.eval_frame, "_debug_get_cache_entry_list", None)
    if getter is None or code is None:
        return None
    try:
        entries = getter(code)
    except Exception:  # pragma: no cover - defensive: a torch build without the debug hook
        return None
    result = []
    for entry in entries:
        manager = getattr(entry, "guard_manager", None)
        check = getattr(manager, "check", None)
        if check is None:
            return None
        result.append((str(entry.compile_id), check))
    return result


def _compile_order(compile_id: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", compile_id))


def entries_by_age(code: Any) -> list[tuple[str, Callable[[dict[str, Any]], bool]]]:
    """The cache entries of ``code``, earliest-compiled first."""
    return sorted(cache_entries(code) or [], key=lambda entry: _compile_order(entry[0]))


def first_accepting(entries: list[tuple[str, Callable[[dict[str, Any]], bool]]], f_locals: dict[str, Any]) -> str | None:
    """Compile id of the first entry whose guards accept these frame locals, or None.

    Given :func:`entries_by_age`, that is the earliest-compiled accepting graph: Dynamo itself
    tries entries most-recently-used first, so which of two accepting graphs runs depends on
    history, and the earliest-compiled one is the stable answer (None: the call would compile).
    """
    for compile_id, check in entries:
        try:
            if check(f_locals):
                return compile_id
        except Exception:
            continue
    return None


def warn_once(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=2)


def supports_unbacked_sources() -> bool:
    """``torch.compiler.config.unbacked_sources`` (env ``TORCH_COMPILE_UNBACKED_SOURCES``) with
    per-dim ``:N`` entries; present in torch 2.13, absent in older releases."""
    config = getattr(torch.compiler, "config", None)
    if config is None or not hasattr(config, "unbacked_sources"):
        return False
    from torch._dynamo.variables import builder

    return hasattr(builder, "_parse_source_entry")


def is_recompile_limit_error(exc: BaseException) -> bool:
    """Dynamo's "recompile limit reached" under fullgraph=True (FailOnRecompileLimitHit in 2.9+;
    older releases raise RecompileLimitExceeded / CacheLimitExceeded)."""
    names = {"FailOnRecompileLimitHit", "RecompileLimitExceeded", "CacheLimitExceeded"}
    return any(cls.__name__ in names for cls in type(exc).__mro__)


# --- compile-cache bundles ---------------------------------------------------------------------


def _cache_api(name: str) -> Callable[..., Any]:
    function = getattr(torch.compiler, name, None)
    if function is None:  # pragma: no cover - torch < 2.7
        from .errors import CompileOptionsError

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
    """``{"backend", "dynamic", "options"}`` of a ``torch.compile``d module, as far as torch
    exposes them (``options``: inductor's config changes from ``mode=``/``options=``); None
    for a compiled function or an object torch does not describe."""
    context = getattr(compiled, "dynamo_ctx", None)
    backend = getattr(context, "callback", None)
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
    return {"backend": name, "dynamic": getattr(backend, "dynamic", None), "options": _plain(options)}


def device_name(device: Any) -> str:
    """What a compile cache depends on of a device: the GPU's name, or the CPU architecture."""
    target = torch.device(device)
    if target.type == "cuda":
        return str(torch.cuda.get_device_name(target))
    import platform

    return f"{target.type} ({platform.machine() or 'unknown'})"
