"""Issue 53: a recording process killed with SIGKILL mid-traffic leaves a log that analyses, and the
calls it loses are at most its last flush window. The child offers calls of the seed distribution
to a ``TrafficRecorder`` whose log folds its windows often (a small ``roll_bytes``), flushing every
``WINDOW`` calls, and counts its offers in a shared file; the parent kills it once folds happened.
"""

from __future__ import annotations

import json
import mmap
import os
import signal
import struct
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

import guardscope
from guardscope.corpus.reader import load_corpus

from ..conftest import REPO

pytestmark = pytest.mark.slow

WINDOW = 400  # the child flushes after every WINDOW calls (and every flush_every seconds)

CHILD = """
import mmap, struct, sys
from bench.bench_traffic_log import signatures
from guardscope.corpus.signatures.materialising import materialise
from guardscope.runtime import TrafficRecorder
from samples.gnn.generate import COMPILE_OPTIONS, model_spec

directory, counter, window = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(counter, "r+b") as stream:
    shared = mmap.mmap(stream.fileno(), 8)
traffic = TrafficRecorder(directory, model=model_spec(directory, "small"), compile=dict(COMPILE_OPTIONS),
                          full_per_signature=1, flush_every=0.5, roll_bytes=60_000, replica="killed")
for index, sig in enumerate(signatures(1_000_000)):
    args, kwargs = materialise(sig)
    traffic.offer(args, kwargs)
    shared[:8] = struct.pack("<q", index + 1)  # offered so far
    if (index + 1) % window == 0:
        traffic.flush()
"""


def test_a_recorder_killed_mid_traffic_loses_at_most_its_last_window(tmp_path):
    log, counter = tmp_path / "traffic", tmp_path / "offered"
    counter.write_bytes(bytes(8))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(log), str(counter), str(WINDOW)], cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and child.poll() is None:  # until windows were folded twice
            manifest = log / "corpus.json"
            shards = json.loads(manifest.read_text())["shards"] if manifest.is_file() else []
            if sum(1 for shard in shards if shard["samples"] > WINDOW) >= 2:
                break
            time.sleep(0.2)
        assert child.poll() is None, child.stderr.read().decode()[-2000:]
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    with open(counter, "rb") as stream:
        offered = struct.unpack("<q", mmap.mmap(stream.fileno(), 8, access=mmap.ACCESS_READ)[:8])[0]

    corpus = load_corpus(log)
    assert corpus.manifest.recording  # its writer never closed
    lost = offered - len(corpus)
    assert 0 <= lost <= WINDOW, (offered, len(corpus))
    # Every file the manifest lists reads with plain pyarrow, and together they hold every call kept.
    listed = [shard.file for shard in corpus.manifest.shards]
    assert sum(sum(pq.read_table(log / name).column("count").to_pylist()) for name in listed) == len(corpus)
    assert any(shard.samples > WINDOW for shard in corpus.manifest.shards)  # folded files among them

    analysis = guardscope.analyze(log, tmp_path / "out")
    catalog = json.loads(analysis.catalog_path.read_text())
    assert catalog["corpus"]["samples"] == len(corpus) and catalog["summary"]["compiles"] >= 1
    # The calls kept in full (checked over columns with the signature rows) are not counted as signatures.
    kept = sum(len(table) - table.column("data").null_count
               for table in (pq.read_table(log / name, columns=["data"]) for name in listed))
    assert kept and catalog["corpus"].get("signatures", {}).get("samples", 0) == len(corpus) - kept
    said = [warning for warning in analysis.warnings if "writer had not closed" in warning]
    assert said and f"the {len(corpus):,} calls it had flushed" in said[0]
