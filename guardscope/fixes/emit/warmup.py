"""Pure: catalog + :class:`~guardscope.fixes.warmup_plan.WarmupPlan` -> the text of ``warmup.py``."""

from __future__ import annotations

from typing import Any

from ..warmup_plan import WarmupPlan
from . import render
from ...store import precompiled_files
from .common import base_context, bundle_file, topology_words


def render_warmup(catalog: dict[str, Any], plan: WarmupPlan) -> str:
    steps = []
    for step in plan.steps:
        known = step.topology >= 0
        probed = catalog["topologies"][step.topology].get("probed") if known else None
        label = f"T{step.topology} (probed {probed}, from probe/corpus)" if probed else f"T{step.topology}"
        describe = f"{label}: {topology_words(catalog, step.topology)}" if known else "a call no graph served"
        if step.hands_on:
            describe += f" | step {step.step} of its request, run for the KV cache it hands on"
        elif step.step:
            describe += f" | step {step.step} of its request, on the KV cache the steps before extended"
        if step.covers:
            describe += " | also serves " + ", ".join(f"T{c}" for c in step.covers)
        steps.append({"sample": step.sample, "topology": step.topology if known else None,
                      "compile_id": step.compile_id, "describe": describe})
    return render(
        "warmup.py.j2",
        **base_context(catalog, plan.graphs),
        bundle_file=bundle_file("warmup"),
        precompiled_file=precompiled_files("warmup")[0],
        steps=steps,
        handing_on=sum(1 for step in plan.steps if step.hands_on),
        graphs=plan.graphs,
        one_per_topology=plan.one_per_topology,
        topologies=plan.topologies,
        probed=sum(1 for t in catalog["topologies"] if t.get("probed")),
    )
