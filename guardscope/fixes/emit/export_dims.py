"""Pure: catalog + :class:`~guardscope.fixes.plan.ExportPlan` -> the text of ``export_dims.py``."""

from __future__ import annotations

from typing import Any

from ..plan import ExportPlan
from . import render
from .common import base_context


def render_export_dims(catalog: dict[str, Any], plan: ExportPlan) -> str:
    shapes: dict[str, list[tuple[int, str]]] = {}
    for dim in plan.dims:
        for argument, axis in dim.members:
            shapes.setdefault(argument, []).append((axis, dim.name))
    for entries in shapes.values():
        entries.sort()
    return render(
        "export_dims.py.j2",
        **base_context(catalog),
        dims=plan.dims,
        warnings=plan.warnings,
        arguments=plan.arguments,
        shapes=shapes,
        margin=plan.margin,
        example_sample=plan.example_sample,
        example_topology=plan.example_topology,
        outside=plan.outside,
        outside_samples=sum(item.samples for item in plan.outside),
        topologies=len(catalog["topologies"]),
    )
