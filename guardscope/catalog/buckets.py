"""Pure: padding buckets for the dynamic dimensions of a corpus, for CUDA Graph Trees.

With ``mode="reduce-overhead"`` each compiled graph keeps one CUDA graph per distinct *shape*
(set of input sizes) it meets, made at run time: the first call with a new shape warms it up,
the next one records (captures) it, later ones replay it. Every distinct shape is a latency
spike and GPU memory. Padding each dynamic dimension up to one of a few *bucket* sizes bounds
the shapes; the price is the padded elements computed for nothing. This module finds, for a
corpus:

* per group of dimensions that are always equal (one symbol, so one set of buckets), the ``k``
  bucket upper bounds that minimise padding, for every ``k`` up to :data:`MAX_BUCKETS` — an
  exact dynamic programme over the sorted distinct sizes (:func:`optimal_bounds_table`);
* the combination of ``k`` per group with the least padding that keeps every compiled graph
  within :data:`SHAPES_PER_GRAPH` distinct shapes, counted on the corpus's own samples
  (bucketed shapes actually seen, per graph), with the padding waste in % of input elements;
* a verdict against ``torch._inductor.config.triton.cudagraph_skip_dynamic_graphs``, whose effect
  depends on inductor's graph partitioning (``partitioned``): with it (torch 2.11+ by default)
  the ops that use symbolic sizes run without CUDA graphs and each graph's static-shape parts are
  captured once — no re-recording per size, no CUDA-graph speed-up for the dynamic parts; without
  it, graphs with symbolic sizes skip CUDA graphs altogether — no recordings, no speed-up.

Sizes 0 and 1 are never padded: Dynamo specialises them (they have graphs of their own) and an
empty edge list padded to two edges is no longer empty. Padding itself changes what a model
computes unless the padded part is masked out, so only dimensions the user confirms paddable
should be padded; without a confirmation every dynamic dimension is a candidate and the
recommendation says so. Waste is counted in input elements, a proxy: a model's work may weigh
one dimension (edges through a wide layer) more than its input elements suggest.
"""

from __future__ import annotations

import itertools
import re
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

MAX_BUCKETS = 8
# torch's own threshold: cudagraph_dynamic_shape_warn_limit (8) distinct sizes per graph.
SHAPES_PER_GRAPH = 8
# Above this share of padded elements, skipping CUDA graphs for dynamic graphs is the better trade.
WASTE_LIMIT = 0.25
# The search over k per group is exhaustive up to this many combinations x shape rows.
SEARCH_LIMIT = 2_000_000
HISTOGRAM_BINS = 32
SPECIAL_SIZES = (0, 1)

VERDICT_NONE = "none_needed"
VERDICT_PAD = "pad"
VERDICT_SKIP = "skip_dynamic_graphs"

_DIM = re.compile(r"^(?P<input>.+)\.size\(\)\[(?P<axis>\d+)\]$")


# --- the data ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShapeRow:
    """``count`` samples served by compiled graph ``graph`` whose dims had these sizes."""

    graph: str | None
    dims: tuple[str, ...]  # "x.size()[0]", ...
    values: tuple[int, ...]
    count: int


@dataclass(frozen=True)
class DimGroup:
    """Dimensions equal in every sample: one symbol in the compiled graph, one set of buckets."""

    name: str  # the member of the earliest forward argument
    dims: tuple[str, ...]
    paddable: bool


def dim_name(argument: str, axis: int) -> str:
    """``("x", 0)`` -> ``"x.size()[0]"``, the catalog's spelling of a dimension."""
    return f"{argument}.size()[{axis}]"


def dim_groups(
    dimensions: Iterable[Any], order: Sequence[str], paddable: Iterable[str] | None = None
) -> tuple[DimGroup, ...]:
    """Groups of dynamic dimensions (``DimensionStats``: ``dim``, ``dynamic``, ``equal_to``),
    named by their earliest member in ``order``. With ``paddable`` (dim names), a group is
    paddable when any member is named (its equal dims must pad along); without, all are."""
    rank = {dim: position for position, dim in enumerate(order)}
    confirmed = None if paddable is None else set(paddable)
    seen: set[str] = set()
    groups = []
    for stats in dimensions:
        if not stats.dynamic or stats.dim in seen:
            continue
        members = tuple(sorted({stats.dim, *stats.equal_to}, key=lambda d: (rank.get(d, len(rank)), d)))
        seen.update(members)
        groups.append(DimGroup(
            name=members[0],
            dims=members,
            paddable=confirmed is None or bool(confirmed & set(members)),
        ))
    return tuple(sorted(groups, key=lambda g: (rank.get(g.name, len(rank)), g.name)))


# --- one group: exact optimal bounds -----------------------------------------------------------


def optimal_bounds_table(histogram: Sequence[tuple[int, int]], max_k: int) -> list[tuple[tuple[int, ...], int]]:
    """For k = 1 .. min(max_k, distinct sizes): the k bucket upper bounds minimising
    ``sum(weight * (bound(size) - size))``, and that minimum, where ``bound(size)`` is the
    smallest bound >= size.

    ``histogram`` is ``[(size, weight)]`` with distinct sizes (any order, integer weights >= 0).
    Exact: a bucket's bound is best at its largest member, so a k-bucketing is a split of the
    sorted sizes into k runs. The cost of a run is a Monge array (cost(a,c) + cost(b,d) <=
    cost(a,d) + cost(b,c) for a < b <= c < d: the difference is the weight of a..b-1 times
    v_d - v_c >= 0), so each layer's best split point is monotone in the run's end and divide
    and conquer finds it in O(m log m) per layer instead of O(m^2). Integers keep it exact.
    """
    points = sorted((int(v), int(w)) for v, w in histogram)
    if len({v for v, _ in points}) != len(points):
        raise ValueError("histogram sizes must be distinct")
    m = len(points)
    values = [v for v, _ in points]
    weight_sum = [0] * (m + 1)
    weighted = [0] * (m + 1)
    for i, (v, w) in enumerate(points):
        weight_sum[i + 1] = weight_sum[i] + w
        weighted[i + 1] = weighted[i] + w * v

    def cost(i: int, j: int) -> int:  # one bucket holding sizes i..j, bound values[j]
        return values[j] * (weight_sum[j + 1] - weight_sum[i]) - (weighted[j + 1] - weighted[i])

    layers = min(max_k, m)
    best = [cost(0, j) for j in range(m)]  # layer 1: one bucket over sizes 0..j
    starts: list[list[int]] = [[0] * m]  # per layer: where the last bucket ending at j starts
    for layer in range(2, layers + 1):
        previous, current, start = best, [0] * m, [0] * m

        def solve(lo: int, hi: int, first: int, last: int) -> None:
            """Fill ends lo..hi knowing their best starts lie in first..last."""
            if lo > hi:
                return
            end = (lo + hi) // 2
            chosen, value = first, None
            for i in range(first, min(end, last) + 1):
                candidate = previous[i - 1] + cost(i, end)
                if value is None or candidate < value:
                    chosen, value = i, candidate
            current[end], start[end] = value, chosen
            solve(lo, end - 1, first, chosen)
            solve(end + 1, hi, chosen, last)

        # layer - 1 buckets need layer - 1 sizes before the last bucket's start
        solve(layer - 1, m - 1, layer - 1, m - 1)
        best = current
        starts.append(start)

    table = []
    for k in range(1, layers + 1):
        bounds, total, end = [], 0, m - 1
        for layer in range(k, 0, -1):
            begin = starts[layer - 1][end]
            bounds.append(values[end])
            total += cost(begin, end)
            end = begin - 1
        table.append((tuple(reversed(bounds)), total))
    return table


def bucketed(value: int, bounds: Sequence[int]) -> int:
    """The size ``value`` pads to: 0 and 1 stay; above the last bound, the value itself."""
    if value in SPECIAL_SIZES or not bounds:
        return value
    position = bisect_left(bounds, value)
    return bounds[position] if position < len(bounds) else value


# --- the corpus as arrays ----------------------------------------------------------------------


class ShapeTable:
    """The corpus's distinct shapes as arrays, to evaluate bucketings exactly and quickly.

    Dims a row lacks (an optional tensor argument that was None) hold -1 and count no elements.
    """

    def __init__(self, rows: Sequence[ShapeRow], groups: Sequence[DimGroup]) -> None:
        self.dims = tuple(sorted({d for row in rows for d in row.dims}))
        self.column = {dim: i for i, dim in enumerate(self.dims)}
        self.values = np.full((len(rows), len(self.dims)), -1, dtype=np.int64)
        for r, row in enumerate(rows):
            for dim, value in zip(row.dims, row.values):
                self.values[r, self.column[dim]] = value
        self.counts = np.array([row.count for row in rows], dtype=np.int64)
        self.graph_names = sorted({row.graph or "" for row in rows})
        self.graphs = np.array([self.graph_names.index(row.graph or "") for row in rows], dtype=np.int64)
        tensors: dict[str, list[int]] = {}
        for dim in self.dims:
            match = _DIM.match(dim)
            tensors.setdefault(match.group("input") if match else dim, []).append(self.column[dim])
        self.tensors = [np.array(columns) for _, columns in sorted(tensors.items())]
        # Only dims that vary tell shapes apart; the others are the same in every sample.
        self.key_columns = sorted(self.column[d] for g in groups for d in g.dims if d in self.column)
        keys = set(self.key_columns)
        self._varying = [t for t in self.tensors if keys & set(t.tolist())]
        fixed = [t for t in self.tensors if not keys & set(t.tolist())]
        self._fixed_elements = self._sum_elements(self.values, fixed)
        self.elements = self.count_elements(self.values)
        self._padded: dict[tuple[str, tuple[int, ...]], list[tuple[int, np.ndarray]]] = {}

    def _sum_elements(self, values: np.ndarray, tensors: list[np.ndarray]) -> int:
        present = np.maximum(values, 0)  # an absent tensor (-1) has no elements, like a size 0
        return sum(int(np.prod(present[:, columns], axis=1) @ self.counts) for columns in tensors)

    def count_elements(self, values: np.ndarray) -> int:
        """Input elements of every sample (``values``: this table's sizes, padded or not)."""
        return self._fixed_elements + self._sum_elements(values, self._varying)

    def _padded_columns(self, group: DimGroup, bounds: tuple[int, ...]) -> list[tuple[int, np.ndarray]]:
        key = (group.name, bounds)
        if key not in self._padded:
            edges = np.array(bounds, dtype=np.int64)
            columns = []
            for dim in group.dims:
                if dim not in self.column:
                    continue
                c = self.column[dim]
                column = self.values[:, c].copy()
                mask = column >= 2
                positions = np.searchsorted(edges, column[mask], side="left")
                inside = positions < len(edges)
                moved = column[mask]
                moved[inside] = edges[positions[inside]]
                column[mask] = moved
                columns.append((c, column))
            self._padded[key] = columns
        return self._padded[key]

    def pad(self, bounds: dict[str, tuple[int, ...]], groups: Sequence[DimGroup]) -> np.ndarray:
        """The sizes after padding each group's dims to its bounds (0, 1 and absent dims stay)."""
        padded = self.values.copy()
        for group in groups:
            if bounds.get(group.name):
                for c, column in self._padded_columns(group, bounds[group.name]):
                    padded[:, c] = column
        return padded

    def shapes(self, values: np.ndarray) -> tuple[int, int]:
        """(distinct shapes summed over graphs, the most for one graph)."""
        if not len(values):
            return 0, 0
        keyed = np.ascontiguousarray(np.column_stack([self.graphs, values[:, self.key_columns]]))
        rows = keyed.view(np.dtype((np.void, keyed.dtype.itemsize * keyed.shape[1]))).ravel()
        _, first = np.unique(rows, return_index=True)
        per_graph = np.bincount(self.graphs[first], minlength=len(self.graph_names))
        return int(len(first)), int(per_graph.max())

    def shapes_bound(self, values: np.ndarray) -> int:
        """Per graph, the product of the distinct sizes of each dim, summed: the shapes however
        the sizes seen combine."""
        bound = 0
        for g in range(len(self.graph_names)):
            rows = values[self.graphs == g][:, self.key_columns]
            product = 1
            for c in range(rows.shape[1]):
                product *= len(np.unique(rows[:, c]))
            bound += product
        return bound

    def weights(self, group: DimGroup) -> list[tuple[int, int]]:
        """``[(size, elements one more unit of this size adds)]`` for sizes >= 2: per sample and
        tensor holding one of the group's dims, the product of the tensor's other dims."""
        weights: dict[int, int] = {}
        for dim in group.dims:
            if dim not in self.column:
                continue
            c = self.column[dim]
            columns = next(cols for cols in self.tensors if c in cols)
            others = [o for o in columns if o != c]
            rest = (np.prod(np.clip(self.values[:, others], 0, None), axis=1) if others
                    else np.ones(len(self.counts), dtype=np.int64))
            for value, per_unit, count in zip(self.values[:, c].tolist(), rest.tolist(), self.counts.tolist()):
                if value >= 2:
                    weights[value] = weights.get(value, 0) + per_unit * count
        return sorted(weights.items())


# --- the recommendation ------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """A bucketing evaluated on the corpus."""

    bounds: tuple[tuple[str, tuple[int, ...]], ...]  # (group name, bounds); unpadded groups absent
    shapes: int  # distinct shapes summed over graphs: CUDA graphs to warm up and record
    max_per_graph: int
    shapes_bound: int | None  # computed for the outcomes reported, not during the search
    padded_elements: int
    elements: int

    @property
    def waste(self) -> float:
        """Padded elements as a share of the corpus's input elements."""
        return self.padded_elements / self.elements if self.elements else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "bounds": {name: list(bounds) for name, bounds in self.bounds},
            "shapes": self.shapes,
            "max_per_graph": self.max_per_graph,
            "shapes_bound": self.shapes_bound,
            "padded_elements": self.padded_elements,
            "elements": self.elements,
            "padding_waste": round(self.waste, 6),
        }


@dataclass(frozen=True)
class GroupPlan:
    group: DimGroup
    distinct: int  # distinct sizes >= 2
    special: tuple[int, ...]  # 0 / 1 seen (kept exact)
    histogram: tuple[tuple[int, int, int], ...]  # (low, high, samples)
    options: tuple[Outcome, ...]  # k = 1 .. : this group alone padded

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.group.name,
            "dims": list(self.group.dims),
            "paddable": self.group.paddable,
            "distinct_sizes": self.distinct,
            "special_sizes": list(self.special),
            "histogram": [list(b) for b in self.histogram],
            "options": [
                {"buckets": len(dict(o.bounds)[self.group.name]), "bounds": list(dict(o.bounds)[self.group.name]),
                 "shapes": o.shapes, "max_per_graph": o.max_per_graph,
                 "padding_waste": round(o.waste, 6)}
                for o in self.options
            ],
        }


@dataclass(frozen=True)
class Recommendation:
    groups: tuple[GroupPlan, ...]
    baseline: Outcome  # no padding
    # The least padding within the budget; else the fewest shapes per graph reachable
    # (check max_per_graph against budget); None when no dim may be padded.
    chosen: Outcome | None
    search: str  # "exhaustive" or "greedy"
    verdict: str
    reasons: tuple[str, ...]
    budget: int
    max_buckets: int
    waste_limit: float
    confirmed: bool  # paddable dims named by the user

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "shapes_per_graph": self.budget,
            "max_buckets": self.max_buckets,
            "waste_limit": self.waste_limit,
            "paddable_confirmed": self.confirmed,
            "search": self.search,
            "baseline": self.baseline.to_json(),
            "chosen": self.chosen.to_json() if self.chosen else None,
            "groups": [g.to_json() for g in self.groups],
        }


def histogram(pairs: Iterable[tuple[int, int]], bins: int = HISTOGRAM_BINS) -> tuple[tuple[int, int, int], ...]:
    """``[(low, high, samples)]``: one bin per size when there are at most ``bins`` sizes, else
    runs of consecutive sizes closed each time another 1/bins of the samples is reached."""
    pairs = sorted(pairs)
    if len(pairs) <= bins:
        return tuple((v, v, c) for v, c in pairs)
    total = sum(c for _, c in pairs)
    result: list[tuple[int, int, int]] = []
    low, count, seen = 0, 0, 0
    for value, c in pairs:
        if count == 0:
            low = value
        count += c
        seen += c
        if seen * bins >= total * (len(result) + 1) or seen == total:
            result.append((low, value, count))
            count = 0
    return tuple(result)


def _evaluate(table: ShapeTable, groups: Sequence[DimGroup], bounds: dict[str, tuple[int, ...]],
              *, bound: bool = False) -> Outcome:
    padded = table.pad(bounds, groups)
    shapes, most = table.shapes(padded)
    return Outcome(
        bounds=tuple(sorted((name, b) for name, b in bounds.items() if b)),
        shapes=shapes,
        max_per_graph=most,
        shapes_bound=table.shapes_bound(padded) if bound else None,
        padded_elements=table.count_elements(padded) - table.elements,
        elements=table.elements,
    )


def _better(a: Outcome, b: Outcome | None, budget: int) -> bool:
    """Within the budget: less padding, then fewer shapes. Outside: fewer per graph."""
    if b is None:
        return True
    a_fits, b_fits = a.max_per_graph <= budget, b.max_per_graph <= budget
    if a_fits != b_fits:
        return a_fits
    if a_fits:
        return (a.padded_elements, a.shapes, a.bounds) < (b.padded_elements, b.shapes, b.bounds)
    return (a.max_per_graph, a.padded_elements, a.bounds) < (b.max_per_graph, b.padded_elements, b.bounds)


def recommend(
    rows: Sequence[ShapeRow],
    groups: Sequence[DimGroup],
    *,
    budget: int = SHAPES_PER_GRAPH,
    max_buckets: int = MAX_BUCKETS,
    waste_limit: float = WASTE_LIMIT,
    confirmed: bool = False,
    partitioned: bool = False,
) -> Recommendation:
    """Padding buckets for ``groups`` on the corpus ``rows`` (see the module docstring).
    ``partitioned``: inductor's graph partitioning turns ``cudagraph_skip_dynamic_graphs`` into
    "CUDA-graph the static partitions" (the verdict's wording says what the setting does)."""
    if budget < 1 or max_buckets < 1:
        raise ValueError("budget and max_buckets must be at least 1")
    table = ShapeTable(rows, groups)
    baseline = _evaluate(table, groups, {}, bound=True)
    plans: list[GroupPlan] = []
    tables: dict[str, list[tuple[int, ...]]] = {}
    for group in groups:
        plan, tables[group.name] = _group_plan(table, groups, group, max_buckets)
        plans.append(plan)
    paddable = [g for g in groups if tables[g.name]]
    choices = [tables[g.name] for g in paddable]
    combinations = 1
    for options in choices:
        combinations *= len(options)
    chosen: Outcome | None = None
    if paddable and combinations * max(len(rows), 1) <= SEARCH_LIMIT:
        search = "exhaustive"
        chosen = _exhaustive(table, groups, paddable, choices, budget)
    elif paddable:
        search = "greedy"
        chosen = _greedy(table, groups, paddable, choices, budget)
    else:
        search = "none"
    if chosen is not None:
        chosen = _evaluate(table, groups, dict(chosen.bounds), bound=True)
    verdict, reasons = _verdict(baseline, chosen, plans, budget, waste_limit, confirmed, partitioned)
    return Recommendation(
        groups=tuple(plans),
        baseline=baseline,
        chosen=chosen,
        search=search,
        verdict=verdict,
        reasons=reasons,
        budget=budget,
        max_buckets=max_buckets,
        waste_limit=waste_limit,
        confirmed=confirmed,
    )


def _group_plan(table: ShapeTable, groups: Sequence[DimGroup], group: DimGroup, max_buckets: int
                ) -> tuple[GroupPlan, list[tuple[int, ...]]]:
    """One group's sizes in the corpus (distinct, special, their histogram) and its candidate
    bucket bounds (none when it cannot be padded), each evaluated alone."""
    columns = [table.column[d] for d in group.dims if d in table.column]
    sizes: dict[int, int] = {}
    for c in columns[:1]:  # equal dims: one column says it all
        for value, count in zip(table.values[:, c], table.counts):
            if value >= 0:
                sizes[int(value)] = sizes.get(int(value), 0) + int(count)
    special = tuple(v for v in SPECIAL_SIZES if v in sizes)
    candidates = [b for b, _ in optimal_bounds_table(table.weights(group), max_buckets)] if group.paddable else []
    plan = GroupPlan(
        group=group,
        distinct=sum(1 for v in sizes if v >= 2),
        special=special,
        histogram=histogram(sizes.items()),
        options=tuple(_evaluate(table, groups, {group.name: b}) for b in candidates),
    )
    return plan, candidates


def _exhaustive(table: ShapeTable, groups: Sequence[DimGroup], paddable: list[DimGroup],
                choices: list[list[tuple[int, ...]]], budget: int) -> Outcome | None:
    """The best of every combination of the groups' candidate bounds (:func:`_better`)."""
    chosen: Outcome | None = None
    for picked in itertools.product(*choices):
        outcome = _evaluate(table, groups, {g.name: b for g, b in zip(paddable, picked)})
        if _better(outcome, chosen, budget):
            chosen = outcome
    return chosen


def _greedy(table: ShapeTable, groups: Sequence[DimGroup], paddable: list[DimGroup],
            choices: list[list[tuple[int, ...]]], budget: int) -> Outcome:
    """Greedy: start from one bucket per group (the fewest shapes) and keep adding the bucket
    that saves the most padding while every graph stays within the budget."""
    picked = [0] * len(paddable)
    chosen = _evaluate(table, groups, {g.name: c[0] for g, c in zip(paddable, choices)})
    while chosen.max_per_graph <= budget:
        step: tuple[list[int], Outcome] | None = None
        for position, options in enumerate(choices):
            if picked[position] + 1 < len(options):
                trial = picked[:position] + [picked[position] + 1] + picked[position + 1:]
                outcome = _evaluate(table, groups, {g.name: c[t] for g, c, t in zip(paddable, choices, trial)})
                if _better(outcome, chosen, budget) and (step is None or _better(outcome, step[1], budget)):
                    step = (trial, outcome)
        if step is None:
            break
        picked, chosen = step
    return chosen


def _percent(share: float) -> str:
    return f"{100 * share:.1f}%"


SKIP_SETTING = "torch._inductor.config.triton.cudagraph_skip_dynamic_graphs = True"


def skip_effect(partitioned: bool) -> str:
    """What :data:`SKIP_SETTING` does, in one sentence, on a torch with or without graph partitioning."""
    if partitioned:
        return (
            "With inductor's graph partitioning (on in this torch) the ops that use symbolic sizes "
            "then run without CUDA graphs and each graph's static-shape parts are captured once — "
            "no re-recording per size and no per-size spikes, but no CUDA-graph launch savings "
            "for the dynamic parts."
        )
    return (
        "Graphs with symbolic sizes then run as plain Inductor code — no recordings and no "
        "spikes, but no CUDA-graph launch savings for them either."
    )


def _verdict(
    baseline: Outcome, chosen: Outcome | None, plans: Sequence[GroupPlan], budget: int,
    waste_limit: float, confirmed: bool, partitioned: bool = False,
) -> tuple[str, tuple[str, ...]]:
    skip = SKIP_SETTING
    reasons = []
    if baseline.max_per_graph <= budget:
        reasons.append(
            f"No compiled graph meets more than {baseline.max_per_graph} distinct shapes "
            f"({baseline.shapes} in all, within {budget} per graph): CUDA Graph Trees record each "
            "once and replay it after; padding would only add work."
        )
        return VERDICT_NONE, tuple(reasons)
    reasons.append(
        f"Unpadded, the corpus has {baseline.shapes} distinct shapes, up to {baseline.max_per_graph} "
        "for one compiled graph: each is a CUDA graph to warm up and record — a latency spike the "
        "first times it is seen, and GPU memory for as long as the process lives."
    )
    fixed = [p.group.name for p in plans if not p.group.paddable]
    if chosen is None or chosen.max_per_graph > budget:
        why = (
            f"no bucketing of the paddable dims keeps every graph within {budget} shapes "
            f"(the fewest reachable is {chosen.max_per_graph} for one graph"
            + (f"; the dims not padded, {', '.join(fixed)}, vary on their own)" if fixed else ")")
            if chosen is not None else "no dimension may be padded"
        )
        reasons.append(f"Skip CUDA graphs for dynamic shapes instead ({skip}): {why}. {skip_effect(partitioned)}")
        return VERDICT_SKIP, tuple(reasons)
    chosen_bounds = dict(chosen.bounds)
    padded = ", ".join(f"{p.group.name} to {list(chosen_bounds[p.group.name])}" for p in plans if p.group.name in chosen_bounds)
    cost = (
        f"Padding {padded} leaves {chosen.shapes} shapes (at most {chosen.max_per_graph} per graph; "
        f"{chosen.shapes_bound} however the padded sizes combine) for {_percent(chosen.waste)} more "
        "input elements on this corpus."
    )
    reasons.append(cost)
    if chosen.waste > waste_limit:
        reasons.append(
            f"That is more than the {_percent(waste_limit)} of extra work worth paying: skip CUDA "
            f"graphs for dynamic shapes instead ({skip}). {skip_effect(partitioned)}"
        )
        return VERDICT_SKIP, tuple(reasons)
    reasons.append(
        "Padding is only correct when the model ignores the padded part: pad edges with a zero "
        "weight, mask padded rows out of sums and softmaxes. Sizes 0 and 1 are never padded "
        "(empty inputs mean something else, and Dynamo compiles them separately). "
        + ("These dims were confirmed paddable." if confirmed else
           "No dim was confirmed paddable (--paddable ARG:DIM), so every dynamic dim was assumed "
           "to be: confirm the ones your model can mask and re-run.")
    )
    reasons.append(
        "Padded sizes coincide more often: with duck sizing on, two padded dims that become "
        "equal are served by (or compile) the graph for equal sizes — re-run guardscope on "
        "padded inputs, or turn duck sizing off."
    )
    return VERDICT_PAD, tuple(reasons)
