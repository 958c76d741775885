"""Context shared by every generated module."""

from __future__ import annotations

from typing import Any

from ... import __version__, torch_compat
from ...options import PRODUCTION_FIELDS, compile_arguments, production_graph_limit, production_options
from ...store import bundle_files
from ..plan import check_identifier


def base_context(catalog: dict[str, Any], graphs: int | None = None) -> dict[str, Any]:
    """What every generated module says; ``graphs``: the graphs its plan compiles, which may need
    more than production's recompile limit allows (``limit_note`` then says how it gets them)."""
    compile_options = catalog["compile"]
    call, note = compile_arguments(compile_options), None
    limit = production_graph_limit(catalog)
    if graphs is not None and graphs > limit:
        if torch_compat.supports_per_call_recompile_limit():
            call += f", recompile_limit={graphs}"
            note = (f"It compiles {graphs} graphs, more than production's recompile limit of {limit}: compile "
                    f"with recompile_limit={graphs} as above (this torch's per-call limit; no global setting "
                    "changes). Compiled without it, warmup() raises the global limit instead.")
        else:
            note = (f"It compiles {graphs} graphs, more than production's recompile limit of {limit}: warmup() "
                    f"raises torch._dynamo.config.recompile_limit to {graphs}, a global setting of the process "
                    "(torch 2.13's per-call torch.compile(recompile_limit=N) avoids that).")
    method = catalog.get("method")
    return {
        "version": __version__,
        "model": catalog["model"],
        # A corpus of a module's method (generate() traffic: forward) compiles that method in place,
        # as generate() calls it; the usage line says so.
        "method": check_identifier(method, "method name") if method else None,
        "compile_call": call,
        "limit_note": note,
        "compile_options": {key: compile_options.get(key) for key in PRODUCTION_FIELDS},
        "device": compile_options.get("device", "cpu"),
        "grad_mode": production_options({"compile": compile_options}).grad_mode,
    }


def limit_words(catalog: dict[str, Any], graphs: int, module: str) -> str | None:
    """What a module does about production's recompile limit when its plan compiles more graphs
    than it allows, for the command's output (None when it fits): it is never raised unsaid."""
    limit = production_graph_limit(catalog)
    if graphs <= limit:
        return None
    default = torch_compat.dynamo_defaults().get("recompile_limit", 8)
    head = (f"{module} compiles {graphs} graphs, more than production's recompile limit of {limit} "
            + ("(torch's default)" if limit == default else f"(torch's default is {default})"))
    if torch_compat.supports_per_call_recompile_limit():
        return (f"{head}: its usage compiles with torch.compile(..., recompile_limit={graphs}); compiled without it, "
                f"its warmup() raises torch._dynamo.config.recompile_limit to {graphs} for the process")
    return f"{head}: its warmup() raises torch._dynamo.config.recompile_limit to {graphs} for the process"


def bundle_file(artifact: str) -> str:
    """The compile-cache bundle a generated module loads, beside it (``guardscope bundle DIR``)."""
    return bundle_files(artifact)[0]


def topology_words(catalog: dict[str, Any], topology_id: int, limit: int = 3) -> str:
    facts = catalog["topologies"][topology_id]["facts"]
    text = "; ".join(facts[:limit])
    return text + ("; ..." if len(facts) > limit else "")
