"""Issue 53, item 4: a traffic log's sample indices name the calls. 20,000 calls of the seed's
production-scale distribution (``bench.bench_traffic_log``'s draws) are written call by call, by
signature (``CorpusWriter(keep="signatures", log="parquet", full_per_signature=0)``, repeats of a
signature gathered on one row per window) and through a ``TrafficRecorder``; the three analyse to
the same compile sample indices (before issue 53 the log by signature gave 0, 1, 4, 13, 25, 41,
... where the calls give 0, 1, 4, 12, 24, 40, ...), and ``load_corpus(log).sample(i)`` is call
``i``. Replays the three logs (eager backend, the guard-only column replay: seconds each)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

import guardscope
from bench.bench_traffic_log import signatures
from guardscope.corpus.signatures.materialising import materialise
from guardscope.corpus.reader import load_corpus
from guardscope.corpus.signatures.signature import signature
from guardscope.corpus.writer import CorpusWriter
from guardscope.runtime import TrafficRecorder
from samples.gnn.generate import COMPILE_OPTIONS, model_spec

from ..builders import as_log_version_1

CALLS = 20_000  # the smallest size of the distribution whose windows hold a compile's shift


def _written(directory, sigs, **options):
    with CorpusWriter(directory, model=model_spec(directory, "small"), compile=COMPILE_OPTIONS, keep="signatures",
                      log="parquet", full_per_signature=0, replica="r", **options) as writer:
        for sig in sigs:
            writer.add_signature(sig, {"cpu"})


def _compiles(corpus, out) -> list[int]:
    analysis = guardscope.analyze(corpus, out)
    return json.loads(analysis.catalog_path.read_text())["summary"]["compile_samples"]


def test_the_same_calls_written_in_full_by_signature_and_recorded_compile_at_the_same_indices(tmp_path):
    sigs = list(signatures(CALLS))
    _written(tmp_path / "calls", sigs, aggregate=False)  # call by call: each row its calls, in order
    _written(tmp_path / "signatures", sigs, shard_size=65536)  # as the benches write: one window
    recorder = TrafficRecorder(tmp_path / "recorded", model=model_spec(tmp_path / "recorded", "small"),
                               compile=dict(COMPILE_OPTIONS), full_per_signature=0, replica="r",
                               max_pending=CALLS + 1)
    for sig in sigs:
        args, kwargs = materialise(sig)
        recorder.offer(args, kwargs)
    recorder.close()
    assert recorder.counts()["dropped"] == 0

    # The logs by signature did gather a signature's repeats away from where they came.
    for name in ("signatures", "recorded"):
        gathered = ["positions" in pq.read_schema(path).names for path in (tmp_path / name).glob("shard-*.parquet")]
        assert any(gathered), name
    expected = _compiles(tmp_path / "calls", tmp_path / "out-calls")
    assert expected[:6] == [0, 1, 4, 12, 24, 40]
    assert _compiles(tmp_path / "signatures", tmp_path / "out-signatures") == expected
    assert _compiles(tmp_path / "recorded", tmp_path / "out-recorded") == expected
    for name in ("signatures", "recorded"):
        corpus = load_corpus(tmp_path / name)
        assert len(corpus) == CALLS
        for index in [*expected, 11, 13, CALLS // 2, CALLS - 1]:
            got = corpus.sample(index)
            assert got.index == index and signature(got.args, got.kwargs, inference=False) == sigs[index], (name, index)


def test_an_old_log_that_gathered_repeats_is_analysed_with_its_indices_called_rows(tmp_path):
    """A log written before issue 53 (version 1) cannot say where a signature's repeats came: the
    catalog says its indices are rows (``corpus.indices``) and analyze says what that means."""
    sigs = list(signatures(CALLS))
    _written(tmp_path / "log", sigs, shard_size=65536)
    as_log_version_1(tmp_path / "log")
    analysis = guardscope.analyze(tmp_path / "log", tmp_path / "out")
    catalog = json.loads(analysis.catalog_path.read_text())
    assert catalog["corpus"]["indices"] == "rows"
    assert catalog["summary"]["compile_samples"][:6] == [0, 1, 4, 13, 25, 41]  # the rows', as the issue found
    assert any("its sample indices are the rows' order, not the calls'" in w for w in analysis.warnings)
