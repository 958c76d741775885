"""The bound on the data a signature corpus keeps in full (issue 23 item 4): ``keep="signatures"``
keeps at most ``DEFAULT_MAX_FULL_BYTES`` of tensors in full unless told otherwise, the writer's
summary says so, and the traffic recorder hands its own bound to the writer; no compile."""

from __future__ import annotations

import logging
import pathlib

import torch

from guardscope.corpus.reader import load_corpus
from guardscope.corpus.writer import DEFAULT_MAX_FULL_BYTES, CorpusWriter
from guardscope.runtime import TrafficRecorder

MODEL = "pkg.models:build"
MiB = 2**20


def big(mib: int, extra: int = 0) -> torch.Tensor:
    """A uint8 tensor of ``mib`` MiB (+ ``extra`` bytes): its own signature for each size."""
    return torch.empty(mib * MiB + extra, dtype=torch.uint8)


def kept(directory: pathlib.Path) -> list[tuple[str, int | None]]:
    return [(sample.recorded, sample.data_of) for sample in load_corpus(directory)]


def test_keep_signatures_keeps_at_most_64_mib_in_full_unless_told_otherwise(tmp_path):
    # 33 MiB in full, then 32 MiB more (past 64 MiB: its signature only), then a small call (fits).
    with CorpusWriter(tmp_path / "c", model=MODEL, keep="signatures", shard_size=1) as writer:
        for tensor in (big(33), big(32), big(0, 16)):
            writer.add(tensor)
    assert DEFAULT_MAX_FULL_BYTES == 64 * MiB == writer.max_full_bytes
    assert kept(tmp_path / "c") == [("full", None), ("signature", None), ("full", None)]
    assert writer.full_bytes == 33 * MiB + 16 and writer.bounded_signatures == 1
    assert writer.summary() == (
        "3 samples in 3 shards: 2 in full, 1 by signature only; in full 34,603,024 bytes (33.0 MiB) "
        "of at most 67,108,864 bytes (64.0 MiB) (max_full_bytes=67108864); 1 signature got no full "
        "sample because of it (a larger max_full_bytes, or None, keeps them)")


def request(rows: int) -> torch.Tensor:
    return torch.ones(rows, 4)  # 16 * rows bytes of storage


def test_the_summary_counts_signatures_the_bound_left_without_data(tmp_path):
    with CorpusWriter(tmp_path / "c", model=MODEL, keep="signatures", max_full_bytes=16 * (3 + 4 + 2),
                      full_per_signature=2) as writer:
        for rows in [3, 4, 3, 5, 6, 5, 4, 2, 2]:
            writer.add(request(rows))
        text = writer.summary()  # pending samples count as the shard they will be
    # 3, 4 full; 3 again: past the bound but it has a full sample, so not counted; 5 and 6 (twice
    # for 5: counted once) get none; 4 again and 2 past it; 2 fits, then 2 again does not.
    assert [recorded for recorded, _ in kept(tmp_path / "c")] == [
        "full", "full", "signature", "signature", "signature", "signature", "signature", "full", "signature"]
    assert writer.bounded_signatures == 2
    assert text == (
        "9 samples in 1 shard: 3 in full, 6 by signature only; in full 144 bytes (0.0 MiB) of at most "
        "144 bytes (0.0 MiB) (max_full_bytes=144); 2 signatures got no full sample because of it "
        "(a larger max_full_bytes, or None, keeps them)")
    assert writer.summary() == text  # closing writes the pending shard: the same one


def test_the_summary_of_an_unbounded_or_unreached_or_full_corpus(tmp_path):
    with CorpusWriter(tmp_path / "none", model=MODEL, keep="signatures", full_per_signature=0) as writer:
        writer.add(request(3))
    assert writer.summary() == "1 sample in 1 shard, every one by signature only: no tensor data (full_per_signature=0)"
    with CorpusWriter(tmp_path / "unbounded", model=MODEL, keep="signatures", max_full_bytes=None) as writer:
        for rows in (3, 4, 3):
            writer.add(request(rows))
    assert writer.summary() == (
        "3 samples in 1 shard: 2 in full, 1 by signature only; in full 112 bytes (0.0 MiB) "
        "(max_full_bytes=None: no bound)")
    with CorpusWriter(tmp_path / "all", model=MODEL, shard_size=2) as writer:
        for rows in (3, 3, 4):
            writer.add(request(rows))
    assert writer.max_full_bytes is None
    assert writer.summary() == '3 samples in 2 shards, every one in full (keep="all")'


def test_the_traffic_recorder_hands_its_own_bound_to_the_writer(tmp_path, caplog):
    # Its max_bytes (256 MiB by default) is the writer's bound too, so the writer never turns a
    # call the recorder copied in full into a signature, and the summary it logs states it.
    caplog.set_level(logging.INFO, logger="guardscope.runtime")
    for name, options, bound in (("default", {}, 256 * MiB), ("exact", {"max_bytes": 112}, 112)):
        recorder = TrafficRecorder(tmp_path / name, model=MODEL, **options)
        for rows in (3, 3, 4):
            assert recorder.offer((request(rows),), {}) is None
        recorder.close()
        assert kept(tmp_path / name) == [("full", None), ("signature", 0), ("full", None)]
        (line,) = [r.getMessage() for r in caplog.records if str(tmp_path / name) in r.getMessage()]
        assert line.endswith(f"3 samples in 1 shard: 2 in full, 1 by signature only; in full 112 bytes "
                             f"(0.0 MiB) of at most {bound:,} bytes ({bound / MiB:.1f} MiB) "
                             f"(max_full_bytes={bound}); the bound left no signature without a full sample")
