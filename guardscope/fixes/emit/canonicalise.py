"""Pure: catalog + :class:`~guardscope.fixes.canonical.CanonicalPlan` -> the text of
``canonicalise.py``."""

from __future__ import annotations

from typing import Any

from ..canonical import CanonicalPlan
from ..plan import check_identifier
from . import render
from .common import base_context


def merge_words(merges: tuple[tuple[int, ...], ...]) -> str:
    """What one transform of the chain merges, for the comment on its line."""
    if not merges:
        return "merges no further topologies"
    return "merges " + "; ".join(" + ".join(f"T{t}" for t in group) for group in merges)


def render_canonicalise(catalog: dict[str, Any], plan: CanonicalPlan) -> str:
    positional = tuple(check_identifier(name) for name in plan.positional)
    return render(
        "canonicalise.py.j2",
        **base_context(catalog),
        positional=positional,
        steps=[{"spec": step.spec, "merges": merge_words(step.merges)} for step in plan.steps],
        warmup=list(plan.warmup),
        graphs=plan.graphs,
        topologies=plan.topologies,
        canonical_topologies=plan.canonical_topologies,
        raised=list(plan.raised),
        pads=[step.spec for step in plan.steps if step.spec.startswith("pad:")],
    )
