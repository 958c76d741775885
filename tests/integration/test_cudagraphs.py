"""CUDA Graph Trees (mode="reduce-overhead"): the parser of torch's cudagraph log lines and
trace events, the capture attached to torch's real loggers, the replay wiring, and the padding
advice for the seed corpus — all on the CPU. Real CUDA graphs: bench/cudagraphs_check.py.

This file holds the tests that compile in this process; the others are in
tests/unit/test_cudagraphs.py.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch._dynamo.utils import dynamo_timed
from torch._guards import CompileId

import guardscope
from guardscope import store, torch_compat
from guardscope.catalog.builder import CatalogBuilder
from guardscope.catalog.cudagraphs import CudagraphSettings
from guardscope.model import CudagraphEventKind as Kind
from guardscope.options import ReplayOptions
from guardscope.replay import runner as replay_runner
from guardscope.replay.cudagraphs import CudagraphRecord, read_cudagraph_log
from guardscope.replay.session import ReplaySession
from guardscope.report.page import write_report
from guardscope.terminal import format_cudagraphs

from ..conftest import SEED_CORPUS, read_catalog
from ..pages import parse, words

NEW, REC, SKIP, HINT = Kind.NEW_SHAPE, Kind.RECORDING, Kind.SKIP, Kind.HINT


def log(text: str, level: str = "INFO") -> CudagraphRecord:
    return CudagraphRecord("log", text, level=level, logger="torch._inductor.cudagraph_trees.__cudagraphs")


# --- the replay wiring, with torch's runtime events simulated on the CPU ------------------------

@pytest.fixture
def simulated_cudagraphs(monkeypatch):
    """Pretend the replay runs CUDA graphs: after each real (eager-backend) call, emit what CUDA
    Graph Trees would — a new tree for a new first dim, a capture on its second call — and a skip
    for inputs of 3 rows, through torch's own logging functions."""
    from torch._inductor import cudagraph_trees, cudagraph_utils

    real_compile = replay_runner.compile_model

    def compile_model(model, options):
        compiled = real_compile(model, options)
        seen: dict[int, int] = {}

        def call(x):
            out = compiled(x)
            rows = x.shape[0]
            seen[rows] = seen.get(rows, 0) + 1
            if seen[rows] == 1:
                cudagraph_trees.log.info("[0/0] Recording cudagraph tree for symint key %s", rows)
            elif seen[rows] == 2:
                with dynamo_timed("CUDAGraphNode.record", log_pt2_compile_event=True,
                                  compile_id=CompileId(frame_id=0, frame_compile_id=0)):
                    pass
            if rows == 3:
                cudagraph_utils.log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to mutated inputs (1 instances)")
            return out

        return call

    monkeypatch.setattr(replay_runner, "compile_model", compile_model)
    monkeypatch.setattr(ReplayOptions, "uses_cudagraphs", property(lambda self: True))


def test_replay_attributes_cudagraph_events_and_runs_every_sample(make_corpus, tmp_path, simulated_cudagraphs):
    sizes = [4, 4, 5, 3, 4, 5, 3, 6]
    corpus = make_corpus("Elementwise", [((torch.randn(n, 2),), {}) for n in sizes],
                         compile_options={"dynamic": True, "fullgraph": True, "mode": "reduce-overhead"})
    analysis = guardscope.analyze(corpus, tmp_path / "out", strict=True)
    catalog = read_catalog(analysis.out_dir)
    assert catalog["replay_mode"] == "full"  # guard-only replay would skip the calls that record
    section = catalog["cudagraphs"]
    assert section["observed"] is True and section["note"] is None
    recorded = section["recorded"]
    assert recorded["new_shapes"] == {"count": 4, "samples": [0, 2, 3, 7]}
    assert recorded["recordings"] == {"count": 3, "samples": [1, 5, 6]}
    assert recorded["skips"] == [{"reason": "mutated inputs (1 instances)", "count": 2, "samples": [3, 6]}]
    assert recorded["by_graph"] == [{"graph": "0/0", "new_shapes": 4, "recordings": 3}]
    # the shapes predict the same: four first dims, three of them seen twice
    assert section["expected"]["new_shapes"] == 4 and section["expected"]["recordings"] == 3
    timings = json.loads((analysis.out_dir / store.TIMINGS).read_text())
    assert [r["sample"] for r in timings["cudagraph_recordings"]] == [1, 5, 6]
    raw, unreadable = read_cudagraph_log((analysis.out_dir / store.TRACE_DIR / store.CUDAGRAPH_LOG).read_text().splitlines())
    assert unreadable == 0 and set(raw) == {0, 1, 2, 3, 5, 6, 7}
    lines = format_cudagraphs(section)
    assert lines[0].startswith("cudagraphs  4 new shapes (warm-ups) at 4 samples, 3 recordings, 2 skips")
    assert "mutated inputs" in lines[1]
    page = parse((analysis.out_dir / "report.html").read_text())
    cudagraphs = page.find("section", id="cudagraphs")
    assert "mutated inputs (1 instances)" in words(cudagraphs)


# --- the seed corpus on the CPU: advice from the shapes alone -----------------------------------

@pytest.fixture(scope="module")
def seed_cudagraphs(tmp_path_factory):
    out = tmp_path_factory.mktemp("seed-cudagraphs") / "out"
    return guardscope.analyze(SEED_CORPUS, out, strict=True, mode="reduce-overhead")


def test_seed_padding_advice(seed_cudagraphs):
    catalog = read_catalog(seed_cudagraphs.out_dir)
    assert catalog["summary"]["compile_samples"] == [0, 1, 4, 12, 24, 40, 60, 84, 112, 144, 180]
    section = catalog["cudagraphs"]
    assert section["observed"] is False and "not observed" in section["note"] and section["recorded"] is None
    # 300 requests, 300 distinct shapes: each a new CUDA graph tree, none seen twice to be captured
    assert section["expected"]["new_shapes"] == 300 and section["expected"]["recordings"] == 0
    padding = section["padding"]
    assert [(g["name"], g["dims"]) for g in padding["groups"]] == [
        ("x.size()[0]", ["x.size()[0]"]),
        ("local_edge_index.size()[1]", ["local_edge_index.size()[1]", "local_edge_scale.size()[0]"]),
        ("cross_edge_index.size()[1]", ["cross_edge_index.size()[1]", "cross_edge_scale.size()[0]"]),
        ("context.size()[0]", ["context.size()[0]"]),
    ]
    assert all(g["special_sizes"] == [0] for g in padding["groups"])  # 0 is kept, never padded
    # 0/1 runs 290 requests: its 284 topology members and 6 that 0/0, compiled earlier, also
    # accepts but Dynamo's most-recently-used-first lookup runs on 0/1
    assert padding["baseline"]["shapes"] == 300 and padding["baseline"]["max_per_graph"] == 290
    assert padding["paddable_confirmed"] is False and padding["search"] == "exhaustive"
    chosen = padding["chosen"]
    assert chosen["max_per_graph"] <= 8 < padding["baseline"]["max_per_graph"]
    assert padding["verdict"] == ("pad" if chosen["padding_waste"] <= padding["waste_limit"] else "skip_dynamic_graphs")
    for group in padding["groups"]:
        for k, option in enumerate(group["options"], start=1):
            assert option["buckets"] == k and option["bounds"][-1] == 60


def test_seed_with_only_the_edges_paddable_skips_dynamic_graphs(seed_cudagraphs):
    state = json.loads(json.dumps(_builder_state(seed_cudagraphs)))
    builder = CatalogBuilder.from_state(state)
    section = builder.cudagraph_section(
        CudagraphSettings(observed=False, paddable=("local_edge_index.size()[1]", "cross_edge_index.size()[1]")),
        builder.dimensions(),
    )
    padding = section["padding"]
    assert padding["verdict"] == "skip_dynamic_graphs" and padding["paddable_confirmed"] is True
    assert [g["paddable"] for g in padding["groups"]] == [False, True, True, False]
    assert "x.size()[0], context.size()[0]" in padding["reasons"][-1]


def _builder_state(analysis):
    """The replay's builder, from a second (guard-only) replay of the seed corpus."""
    metas, _ = _replay_lookup(SEED_CORPUS, guard_only=True)
    assert sum(m.ran != m.serving for m in metas.values()) == 6
    return _builder(metas).to_state()


def test_seed_cudagraph_section_is_deterministic_and_survives_a_checkpoint(seed_cudagraphs):
    catalog = read_catalog(seed_cudagraphs.out_dir)
    builder = CatalogBuilder.from_state(json.loads(json.dumps(_builder_state(seed_cudagraphs))))
    rebuilt = builder.cudagraph_section(CudagraphSettings(observed=False, **torch_compat.cudagraph_config()),
                                        builder.dimensions())
    assert json.dumps(rebuilt, sort_keys=True) == json.dumps(catalog["cudagraphs"], sort_keys=True)


def test_seed_report_shows_the_padding_advice(seed_cudagraphs, tmp_path):
    write_report(seed_cudagraphs.out_dir)
    page = parse((seed_cudagraphs.out_dir / "report.html").read_text())
    section = page.find("section", id="cudagraphs")
    text = words(section)
    assert "300 distinct shapes" in text and "not observed" in text
    rows = section.find("table", class_="buckets").find("tbody").find_all("tr")
    assert len(rows) == 4
    assert any(a.attrs.get("href") == "#cudagraphs" for a in page.find_all("a"))


# --- which graph runs: Dynamo's most-recently-used-first lookup ---------------------------------
#
# The seed's first 40 requests twice (bench/cudagraphs_check.py's "repeats" run). Graph 0/1 is
# the general one; in the second round Dynamo tries the graph used last first, so 0/1 runs
# request 0 again (sample 40) although 0/0, the earliest-compiled graph accepting it, served it
# the first time. On an H200 (torch 2.11) CUDA Graph Trees made 41 new shapes and 39 recordings.


def _replay_lookup(corpus_dir, guard_only):
    """Each sample's SampleMeta, and (in a full replay) Dynamo's live lookup order after it
    next to the emulated one."""
    from guardscope.corpus.spec import load_model
    from guardscope.pipeline import options_from_manifest

    corpus = guardscope.load_corpus(corpus_dir)
    options = options_from_manifest(corpus.manifest.compile)
    metas, orders = {}, {}
    model = load_model(corpus.manifest.model, base_dir=corpus.path)
    with ReplaySession(model, options, on_sample=lambda m: metas.__setitem__(m.index, m),
                              guard_only=guard_only, track_lookup=True) as session:
        for sample in corpus:
            session.replay([sample])
            live = [cid for cid, _ in torch_compat.cache_entries(session.runner.code)]
            orders[sample.index] = (session.lookup_order, live)
        assert session.result().replay_mode == ("guards" if guard_only else "full")
    return metas, orders


@pytest.fixture(scope="module")
def repeats_full(repeats):
    return _replay_lookup(repeats, guard_only=False)


def _builder(metas):
    builder = CatalogBuilder(track_shapes=True)
    for index in sorted(metas):
        builder.add_sample(metas[index])
    return builder


def test_lookup_order_is_dynamos_and_a_guard_only_replay_knows_it_too(repeats, repeats_full):
    full, orders = repeats_full
    assert all(emulated == live for emulated, live in orders.values()), orders
    assert orders[40][1] == ["0/1", "0/4", "0/3", "0/2", "0/0"]
    assert (full[40].serving, full[40].ran) == ("0/0", "0/1")
    assert (full[0].serving, full[0].ran) == ("0/0", "0/0")
    # Skipped samples never reach Dynamo, yet the emulated lookup runs the same graphs.
    guards, _ = _replay_lookup(repeats, guard_only=True)
    assert {i: m.ran for i, m in guards.items()} == {i: m.ran for i, m in full.items()}
    assert {i: m.serving for i, m in guards.items()} == {i: m.serving for i, m in full.items()}
    # Without tracking nothing is filled in.
    assert all(m.ran is None for m in _untracked_metas(repeats))


def _untracked_metas(corpus_dir):
    corpus = guardscope.load_corpus(corpus_dir)
    from guardscope.corpus.spec import load_model
    from guardscope.pipeline import options_from_manifest

    metas = []
    model = load_model(corpus.manifest.model, base_dir=corpus.path)
    with ReplaySession(model, options_from_manifest(corpus.manifest.compile),
                              on_sample=metas.append, guard_only=True) as session:
        session.replay(corpus.sample(i) for i in range(3))
    return metas


@pytest.fixture(scope="module")
def repeats_analysis(repeats, tmp_path_factory):
    out = tmp_path_factory.mktemp("repeats-out") / "out"
    return guardscope.analyze(repeats, out, strict=True, mode="reduce-overhead", checkpoint_every=0)


def test_repeats_expect_what_the_h200_recorded(repeats_analysis):
    catalog = read_catalog(repeats_analysis.out_dir)
    section = catalog["cudagraphs"]
    assert section["settings"] == torch_compat.cudagraph_config()
    assert section["settings"]["skip_dynamic_graphs"] is False
    expected = section["expected"]
    assert (expected["model"], expected["new_shapes"], expected["recordings"], expected["skips"]) == ("per_shape", 41, 39, 0)
    by_graph = {g["graph"]: (g["new_shapes"], g["recordings"]) for g in expected["by_graph"]}
    # 0/0 met request 0 once (sample 40 ran on 0/1): a warm-up, never recorded
    assert by_graph == {"0/0": (1, 0), "0/1": (37, 36), "0/2": (1, 1), "0/3": (1, 1), "0/4": (1, 1)}
    # The topologies stay on the earliest-compiled accepting graph.
    first = {t["compile_id"]: t["samples"] for t in catalog["topologies"]}
    assert first["0/0"] == [0, 40]
    assert "41 new shapes (warm-ups), 39 recordings (not observed" in format_cudagraphs(section)[0]


def test_repeats_resume_to_the_same_catalog(repeats, repeats_analysis, tmp_path):
    out = tmp_path / "out"

    def interrupt(done, compiles):
        if done > 45:  # in the third shard: the interrupted run keeps the 46 finished samples
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        guardscope.analyze(repeats, out, strict=True, mode="reduce-overhead", checkpoint_every=0, progress=interrupt)
    checkpoint = json.loads((out / ".guardscope-checkpoint.json").read_text())
    assert checkpoint["next_sample"] == 46 and checkpoint["lookup_order"][0] == "0/1"
    guardscope.analyze(repeats, out, strict=True, mode="reduce-overhead", checkpoint_every=0, resume=True)
    assert (out / "catalog.json").read_bytes() == (repeats_analysis.out_dir / "catalog.json").read_bytes()


def test_repeats_builder_state_round_trips(repeats_analysis, repeats_full):
    catalog = read_catalog(repeats_analysis.out_dir)
    builder = _builder(repeats_full[0])
    rebuilt = CatalogBuilder.from_state(json.loads(json.dumps(builder.to_state())))
    settings = CudagraphSettings(observed=False, **torch_compat.cudagraph_config())
    assert rebuilt.cudagraph_tally.shapes == builder.cudagraph_tally.shapes
    section = rebuilt.cudagraph_section(settings, rebuilt.dimensions())
    assert json.dumps(section, sort_keys=True) == json.dumps(catalog["cudagraphs"], sort_keys=True)


@pytest.mark.parametrize("partitioned, model, new_shapes, recordings, skips", [
    # the static partitions of each graph: one tree per graph, captured on its second run
    (True, "static_partitions", 5, 4, 0),
    # the whole graph skipped at its compile (torch before 2.11, or TORCHINDUCTOR_GRAPH_PARTITION=0)
    (False, "skipped", 0, 0, 5),
])
def test_skip_dynamic_graphs_with_and_without_graph_partitioning(repeats_full, partitioned, model,
                                                                 new_shapes, recordings, skips):
    builder = _builder(repeats_full[0])
    settings = CudagraphSettings(observed=False, skip_dynamic_graphs=True, graph_partition=partitioned)
    section = builder.cudagraph_section(settings, builder.dimensions())
    expected = section["expected"]
    assert (expected["model"], expected["new_shapes"], expected["recordings"], expected["skips"]) == (
        model, new_shapes, recordings, skips)
    assert section["settings"] == {"skip_dynamic_graphs": True, "graph_partition": partitioned}
    lines = format_cudagraphs(section)
    assert "setting   cudagraph_skip_dynamic_graphs = True" in lines[1]
    assert ("static-shape parts are captured once" in lines[1]) is partitioned
    assert ("run as plain Inductor code" in lines[1]) is not partitioned


def test_the_analysis_reads_inductors_settings(repeats, tmp_path):
    from torch._inductor import config

    with config.patch({"triton.cudagraph_skip_dynamic_graphs": True, "graph_partition": False}):
        analysis = guardscope.analyze(repeats, tmp_path / "out", strict=True, mode="reduce-overhead")
    section = read_catalog(analysis.out_dir)["cudagraphs"]
    assert section["settings"] == {"skip_dynamic_graphs": True, "graph_partition": False}
    assert (section["expected"]["model"], section["expected"]["skips"]) == ("skipped", 5)
    assert config.triton.cudagraph_skip_dynamic_graphs is False  # restored
    write_report(analysis.out_dir)
    text = words(parse((analysis.out_dir / "report.html").read_text()).find("section", id="cudagraphs"))
    assert "cudagraph_skip_dynamic_graphs was set for this analysis" in text
    assert "run as plain Inductor code" in text and "none: graphs with symbolic sizes skip CUDA graphs" in text
