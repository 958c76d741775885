"""Issue 53: a traffic recorder's writer keeps draining its queue while a window's data shard is
written (``corpus.traffic_log.tail``), so calls offered meanwhile are not dropped at the default bounds; the
files still follow in order, flush() still waits for them, and a failed write is raised. No compile."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from guardscope.corpus.traffic_log import files as log_files
from guardscope.corpus.traffic_log.tail import FileTail
from guardscope.corpus.reader import load_corpus
from guardscope.runtime import TrafficRecorder

MODEL = "pkg.models:build"
SLOW = 1.5  # seconds a data shard takes to write here (a window of thousands of new layouts)


def test_offers_while_a_data_shard_is_written_are_not_dropped(tmp_path, monkeypatch):
    started = threading.Event()
    encode = log_files._data_shard

    def slow(data, structured):  # as a window of many calls kept in full: seconds to encode and write
        started.set()
        time.sleep(SLOW)
        return encode(data, structured)

    monkeypatch.setattr(log_files, "_data_shard", slow)
    recorder = TrafficRecorder(tmp_path / "t", model=MODEL, compiles=False, replica="r")  # the default bounds
    assert recorder.max_pending == 4096
    recorder.offer((torch.ones(3, 4),), {})  # kept in full: the window has a data shard
    assert not recorder.flush(timeout=0)  # handed to the writer, not waited for
    assert started.wait(30)  # its data shard is being written now
    offered = recorder.max_pending + 1000
    began = time.monotonic()
    for _ in range(offered):  # one recurring layout: cheap offers, more than the queue holds
        assert recorder.offer((torch.ones(5, 4),), {}) is None
    offering = time.monotonic() - began
    assert recorder.flush()  # waits for the files
    recorder.close()
    counts = recorder.counts()
    assert counts["dropped"] == 0 and counts["recorded"] == offered + 1, counts
    corpus = load_corpus(tmp_path / "t")
    assert len(corpus) == offered + 1 and not corpus.manifest.recording
    assert [corpus.sample(i).recorded for i in (0, 1, 2)] == ["full", "full", "signature"]
    assert offering < 30  # (the offers never waited for the shard: ~0.1 s here)


def test_the_tail_runs_jobs_in_order_and_raises_a_failed_one(tmp_path):
    tail, done = FileTail("test-tail"), []
    for number in range(5):
        tail.submit(done.append, number)
    tail.then(lambda: done.append("then"))
    tail.wait()
    assert done == [0, 1, 2, 3, 4, "then"]
    tail.close()

    def fail():
        raise OSError("disk full")

    gate = threading.Event()
    tail = FileTail("test-tail", depth=3)
    tail.submit(gate.wait)  # the next two are taken before the failure is known
    tail.submit(fail)
    tail.submit(done.append, "skipped")  # after a failure: not run
    tail.then(lambda: done.append("signalled"))  # a waiter's signal runs all the same
    gate.set()
    with pytest.raises(OSError, match="disk full"):
        tail.wait()
    with pytest.raises(OSError, match="disk full"):
        tail.submit(done.append, "refused")
    with pytest.raises(OSError, match="disk full"):
        tail.close()
    assert done[-1] == "signalled" and "skipped" not in done and "refused" not in done
