"""Pure: catalog + :class:`~guardscope.fixes.plan.UnbackedPlan` -> the text of ``unbacked.py``."""

from __future__ import annotations

from typing import Any

from ... import plans
from ..plan import UnbackedPlan, check_identifier
from . import render
from .common import base_context, bundle_file


def environment_form(plan: UnbackedPlan, supports_unbacked_sources: bool) -> dict[str, str]:
    """``TORCH_COMPILE_UNBACKED_SOURCES`` for the same marks, where torch reads it (top-level
    arguments only: a dim inside an argument is marked by ``mark()`` alone)."""
    if not supports_unbacked_sources or not plan.dims or any(d.nested for d in plan.dims):
        return {}
    sources = ",".join(f"L['{d.argument}']:{d.axis}" for d in plan.dims)
    return {"TORCH_COMPILE_UNBACKED_SOURCES": sources}


def render_unbacked(
    catalog: dict[str, Any], plan: UnbackedPlan, *, plain_graphs: int, supports_unbacked_sources: bool,
    spec: Any = None,
) -> str:
    """``spec``: the plan's shapes_spec form (:class:`~guardscope.fixes.spec_plan.SpecPlan`), or None
    when it was not tried; its usage line compiles without ``dynamic=`` (torch takes none with it)."""
    without_dynamic = {**catalog, "compile": {**catalog["compile"], "dynamic": None}}
    spec_call = base_context(without_dynamic, spec.graphs if spec is not None else None)["compile_call"]
    return render(
        "unbacked.py.j2",
        **base_context(catalog, plan.graphs),
        bundle_file=bundle_file("unbacked"),
        arguments=tuple(check_identifier(a) for a in catalog.get("arguments", [])),
        dims=plan.dims,
        skipped=plan.skipped,
        frames=plan.frames,
        added_breaks=plan.added_breaks,
        duck_shape=plan.duck_shape,
        duck_reason=plan.duck_reason,
        residual=list(plan.residual),
        graphs=plan.graphs,
        plain_graphs=plain_graphs,
        environment=environment_form(plan, supports_unbacked_sources),
        spec=spec,
        spec_call=spec_call,
        spec_dir=plans.SPEC_WARMUP_DIR,
    )
