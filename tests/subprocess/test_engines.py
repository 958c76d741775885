"""Issue 38: ``analyze --engine dask`` reads and decodes a traffic log's shards on a Dask cluster
(a ``LocalCluster`` of 2 worker processes here, reached by its address as a remote one is) and
checks their rows there against the graphs compiled so far, while the replay stays in this
process, and the catalog is the embedded engine's byte for byte: for a seed traffic log whose
shards are all columns, for a log whose shards hold calls kept in full (read here), and for the
shipped fleet merged. An unreachable scheduler is one line naming it, before the output folder is
touched; a corrupt shard is skipped and counted as the embedded engine skips it."""

from __future__ import annotations

import hashlib
import json
import random
import shutil

import pytest
from click.testing import CliRunner

from guardscope import pipeline
from guardscope.cli import main
from guardscope.corpus.reader import load_corpus
from guardscope.corpus.writer import CorpusWriter
from guardscope.errors import EngineError
from guardscope.replay import engines

from ..paths import SEED_CORPUS
from ..sessions import copy_analysis

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def scheduler():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=50) as cluster:
        yield cluster.scheduler_address


def _seed_log(path, full_per_signature: int) -> None:
    corpus = load_corpus(SEED_CORPUS)
    spec = str((SEED_CORPUS / corpus.manifest.model.split(":")[0]).resolve()) + ":" + corpus.manifest.model.split(":")[1]
    calls = [(sample.args, sample.kwargs) for sample in corpus][:150]
    calls = calls + calls[:60]
    random.Random(5).shuffle(calls)
    with CorpusWriter(path, model=spec, compile=dict(corpus.manifest.compile), keep="signatures", log="parquet",
                      shard_size=32, full_per_signature=full_per_signature) as writer:
        for args, kwargs in calls:
            writer.add(*args, **kwargs)


def _both(corpus, root, scheduler, embedded=None, **options) -> tuple[bytes, dict]:
    """The catalog bytes of both engines (they must be equal) and the Dask run's engine summary;
    ``embedded``: the embedded engine's analysis of ``corpus`` when one was made already."""
    if embedded is None:
        embedded = pipeline.analyze(corpus, root / "embedded", **options).out_dir
    pipeline.analyze(corpus, root / "dask", engine="dask", scheduler=scheduler, **options)
    dask = (root / "dask" / "catalog.json").read_bytes()
    assert dask == (embedded / "catalog.json").read_bytes()
    return dask, json.loads((root / "dask" / "timings.json").read_text())["engine"]


@pytest.mark.parametrize("full_per_signature", [0, 1])
def test_the_dask_engine_gives_the_embedded_catalog_byte_for_byte(tmp_path, scheduler, full_per_signature):
    _seed_log(tmp_path / "log", full_per_signature)
    shards = len(load_corpus(tmp_path / "log").manifest.shards)
    # With calls kept in full, the cluster says how many it checked over columns, and the signature
    # count is corrected for them as for a shard decoded here: the catalogs are equal byte for byte.
    catalog, engine = _both(tmp_path / "log", tmp_path, scheduler)
    assert json.loads(catalog)["summary"]["compile_samples"]
    if full_per_signature == 0:  # every shard is columns: decoded on the cluster
        assert engine == {"name": "dask", "shards_on_cluster": shards, "shards_here": 0}
        # ... and the shards submitted once the replay had graphs were checked there too, against
        # the graphs compiled by then (later compiles are tried here, on the rows left unserved).
        checks = json.loads((tmp_path / "dask" / "timings.json").read_text())["column_checks"]
        assert 0 < checks["scanned_on_cluster"] < checks["samples"]
    else:  # each signature's first call kept in full: checked over columns too, wherever decoded
        assert engine["shards_on_cluster"] + engine["shards_here"] == shards


def test_the_shipped_fleet_merged_gives_the_same_catalog_on_both_engines(tmp_path, scheduler, shipped_fleet):
    # The session's merge, analysed by the embedded engine: copied side by side as made, so that
    # the corpus's path relative to each analysis folder (in the catalog) is the same.
    merged, embedded = shipped_fleet
    shutil.copytree(merged.parent, tmp_path / merged.parent.name)
    corpus = tmp_path / merged.parent.name / merged.name
    catalog, engine = _both(corpus, tmp_path, scheduler, copy_analysis(embedded, tmp_path / "embedded"))
    assert sorted(json.loads(catalog)["replicas"]) == [f"web-{k}" for k in range(4)]
    assert engine["shards_on_cluster"] + engine["shards_here"] == len(load_corpus(corpus).manifest.shards)


def test_a_corrupt_shard_is_skipped_and_counted_as_the_embedded_engine_does(tmp_path, scheduler):
    _seed_log(tmp_path / "log", 0)
    manifest = json.loads((tmp_path / "log" / "corpus.json").read_text())
    bad = tmp_path / "log" / manifest["shards"][2]["file"]
    content = bad.read_bytes()[: len(bad.read_bytes()) // 2]
    bad.write_bytes(content)
    manifest["shards"][2]["sha256"] = hashlib.sha256(content).hexdigest()  # truncated as recorded: not Parquet
    (tmp_path / "log" / "corpus.json").write_text(json.dumps(manifest))
    catalog, _ = _both(tmp_path / "log", tmp_path, scheduler, skip_bad_shards=True)
    skipped = json.loads(catalog)["skipped_shards"]
    assert [entry["file"] for entry in skipped] == [bad.name] and "not a readable Parquet file" in skipped[0]["error"]


def test_an_unreachable_scheduler_is_one_line_naming_it_and_nothing_is_written(tmp_path, monkeypatch):
    _seed_log(tmp_path / "log", 0)
    monkeypatch.setattr(engines, "CONNECT_TIMEOUT", 1)  # a refused address is retried until the timeout: 10 s idle
    with pytest.raises(EngineError) as caught:
        pipeline.analyze(tmp_path / "log", tmp_path / "out", engine="dask", scheduler="tcp://127.0.0.1:9")
    assert str(caught.value).startswith("cannot reach the Dask scheduler at tcp://127.0.0.1:9: ")
    assert "\n" not in str(caught.value) and not (tmp_path / "out").exists()
    result = CliRunner().invoke(main, ["analyze", str(tmp_path / "log"), "--out", str(tmp_path / "out"), "-q",
                                       "--scheduler", "tcp://127.0.0.1:9"])
    assert result.exit_code == 2 and "--scheduler is for --engine dask" in result.output


def test_the_command_starts_a_local_cluster_without_an_address(tmp_path, monkeypatch):
    _seed_log(tmp_path / "log", 0)
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    result = CliRunner().invoke(main, ["analyze", str(tmp_path / "log"), "--out", str(tmp_path / "out"), "-q",
                                       "--engine", "dask", "--no-isolate"])
    assert result.exit_code == 0, result.output
    engine = json.loads((tmp_path / "out" / "timings.json").read_text())["engine"]
    assert engine["name"] == "dask" and engine["shards_on_cluster"] == len(load_corpus(tmp_path / "log").manifest.shards)
