"""Pure: catalog + :class:`~guardscope.fixes.canonical.CanonicalPlan` -> the text of
``canonicalise.py``."""

from __future__ import annotations

from typing import Any

from ...text import counted
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
        # In words that cannot be read as one count of another thing: "6 topologies into 1
        # topology", "3 graphs", never "6 topologies into 1 (3 graph(s) compiled)".
        topologies_words=counted(plan.topologies, "topology", "topologies"),
        canonical_words=counted(plan.canonical_topologies, "topology", "topologies"),
        graphs_words=counted(plan.graphs, "graph"),
        warmup_words=counted(len(plan.warmup), "transformed sample"),
        raised=list(plan.raised),
        pads=[step.spec for step in plan.steps if step.spec.startswith("pad:")],
    )
