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

:func:`dynamo_settings` reads the settings a corpus records of production's process (those that
differ from torch's defaults: ``ConfigModule._config[name].default``), :func:`dynamo_defaults`
torch's own values, and :func:`applied_settings` puts the guard-changing ones in place for a
replay. :func:`warn_once` warns about compile options a manifest names that are not applied.

:func:`held_call_settings`: the settings a ``torch.compile(dynamic=True/False)`` callable makes
around each of its calls (``torch._dynamo.eval_frame.make_set_enable_dynamic``, a closure patcher
that saves them on entry and puts them back on exit), held from the first of several threads'
calls in flight to the last, where torch keeps a setting for the whole process (2.11): there the
threads' saves and restores interleave and can leave a setting changed for good.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Any, Iterator

import torch

from .versions import supports_per_thread_config


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


def allow_graphs(count: int) -> None:
    """Raise Dynamo's per-frame recompile limit to ``count`` when it is lower, for good: every
    graph a generated warmup compiled stays usable, and the limit still stops a frame that keeps
    recompiling beyond them. A limit already higher is left as it is."""
    config = torch._dynamo.config
    name = _recompile_limit_names()[0]
    if getattr(config, name) < count:
        setattr(config, name, int(count))


@contextlib.contextmanager
def recompile_limits(limit: int, accumulated: int, fail_on_limit: bool) -> Iterator[None]:
    """Dynamo's recompile limits set to production's for the block (both may be lower than now),
    and whether reaching one fails the call (``fail_on_recompile_limit_hit``, where torch has it)."""
    names = _recompile_limit_names()
    settings: dict[str, Any] = {f"torch._dynamo.config.{names[0]}": int(limit),
                                f"torch._dynamo.config.{names[1]}": int(accumulated)}
    if "fail_on_recompile_limit_hit" in _entries():
        settings["torch._dynamo.config.fail_on_recompile_limit_hit"] = bool(fail_on_limit)
    with patched_config(settings):
        yield


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


# The Dynamo settings a corpus records when production changed them: the recompile limits and
# what Dynamo does at one (modelled by the analysis, never applied: the replay raises the limits
# to observe past them), and the settings that change which guards Dynamo installs (applied by
# the replay). A name this torch lacks is left out.
LIMIT_SETTINGS = ("recompile_limit", "accumulated_recompile_limit", "fail_on_recompile_limit_hit")
GUARD_SETTINGS = ("automatic_dynamic_shapes", "assume_static_by_default", "specialize_int", "specialize_float",
                  "capture_scalar_outputs", "capture_dynamic_output_shape_ops", "force_parameter_static_shapes")
DYNAMO_SETTINGS = LIMIT_SETTINGS + GUARD_SETTINGS


def _entries() -> dict[str, Any]:
    # torch's ConfigModule keeps each setting's declaration, with its default, in _config.
    return getattr(torch._dynamo.config, "_config", {})


def dynamo_defaults() -> dict[str, Any]:
    """torch's own value of each of :data:`DYNAMO_SETTINGS` this torch has."""
    entries = _entries()
    return {name: entries[name].default for name in DYNAMO_SETTINGS if name in entries}


def dynamo_settings() -> dict[str, Any]:
    """The :data:`DYNAMO_SETTINGS` this thread's Dynamo config holds that differ from torch's
    defaults (torch 2.13 keeps a setting made in code per thread: read it on the thread that
    serves)."""
    config = torch._dynamo.config
    return {name: getattr(config, name) for name, default in dynamo_defaults().items()
            if getattr(config, name) != default}


@contextlib.contextmanager
def applied_settings(settings: dict[str, Any]) -> Iterator[list[str]]:
    """The guard-changing :data:`GUARD_SETTINGS` of ``settings`` (a corpus's recorded Dynamo
    settings) in place for the block; yields the names given that are not applied (a limit, which
    is modelled instead, or a name this torch does not have)."""
    entries = _entries()
    applied = {f"torch._dynamo.config.{name}": value for name, value in settings.items()
               if name in GUARD_SETTINGS and name in entries}
    skipped = sorted(name for name in settings if name not in GUARD_SETTINGS or name not in entries)
    with patched_config(applied):
        yield skipped


DUCK_SHAPE_SETTING = "torch.fx.experimental._config.use_duck_shape"


def dynamic_call_settings(dynamic: bool | None) -> dict[str, Any]:
    """The Dynamo settings a ``torch.compile(..., dynamic=dynamic)`` callable puts in place around
    each of its calls, as ``torch._dynamo.eval_frame.make_set_enable_dynamic`` makes them (versions
    read: the same in 2.11.0, 2.13.0 and 2.14.1; tests/unit/test_torch_internals.py checks them
    against the installed torch): True assumes every dim dynamic, False none and no automatic
    dynamic either; None (torch's default) changes nothing."""
    if dynamic is None:
        return {}
    if dynamic:
        return {"assume_static_by_default": False}
    return {"automatic_dynamic_shapes": False, "assume_static_by_default": True}


_held_lock = threading.Lock()
_held: dict[tuple[tuple[str, Any], ...], list[Any]] = {}  # settings -> [calls in flight, the values before]


@contextlib.contextmanager
def held_call_settings(dynamic: bool | None) -> Iterator[None]:
    """The block is one call of a ``torch.compile(dynamic=dynamic)`` callable that other threads may
    call at the same time: its settings (:func:`dynamic_call_settings`) are held from the first
    call in to the last out, and the values before are put back after the last.

    Where torch keeps a setting made in code for the whole process (not
    :func:`~guardscope.torch_compat.versions.supports_per_thread_config`: 2.11.0), each call saves
    the settings on entry and restores them on exit, and threads interleave: A saves the default
    and sets True's ``assume_static_by_default=False``, B saves A's value, A restores the default, B
    restores A's value, which stays. Seen on torch 2.11.0 (6 threads calling a ``dynamic=True``
    module): every later ``torch.compile(dynamic=None)`` in the process then compiled its first
    graph with dynamic dims and floats. Held here, every call saves and restores the held value.
    Elsewhere (per-thread settings, or ``dynamic=None``), nothing."""
    settings = dynamic_call_settings(dynamic)
    if not settings or supports_per_thread_config():
        yield
        return
    config = torch._dynamo.config
    key = tuple(sorted(settings.items()))
    with _held_lock:
        held = _held.setdefault(key, [0, None])
        if held[0] == 0:
            held[1] = {name: getattr(config, name) for name in settings}
            for name, value in settings.items():
                setattr(config, name, value)
        held[0] += 1
    try:
        yield
    finally:
        with _held_lock:
            held[0] -= 1
            if held[0] == 0:
                for name, value in held[1].items():
                    setattr(config, name, value)
                del _held[key]


def warn_once(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=2)
