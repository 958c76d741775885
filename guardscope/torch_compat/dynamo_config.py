"""Dynamo's process-wide settings, changed for a block and put back: its recompile limits (and the
error it raises at one), the config values a replay patches (duck sizing), the guard-latency
profile of a background compile, and a clean slate (:func:`reset_dynamo`).

* ``torch._dynamo.config.recompile_limit`` (named ``cache_size_limit`` before 2.6; 2.9+ keeps the
  old name as an alias) and ``accumulated_recompile_limit``.
* ``torch.fx.experimental._config.use_duck_shape``: duck sizing.
* ``torch._dynamo.guards.profile_guard_manager`` (the name ``CheckFunctionManager`` calls, bound
  from ``torch._C._dynamo.guards``): after each compile it times the new guards once, after
  flushing the CPU caches, for a compile metric; 20-35 ms with the GIL held.
  :func:`without_guard_latency_profile` replaces it while a background compile runs.

:func:`warn_once` warns about compile options a manifest names that are not applied.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Any, Iterator

import torch


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


def is_recompile_limit_error(exc: BaseException) -> bool:
    """Dynamo's "recompile limit reached" under fullgraph=True (FailOnRecompileLimitHit in 2.9+;
    older releases raise RecompileLimitExceeded / CacheLimitExceeded)."""
    names = {"FailOnRecompileLimitHit", "RecompileLimitExceeded", "CacheLimitExceeded"}
    return any(cls.__name__ in names for cls in type(exc).__mro__)


_profile_lock = threading.Lock()
_profile_depth = 0
_profile_saved: Any = None


def _no_guard_latency(*args: Any) -> float:
    return 0.0


@contextlib.contextmanager
def without_guard_latency_profile() -> Iterator[None]:
    """Within the block, Dynamo does not time a new compile's guards: the measurement
    (``profile_guard_manager``: a CPU cache flush, then one guard evaluation) holds the GIL for
    20-35 ms, a stall for every other thread, and only feeds the compile metric
    ``guard_latency_us`` (0 for those compiles). Process-wide; nested or concurrent blocks share
    it, the last one out puts torch's function back. Where torch has no such name, nothing."""
    global _profile_depth, _profile_saved
    try:
        from torch._dynamo import guards
    except ImportError:
        guards = None
    if guards is None or not callable(getattr(guards, "profile_guard_manager", None)):
        yield
        return
    with _profile_lock:
        if _profile_depth == 0:
            _profile_saved = guards.profile_guard_manager
            guards.profile_guard_manager = _no_guard_latency
        _profile_depth += 1
    try:
        yield
    finally:
        with _profile_lock:
            _profile_depth -= 1
            # Put torch's function back, unless someone replaced ours meanwhile (theirs stays).
            if _profile_depth == 0 and guards.profile_guard_manager is _no_guard_latency:
                guards.profile_guard_manager = _profile_saved


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


def warn_once(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=2)
