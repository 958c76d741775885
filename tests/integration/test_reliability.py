"""Bad input gets a clear answer, crashes stay contained, nothing finished is lost.

This file holds the tests that compile in this process; the others are in
tests/unit/test_reliability.py, tests/subprocess/test_reliability.py.
"""

from __future__ import annotations

import json
import shutil
import signal
from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner

import guardscope
from guardscope import CorpusWriter, checkpoint, store
from guardscope.catalog.builder import CatalogBuilder
from guardscope.cli import main
from guardscope.replay.resumable import _rebuild_warnings

from ..conftest import SEED_CORPUS, read_catalog
from ..models import RaisesOnThreeRows
from ..pages import parse, words
from ..paths import MODELS, model_spec


def run_cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# --- 2, 3: corrupt shards, malicious pickles ----------------------------------------------------


def test_corrupt_shard_is_named_and_can_be_skipped(sharded_seed, tmp_path):
    corpus = tmp_path / "c"
    shutil.copytree(sharded_seed, corpus)
    shard = corpus / "shard-00002.pt"
    shard.write_bytes(shard.read_bytes()[:1000])  # truncated
    result = run_cli("analyze", str(corpus), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "shard-00002.pt" in result.output
    assert not (tmp_path / "out" / "catalog.json").exists()  # never a silent partial result

    analysis = guardscope.analyze(corpus, tmp_path / "out2", skip_bad_shards=True)
    catalog = read_catalog(analysis.out_dir)
    assert [s["file"] for s in catalog["skipped_shards"]] == ["shard-00002.pt"]
    assert catalog["corpus"]["samples"] == 260 and catalog["summary"]["skipped_shards"] == 1
    assert "shard-00002.pt" in (analysis.out_dir / "report.html").read_text()


# --- 7: interruption and resume ----------------------------------------------------------------


@pytest.mark.parametrize("fullgraph", [False, True])
def test_a_resumed_analysis_equals_the_uninterrupted_one_wherever_it_was_interrupted(tmp_path, fullgraph):
    """Issue 23 item 6: a resume must rebuild all the Dynamo state the finished samples left, not
    only their graphs. TextClassifier, ``dynamic=None``: requests 0, 1 (non-contiguous ids) and 2
    (a float mask) compile 0/0, 0/1 and 0/2; requests 3 and 4 run 0/2, and their guard checks
    fail older graphs' guards on the way, which re-sorts those graphs' guards (Dynamo checks the
    most often failing first); request 5 recompiles, and which failure it reports for each older
    graph depends on that. A resume that re-ran only the compiling requests reported other
    failures (``fullgraph=False``: every request runs; ``True``: requests the guards accept are
    only checked). Shards of 2: interrupted between shards (2) and inside one (3, 5)."""
    def ids(transposed=False):
        return torch.randint(0, 100, (5, 2)).t() if transposed else torch.randint(0, 100, (2, 5))

    bool_mask, float_mask = torch.zeros(2, 5, dtype=torch.bool), torch.zeros(2, 5)
    calls = [(ids(), bool_mask), (ids(transposed=True), bool_mask), (ids(), float_mask), (ids(), float_mask),
             (ids(), float_mask), (ids(transposed=True), float_mask)]
    corpus = tmp_path / "corpus"
    with CorpusWriter(corpus, model=model_spec("TextClassifier"), compile={"dynamic": None, "fullgraph": fullgraph},
                      shard_size=2) as writer:
        for args in calls:
            writer.add(*args)
    reference = guardscope.analyze(corpus, tmp_path / "reference", checkpoint_every=0).out_dir
    catalog = read_catalog(reference)
    assert catalog["replay_mode"] == ("guards" if fullgraph else "full")
    assert [[f["kind"] for f in c["failures"]] for c in catalog["compiles"]] == [
        [], ["stride_mismatch"], ["dtype_mismatch", "stride_mismatch"],
        ["dtype_mismatch", "dtype_mismatch", "stride_mismatch"]]

    def compiles(out):
        return (out / "trace" / "torch_trace.log").read_text().count('"compilation_metrics"')

    for interrupted_at in (2, 3, 5):
        out = tmp_path / f"interrupted-at-{interrupted_at}"

        def interrupt(done, _compiles, at=interrupted_at):
            if done == at:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            guardscope.analyze(corpus, out, checkpoint_every=0, progress=interrupt)
        assert checkpoint.checkpoint_progress(out) == interrupted_at
        resumed = guardscope.analyze(corpus, out, checkpoint_every=0, resume=True)
        assert (out / "catalog.json").read_bytes() == (reference / "catalog.json").read_bytes(), interrupted_at
        assert compiles(out) == compiles(reference) == 4  # the finished part, replayed again, logged nothing
        assert not [w for w in resumed.warnings if "resumed replay" in w]


def test_an_interrupt_while_a_sample_is_recorded_waits_until_it_is_recorded(tmp_path, monkeypatch):
    """Ctrl-C landing right after the catalog builder took a sample, before the replay counted it
    done: the checkpoint must not hold that sample both as done and as still to do (its resume
    counted it twice: 7 samples of 6, as a CI run under load catalogued 301 of the seed's 300)."""
    corpus = tmp_path / "corpus"
    with CorpusWriter(corpus, model=model_spec("Elementwise"), compile={"dynamic": True, "fullgraph": True},
                      shard_size=2) as writer:
        for rows in (5, 7, 1, 9, 0, 6):
            writer.add(torch.randn(rows, 4))
    reference = guardscope.analyze(corpus, tmp_path / "reference", checkpoint_every=0).out_dir
    recorded = CatalogBuilder.add_sample

    def recorded_then_interrupted(builder, meta):
        recorded(builder, meta)
        if meta.index == 3:
            # raise_signal, not os.kill: the signal goes to this thread, not to any of the process's
            # threads, so Python runs the handler at the next instruction, here.
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(CatalogBuilder, "add_sample", recorded_then_interrupted)
    out = tmp_path / "out"
    # Ctrl-C's own handler, whatever an earlier test in this worker left installed.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            guardscope.analyze(corpus, out, checkpoint_every=0)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert checkpoint.checkpoint_progress(out) == 4  # sample 3 is done: recorded, and counted
    monkeypatch.setattr(CatalogBuilder, "add_sample", recorded)
    guardscope.analyze(corpus, out, checkpoint_every=0, resume=True)
    assert (out / "catalog.json").read_bytes() == (reference / "catalog.json").read_bytes()


def test_a_resume_that_replays_differently_is_warned_about():
    """A model that does not replay the same way twice: the checkpoint's compiling samples or
    lookup order differ from what the replay again of the finished samples rebuilt."""
    state = {"compile_samples": [0, 3], "lookup_order": ["0/1", "0/0"]}
    same = SimpleNamespace(compile_samples=lambda before: [0, 3], lookup_order=["0/1", "0/0"])
    assert _rebuild_warnings(same, state, 5) == []
    other = SimpleNamespace(compile_samples=lambda before: [0, 4], lookup_order=["0/1", "0/0"])
    (warning,) = _rebuild_warnings(other, state, 5)
    assert warning.startswith("the resumed replay of the 5 finished samples made compiles at samples [0, 4] "
                              "where the interrupted run compiled at [0, 3]")
    assert "may differ from an uninterrupted run's" in warning


# --- 8: the recompile limit ------------------------------------------------------------------------


def test_samples_past_the_recompile_limit_are_listed_as_not_analysed(tmp_path):
    analysis = guardscope.analyze(SEED_CORPUS, tmp_path / "out", recompile_limit=1)
    catalog = read_catalog(analysis.out_dir)
    # With the limit below Dynamo's default, torch's own default (8) applies: max(limit, default).
    assert catalog["summary"]["compiles"] == 8
    assert catalog["not_analysed"] == [112, 144, 180]
    assert any("recompile limit" in w for w in analysis.warnings)
    assert "112" in (analysis.out_dir / "report.html").read_text()



def graph_runs(model, inputs) -> list[int]:
    """The inputs a compiled graph ran for, under plain ``torch.compile`` (eager backend)."""
    ran: list[int] = []

    def backend(graph, _):
        def run(*args):
            ran.append(current)
            return graph(*args)
        return run

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend)
    for current, x in enumerate(inputs):
        try:
            compiled(x)
        except ValueError:
            pass
    torch._dynamo.reset()
    return ran


def test_a_failed_compile_is_named_and_the_eager_calls_after_it_are_counted(make_corpus, tmp_path):
    """A forward that raises for 3-row inputs: the compile for sample 1 fails while tracing the
    raise and Dynamo skips the forward from then on, even for the 2-row inputs graph 0/0 accepts.
    The summary, the catalog and the report say so, not "recompile limit reached"."""
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(2 + index % 5, 4, generator=generator) for index in range(40)]
    assert graph_runs(RaisesOnThreeRows(), inputs) == [0]  # what Dynamo does: sample 0 ran a graph, no other
    corpus = make_corpus("RaisesOnThreeRows", [((x,), {}) for x in inputs], {"dynamic": None, "fullgraph": False})

    result = run_cli("analyze", str(corpus), "--out", str(tmp_path / "out"), "--accept-errors", "-q")
    assert result.exit_code == 0, result.output
    assert "limit reached" not in result.output and "recompile limit (" not in result.output
    eager = [i for i in range(2, 40) if i % 5 != 1]  # every later call that did not raise
    lines = MODELS.read_text().splitlines()
    model = lines.index("class RaisesOnThreeRows(torch.nn.Module):")
    forward = next(n for n in range(model, len(lines)) if "def forward" in lines[n]) + 1  # 1-based
    assert (f"compile failed 0/1 of forward (tests/models.py:{forward}) at sample 1: ValueError: three rows, "
            f"raised at tests/models.py:{forward + 2} while Dynamo traced it") in result.output
    assert f"every later call ran it eagerly, {len(eager)} samples, first {eager[:10]}" in result.output
    assert "warning: compile 0/1 of forward" in result.output and "turns torch.compile off" in result.output

    catalog = read_catalog(tmp_path / "out")
    (failed,) = [c for c in catalog["compiles"] if c["fail_type"]]
    assert (failed["compile_id"], failed["sample"], failed["fail_type"]) == ("0/1", 1, "Unsupported")
    (skipped,) = catalog["skipped_frames"]
    assert (skipped["frame"], skipped["compile_id"], skipped["sample"]) == (0, "0/1", 1)
    assert skipped["error"] == "ValueError: three rows" and skipped["eager_samples"] == eager
    assert [t["samples"] for t in catalog["topologies"]] == [[0]]  # the 2-row calls after sample 1 ran eagerly
    raised = [f["sample"] for f in catalog["failed_samples"]]
    assert raised == list(range(1, 40, 5)) and catalog["not_analysed"] == []
    assert sum(t["count"] for t in catalog["topologies"]) + len(raised) + len(eager) == 40

    page = parse((tmp_path / "out" / "report.html").read_text())
    lead = words(page.find("section", id="compile-failed"))
    assert f"Compile 0/1 of forward (tests/models.py:{forward}) failed at sample 1: ValueError: three rows" in lead
    assert f"every later call ran eagerly, {len(eager)} samples" in lead
    assert "Compile 0/1 failed at sample 1 and every later call ran eagerly." in words(page.find("p", class_="lede"))


def test_skip_bad_shards_skips_a_corrupt_shard_of_a_traffic_corpus(tmp_path):
    """Issue 36, item 3: in a traffic corpus later calls of a signature name its full sample; with
    that sample's shard truncated, --skip-bad-shards still stopped on the checksum error. Now the
    shard is skipped and its signature's later calls run on tensors materialised from the signature."""
    from guardscope.errors import ShardError
    from guardscope.runtime import TrafficRecorder

    traffic = TrafficRecorder(tmp_path / "traffic", model=model_spec("Elementwise"), compile={"dynamic": True},
                              flush_every=0, roll_bytes=None)  # a shard per call, none folded
    for index in range(30):
        traffic.offer((torch.randn(2 + index % 7, 3),), {})
    traffic.close()
    manifest = json.loads((tmp_path / "traffic" / "corpus.json").read_text())
    shard = tmp_path / "traffic" / manifest["shards"][1]["file"]  # the full sample of rows 3
    shard.write_bytes(shard.read_bytes()[:200])
    with pytest.raises(ShardError, match="fails its checksum"):
        guardscope.analyze(tmp_path / "traffic", tmp_path / "strict")
    result = CliRunner().invoke(main, ["analyze", str(tmp_path / "traffic"), "--out", str(tmp_path / "out"),
                                           "--skip-bad-shards", "-q"])
    assert result.exit_code == 0, result.output
    catalog = json.loads((tmp_path / "out" / "catalog.json").read_text())
    assert [s["file"] for s in catalog["skipped_shards"]] == [manifest["shards"][1]["file"]]
    signatures = catalog["corpus"]["signatures"]
    assert catalog["corpus"]["samples"] == 29 and signatures["ran_on_materialised"] >= 1


_DOUBLE_WEIGHTS = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3).double()  # the recording served float32 weights

    def forward(self, x):
        return self.conv(x).relu()
"""


def test_an_analysis_where_every_sample_raises_says_so_and_names_the_models_error(tmp_path):
    """Issue 36, item 5: a spec building float64 weights against a float32 recording. Every sample
    raises while Dynamo traces it: the progress line counted each failed compile as a compile
    ("3 compiles" against the summary's 0), the error said "every other sample is catalogued", and
    the cause shown was Dynamo's "RuntimeError when making fake tensor call", not the model's."""
    (tmp_path / "net.py").write_text(_DOUBLE_WEIGHTS)
    with CorpusWriter(tmp_path / "corpus", model=f"{tmp_path / 'net.py'}:Net", compile={"dynamic": None}) as writer:
        for batch, side in ((2, 8), (3, 8), (2, 10)):
            writer.add(torch.randn(batch, 3, side, side))
    result = CliRunner().invoke(main, ["analyze", str(tmp_path / "corpus"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    assert "replaying 3/3 samples (100%), 0 compiles" in result.stderr
    assert "compiles    0" in result.stdout or "compiles 0" in " ".join(result.stdout.split())
    error = result.stderr.splitlines()[-1]
    assert error.startswith("error: 3 of 3 samples raised in the model (first, sample 0: RuntimeError: Input type "
                            "(float) and bias type (double) should be the same, raised while Dynamo traced the model); "
                            "no sample could be catalogued."), error
