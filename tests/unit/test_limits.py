"""The model of production's recompile limits (guardscope.catalog.limits), on hand-made catalogs:
which samples fail or run eagerly, where each frame reaches its limit, and when later frames are
only approximate. tests/integration/test_production_limits.py checks it against plain
torch.compile."""

from __future__ import annotations

from guardscope.catalog.limits import ProductionLimits, production_limits, production_section
from guardscope.corpus.storage.requests import RequestRuns
from guardscope.model import Catalog, ClassifiedCompile, CompileEvent, Topology
from guardscope.text import production_lines

DEFAULTS = {"recompile_limit": 8, "accumulated_recompile_limit": 256, "fail_on_recompile_limit_hit": False}


def compiled(frame: int, index: int, sample: int) -> ClassifiedCompile:
    return ClassifiedCompile(CompileEvent(f"{frame}/{index}", frame, index, sample, "forward", None), ())


def catalog(graphs: list[ClassifiedCompile], topologies: list[tuple[tuple[str, ...], tuple[int, ...]]], *,
            samples: int, fullgraph: bool, not_analysed: tuple[int, ...] = ()) -> Catalog:
    made = [Topology(i, ids[0], members[0], members, (), ids) for i, (ids, members) in enumerate(topologies)]
    frames = tuple({"frame": f, "label": "forward" if f == 0 else f"resume in forward at model.py:{f}"}
                   for f in sorted({c.event.frame_id for c in graphs}))
    return Catalog("2.13.0", "corpus", samples, "m.py:M", {"fullgraph": fullgraph}, tuple(graphs), tuple(made), (),
                   not_analysed=not_analysed, frames=frames)


def one_frame(count: int, *, fullgraph: bool) -> Catalog:
    """Sample i compiles graph 0/i; then samples count.. reuse graphs 0, 3 and count-1."""
    graphs = [compiled(0, i, i) for i in range(count)]
    topologies = [((f"0/{i}",), (i,)) for i in range(count)]
    topologies[0] = (("0/0",), (0, count))
    topologies[3] = (("0/3",), (3, count + 1))
    topologies[-1] = ((f"0/{count - 1}",), (count - 1, count + 2))
    return catalog(graphs, topologies, samples=count + 3, fullgraph=fullgraph)


def test_the_first_frame_past_its_limit_fails_under_fullgraph_and_runs_eagerly_otherwise():
    limits = production_limits(None, {}, DEFAULTS)
    assert limits == ProductionLimits(8, 256, False, "torch default")
    failing = production_section(one_frame(11, fullgraph=True), limits)
    assert failing["failed_samples"] == [8, 9, 10, 13] and failing["eager_samples"] == []
    (frame,) = failing["frames"]
    assert frame["reached_at"] == {"sample": 8} and frame["graphs_needed"] == 11 and frame["margin"] is None
    assert frame["failed"] == 4 and frame["share"] == round(4 / 14, 6) and failing["exact"]
    eager = production_section(one_frame(11, fullgraph=False), limits)
    assert eager["failed_samples"] == [] and eager["eager_samples"] == [8, 9, 10, 13] and eager["on_limit"] == "eager"
    within = production_section(one_frame(5, fullgraph=True), limits)
    assert within["failed_samples"] == within["eager_samples"] == []
    assert within["frames"][0]["reached_at"] is None and within["frames"][0]["margin"] == 3
    assert production_lines(within) == ["recompile_limit 8 (torch default): forward needs 5 graphs, 3 under the limit"]


def test_recorded_limits_and_fail_on_recompile_limit_hit():
    recorded = production_limits({"recompile_limit": 16}, {}, DEFAULTS)
    assert (recorded.per_frame, recorded.source) == (16, "recorded")
    per_call = production_limits(None, {"recompile_limit": 4}, DEFAULTS)  # torch.compile(recompile_limit=4)
    assert (per_call.per_frame, per_call.source) == (4, "recorded")
    accumulated = production_limits({"accumulated_recompile_limit": 6}, {}, DEFAULTS)
    assert accumulated.per_frame == 6
    hard = production_limits({"fail_on_recompile_limit_hit": True}, {}, DEFAULTS)
    assert hard.source == "torch default" and hard.fail_on_limit
    section = production_section(one_frame(11, fullgraph=False), hard)
    assert section["failed_samples"] == [8, 9, 10, 13] and section["on_limit"] == "fail"


def test_a_later_frame_past_its_limit_runs_eagerly_and_says_where_in_the_request():
    """Frame 0 holds one graph; its resume frame needs 10 (samples 0-9), so samples 8 and 9 and the
    repeats of their topologies run that frame eagerly."""
    graphs = [compiled(0, 0, 0)] + [compiled(1, i, i) for i in range(10)]
    topologies = [(("0/0", f"1/{i}"), (i,) + ((10 + i,) if i >= 8 else ())) for i in range(10)]
    runs = RequestRuns([["r0", 0, 0, 6], ["r1", 6, 0, 6]])  # two requests of six forward calls
    section = production_section(catalog(graphs, topologies, samples=20, fullgraph=False),
                                 production_limits(None, {}, DEFAULTS), runs)
    assert section["eager_samples"] == [8, 9, 18, 19] and section["failed_samples"] == [] and section["exact"]
    first, later = section["frames"]
    assert first["reached_at"] is None and first["margin"] == 7
    assert later["reached_at"] == {"sample": 8, "request": "r1", "step": 2} and later["eager"] == 4
    assert "reaches the limit at sample 8 (request r1 step 2) (10 graphs needed)" in production_lines(section)[1]


def test_later_frames_are_approximate_when_their_graphs_came_from_calls_production_runs_eagerly():
    graphs = [compiled(0, i, i) for i in range(10)] + [compiled(1, 0, 0), compiled(1, 1, 9)]
    topologies = [((f"0/{i}", "1/0"), (i,)) for i in range(9)] + [(("0/9", "1/1"), (9, 10))]
    section = production_section(catalog(graphs, topologies, samples=11, fullgraph=False),
                                 production_limits(None, {}, DEFAULTS))
    assert section["eager_samples"] == [8, 9, 10] and not section["exact"]
    assert production_lines(section)[-1].startswith("later frames are approximate")


def test_samples_past_the_replays_own_limit_are_past_productions_too():
    graphs = [compiled(0, i, i) for i in range(9)]
    topologies = [((f"0/{i}",), (i,)) for i in range(9)]
    section = production_section(catalog(graphs, topologies, samples=11, fullgraph=True, not_analysed=(9, 10)),
                                 production_limits(None, {}, DEFAULTS))
    assert section["failed_samples"] == [8, 9, 10]
    assert section["frames"][0]["graphs_needed"] == 10 and section["frames"][0]["reached_at"] == {"sample": 8}


def test_decode_steps_after_an_eager_step_are_named_as_carrying_eager_cache_layouts():
    """The same traffic as generation requests that carry a KV cache: r1's step 2 (sample 8) runs
    its resume frame eagerly, so r1's later steps (9, 10, 11) get a cache eager code extended. r0
    lost nothing. Calls without state are never named."""
    graphs = [compiled(0, 0, 0)] + [compiled(1, i, i) for i in range(10)]
    topologies = [(("0/0", f"1/{i}"), (i,) + ((10 + i,) if i >= 8 else ())) for i in range(10)]
    runs = RequestRuns([["r0", 0, 0, 6], ["r1", 6, 0, 6], ["r2", 12, 0, 8]])
    limits = production_limits(None, {}, DEFAULTS)
    stateful = production_section(catalog(graphs, topologies, samples=20, fullgraph=False), limits, runs, True)
    assert stateful["eager_state_samples"] == [9, 10, 11, 19]  # r2's step 6 (sample 18) ran eagerly too
    assert production_lines(stateful)[-1].startswith(
        "4 decode steps follow an eager step of their request: their KV caches were extended by eager code")
    plain = production_section(catalog(graphs, topologies, samples=20, fullgraph=False), limits, runs)
    assert plain["eager_state_samples"] == [] and not production_lines(plain)[-1].startswith("4 decode")
