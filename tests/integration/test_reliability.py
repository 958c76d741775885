"""Bad input gets a clear answer, crashes stay contained, nothing finished is lost.

This file holds the tests that compile in this process; the others are in
tests/unit/test_reliability.py, tests/subprocess/test_reliability.py.
"""

from __future__ import annotations

import shutil

from click.testing import CliRunner

import guardscope
from guardscope.cli import main

from ..conftest import SEED_CORPUS, read_catalog


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


# --- 8: the recompile limit ------------------------------------------------------------------------


def test_samples_past_the_recompile_limit_are_listed_as_not_analysed(tmp_path):
    analysis = guardscope.analyze(SEED_CORPUS, tmp_path / "out", recompile_limit=1)
    catalog = read_catalog(analysis.out_dir)
    # With the limit below Dynamo's default, torch's own default (8) applies: max(limit, default).
    assert catalog["summary"]["compiles"] == 8
    assert catalog["not_analysed"] == [112, 144, 180]
    assert any("recompile limit" in w for w in analysis.warnings)
    assert "112" in (analysis.out_dir / "report.html").read_text()
