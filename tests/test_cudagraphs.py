"""CUDA Graph Trees (mode="reduce-overhead"): the parser of torch's cudagraph log lines and
trace events, the capture attached to torch's real loggers, the replay wiring, and the padding
advice for the seed corpus — all on the CPU. Real CUDA graphs: bench/cudagraphs_check.py."""

from __future__ import annotations

import io
import json
import logging

import pytest
import torch
from torch._dynamo.utils import dynamo_timed
from torch._guards import CompileId

import guardscope
from guardscope import cli, output, replay, torch_compat
from guardscope.capture import (
    UNLOGGED_SKIP,
    CudagraphCapture,
    CudagraphRecord,
    TraceCapture,
    cudagraph_events,
    read_cudagraph_log,
)
from guardscope.catalog import CatalogBuilder, CudagraphSettings
from guardscope.model import CudagraphEventKind as Kind
from guardscope.replay import ReplayOptions
from guardscope.report import write_report

from .conftest import SEED_CORPUS, read_catalog
from .test_report import parse, words

NEW, REC, SKIP, HINT = Kind.NEW_SHAPE, Kind.RECORDING, Kind.SKIP, Kind.HINT


def log(text: str, level: str = "INFO") -> CudagraphRecord:
    return CudagraphRecord("log", text, level=level, logger="torch._inductor.cudagraph_trees.__cudagraphs")


def chromium(phase: str, ts: float, compile_id: str = "0/1", name: str = "CUDAGraphNode.record") -> CudagraphRecord:
    event = {"name": name, "ts": ts, "args": {"compile_id": compile_id}, "ph": phase, "cat": "dynamo_timed"}
    return CudagraphRecord("trace", json.dumps(event))


def kinds(events):
    return [(e.kind, e.detail, e.compile_id) for e in events]


# --- the parser ---------------------------------------------------------------------------------

@pytest.mark.parametrize("line, detail, compile_id", [
    ("recording cudagraph tree for (12, 30)", "(12, 30)", None),  # torch 2.2
    ("recording cudagraph tree for symint key (12, 30)", "(12, 30)", None),  # 2.3 - 2.10
    ("recording cudagraph tree for graph without symints", "no sizes", None),
    ("[0/3] Recording cudagraph tree for symint key 17", "17", "0/3"),  # 2.11+
])
def test_new_shape_lines_of_every_torch_wording(line, detail, compile_id):
    events, unreadable = cudagraph_events([log(line)])
    assert kinds(events) == [(NEW, detail, compile_id)] and unreadable == 0


@pytest.mark.parametrize("line", [
    "Recording function 3 of graph recording id 7",
    "Recording function 1 (f) of graph recording id 1, inputs: [0]: int(3)",
    "[0/1] Recording function=forward, mode=INFERENCE, cuda_graph_id=3, inputs: [0]: int(3)",
])
def test_recording_lines_count_when_the_trace_has_no_timed_event(line):
    events, _ = cudagraph_events([log(line, "DEBUG")])
    assert [e.kind for e in events] == [REC]


def test_timed_trace_events_give_recordings_with_their_capture_time():
    records = [
        log("[0/1] Recording function=forward, mode=INFERENCE, cuda_graph_id=3, inputs: []", "DEBUG"),
        chromium("B", 1_000_000.0), chromium("E", 1_250_000.0),
        chromium("B", 2_000_000.0, name="cudagraphify.get_container"),  # not a capture
        chromium("B", 3_000_000.0, compile_id="0/2"),  # never ended (the capture raised)
        CudagraphRecord("trace", "{not json"),
    ]
    events, unreadable = cudagraph_events(records)
    assert [(e.kind, e.compile_id, e.seconds) for e in events] == [(REC, "0/1", 0.25), (REC, "0/2", None)]
    assert unreadable == 1  # and the log line is not counted twice


def test_skip_reasons_are_cleaned_of_stacks_paths_and_addresses():
    text = ('skipping cudagraphs due to mutated inputs (1 instances). Found from : \n'
            '   File "/home/someone/project/pkg/model.py", line 12, in forward\n    x.add_(1)')
    rerecord = ("[0/1] Re-recording function=forward, mode=INFERENCE, reason=static input data pointer "
                "changed.\ninput name: primals_2. data pointer changed from 139872348160 to 0x7F4763000200")
    events, _ = cudagraph_events([
        log(text, "WARNING"),
        log("disabling cudagraphs due to incompatible op aten._local_scalar_dense.default Found from "
            '\n File "/x/y/z.py", line 1', "WARNING"),
        log("skipping cudagraph due to function 2 exceeding max re-recording limit (=128) on cudagraph "
            "node 5 due to static input data pointer changed.", "WARNING"),
        log(rerecord, "DEBUG"),
        CudagraphRecord("counter", "3"),
    ])
    assert kinds(events) == [
        (SKIP, "mutated inputs (1 instances)", None),
        (SKIP, "incompatible op aten._local_scalar_dense.default", None),
        (SKIP, "function 2 exceeding max re-recording limit (=128) on cudagraph node 5 due to static "
               "input data pointer changed.", None),
        (HINT, "re-recorded: static input data pointer changed.", "0/1"),
    ]


def test_a_counted_skip_is_never_lost():
    # A reason logged bare (no "skipping cudagraphs" prefix) becomes the skip the counter saw.
    bare = "graph with symbolic shapes inputs and config.triton.cudagraph_skip_dynamic_graphs=True. Found from \n x"
    events, _ = cudagraph_events([log(bare, "WARNING"), CudagraphRecord("counter", "1")])
    assert kinds(events) == [
        (SKIP, "graph with symbolic shapes inputs and config.triton.cudagraph_skip_dynamic_graphs=True", None)]
    # Without a counter increase the same warning stays a hint.
    assert [e.kind for e in cudagraph_events([log(bare, "WARNING")])[0]] == [HINT]
    # A skip torch counted but whose message was not seen is kept, reason unknown.
    assert kinds(cudagraph_events([CudagraphRecord("counter", "2")])[0]) == [(SKIP, UNLOGGED_SKIP, None)] * 2


def test_too_many_sizes_warning_and_debug_chatter():
    warning = ("CUDAGraph supports dynamic shapes by recording a new graph for each distinct input size. "
               "Recording too many CUDAGraphs may lead to extra overhead. We have observed 9 distinct sizes. ...")
    events, _ = cudagraph_events([
        log(warning, "WARNING"),
        log("[0/1] Running warmup function=forward, mode=INFERENCE", "DEBUG"),
        log("Checkpointing cuda caching allocator state. Number of checkpoints 1", "DEBUG"),
    ])
    assert kinds(events) == [(HINT, "torch warns of many CUDA graphs: 9 distinct sizes recorded for one graph", None)]


# --- the capture on torch's own loggers ---------------------------------------------------------

def emit_runtime_events(sample_key):
    """What CUDA Graph Trees emit while running a call, through torch's own functions."""
    from torch._inductor import cudagraph_trees, cudagraph_utils

    cudagraph_trees.log.info("[%s] Recording cudagraph tree for symint key %s", "0/0", sample_key)
    with dynamo_timed("CUDAGraphNode.record", log_pt2_compile_event=True,
                      compile_id=CompileId(frame_id=0, frame_compile_id=0)):
        pass
    cudagraph_utils.log_cudagraph_skip_and_bump_counter(
        'skipping cudagraphs due to mutated inputs (1 instances). Found from : \n File "/a/b/c.py", line 1')


def test_capture_attributes_torch_events_to_samples_and_restores_the_loggers():
    loggers = torch_compat.cudagraph_loggers()
    assert {"torch._inductor.cudagraph_trees.__cudagraphs", "torch._inductor.cudagraph_utils.__cudagraphs"} <= {
        logger.name for logger in loggers}
    before = [(logger.level, logger.propagate, list(logger.handlers)) for logger in loggers]
    trace_before = (torch_compat.trace_logger().level, list(torch_compat.trace_logger().handlers))
    stream = io.StringIO()
    with TraceCapture(), CudagraphCapture(stream) as capture:
        capture.set_sample(7)
        emit_runtime_events((12,))
        seven = capture.take()
        capture.set_sample(8)
        eight = capture.take()
    assert [(e.kind, e.detail, e.compile_id) for e in seven] == [
        (NEW, "(12,)", "0/0"), (SKIP, "mutated inputs (1 instances)", None), (REC, "", "0/0")]
    assert seven[-1].seconds is not None and seven[-1].seconds >= 0
    assert eight == ()
    assert [(logger.level, logger.propagate, list(logger.handlers)) for logger in loggers] == before
    # (torch's own lazy trace handler may drop itself once a record is written without TORCH_TRACE)
    trace = torch_compat.trace_logger()
    assert trace.level == trace_before[0]
    assert not [h for h in trace.handlers if h not in trace_before[1]]
    # The raw lines read back to the same events: that is how a GPU fixture is tested here.
    by_sample, unreadable = read_cudagraph_log(stream.getvalue().splitlines() + ["{broken"])
    assert unreadable == 1 and set(by_sample) == {7}
    assert cudagraph_events(by_sample[7])[0] == seven


def test_capture_does_not_print_torch_logs(capfd):
    logger = logging.getLogger("torch._inductor.cudagraph_trees.__cudagraphs")
    with CudagraphCapture() as capture:
        capture.set_sample(0)
        logger.warning("skipping cudagraphs due to reasons")
    assert "skipping cudagraphs" not in capfd.readouterr().err
    assert [e.kind for e in capture.take()] == [SKIP]


def test_which_options_use_cudagraphs():
    assert torch_compat.mode_uses_cudagraphs("reduce-overhead")
    assert torch_compat.mode_uses_cudagraphs("max-autotune")
    assert not torch_compat.mode_uses_cudagraphs("max-autotune-no-cudagraphs")
    assert not torch_compat.mode_uses_cudagraphs(None) and not torch_compat.mode_uses_cudagraphs("default")
    assert ReplayOptions(backend="inductor", device="cuda", mode="reduce-overhead").uses_cudagraphs
    assert not ReplayOptions(backend="eager", device="cuda", mode="reduce-overhead").uses_cudagraphs
    assert not ReplayOptions(backend="inductor", device="cpu", mode="reduce-overhead").uses_cudagraphs


# --- the replay wiring, with torch's runtime events simulated on the CPU ------------------------

@pytest.fixture
def simulated_cudagraphs(monkeypatch):
    """Pretend the replay runs CUDA graphs: after each real (eager-backend) call, emit what CUDA
    Graph Trees would — a new tree for a new first dim, a capture on its second call — and a skip
    for inputs of 3 rows, through torch's own logging functions."""
    from torch._inductor import cudagraph_trees, cudagraph_utils

    real_compile = replay.compile_model

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

    monkeypatch.setattr(replay, "compile_model", compile_model)
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
    timings = json.loads((analysis.out_dir / output.TIMINGS).read_text())
    assert [r["sample"] for r in timings["cudagraph_recordings"]] == [1, 5, 6]
    raw, unreadable = read_cudagraph_log((analysis.out_dir / output.TRACE_DIR / output.CUDAGRAPH_LOG).read_text().splitlines())
    assert unreadable == 0 and set(raw) == {0, 1, 2, 3, 5, 6, 7}
    lines = cli.format_cudagraphs(section)
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


# --- fixtures recorded on a GPU (bench/cudagraphs_check.py) -------------------------------------

GPU_FIXTURES = sorted((SEED_CORPUS.parents[2] / "tests" / "fixtures" / "cudagraphs").glob("*/cudagraphs_fixture.json"))


@pytest.mark.parametrize("path", GPU_FIXTURES or [None], ids=lambda p: p.parent.name if p else "none")
def test_parser_on_records_from_a_real_gpu(path):
    if path is None:
        pytest.skip("no GPU fixture yet: record one with bench/cudagraphs_check.py (see tests/fixtures/cudagraphs)")
    fixture = json.loads(path.read_text())
    for name, run in fixture["runs"].items():
        assert all(run["checks"].values()), (name, run["checks"])
        for sample, recorded in run["samples"].items():
            records = [CudagraphRecord(r["source"], r["text"], r["level"], r["logger"], r["sample"]) for r in recorded["records"]]
            events, unreadable = cudagraph_events(records)
            assert unreadable == 0
            assert [[e.kind.value, e.detail, e.compile_id] for e in events] == recorded["events"], (name, sample)
    runs = fixture["runs"]
    if "repeats" in runs:
        kinds_seen = {e[0] for s in runs["repeats"]["samples"].values() for e in s["events"]}
        assert {"new_shape", "recording"} <= kinds_seen
    if "skip_dynamic" in runs:
        reasons = [s["reason"] for s in runs["skip_dynamic"]["recorded"]["skips"]]
        # with graph partitioning torch skips no whole graph: the static partitions record once
        partitioned = runs["skip_dynamic"].get("settings", {}).get("graph_partition", False)
        assert any("cudagraph_skip_dynamic_graphs" in r for r in reasons) is not partitioned


# --- which graph runs: Dynamo's most-recently-used-first lookup ---------------------------------
#
# The seed's first 40 requests twice (bench/cudagraphs_check.py's "repeats" run). Graph 0/1 is
# the general one; in the second round Dynamo tries the graph used last first, so 0/1 runs
# request 0 again (sample 40) although 0/0, the earliest-compiled graph accepting it, served it
# the first time. On an H200 (torch 2.11) CUDA Graph Trees made 41 new shapes and 39 recordings.

REPEATED = 40


@pytest.fixture(scope="module")
def repeats(tmp_path_factory):
    seed = guardscope.load_corpus(SEED_CORPUS)
    path = tmp_path_factory.mktemp("repeats") / "corpus"
    with guardscope.CorpusWriter(path, model=f"{SEED_CORPUS.parent / 'model.py'}:small",
                                 compile=seed.manifest.compile, shard_size=20) as writer:
        for _ in range(2):
            for index in range(REPEATED):
                sample = seed.sample(index)
                writer.add(*sample.args, **sample.kwargs)
    return path


def _replay_lookup(corpus_dir, guard_only):
    """Each sample's SampleMeta, and (in a full replay) Dynamo's live lookup order after it
    next to the emulated one."""
    from guardscope.modelspec import load_model
    from guardscope.pipeline import options_from_manifest

    corpus = guardscope.load_corpus(corpus_dir)
    options = options_from_manifest(corpus.manifest.compile)
    metas, orders = {}, {}
    model = load_model(corpus.manifest.model, base_dir=corpus.path)
    with replay.ReplaySession(model, options, on_sample=lambda m: metas.__setitem__(m.index, m),
                              guard_only=guard_only, track_lookup=True) as session:
        for sample in corpus:
            session.replay([sample])
            live = [cid for cid, _ in torch_compat.cache_entries(session.runner.code)]
            orders[sample.index] = (session.lookup_order, live)
        assert session.result().replay_mode == ("guards" if guard_only else "full")
    return metas, orders


def test_lookup_order_moves_a_hit_to_the_front_and_puts_a_compile_there():
    def even(f_locals):
        return f_locals["x"] % 2 == 0

    def broken(f_locals):
        raise RuntimeError("a guard that raises rejects")

    lookup = torch_compat.LookupOrder()
    assert lookup.call([("0/0", even)], {"x": 2}) == "0/0"  # compiled by this call
    assert lookup.call([("0/0", even)], {"x": 4}) == "0/0"
    both = [("0/0", even), ("0/1", lambda f_locals: True)]
    assert lookup.call(both, {"x": 3}) == "0/1" and lookup.order == ["0/1", "0/0"]
    # 0/0, the earliest-compiled, accepts 4 too; Dynamo runs the one used last
    assert torch_compat.first_accepting(both, {"x": 4}) == "0/0"
    assert lookup.call(both, {"x": 4}) == "0/1"
    # an order saved at a checkpoint decides it after a resume
    assert torch_compat.LookupOrder(["0/0", "0/1"]).call(both, {"x": 4}) == "0/0"
    # nothing accepts (the call ran without a graph): nothing moves
    lookup = torch_compat.LookupOrder(["0/1", "0/0"])
    assert lookup.call([("0/0", broken), ("0/1", even)], {"x": 5}) is None and lookup.order == ["0/1", "0/0"]
    assert lookup.call([("0/0", broken), ("0/1", even)], {"x": 6}) == "0/1"


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
    from guardscope.modelspec import load_model
    from guardscope.pipeline import options_from_manifest

    metas = []
    model = load_model(corpus.manifest.model, base_dir=corpus.path)
    with replay.ReplaySession(model, options_from_manifest(corpus.manifest.compile),
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
    assert "41 new shapes (warm-ups), 39 recordings (not observed" in cli.format_cudagraphs(section)[0]


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
    assert rebuilt.shapes == builder.shapes
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
    lines = cli.format_cudagraphs(section)
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
