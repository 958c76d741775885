"""The unbacked plan in torch's declarative form: ``torch.compile(model, dynamic_shapes=...)``
(torch 2.14; ``shapes_spec=`` in 2.13, the keyword detected) naming the same dims
(:mod:`guardscope.torch_compat.shapes_specs`).

It is not the ``mark_unbacked`` plan spelled differently. Torch's rule for a spec is that every
dim it does not name is static, and ``dynamic=`` cannot be given beside it: where production
relies on ``dynamic=True`` or on automatic dynamic shapes for the other dims, the spec compiles a
graph for each of their sizes. So it is replayed on the corpus like the mark_unbacked plan (the
samples that still compile form its own residual warmup), and verified on its own
(``verify``'s ``shapes_spec`` artifact, named so whatever the keyword); the report shows its graphs beside the marks'.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable

from .. import torch_compat
from ..replay.session import ReplayOptions
from .plan import UnbackedPlan, replay_for_residual

OK, INFEASIBLE, UNSUPPORTED = "ok", "infeasible", "unsupported"


@dataclass(frozen=True)
class SpecPlan:
    dims: tuple[tuple[str, int, int], ...]  # (argument path, dim, the tensor's rank)
    residual: tuple[int, ...] = ()  # corpus samples that still compile under the spec
    graphs: int = 0  # graphs it compiles over the corpus, every frame counted
    status: str = OK  # INFEASIBLE: the spec breaks the model; UNSUPPORTED: this torch has none
    reason: str | None = None
    # torch.compile's keyword for the spec on the torch that made the plan: dynamic_shapes (2.14),
    # shapes_spec (2.13); None where it takes none
    keyword: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "keyword": self.keyword,
                "dims": [f"{path}:{dim}" for path, dim, _ in self.dims],
                "residual_samples": list(self.residual), "graphs": self.graphs}


def spec_dims(catalog: dict[str, Any], plan: UnbackedPlan) -> tuple[tuple[str, int, int], ...]:
    """The plan's dims with the rank of the tensor each is in (a ``TensorSpec`` lists every dim):
    one more than the largest axis the catalog's dimension table has for that input."""
    ranks: dict[str, int] = {}
    for entry in catalog.get("dimensions", []):
        ranks[entry["input"]] = max(ranks.get(entry["input"], 0), int(entry["axis"]) + 1)
    return tuple((d.argument, d.axis, max(ranks.get(d.argument, 0), d.axis + 1)) for d in plan.dims)


def plan_spec(model: Any, records: Iterable[Any], plan: UnbackedPlan, options: ReplayOptions,
              catalog: dict[str, Any]) -> SpecPlan:
    """Replay the corpus compiled with the plan's dims as a ``ShapesSpec`` (no marks, duck
    sizing as the plan sets it, no ``dynamic=``): the samples that still compile are its residual
    warmup. Infeasible when a sample that ran in the analysis raises under it (torch's message
    kept); unsupported on a torch that takes no spec (the cause detected:
    :func:`guardscope.torch_compat.spec_support`)."""
    dims = spec_dims(catalog, plan)
    support = torch_compat.spec_support()
    keyword = support.keyword
    if keyword is None:
        return SpecPlan(dims, status=UNSUPPORTED, reason=support.reason)
    if plan.status != OK or not dims:
        return SpecPlan(dims, status=INFEASIBLE, reason=plan.reason or "the unbacked plan marks no dim",
                        keyword=keyword)
    spec_options = replace(options, shapes_spec=dims, dynamic=None, mark_unbacked=(), duck_shape=plan.duck_shape)
    result, residual, errors = replay_for_residual(model, records, spec_options, catalog)
    compiled = tuple(residual)
    graphs = sum(1 for e in result.events if e.fail_type is None)
    if errors:
        sample, error = errors[0]
        return SpecPlan(dims, compiled, graphs, INFEASIBLE, (
            f"{len(errors)} of {result.samples} replayed samples raise compiled with this spec ({keyword}=) "
            f"(first, sample {sample}): {error}"), keyword)
    return SpecPlan(dims, compiled, graphs, keyword=keyword)
