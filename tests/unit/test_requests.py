"""requests.json: the request and step of each tagged call, written by the writer and the traffic
recorder, read back by sample index; malformed files refused. No compile."""

from __future__ import annotations

import json

import pytest
import torch

from guardscope.corpus.reader import load_corpus
from guardscope.corpus.storage.requests import REQUESTS_NAME, RequestRuns
from guardscope.corpus.writer import CorpusWriter
from guardscope.errors import ManifestError

MODEL = "pkg.models:build"


def test_runs_merge_consecutive_steps_and_split_interleaved_requests():
    runs = RequestRuns()
    for index, (request, step) in enumerate([("a", 0), ("a", 1), ("a", 2), (7, 0), ("a", 3), (7, 1), (7, 2)]):
        runs.add(index, request, step)
    assert runs.runs == [["a", 0, 0, 3], [7, 3, 0, 1], ["a", 4, 3, 1], [7, 5, 1, 2]]
    assert [runs.of(i) for i in range(8)] == [("a", 0), ("a", 1), ("a", 2), (7, 0), ("a", 3), (7, 1), (7, 2), None]
    assert runs.requests() == 2 and runs.upto(4) == [["a", 0, 0, 3], [7, 3, 0, 1]]


def test_the_writer_tags_the_calls_of_each_request(tmp_path):
    with CorpusWriter(tmp_path / "c", model=MODEL, shard_size=2) as writer:
        writer.add(torch.ones(1))                       # untagged
        for request, steps in (("req-1", 3), (2, 2)):
            with writer.request(request):
                for step in range(steps):
                    writer.add(torch.ones(step + 1))
    corpus = load_corpus(tmp_path / "c")
    assert [corpus.requests.of(i) for i in range(len(corpus))] == [
        None, ("req-1", 0), ("req-1", 1), ("req-1", 2), (2, 0), (2, 1)]
    assert corpus.requests.requests() == 2
    with pytest.raises(TypeError, match="a request tag is a str or an int"):
        with CorpusWriter(tmp_path / "d", model=MODEL) as writer, writer.request(1.5):
            pass
    # overwrite=True removes an earlier corpus's tags with it
    with CorpusWriter(tmp_path / "c", model=MODEL, overwrite=True) as writer:
        writer.add(torch.ones(1))
    assert not (tmp_path / "c" / REQUESTS_NAME).exists() and load_corpus(tmp_path / "c").requests is None


def test_the_traffic_recorder_tags_each_threads_request(tmp_path):
    from guardscope.runtime import TrafficRecorder

    traffic = TrafficRecorder(tmp_path / "c", model=MODEL, full_per_signature=0)
    forward = traffic.wrap(lambda x: x + 1)
    for request in ("r0", "r1"):
        with traffic.request(request):
            for length in (4, 1, 1):
                forward(torch.ones(length))
    forward(torch.ones(2))
    traffic.close()
    corpus = load_corpus(tmp_path / "c")
    assert [corpus.requests.of(i) for i in range(len(corpus))] == [
        ("r0", 0), ("r0", 1), ("r0", 2), ("r1", 0), ("r1", 1), ("r1", 2), None]


@pytest.mark.parametrize(("runs", "message"), [
    ("nope", "is not a guardscope-requests file"),
    ([["a", 0, 0]], r"runs\[0\]"),
    ([["a", 0, 0, 2], ["b", 1, 0, 1]], r"runs\[1\].*in sample order"),
    ([[True, 0, 0, 1]], r"runs\[0\]"),
    ([["a", 0, -1, 1]], r"runs\[0\]"),
])
def test_a_malformed_requests_file_is_refused(tmp_path, runs, message):
    with CorpusWriter(tmp_path / "c", model=MODEL) as writer:
        writer.add(torch.ones(1))
        writer.add(torch.ones(1))
    (tmp_path / "c" / REQUESTS_NAME).write_text(json.dumps({"format": "guardscope-requests", "runs": runs}))
    with pytest.raises(ManifestError, match=message):
        load_corpus(tmp_path / "c").requests


def test_runs_past_the_manifest_are_cut_off(tmp_path):
    """A recording stopped between the manifest's write and the tags' lists no sample twice."""
    with CorpusWriter(tmp_path / "c", model=MODEL) as writer:
        writer.add(torch.ones(1))
    (tmp_path / "c" / REQUESTS_NAME).write_text(json.dumps({"format": "guardscope-requests", "runs": [["a", 0, 0, 5]]}))
    assert load_corpus(tmp_path / "c").requests.runs == [["a", 0, 0, 1]]
