"""Bad input gets a clear answer, crashes stay contained, nothing finished is lost.

This file holds the tests that start child processes, compile with inductor or drive the browser;
the others are in tests/unit/test_reliability.py, tests/integration/test_reliability.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import guardscope

# --- 7: interruption and resume -----------------------------------------------------------------


def _analyze_command(corpus: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "guardscope.cli", "analyze", str(corpus), "--out", str(out), "-q",
            "--checkpoint-every", "0", *extra]


def test_killed_analysis_resumes_to_the_same_catalog(sharded_seed, tmp_path):
    reference = tmp_path / "reference"
    subprocess.run(_analyze_command(sharded_seed, reference), check=True, capture_output=True, timeout=600)

    out = tmp_path / "interrupted"
    process = subprocess.Popen(_analyze_command(sharded_seed, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    checkpoint = out / ".guardscope-checkpoint.json"
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if checkpoint.is_file() and json.loads(checkpoint.read_text())["next_sample"] >= 3 * 40:
            break
        time.sleep(0.05)
    assert process.poll() is None, "the analysis finished before it could be interrupted"
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert not (out / "catalog.json").exists()
    kept = json.loads(checkpoint.read_text())["next_sample"]
    assert 3 * 40 <= kept < 300

    refused = subprocess.run(_analyze_command(sharded_seed, out), capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2 and "--resume" in refused.stderr

    subprocess.run(_analyze_command(sharded_seed, out, "--resume"), check=True, capture_output=True, timeout=600)
    assert (out / "catalog.json").read_bytes() == (reference / "catalog.json").read_bytes()
    assert not checkpoint.exists()
    # The trace on disk holds each compile once: what the killed run wrote after its checkpoint
    # was cut, and the warm-up that rebuilt the finished shards' graphs wrote nothing.
    def compiles(path):
        return (path / "trace" / "torch_trace.log").read_text().count('"compilation_metrics"')

    assert compiles(out) == compiles(reference) == 11


def test_sigterm_keeps_finished_shards_and_says_how_to_resume(sharded_seed, tmp_path):
    out = tmp_path / "out"
    process = subprocess.Popen(_analyze_command(sharded_seed, out), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    checkpoint = out / ".guardscope-checkpoint.json"
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None and not checkpoint.is_file():
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    if process.returncode == 0 or (process.returncode == -signal.SIGTERM and (out / "catalog.json").is_file()):
        # It finished before SIGTERM arrived, or after it had written everything and given
        # SIGTERM its default action back.
        pytest.skip("the analysis finished before SIGTERM arrived")
    assert process.returncode == 130, stderr[-3000:]
    assert "--resume" in stderr and checkpoint.is_file(), stderr[-3000:]


_SIGNALS_WHILE_TRACING = """
import os
import signal
from pathlib import Path

import torch

MARKER = Path(__file__).with_name("signalled")


@torch.library.custom_op("guardscope_test::doubled", mutates_args=())
def doubled(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@doubled.register_fake
def _(x):
    # Dynamo traces this under fake tensors: the signal arrives inside fake-tensor dispatch.
    if x.shape[0] == 5 and not MARKER.exists():
        MARKER.touch()
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # a handler runs at the next bytecode: here
        except KeyboardInterrupt as exc:
            # What pybind11's overload resolution does to an exception raised while it converts
            # arguments, and so what CI saw at e878c05: Dynamo then reports "Unsupported:
            # TypeError when making fake tensor call" as the sample's error.
            raise TypeError("incompatible function arguments") from exc
    return torch.empty_like(x)


class Model(torch.nn.Module):
    def forward(self, x):
        return doubled(x) + 1
"""


def test_a_signal_while_dynamo_traces_stops_after_that_sample_not_as_its_error(tmp_path):
    # Python runs a signal's handler between two bytecodes of whatever runs: here Dynamo's
    # fake-tensor dispatch, which turned the CLI's KeyboardInterrupt into "Unsupported: TypeError
    # when making fake tensor call", a sample error (exit 1, "samples raised in the model").
    (tmp_path / "model.py").write_text(_SIGNALS_WHILE_TRACING)
    spec = f"{tmp_path / 'model.py'}:Model"
    from guardscope import CorpusWriter

    with CorpusWriter(tmp_path / "corpus", model=spec, compile={"dynamic": False}) as writer:
        for rows in (3, 4, 5, 6, 7):
            writer.add(torch.randn(rows, 2))
    out = tmp_path / "out"
    interrupted = subprocess.run(_analyze_command(tmp_path / "corpus", out), capture_output=True, text=True,
                                 timeout=300)
    assert (tmp_path / "signalled").exists()
    assert interrupted.returncode == 130, interrupted.stderr[-3000:]
    # The sample being traced when the signal came finished and was kept.
    assert json.loads((out / ".guardscope-checkpoint.json").read_text())["next_sample"] == 3
    assert "SIGTERM received: stopping after the current sample" in interrupted.stderr
    assert "raised in the model" not in interrupted.stderr and "--resume" in interrupted.stderr

    resumed = subprocess.run(_analyze_command(tmp_path / "corpus", out, "--resume"), capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    catalog = json.loads((out / "catalog.json").read_text())
    assert catalog["failed_samples"] == [] and catalog["summary"]["compile_samples"] == [0, 1, 2, 3, 4]
    assert sum(topology["count"] for topology in catalog["topologies"]) == 5


def test_samples_that_raise_in_the_model_stay_out_of_the_plans_and_verify_says_they_raised(make_corpus, tmp_path):
    """Issue 36, item 10: a model that refuses batches over 4. verify called the warmup CRASHED
    with the model's ValueError and the verdict FAILED, and a raising sample was part of the
    unbacked plan's residual warmup. The plans leave raising samples out; verify replays them as
    raised in the model, as recorded."""
    from guardscope import pipeline, store

    batches = (2, 3, 6, 2, 1, 5, 4, 3, 7, 1)
    corpus = make_corpus("RaisesOnLargeBatches", [((torch.randn(b, 4),), {}) for b in batches],
                         compile_options={"dynamic": None, "fullgraph": False})
    completed = subprocess.run(_analyze_command(corpus, tmp_path / "out", "--accept-errors"), capture_output=True,
                               text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    out = tmp_path / "out"
    raised = [f["sample"] for f in store.read_catalog(out)["failed_samples"]]
    assert raised == [i for i, b in enumerate(batches) if b > 4] and raised
    pipeline.emit_warmup(out, only=("warmup", "unbacked"))
    fixes = {f["name"]: f for f in store.read_document(out, store.FIXES, required=True)["artifacts"]}
    for name in ("warmup", "unbacked"):
        warmup_corpus = guardscope.load_corpus(out / ("warmup" if name == "warmup" else "unbacked_warmup")) \
            if fixes[name]["status"] == "ok" else []
        assert all(sample.args[0].shape[0] <= 4 for sample in warmup_corpus), name
    document = pipeline.verify(out, artifacts=("warmup", "unbacked"), bundle=False, backend="eager")
    results = {r["name"]: r for r in document["artifacts"]}
    assert results["warmup"]["status"] == "passed", results["warmup"]
    assert results["warmup"]["raised_as_recorded"] == len(raised)
    assert results["unbacked"]["status"] in ("passed", "infeasible"), results["unbacked"]
    assert document["verdict"] == "passed"


def test_a_crash_in_the_replay_is_reported_not_fatal(make_corpus, tmp_path):
    corpus = make_corpus("Segfaults", [((torch.randn(3),), {}), ((torch.randn(4),), {})],
                         compile_options={"dynamic": True, "fullgraph": False})
    completed = subprocess.run(_analyze_command(corpus, tmp_path / "out", "--isolate"),
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 3, completed.stderr[-2000:]
    assert "crashed (SIGSEGV)" in completed.stderr and "--backend eager" in completed.stderr


def test_torchs_graph_break_warnings_go_to_the_analysis_log_not_the_terminal(make_corpus, tmp_path):
    """Issue 36, item 8: the analysis printed torch's W-level graph-break warnings (each with its
    source lines) between its own lines. They go to DIR/analyze.log; the terminal gets one line per
    cause. (A child process: torch warns about ``.item()`` once per process.)"""
    corpus = make_corpus("DataBranch", [((torch.randn(n, 3),), {}) for n in (2, 3, 4)],
                         compile_options={"dynamic": None, "fullgraph": False})
    out = tmp_path / "out"
    completed = subprocess.run(_analyze_command(corpus, out), capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "Graph break from `Tensor.item()`" not in completed.stderr
    log = (out / "analyze.log").read_text()
    assert "Graph break from `Tensor.item()`" in log and "y.sum().item()" in log
    line = next(line for line in completed.stdout.splitlines() if line.startswith("torch "))
    assert line == ("torch       logged 1 warning while the corpus was replayed: Graph break from `Tensor.item()`, "
                    f"consider setting: (full log: {out / 'analyze.log'})"), line
