"""Context shared by every generated module."""

from __future__ import annotations

from typing import Any


def base_context(catalog: dict[str, Any]) -> dict[str, Any]:
    from .. import __version__

    compile_options = catalog["compile"]
    call = []
    for key in ("dynamic", "fullgraph", "mode"):
        value = compile_options.get(key)
        if value is not None and not (key == "fullgraph" and value is False):
            call.append(f", {key}={value!r}")
    return {
        "version": __version__,
        "model": catalog["model"],
        "compile_call": "".join(call),
        "compile_options": {key: compile_options.get(key) for key in ("dynamic", "fullgraph", "mode")},
        "device": compile_options.get("device", "cpu"),
        "inference_mode": bool(compile_options.get("inference_mode", True)),
    }


def bundle_file(artifact: str) -> str:
    """The compile-cache bundle a generated module loads, beside it (``guardscope bundle DIR``)."""
    from ..output import bundle_files

    return bundle_files(artifact)[0]


def topology_words(catalog: dict[str, Any], topology_id: int, limit: int = 3) -> str:
    facts = catalog["topologies"][topology_id]["facts"]
    text = "; ".join(facts[:limit])
    return text + ("; ..." if len(facts) > limit else "")
