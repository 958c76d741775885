"""Bad input gets a clear answer, crashes stay contained, nothing finished is lost."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import guardscope
from guardscope.cli import main
from guardscope.corpus import CorpusWriter, load_corpus
from guardscope.errors import CatalogError, ShardError
from guardscope.plan import check_identifier

from .conftest import REPO, SEED_CORPUS, model_spec, read_catalog


def run_cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def sharded_seed(tmp_path_factory):
    """The seed corpus re-recorded in shards of 40 samples (8 shards)."""
    path = tmp_path_factory.mktemp("sharded") / "corpus"
    source = load_corpus(SEED_CORPUS)
    spec = f"{(REPO / 'samples' / 'gnn' / 'model.py').as_posix()}:small"
    with CorpusWriter(path, model=spec, compile=source.manifest.compile, shard_size=40) as writer:
        for sample in source:
            writer.add(*sample.args, **sample.kwargs)
    return path


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
        (f"{Path(__file__).parent / 'models.py'}:Missing", ["has no attribute", "Missing"]),
        (f"{Path(__file__).parent / 'models.py'}:__doc__", ["not a class or factory"]),
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
    if process.returncode == 0:
        pytest.skip("the analysis finished before SIGTERM arrived")
    assert process.returncode == 130
    assert "--resume" in stderr and checkpoint.is_file()


def test_a_crash_in_the_replay_is_reported_not_fatal(make_corpus, tmp_path):
    corpus = make_corpus("Segfaults", [((torch.randn(3),), {}), ((torch.randn(4),), {})],
                         compile_options={"dynamic": True, "fullgraph": False})
    completed = subprocess.run(_analyze_command(corpus, tmp_path / "out", "--isolate"),
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 3, completed.stderr[-2000:]
    assert "crashed (SIGSEGV)" in completed.stderr and "--backend eager" in completed.stderr


def test_resume_with_other_options_is_refused(sharded_seed, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".guardscope-checkpoint.json").write_text(json.dumps({"version": 1, "fingerprint": {}}))
    result = run_cli("analyze", str(sharded_seed), "--out", str(out), "--resume")
    assert result.exit_code == 2 and "--force" in result.output


# --- 8: the recompile limit ------------------------------------------------------------------------


def test_samples_past_the_recompile_limit_are_listed_as_not_analysed(tmp_path):
    analysis = guardscope.analyze(SEED_CORPUS, tmp_path / "out", recompile_limit=1)
    catalog = read_catalog(analysis.out_dir)
    # With the limit below Dynamo's default, torch's own default (8) applies: max(limit, default).
    assert catalog["summary"]["compiles"] == 8
    assert catalog["not_analysed"] == [112, 144, 180]
    assert any("recompile limit" in w for w in analysis.warnings)
    assert "112" in (analysis.out_dir / "report.html").read_text()


# --- 10: generated code never embeds corpus-controlled strings -------------------------------------


@pytest.mark.parametrize("name", ["x; import os", "__import__('os')", "class", "a b", ""])
def test_argument_names_must_be_identifiers(name):
    with pytest.raises(CatalogError):
        check_identifier(name)


# --- 9: torch outside the tested range ------------------------------------------------------------


def test_torch_outside_the_tested_range_warns(monkeypatch):
    from guardscope import torch_compat

    assert torch_compat.check_supported_version() is None  # 2.11 and 2.13 are in range
    monkeypatch.setattr(torch_compat, "torch_version", lambda: "2.16.0")
    warning = torch_compat.check_supported_version()
    assert "2.16.0" in warning and "other" in warning
