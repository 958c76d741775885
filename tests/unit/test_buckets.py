"""Padding buckets for CUDA Graph Trees (pure): the optimal bounds against brute force, the
equal-dims and 0/1 rules, exact waste and shape counts, verdicts, determinism."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardscope.catalog import buckets
from guardscope.catalog.buckets import (
    DimGroup,
    ShapeRow,
    ShapeTable,
    bucketed,
    dim_groups,
    histogram,
    optimal_bounds_table,
    recommend,
)
from guardscope.model import DimensionStats


def padding_cost(histogram_: list[tuple[int, int]], bounds: tuple[int, ...]) -> int:
    return sum(w * (bucketed(v, bounds) - v) for v, w in histogram_)


def brute_force(histogram_: list[tuple[int, int]], k: int) -> int:
    values = sorted(v for v, _ in histogram_)
    best = None
    for others in itertools.combinations(values[:-1], k - 1):
        cost = padding_cost(histogram_, (*others, values[-1]))
        best = cost if best is None else min(best, cost)
    return best


histograms = st.dictionaries(st.integers(2, 200), st.integers(0, 40), min_size=1, max_size=9).map(
    lambda d: sorted(d.items())
)


@settings(max_examples=300, deadline=None)
@given(histograms, st.integers(1, 9))
def test_bounds_are_optimal_against_brute_force(histogram_, max_k):
    table = optimal_bounds_table(histogram_, max_k)
    assert len(table) == min(max_k, len(histogram_))
    for k, (bounds, cost) in enumerate(table, start=1):
        assert len(bounds) == k and list(bounds) == sorted(set(bounds))
        assert bounds[-1] == histogram_[-1][0]  # every size fits under the last bound
        assert set(bounds) <= {v for v, _ in histogram_}
        assert cost == padding_cost(histogram_, bounds) == brute_force(histogram_, k)
    costs = [cost for _, cost in table]
    assert costs == sorted(costs, reverse=True)  # more buckets never pad more


def test_bounds_table_on_a_larger_histogram_matches_the_quadratic_programme():
    rng = random.Random(7)
    histogram_ = sorted({rng.randint(2, 5000): rng.randint(0, 30) for _ in range(400)}.items())
    values = [v for v, _ in histogram_]

    def cost(i, j):
        return sum(w * (values[j] - v) for v, w in histogram_[i:j + 1])

    # the textbook O(k m^2) programme, on the first 60 sizes
    part = histogram_[:60]
    m = len(part)
    best = [cost(0, j) for j in range(m)]
    table = optimal_bounds_table(part, 6)
    assert table[0][1] == best[-1]
    for layer in range(2, 7):
        best = [min(best[i - 1] + cost(i, j) for i in range(layer - 1, j + 1)) if j >= layer - 1 else None
                for j in range(m)]
        assert table[layer - 1][1] == best[-1]
    # and the whole histogram runs fast enough to be exact at corpus scale
    assert len(optimal_bounds_table(histogram_, 8)) == 8


def test_bounds_input_is_checked_and_order_free():
    assert optimal_bounds_table([], 4) == []
    assert optimal_bounds_table([(9, 1), (3, 2)], 1) == optimal_bounds_table([(3, 2), (9, 1)], 1) == [((9,), 12)]
    with pytest.raises(ValueError):
        optimal_bounds_table([(3, 1), (3, 2)], 2)


def test_zero_and_one_are_never_padded():
    assert bucketed(0, (8, 16)) == 0 and bucketed(1, (8, 16)) == 1
    assert bucketed(2, (8, 16)) == 8 and bucketed(8, (8, 16)) == 8 and bucketed(9, (8, 16)) == 16
    assert bucketed(17, (8, 16)) == 17  # above every bound: left as it is
    assert bucketed(5, ()) == 5


def test_histogram_is_bounded_and_keeps_every_sample():
    pairs = [(v, 1 + v % 3) for v in range(100)]
    bins = histogram(pairs, bins=10)
    assert len(bins) <= 10
    assert sum(c for _, _, c in bins) == sum(c for _, c in pairs)
    assert bins[0][0] == 0 and bins[-1][1] == 99
    assert all(bins[i][1] < bins[i + 1][0] for i in range(len(bins) - 1))
    assert histogram([(5, 2), (3, 1)]) == ((3, 3, 1), (5, 5, 2))


def stats(dim, *, dynamic=True, equal_to=()):
    return DimensionStats(dim=dim, input=dim.split(".")[0], axis=0, min=0, max=9 if dynamic else 0,
                          ever_zero=False, ever_one=False, equal_to=tuple(equal_to))


def test_dim_groups_merge_always_equal_dims_and_follow_paddable():
    dims = [
        stats("e_scale.size()[0]", equal_to=["e.size()[1]"]),
        stats("e.size()[1]", equal_to=["e_scale.size()[0]"]),
        stats("e.size()[0]", dynamic=False),
        stats("x.size()[0]"),
    ]
    order = ["x.size()[0]", "e.size()[0]", "e.size()[1]", "e_scale.size()[0]"]
    groups = dim_groups(dims, order)
    assert [(g.name, g.dims, g.paddable) for g in groups] == [
        ("x.size()[0]", ("x.size()[0]",), True),
        ("e.size()[1]", ("e.size()[1]", "e_scale.size()[0]"), True),
    ]
    # naming one member makes the whole group paddable: its equal dims must pad along
    confirmed = dim_groups(dims, order, ["e_scale.size()[0]"])
    assert [g.paddable for g in confirmed] == [False, True]
    assert [g.paddable for g in dim_groups(dims, order, [])] == [False, False]


# --- a small corpus: x [N, 4], e [2, E], s [E, 1] (s always as long as e) ---------------------

DIMS = ("x.size()[0]", "x.size()[1]", "e.size()[0]", "e.size()[1]", "s.size()[0]", "s.size()[1]")
GROUPS = (
    DimGroup("x.size()[0]", ("x.size()[0]",), True),
    DimGroup("e.size()[1]", ("e.size()[1]", "s.size()[0]"), True),
)


def corpus_rows(samples, graph="0/0"):
    counts = {}
    for n, e in samples:
        key = (graph, (n, 4, 2, e, e, 1))
        counts[key] = counts.get(key, 0) + 1
    return [ShapeRow(g, DIMS, values, count) for (g, values), count in sorted(counts.items())]


def test_waste_and_shapes_are_counted_exactly():
    rows = corpus_rows([(3, 5), (4, 5), (6, 7), (0, 2)])
    table = ShapeTable(rows, GROUPS)
    # elements: x N*4, e 2E, s E
    assert table.elements == (3 + 4 + 6 + 0) * 4 + (5 + 5 + 7 + 2) * 3
    padded = table.pad({"x.size()[0]": (4, 6), "e.size()[1]": (7,)}, GROUPS)
    in_dims_order = [tuple(row[table.column[d]] for d in DIMS) for row in padded.tolist()]
    assert in_dims_order == [
        (0, 4, 2, 7, 7, 1),  # N = 0 stays 0; E = 2 pads to 7
        (4, 4, 2, 7, 7, 1),
        (4, 4, 2, 7, 7, 1),
        (6, 4, 2, 7, 7, 1),
    ]
    assert table.shapes(padded) == (3, 3)
    extra = table.count_elements(padded) - table.elements
    assert extra == 1 * 4 + (2 + 2 + 0 + 5) * 3  # x: 3 -> 4; E: 5, 5, 2 -> 7


def test_equal_dims_always_get_the_same_bucket():
    rng = random.Random(3)
    rows = corpus_rows([(rng.randint(2, 40), rng.randint(0, 60)) for _ in range(200)])
    recommendation = recommend(rows, GROUPS, budget=4)
    table = ShapeTable(rows, GROUPS)
    for outcome in [recommendation.chosen, *[o for g in recommendation.groups for o in g.options]]:
        padded = table.pad(dict(outcome.bounds), GROUPS)
        e, s = table.column["e.size()[1]"], table.column["s.size()[0]"]
        assert (padded[:, e] == padded[:, s]).all()


def test_shapes_are_counted_per_compiled_graph():
    one = corpus_rows([(5, 5), (6, 6)], graph="0/0") + corpus_rows([(5, 5)], graph="0/1")
    table = ShapeTable(one, GROUPS)
    assert table.shapes(table.values) == (3, 2)  # (5, 5) is a shape of both graphs


def test_verdict_none_needed_when_few_shapes():
    rows = corpus_rows([(8, 10)] * 5 + [(16, 20)] * 5)
    recommendation = recommend(rows, GROUPS)
    assert recommendation.verdict == buckets.VERDICT_NONE
    assert recommendation.baseline.shapes == 2 and recommendation.baseline.padded_elements == 0


def test_verdict_pad_bounds_the_shapes_within_the_budget():
    rows = corpus_rows([(n, 2 * n) for n in range(2, 66)])
    recommendation = recommend(rows, GROUPS, budget=4, confirmed=True)
    assert recommendation.verdict == buckets.VERDICT_PAD
    chosen = recommendation.chosen
    assert recommendation.baseline.shapes == 64
    assert chosen.max_per_graph <= 4 and chosen.shapes <= 4
    assert 0 < chosen.waste <= buckets.WASTE_LIMIT
    assert recommendation.search == "exhaustive"
    assert "confirmed paddable" in " ".join(recommendation.reasons)
    # nothing within the budget pads less (k per group up to 8)
    table = ShapeTable(rows, GROUPS)
    options = {g.group.name: [dict(o.bounds)[g.group.name] for o in g.options] for g in recommendation.groups}
    for x_bounds, e_bounds in itertools.product(options["x.size()[0]"], options["e.size()[1]"]):
        padded = table.pad({"x.size()[0]": x_bounds, "e.size()[1]": e_bounds}, GROUPS)
        if table.shapes(padded)[1] <= 4:
            assert table.count_elements(padded) - table.elements >= chosen.padded_elements


def test_verdict_skip_when_an_unpaddable_dim_varies():
    rows = corpus_rows([(n, 5) for n in range(2, 40)])
    groups = (DimGroup("x.size()[0]", ("x.size()[0]",), False), GROUPS[1])
    recommendation = recommend(rows, groups, budget=8, confirmed=True)
    assert recommendation.verdict == buckets.VERDICT_SKIP
    assert "cudagraph_skip_dynamic_graphs = True" in recommendation.reasons[-1]
    assert "x.size()[0]" in recommendation.reasons[-1]


@pytest.mark.parametrize("partitioned", [True, False])
def test_skip_verdict_says_what_the_setting_does_with_and_without_graph_partitioning(partitioned):
    rows = corpus_rows([(n, 5) for n in range(2, 40)])
    groups = (DimGroup("x.size()[0]", ("x.size()[0]",), False), GROUPS[1])
    reason = recommend(rows, groups, budget=8, confirmed=True, partitioned=partitioned).reasons[-1]
    # with partitioning only the dynamic-shape ops lose CUDA graphs; the rest is captured once a graph
    assert ("static-shape parts are captured once" in reason) is partitioned
    assert ("no re-recording per size" in reason) is partitioned
    assert ("run as plain Inductor code" in reason) is not partitioned
    assert "cudagraph_skip_dynamic_graphs = True" in reason


def test_verdict_skip_when_padding_costs_too_much():
    # Almost every sample is tiny, a few are huge: any 2 buckets pad the tiny ones a lot.
    rows = corpus_rows([(2, 2)] * 50 + [(3, 2)] * 50 + [(4, 2)] * 50 + [(1000, 2)] + [(2000, 2)])
    recommendation = recommend(rows, GROUPS, budget=2)
    assert recommendation.chosen.max_per_graph <= 2
    assert recommendation.chosen.waste > buckets.WASTE_LIMIT
    assert recommendation.verdict == buckets.VERDICT_SKIP


def test_greedy_search_stays_within_the_budget(monkeypatch):
    rng = random.Random(11)
    rows = corpus_rows([(rng.randint(2, 80), rng.randint(2, 80)) for _ in range(150)])
    exhaustive = recommend(rows, GROUPS, budget=6)
    monkeypatch.setattr(buckets, "SEARCH_LIMIT", 0)
    greedy = recommend(rows, GROUPS, budget=6)
    assert greedy.search == "greedy" and exhaustive.search == "exhaustive"
    assert greedy.chosen.max_per_graph <= 6
    assert greedy.chosen.padded_elements >= exhaustive.chosen.padded_elements


def test_recommendation_is_deterministic_and_order_free():
    rng = random.Random(5)
    rows = corpus_rows([(rng.randint(0, 50), rng.randint(0, 50)) for _ in range(120)])
    first = json.dumps(recommend(rows, GROUPS).to_json(), sort_keys=True)
    shuffled = list(rows)
    random.Random(1).shuffle(shuffled)
    assert json.dumps(recommend(shuffled, GROUPS).to_json(), sort_keys=True) == first


def test_absent_tensors_count_no_elements():
    rows = [
        ShapeRow("0/0", ("x.size()[0]", "y.size()[0]"), (5, 3), 1),
        ShapeRow("0/0", ("x.size()[0]",), (6,), 1),  # y was None
    ]
    groups = (DimGroup("x.size()[0]", ("x.size()[0]",), True), DimGroup("y.size()[0]", ("y.size()[0]",), True))
    table = ShapeTable(rows, groups)
    assert table.elements == 5 + 3 + 6
    assert table.count_elements(table.pad({"y.size()[0]": (4,)}, groups)) == 5 + 4 + 6
