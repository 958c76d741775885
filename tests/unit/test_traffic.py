"""guardscope.runtime.TrafficRecorder: every call recorded by signature (a Parquet traffic log,
corpus format 5; ``log="shards"``: format 3), bounded, off the caller's buffers; no compile."""

from __future__ import annotations

import pytest
import torch

from guardscope.corpus.storage.format import read_manifest
from guardscope.corpus.reader import load_corpus
from guardscope.corpus.signatures.signature import signature
from guardscope.errors import ServeError
from guardscope.runtime import TrafficRecorder

MODEL = "pkg.models:build"


def call(rows: int, seed: int) -> tuple[tuple, dict]:
    x = torch.randn(rows, 4, generator=torch.Generator().manual_seed(seed))
    return (x, x[1:]), {"k": rows % 2}


def recorded(directory, calls, **options):
    recorder = TrafficRecorder(directory, model=MODEL, compile={"dynamic": True}, **options)
    for args, kwargs in calls:
        assert recorder.offer(args, kwargs) is None
    recorder.close()
    return recorder


@pytest.mark.parametrize("log", ["parquet", "shards"])
def test_every_call_is_recorded_and_only_the_first_of_each_signature_in_full(tmp_path, log):
    rows = [3, 3, 5, 3, 5, 5, 5, 7, 3, 3]
    calls = [call(n, seed) for seed, n in enumerate(rows)]
    recorder = recorded(tmp_path / "t", calls, log=log)
    counts = recorder.counts()
    assert (counts["recorded"], counts["pending"], counts["dropped"], counts["full"]) == (10, 0, 0, 3)
    assert counts["signatures"] == 3
    assert read_manifest(tmp_path / "t").format_version == (5 if log == "parquet" else 3)
    samples = list(load_corpus(tmp_path / "t"))
    # In recorded order (a traffic log gathers a signature's repeats on one row but keeps each
    # call's place, so sample i is the i-th call), consecutive repeats on one record.
    order = list(range(10))
    assert [s.recorded for s in samples] == ["full", "signature", "full", "signature", "signature",
                                             "signature", "signature", "full", "signature", "signature"]
    assert [s.data_of for s in samples] == [None, 0, None, 0, 2, 2, 2, None, 0, 0]
    for sample, position in zip(samples, order):
        assert signature(sample.args, sample.kwargs) == signature(*calls[position])
    for sample in samples:
        if sample.recorded == "full":  # full: the tensors themselves
            assert torch.equal(sample.args[0], calls[order[sample.index]][0][0])
        assert sample.args[1].untyped_storage().data_ptr() == sample.args[0].untyped_storage().data_ptr()


def test_full_samples_are_copies_taken_at_the_call(tmp_path):
    args, kwargs = call(4, 0)
    expected = args[0].clone()
    recorder = TrafficRecorder(tmp_path / "t", model=MODEL)
    recorder.offer(args, kwargs)
    args[0].fill_(7.0)  # the caller reuses its buffer
    recorder.close()
    (sample,) = load_corpus(tmp_path / "t")
    assert torch.equal(sample.args[0], expected)


def test_no_tensor_data_with_full_per_signature_0(tmp_path):
    recorder = recorded(tmp_path / "t", [call(64, seed) for seed in range(40)], full_per_signature=0)
    assert recorder.counts()["full"] == 0
    samples = list(load_corpus(tmp_path / "t"))
    assert len(samples) == 40 and {(s.recorded, s.data_of) for s in samples} == {("signature", None)}
    assert sum(p.stat().st_size for p in (tmp_path / "t").glob("shard-*.pt")) < 4096


def test_the_data_budget_turns_new_signatures_into_signature_records(tmp_path):
    # Each call holds 5x4 float32 = 80 bytes of storage; the budget takes two.
    recorder = recorded(tmp_path / "t", [call(5 + n, n) for n in range(4)] + [call(5, 9)], max_bytes=220)
    # 5x4 and 6x4 (80 + 96 bytes) fit, 7x4 does not: it and 8x4 are signatures only.
    samples = list(load_corpus(tmp_path / "t"))
    assert [(s.recorded, s.data_of) for s in samples] == [
        ("full", None), ("full", None), ("signature", None), ("signature", None), ("signature", 0)]
    assert recorder.counts()["full"] == 2


def test_what_cannot_be_stored_is_dropped_never_raised(tmp_path):
    recorder = TrafficRecorder(tmp_path / "t", model=MODEL)
    assert recorder.offer((torch.ones(2), {1, 2}), {}) == "unstorable"
    assert recorder.offer(*call(3, 0)) is None
    recorder.close()
    assert recorder.offer(*call(3, 1)) == "closed"
    counts = recorder.counts()
    assert (counts["recorded"], counts["dropped"], dict(counts["dropped_by_reason"])) == (
        1, 2, {"unstorable": 1, "closed": 1})
    assert len(load_corpus(tmp_path / "t")) == 1


def test_a_directory_holding_a_corpus_is_refused_with_traffic_words(tmp_path):
    recorded(tmp_path / "t", [call(3, 0)])
    with pytest.raises(ServeError, match="traffic directory .* already holds a corpus.*overwrite_traffic=True"):
        TrafficRecorder(tmp_path / "t", model=MODEL)
    with pytest.raises(ServeError, match="full_per_signature must be an int >= 0"):
        TrafficRecorder(tmp_path / "u", model=MODEL, full_per_signature=-1)
    recorded(tmp_path / "t", [call(3, 0), call(3, 1)], overwrite=True)
    assert len(load_corpus(tmp_path / "t")) == 2


def test_production_s_dynamo_settings_are_read_on_the_serving_thread(tmp_path):
    """torch 2.13 keeps a setting made in code per thread: the recorder reads it where calls are
    offered, not on its writer thread."""
    with torch._dynamo.config.patch(recompile_limit=12):
        recorded(tmp_path / "t", [call(3, 0), call(5, 1)])
    assert read_manifest(tmp_path / "t").dynamo_config == {"recompile_limit": 12}


def test_the_grad_mode_is_read_where_the_call_is_offered_or_given(tmp_path):
    with torch.no_grad():
        recorded(tmp_path / "n", [call(3, 0)])
    with torch.inference_mode():
        recorded(tmp_path / "i", [call(3, 0)])
    recorded(tmp_path / "g", [call(3, 0)])
    assert [read_manifest(tmp_path / name).grad_mode for name in "nig"] == ["no_grad", "inference_mode", "grad"]
    traffic = TrafficRecorder(tmp_path / "given", model=MODEL, grad_mode="no_grad")
    traffic.offer(*call(3, 0))
    traffic.close()
    assert read_manifest(tmp_path / "given").grad_mode == "no_grad"
    with pytest.raises(ServeError, match='grad_mode is "train"; use one of inference_mode, no_grad, grad'):
        TrafficRecorder(tmp_path / "bad", model=MODEL, grad_mode="train")



def test_calls_known_by_their_cheap_key_are_recorded_with_their_own_signature(tmp_path):
    """Issue 37: after its first call, a layout is found by its cheap key (no signature walk on the
    serving thread); a call of the same shapes that aliases differently, or whose view sits
    elsewhere in its storage, still gets its own signature, in recorded order."""
    base = torch.randn(6, 4)
    calls = [((base, base[1:]), {"k": 1}), ((torch.randn(6, 4), torch.randn(5, 4)), {"k": 1}),
             ((base, base[1:]), {"k": 1}), ((base[1:], base[:5]), {"k": 1}), ((base, base[1:]), {"k": 1.0}),
             ((base, base[1:]), {"k": 1})]
    recorder = recorded(tmp_path / "t", calls, full_per_signature=0)
    assert recorder.counts()["recorded"] == len(calls)
    samples = list(load_corpus(tmp_path / "t"))
    assert len(samples) == len(calls)
    # One window: each signature's calls are one row, each call in its place.
    for sample, (args, kwargs) in zip(samples, calls):
        assert signature(sample.args, sample.kwargs) == signature(args, kwargs, inference=False)
    assert len({signature(s.args, s.kwargs) for s in samples}) == 4


@pytest.mark.parametrize("max_pending", [2, 0])
def test_calls_beyond_max_pending_are_dropped_as_queue_full_and_0_means_unbounded(tmp_path, max_pending):
    # The writer thread held at its first item (its corpus not opened yet): what the serving
    # thread may queue meanwhile is max_pending calls, the rest dropped, none lost from the counts.
    gate = __import__("threading").Event()
    recorder = TrafficRecorder(tmp_path / "t", model=MODEL, max_pending=max_pending)
    opened = recorder._open_writer
    recorder._open_writer = lambda: (gate.wait(), opened())[1]
    reasons = [recorder.offer(*call(3 + n % 4, n)) for n in range(8)]
    gate.set()
    recorder.close()
    counts = recorder.counts()
    if max_pending:
        assert reasons == [None, None] + ["queue_full"] * 6
        assert (counts["recorded"], dict(counts["dropped_by_reason"])) == (2, {"queue_full": 6})
    else:
        assert reasons == [None] * 8 and counts["recorded"] == 8 and counts["dropped"] == 0
    assert counts["pending"] == 0
