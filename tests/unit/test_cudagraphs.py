"""CUDA Graph Trees (mode="reduce-overhead"): the parser of torch's cudagraph log lines and
trace events, the capture attached to torch's real loggers, the replay wiring, and the padding
advice for the seed corpus — all on the CPU. Real CUDA graphs: bench/cudagraphs_check.py.

This file holds the pure tests (no torch.compile, no child process); the others are in
tests/integration/test_cudagraphs.py.
"""

from __future__ import annotations

import io
import json
import logging

import pytest
from torch._dynamo.utils import dynamo_timed
from torch._guards import CompileId

from guardscope import torch_compat
from guardscope.model import CudagraphEventKind as Kind
from guardscope.options import ReplayOptions
from guardscope.replay.capture import TraceCapture
from guardscope.replay.cudagraphs import (
    UNLOGGED_SKIP,
    CudagraphCapture,
    CudagraphRecord,
    cudagraph_events,
    read_cudagraph_log,
)

from ..conftest import SEED_CORPUS

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
