"""Bad input gets a clear answer, crashes stay contained, nothing finished is lost.

This file holds the pure tests (no torch.compile, no child process); the others are in
tests/integration/test_reliability.py, tests/subprocess/test_reliability.py.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from guardscope import CorpusWriter
from guardscope.cli import main
from guardscope.corpus.reader import load_corpus
from guardscope.corpus.spec import load_model
from guardscope.errors import CallMismatchError, CatalogError, ShardError
from guardscope.fixes.plan import check_identifier
from guardscope.model import Sample
from guardscope.replay.runner import check_call_fits

from ..conftest import SEED_CORPUS


def run_cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# --- 1, 4: bad paths, manifests and model specs -------------------------------------------------


@pytest.mark.parametrize("option, value", [("--mark-unbacked", "x"), ("--mark-unbacked", "x:first"),
                                           ("--paddable", ":0")])
def test_a_bad_arg_dim_option_names_the_value_and_the_form(tmp_path, option, value):
    result = run_cli("analyze", str(SEED_CORPUS), "--out", str(tmp_path / "out"), option, value)
    assert result.exit_code == 2
    assert f"{value!r} is not ARG:DIM (e.g. x:0)" in result.output and option in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("make", ["missing", "empty", "not_a_corpus"])
def test_bad_corpus_path_names_it_and_says_what_a_corpus_is(tmp_path, make):
    path = tmp_path / "c"
    if make != "missing":
        path.mkdir()
    if make == "not_a_corpus":
        (path / "notes.txt").write_text("hello")
    result = run_cli("analyze", str(path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert str(path) in result.output and "corpus.json" in result.output
    assert "Traceback" not in result.output


def test_unknown_manifest_version_names_the_field(tmp_path):
    shutil.copytree(SEED_CORPUS, tmp_path / "c")
    manifest = json.loads((tmp_path / "c" / "corpus.json").read_text())
    manifest["format_version"] = 99
    (tmp_path / "c" / "corpus.json").write_text(json.dumps(manifest))
    result = run_cli("analyze", str(tmp_path / "c"), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "format_version" in result.output


@pytest.mark.parametrize(
    "spec, words",
    [
        ("no_such_module_xyz:build", ["no_such_module_xyz", "not found"]),
        (f"{Path(__file__).parents[1] / 'models.py'}:Missing", ["has no attribute", "Missing"]),
        (f"{Path(__file__).parents[1] / 'models.py'}:__doc__", ["not a class or factory"]),
        ("/nonexistent/dir/model.py:build", ["file not found"]),
        ("torch.nn:Linear", ["raised TypeError"]),  # Linear() needs arguments: the factory raises
    ],
)
def test_bad_model_spec_gives_the_spec_and_the_cause(tmp_path, spec, words):
    result = run_cli("analyze", str(SEED_CORPUS), "--out", str(tmp_path / "out"), "--model", spec)
    assert result.exit_code == 2, result.output
    assert spec in result.output and "Traceback" not in result.output
    for word in words:
        assert word in result.output


_TWO_MODELS = """
import functools

import torch


class Net(torch.nn.Module):
    def forward(self, x, y):
        return x.sum() + y.sum()


class Renamed(torch.nn.Module):  # Net's next version: y became scale
    def forward(self, x, scale=None):
        return x.sum()


def wrapped(forward):
    @functools.wraps(forward)
    def wrapper(*args, **kwargs):
        return forward(*args, **kwargs)
    return wrapper


class Wrapped(torch.nn.Module):  # a decorator's *args, **kwargs: any call binds to it
    @wrapped
    def forward(self, x, y):
        return x.sum() + y.sum()
"""


def test_a_log_whose_calls_do_not_fit_the_models_forward_is_named(tmp_path):
    """Issue 37: a traffic log recorded for another model (or a forward renamed since) is refused
    in one line naming the log file, forward's signature and the call, before the output folder
    is touched, not replayed into as many TypeErrors as it has calls."""
    (tmp_path / "nets.py").write_text(_TWO_MODELS)
    with CorpusWriter(tmp_path / "log", model=f"{tmp_path / 'nets.py'}:Net", keep="signatures", log="parquet",
                      full_per_signature=0) as writer:
        for rows in (2, 3, 4):
            writer.add(torch.zeros(rows, 4), y=torch.zeros(rows))
    first = json.loads((tmp_path / "log" / "corpus.json").read_text())["shards"][0]["file"]
    result = run_cli("analyze", str(tmp_path / "log"), "--out", str(tmp_path / "out"),
                     "--model", f"{tmp_path / 'nets.py'}:Renamed")
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: {tmp_path / 'log' / first}: its calls do not fit the model's "
                           "Renamed.forward(x, scale=None)"), line
    assert "unexpected keyword argument 'y'" in line and "sample 0 passes (Tensor, y=Tensor)" in line
    assert "--model" in line and not (tmp_path / "out").exists()

    sample = Sample(index=0, args=(torch.zeros(2, 4), torch.zeros(2)), kwargs={})
    check_call_fits(load_model(f"{tmp_path / 'nets.py'}:Net"), sample, "log", "Net")  # fits
    check_call_fits(load_model(f"{tmp_path / 'nets.py'}:Wrapped"), sample, "log", "Wrapped")  # not checked
    with pytest.raises(CallMismatchError, match=r"Renamed.forward\(x, scale=None\).*too many positional"):
        check_call_fits(load_model(f"{tmp_path / 'nets.py'}:Renamed"),
                        Sample(index=5, args=sample.args + (1,), kwargs={}), "log", "Renamed")


def test_pickle_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    shutil.copytree(SEED_CORPUS, tmp_path / "c")
    shard = tmp_path / "c" / "shard-00001.pt"
    torch.save({"format": "guardscope-corpus", "samples": [Payload()]}, shard)
    manifest = json.loads((tmp_path / "c" / "corpus.json").read_text())
    import hashlib

    manifest["shards"][1]["sha256"] = hashlib.sha256(shard.read_bytes()).hexdigest()
    (tmp_path / "c" / "corpus.json").write_text(json.dumps(manifest))
    with pytest.raises(ShardError, match="shard-00001.pt"):
        list(load_corpus(tmp_path / "c"))
    assert not marker.exists()


# --- 7: interruption and resume -----------------------------------------------------------------


def test_resume_with_other_options_is_refused(sharded_seed, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".guardscope-checkpoint.json").write_text(json.dumps({"version": 1, "fingerprint": {}}))
    result = run_cli("analyze", str(sharded_seed), "--out", str(out), "--resume")
    assert result.exit_code == 2 and "--force" in result.output


def test_members_stream_into_a_file_that_a_resume_cuts_back(tmp_path):
    from guardscope import checkpoint
    from guardscope.catalog.builder import CatalogBuilder

    builder = CatalogBuilder()
    builder.members = {"0/0": [0, 2], "0/1": [1]}
    first = checkpoint.append_members(tmp_path, builder.members_after({}), keep_bytes=0)
    counts = builder.member_counts()
    builder.members["0/0"].append(3)
    builder.members["0/2"] = [4]
    assert {key: list(found) for key, found in builder.members_after(counts).items()} == {"0/0": [3], "0/2": [4]}
    second = checkpoint.append_members(tmp_path, builder.members_after(counts), keep_bytes=first)
    assert checkpoint.read_members(tmp_path, second) == builder.members
    assert checkpoint.read_members(tmp_path, first) == {"0/0": [0, 2], "0/1": [1]}
    # An interrupted run appended more after its last checkpoint: the resume cuts it off.
    checkpoint.append_members(tmp_path, {"0/1": [5]}, keep_bytes=second)
    assert checkpoint.append_members(tmp_path, {}, keep_bytes=second) == second
    assert checkpoint.read_members(tmp_path, second) == builder.members
    state = builder.to_state(members=False)
    assert "members" not in state and state["member_counts"] == {"0/0": 3, "0/1": 1, "0/2": 1}


def test_a_checkpoint_whose_members_file_disagrees_is_refused(tmp_path):
    from guardscope import checkpoint
    from guardscope.errors import OutputError

    size = checkpoint.append_members(tmp_path, {"0/0": [0, 1]}, keep_bytes=0)
    checkpoint.write_checkpoint(tmp_path, {"fingerprint": {}, "members_bytes": size,
                                           "builder": {"member_counts": {"0/0": 3}}})
    with pytest.raises(OutputError, match="does not hold the members"):
        checkpoint.read_checkpoint(tmp_path, {})
    checkpoint.write_checkpoint(tmp_path, {"fingerprint": {}, "members_bytes": size + 5,
                                           "builder": {"member_counts": {"0/0": 2}}})
    with pytest.raises(OutputError, match="damaged"):
        checkpoint.read_checkpoint(tmp_path, {})


# --- 7: an existing output folder ---------------------------------------------------------------


@pytest.mark.parametrize("listed", [False, True], ids=["no-list", "listed"])
def test_force_never_replaces_the_users_own_catalog(tmp_path, listed):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "catalog.json").write_text('{"mine": 1}')
    if listed:  # a list naming it, as a guardscope that took any catalog.json for its own wrote
        (out / ".guardscope-files.json").write_text('["catalog.json"]')
    refused = run_cli("analyze", str(SEED_CORPUS), "--out", str(out))
    assert refused.exit_code == 2 and "already holds an analysis" not in refused.output
    forced = run_cli("analyze", str(SEED_CORPUS), "--out", str(out), "--force")
    assert forced.exit_code == 2, forced.output
    for words in ("catalog.json", "did not write", "even with --force", "move it", "another --out"):
        assert words in forced.output
    assert (out / "catalog.json").read_text() == '{"mine": 1}'


def test_a_listed_file_is_guardscopes_only_while_its_content_is(tmp_path):
    from guardscope import store
    from guardscope.errors import OutputError

    catalog = {"schema": 1, **{key: {} for key in store.CATALOG_KEYS}}
    out = store.prepare_output_dir(tmp_path / "out")
    store.write_document(out, store.CATALOG, catalog)
    store.write_text(out / "warmup.py", '"""Warmup, generated by guardscope."""\n')
    store.write_document(out, store.CATALOG, catalog)  # guardscope's own: replaced
    # The user put their own files in place of guardscope's: the list still names them.
    (out / "catalog.json").write_text('{"mine": 1}')
    (out / "warmup.py").write_text("# my warmup\n")
    with pytest.raises(OutputError, match="catalog.json exists and was not written by guardscope"):
        store.write_document(out, store.CATALOG, catalog)
    with pytest.raises(OutputError, match="warmup.py exist"):
        store.refuse_foreign(out, ["warmup.py"])
    store.remove_owned(out, store.CATALOG)
    with pytest.raises(OutputError, match="catalog.json, which guardscope did not write"):
        store.prepare_output_dir(out, force=True)
    assert (out / "catalog.json").read_text() == '{"mine": 1}'
    # A folder analysed before the list existed: its catalog is told by its content.
    store.write_document(tmp_path / "old", store.CATALOG, catalog)
    assert store.prepare_output_dir(tmp_path / "old", force=True)
    assert json.loads((tmp_path / "old" / ".guardscope-files.json").read_text()) == ["catalog.json"]


def test_an_interrupt_between_a_write_and_its_listing_leaves_the_file_replaceable(tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM (raised as KeyboardInterrupt) can land after any step of a write; the
    checkpoint written while unwinding must still be allowed to replace the one just written."""
    from guardscope import checkpoint, store

    out = store.prepare_output_dir(tmp_path / "out")
    real = store.write_atomic
    for interrupt_at in range(3):  # after the 1st, 2nd ... file operation of a checkpoint write
        calls = []

        def interrupted(path, data, **kwargs):
            real(path, data, **kwargs)
            calls.append(path)
            if len(calls) == interrupt_at + 1:
                raise KeyboardInterrupt

        monkeypatch.setattr(store, "write_atomic", interrupted)
        try:
            checkpoint.write_checkpoint(out, {"fingerprint": {}, "step": interrupt_at})
        except KeyboardInterrupt:
            pass
        monkeypatch.setattr(store, "write_atomic", real)
        checkpoint.write_checkpoint(out, {"fingerprint": {}, "step": "unwinding"})
        assert json.loads((out / store.CHECKPOINT).read_text())["step"] == "unwinding"
        (out / store.CHECKPOINT).unlink()
        store._write_owned(out, [name for name in store._read_owned(out) if name != store.CHECKPOINT])


# --- 10: generated code never embeds corpus-controlled strings -------------------------------------


@pytest.mark.parametrize("name", ["x; import os", "__import__('os')", "class", "a b", ""])
def test_argument_names_must_be_identifiers(name):
    with pytest.raises(CatalogError):
        check_identifier(name)


# --- 9: torch outside the tested range ------------------------------------------------------------


def test_torch_outside_the_tested_range_warns(monkeypatch):
    from guardscope import torch_compat
    from guardscope.torch_compat import versions

    assert torch_compat.check_supported_version() is None  # 2.11 and 2.13 are in range
    monkeypatch.setattr(versions, "torch_version", lambda: "2.16.0")  # where check_supported_version reads it
    warning = torch_compat.check_supported_version()
    assert "2.16.0" in warning and "other" in warning


# --- 8: a failed compile that makes Dynamo skip a frame -------------------------------------------

OBSERVED = "Observed exception\n  Explanation: Dynamo found no exception handler at the top-level compiled function"


def catalog_of(events, samples, fullgraph=False):
    """A catalog built from compile events and (index, serving graph or error) samples."""
    from guardscope.catalog.builder import CatalogBuilder
    from guardscope.model import SampleMeta, TensorMeta

    builder = CatalogBuilder()
    for index, (serving, error) in enumerate(samples):
        builder.add_sample(SampleMeta(index=index, tensors=(("x", TensorMeta((2,), (1,), "float32", "cpu", False)),),
                                      lengths=(), scalars=(), serving=serving, error=error))
    return builder.build(events=events, torch_version="2.13.0", corpus_path="../corpus", model="m.py:M",
                         compile_options={"backend": "eager", "fullgraph": fullgraph})


def failed_compile(compile_id, sample, reason=OBSERVED):
    from guardscope.model import CompileEvent

    frame, number = map(int, compile_id.split("/"))
    return CompileEvent(compile_id, frame, number, sample, "forward", None, fail_type="Unsupported", fail_reason=reason)


def test_a_failed_compile_of_the_forward_sends_every_later_call_to_eager():
    from guardscope.model import CompileEvent

    compiled = CompileEvent("0/0", 0, 0, 0, "forward", None)
    # sample 1 raised (its compile failed on the raise); 2 found no graph; 3 passed 0/0's guards, but ran eagerly
    samples = [("0/0", None), (None, "ValueError: three rows"), (None, None), ("0/0", None)]
    catalog = catalog_of([compiled, failed_compile("0/1", 1)], samples).to_json()
    (skipped,) = catalog["skipped_frames"]
    assert skipped == {"frame": 0, "frame_label": "forward", "compile_id": "0/1", "sample": 1,
                       "fail_type": "Unsupported", "reason": "Observed exception", "location": None,
                       "error": "ValueError: three rows", "eager_samples": [2, 3]}
    assert [t["samples"] for t in catalog["topologies"]] == [[0]] and catalog["not_analysed"] == []

    # fullgraph makes the failure the sample's error: Dynamo goes on compiling the frame
    assert "skipped_frames" not in catalog_of([compiled, failed_compile("0/1", 1)], samples, fullgraph=True).to_json()
    # the recompile limit keeps the graphs running: samples no graph accepts are not analysed
    limit = catalog_of([compiled, failed_compile("0/1", 2, "Dynamo recompile limit exceeded\n  ...")], samples)
    assert limit.skipped_frames == () and limit.not_analysed == (2,)
    assert [tuple(t.samples) for t in limit.topologies] == [(0, 3)]
    # a frame that compiled again after a failure was not skipped
    later = CompileEvent("0/2", 0, 2, 3, "forward", None)
    assert catalog_of([compiled, failed_compile("0/1", 1), later], samples).skipped_frames == ()
    # a later frame's failure: its calls ran that frame eagerly, which calls reached it is not known
    (skipped,) = catalog_of([compiled, failed_compile("1/0", 1, "Unsupported context manager")], samples).skipped_frames
    assert (skipped["frame"], skipped["error"], skipped["eager_samples"]) == (1, None, None)


def test_held_signals_run_a_signal_at_the_next_safe_point_and_a_second_at_once():
    import signal

    from guardscope.replay.resumable import HeldSignals

    arrived: list[str] = []
    notices: list[str] = []

    def handler(number, frame):
        arrived.append(signal.Signals(number).name)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        held = HeldSignals(notices.append)
        with held.installed():
            os.kill(os.getpid(), signal.SIGTERM)  # inside a sample: held
            arrived.append("sample finished")
            assert notices == ["SIGTERM received: stopping after the current sample (send it again to stop at once)"]
            held.safe_point()  # between two samples: delivered
            assert arrived == ["sample finished", "SIGTERM"]
            held.safe_point()
            assert arrived == ["sample finished", "SIGTERM"]  # once

            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)  # a second one: at once (a hung compile)
            assert arrived == ["sample finished", "SIGTERM", "SIGTERM"]
            held.safe_point()
            assert arrived == ["sample finished", "SIGTERM", "SIGTERM"]

            with held.holding():  # the builder and the checkpoint's progress: even a second waits
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGTERM)
                arrived.append("recorded")
            held.safe_point()
            assert arrived[-2:] == ["recorded", "SIGTERM"]

            os.kill(os.getpid(), signal.SIGTERM)  # held to the end of the replay: delivered there
            arrived.append("replay ended")
        assert arrived[-2:] == ["replay ended", "SIGTERM"]
        assert signal.getsignal(signal.SIGTERM) is handler  # put back as it was
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_model_whose_own_import_fails_names_the_root_cause_and_where(tmp_path, monkeypatch):
    """Issue 51, item 7: the model's import failed in a broken environment. The error names the
    missing module and the line that imports it, and a module spec that was found is not called
    'not found' because a module it imports is missing."""
    import sys

    from guardscope.corpus.spec import load_model
    from guardscope.errors import ModelSpecError

    (tmp_path / "broken_model_51.py").write_text(
        "import torch\nimport missing_dependency_51\n\n\ndef build():\n    return torch.nn.Identity()\n")
    (tmp_path / "served_model_51.py").write_text("from broken_model_51 import build\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    where = f"at {tmp_path / 'broken_model_51.py'}, line 2"
    try:
        for spec in (f"{tmp_path / 'broken_model_51.py'}:build", "served_model_51:build"):
            with pytest.raises(ModelSpecError) as raised:
                load_model(spec)
            message = str(raised.value)
            assert "raised ModuleNotFoundError: No module named 'missing_dependency_51'" in message, message
            assert where in message and "not found (" not in message, message
    finally:
        for name in ("broken_model_51", "served_model_51"):
            sys.modules.pop(name, None)


def test_a_crashed_child_s_reason_leads_with_its_root_cause_one_item_a_line(tmp_path):
    """What a child that died of an uncaught exception leaves as its reason: the root cause of the
    chain Python printed, where it was raised, then the exception that ended the process; never
    its last lines flattened onto one with ' | '."""
    import traceback

    from guardscope.corpus.spec import load_model
    from guardscope.errors import ModelSpecError
    from guardscope.proving.isolation import Completed

    (tmp_path / "model.py").write_text("import torch\nimport missing_dependency_51\n")
    with pytest.raises(ModelSpecError) as raised:
        load_model(f"{tmp_path / 'model.py'}:build")
    printed = "".join(traceback.format_exception(raised.value))  # as Python prints it when a process dies
    stderr = "/x/copyreg.py:99: FutureWarning: deprecated\n  return cls(*args)\n" + printed
    reason = Completed(1, "", stderr, 2.0).failure("the verification process")
    lines = reason.splitlines()
    assert lines[0] == "the verification process exited with status 1: ModuleNotFoundError: No module named 'missing_dependency_51'"
    assert lines[1] == f"  raised at {tmp_path / 'model.py'}, line 2, in <module>: import missing_dependency_51"
    assert lines[2].startswith("  which ended the process as guardscope.errors.ModelSpecError: model spec ")
    assert len(lines) == 3 and " | " not in reason
    # One exception, no chain: its own line and frame.
    from guardscope.proving.isolation import python_error

    plain = 'Traceback (most recent call last):\n  File "/app/run.py", line 7, in main\n    go()\nValueError: bad\n'
    error = python_error(plain)
    assert (error.root, error.error, error.where, error.source) == ("ValueError: bad", "ValueError: bad",
                                                                    "/app/run.py, line 7, in main", "go()")
    assert python_error("Fatal Python error: Segmentation fault\n") is None
