"""Context shared by every generated module."""

from __future__ import annotations

from typing import Any

from ... import __version__
from ...options import PRODUCTION_FIELDS, compile_arguments
from ...store import bundle_files


def base_context(catalog: dict[str, Any]) -> dict[str, Any]:
    compile_options = catalog["compile"]
    return {
        "version": __version__,
        "model": catalog["model"],
        "compile_call": compile_arguments(compile_options),
        "compile_options": {key: compile_options.get(key) for key in PRODUCTION_FIELDS},
        "device": compile_options.get("device", "cpu"),
        "inference_mode": bool(compile_options.get("inference_mode", True)),
    }


def bundle_file(artifact: str) -> str:
    """The compile-cache bundle a generated module loads, beside it (``guardscope bundle DIR``)."""
    return bundle_files(artifact)[0]


def topology_words(catalog: dict[str, Any], topology_id: int, limit: int = 3) -> str:
    facts = catalog["topologies"][topology_id]["facts"]
    text = "; ".join(facts[:limit])
    return text + ("; ..." if len(facts) > limit else "")
