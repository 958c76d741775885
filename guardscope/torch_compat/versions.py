"""Which torch this is, and which of the features guardscope uses it has.

guardscope is tested on torch 2.11 to 2.14 (:data:`TESTED_RANGE`, docs/compat.md); on another release it still runs
and says so (:func:`check_supported_version`). A feature is detected, not inferred from the
version: ``torch.compiler.set_stance`` (:func:`supports_eager_on_recompile`),
``torch.compiler.config.unbacked_sources`` (:func:`supports_unbacked_sources`), a per-call
``recompile_limit`` (:func:`supports_per_call_recompile_limit`), Dynamo settings kept per thread
(:func:`supports_per_thread_config`); the declarative spec's keyword is
``shapes_specs.spec_support``'s. Each gate's docstring names the releases whose sources were read
for it; tests/unit/test_torch_internals.py checks every gate against the installed torch.
"""

from __future__ import annotations

import re

import torch


TESTED_RANGE = ((2, 11), (2, 14))


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


def supports_unbacked_sources() -> bool:
    """``torch.compiler.config.unbacked_sources`` (env ``TORCH_COMPILE_UNBACKED_SOURCES``) with
    per-dim ``:N`` entries (``torch._dynamo.variables.builder._parse_source_entry``). Versions
    read: 2.13.0 and 2.14.1 have both; 2.9.1, 2.10.0, 2.11.0 and 2.12.1 declare the config but
    have no ``_parse_source_entry`` (no per-dim entries), so False there."""
    config = getattr(torch.compiler, "config", None)
    if config is None or not hasattr(config, "unbacked_sources"):
        return False
    from torch._dynamo.variables import builder

    return hasattr(builder, "_parse_source_entry")


def supports_per_call_recompile_limit() -> bool:
    """``torch.compile(..., recompile_limit=N)``: a limit for one compiled callable, which
    replaces the global ``recompile_limit`` while that callable compiles. Versions read: in
    ``torch.compile``'s signature in 2.12.1, 2.13.0 and 2.14.1; absent in 2.9.1, 2.10.0, 2.11.0."""
    import inspect

    return "recompile_limit" in inspect.signature(torch.compile).parameters


def supports_eager_on_recompile() -> bool:
    """``torch.compiler.set_stance("eager_on_recompile")``: added with ``set_stance`` in torch 2.6
    (versions read: present in 2.9.1, 2.10.0, 2.11.0, 2.12.1, 2.13.0 and 2.14.1). Under it a call
    that no cached graph accepts runs eagerly instead of compiling; a graph that accepts still runs."""
    return callable(getattr(torch.compiler, "set_stance", None))


def supports_per_thread_config() -> bool:
    """Whether a Dynamo setting made in code holds for the thread that made it only: torch keeps each
    ``torch._dynamo.config`` entry's ``user_override`` in a ``contextvars.ContextVar`` ("user overrides
    are thread-local", ``torch/utils/_config_module.py``). Versions read: 2.13.0 and 2.14.1 do; 2.11.0
    keeps a plain attribute, one value for the whole process (2.12.1 not read: the gate reads the
    installed torch). Where False, the settings a ``torch.compile(dynamic=...)`` callable saves and
    restores around each call race between threads
    (:func:`guardscope.torch_compat.dynamo_config.held_call_settings`)."""
    import contextvars

    entry = getattr(torch._dynamo.config, "_config", {}).get("assume_static_by_default")
    return isinstance(getattr(entry, "user_override", None), contextvars.ContextVar)
