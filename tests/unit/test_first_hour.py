"""A user's first hour, through the real command line in a subprocess (exit codes and stderr are
what a user sees): no lost work, no false causes, no tracebacks, feedback while it runs.

This file holds the pure tests (no torch.compile, no child process); the others are in
tests/subprocess/test_first_hour.py.
"""

from __future__ import annotations


# --- rough edges --------------------------------------------------------------------------------


def test_help_texts_render_their_examples_and_say_why_defaults_differ():
    from click.testing import CliRunner

    from guardscope.cli import main

    analyze = CliRunner().invoke(main, ["analyze", "--help"], terminal_width=200).output
    assert "--mode reduce-overhead \\\n" in analyze  # the continuation of a two-line example survives
    assert "Exit status: 0 analysed; 1" in " ".join(analyze.split())
    assert "do not depend on the device" in " ".join(analyze.split())
    fidelity = CliRunner().invoke(main, ["fidelity", "--help"], terminal_width=200).output
    assert "analyze defaults to the CPU" in " ".join(fidelity.split())
    for command in ("emit-warmup", "verify", "probe", "bundle", "fidelity"):
        assert "--corpus" in CliRunner().invoke(main, [command, "--help"]).output, command


def test_a_model_file_imports_the_modules_beside_it(tmp_path, monkeypatch):
    import sys

    from guardscope.corpus.spec import load_model

    models = tmp_path / "models"
    models.mkdir()
    (models / "first_hour_layers.py").write_text(
        "import torch\n\n\nclass Block(torch.nn.Linear):\n    def __init__(self):\n        super().__init__(2, 3)\n"
    )
    (models / "net.py").write_text(
        "import torch\nfrom first_hour_layers import Block\n\n\n"
        "class Net(torch.nn.Sequential):\n    def __init__(self):\n        super().__init__(Block())\n"
    )
    (models / "other.py").write_text("from first_hour_layers import Block as build\n")
    (tmp_path / "corpus").mkdir()
    monkeypatch.setattr(sys, "path", list(sys.path))  # the folder the load adds leaves with the test
    monkeypatch.chdir(tmp_path)
    try:
        # As 'python models/net.py' runs it, from the working directory and from the corpus folder.
        assert load_model("models/net.py:Net")[0].out_features == 3
        assert load_model("../models/other.py:build", base_dir=tmp_path / "corpus").out_features == 3
        assert sys.path.count(str(models)) == 1 and sys.path[0] == str(models)
    finally:
        sys.modules.pop("first_hour_layers", None)


def test_a_live_recorder_s_folder_says_nothing_was_flushed_yet(tmp_path):
    """A traffic folder whose recorder is still open and has not flushed: the calls were recorded,
    not written, and the error says so; a closed recorder's empty folder asks for calls."""
    import time

    import pytest
    import torch

    from guardscope.corpus.storage.format import read_manifest
    from guardscope.errors import CorpusError
    from guardscope.pipeline import analyze
    from guardscope.runtime import TrafficRecorder

    recorder = TrafficRecorder(tmp_path / "live", model="pkg.models:build", flush_every=3600)
    try:
        assert recorder.offer((torch.ones(3),), {}) is None
        deadline = time.monotonic() + 30
        while not (tmp_path / "live" / "corpus.json").exists():  # the writer opens on its thread
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(CorpusError) as live:
            analyze(tmp_path / "live", tmp_path / "out")
        assert "holds no samples yet: its recorder is still open and has flushed nothing" in str(live.value)
        assert "flush() or close()" in str(live.value) and "record some calls" not in str(live.value)
        assert read_manifest(tmp_path / "live").recording
    finally:
        recorder.close()
    manifest = read_manifest(tmp_path / "live")
    assert (manifest.samples, manifest.recording) == (1, False)
    assert "recording" not in (tmp_path / "live" / "corpus.json").read_text()

    from guardscope.corpus.writer import CorpusWriter

    CorpusWriter(tmp_path / "empty", model="pkg.models:build").close()
    assert not read_manifest(tmp_path / "empty").recording
    with pytest.raises(CorpusError, match="holds no samples: record some calls into it first"):
        analyze(tmp_path / "empty", tmp_path / "out")


def test_a_missing_corpus_names_both_shard_kinds(tmp_path):
    """A folder that is not a corpus: the error describes a traffic log's .parquet shards too."""
    import pytest

    from guardscope.corpus.reader import load_corpus
    from guardscope.errors import CorpusError

    (tmp_path / "traffic").mkdir()
    for path in (tmp_path / "missing", tmp_path / "traffic"):
        with pytest.raises(CorpusError) as refused:
            load_corpus(path)
        assert "shard-NNNNN.pt" in str(refused.value) and "shard-NNNNN.parquet" in str(refused.value)
        assert "TrafficRecorder" in str(refused.value)


def test_a_corpus_folder_given_for_an_analysis_is_one_line_and_no_progress(tmp_path):
    """emit-warmup (and probe, fidelity) on a corpus folder: the inputs are checked before any
    progress line, and the one line says it is a corpus and what to run."""
    import torch
    from click.testing import CliRunner

    from guardscope.cli import main
    from guardscope.corpus.writer import CorpusWriter

    with CorpusWriter(tmp_path / "corpus", model="pkg.models:build") as writer:
        writer.add(torch.ones(3))
    for command in ("emit-warmup", "probe", "fidelity"):
        done = CliRunner().invoke(main, [command, str(tmp_path / "corpus")])
        assert done.exit_code == 2, (command, done.output)
        assert done.output.splitlines() == [
            f"error: {tmp_path / 'corpus'} is a corpus, not an analysis folder: run 'guardscope analyze "
            f"{tmp_path / 'corpus'} --out DIR' first, then pass DIR"], command
