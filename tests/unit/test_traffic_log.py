"""Traffic logs (corpus format 5, issue 37): signature records as Parquet, one file per flush, read
by plain pyarrow and DuckDB as they are; repeats of a signature counted on one row per window with
first/last timestamps and a replica id; bad files refused with one line naming them; ``convert``
keeps every sample at its index. No compile."""

from __future__ import annotations

import json
import pathlib
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from guardscope.corpus.converting import convert_corpus
from guardscope.corpus.storage.format import read_manifest
from guardscope.corpus.reader import SignatureRecord, load_corpus
from guardscope.corpus.signatures.signature import signature
from guardscope.corpus.traffic_log.parquet import layout_of, signature_with
from guardscope.corpus.writer import CorpusWriter
from guardscope.errors import CorpusError, ShardError
from guardscope.model import Sample

from ..builders import as_log_version_1

MODEL = "pkg.models:build"


def call(rows: int, width: int = 4) -> tuple[tuple, dict]:
    return (torch.zeros(rows, width), torch.zeros(rows, dtype=torch.int64)), {"mask": None, "k": rows % 3}


def traffic(directory: pathlib.Path, rows: list[int], **options) -> CorpusWriter:
    options = {"keep": "signatures", "log": "parquet", "replica": "host-a:1", **options}
    with CorpusWriter(directory, model=MODEL, compile={"dynamic": True}, **options) as writer:
        for count in rows:
            args, kwargs = call(count)
            writer.add(*args, **kwargs)
    return writer


def described(corpus) -> list[tuple]:
    """Each sample's index, kind and signature, as loading gives them."""
    out = []
    for record in corpus.iter_records():
        if type(record) is Sample:
            out.append((record.index, "full", signature(record.args, record.kwargs, inference=False)))
        else:
            out += [(record.first + k, "signature", record.signature) for k in range(record.repeat)]
    return out


def test_a_traffic_log_is_parquet_that_pyarrow_reads_as_it_is(tmp_path):
    rows = [5, 5, 7, 5, 7, 9, 5]
    traffic(tmp_path / "t", rows)
    manifest = read_manifest(tmp_path / "t")
    assert manifest.format_version == 5 and manifest.samples == len(rows)
    (shard,) = manifest.shards
    assert shard.file == "shard-00000.parquet" and shard.data[0] == "shard-00000.pt"
    table = pq.read_table(tmp_path / "t" / shard.file)
    got = table.drop(["first_seen", "last_seen"]).to_pylist()  # timestamps: as ns (no pandas needed)
    seen = list(zip(*(table.column(name).cast(pa.int64()).to_pylist() for name in ("first_seen", "last_seen"))))
    # One row per call kept in full (5, 7, 9: their first), the repeats of a signature on one row
    # at its first signature-only call (5 x3 after 5's full row, 7 x1 after 7's), each row's
    # calls named: its first, and all of them where they are not consecutive.
    assert [(r["sizes"][0][0], r["count"], r["data"] is not None, r["first"], r["positions"]) for r in got] == [
        (5, 1, True, 0, None), (5, 3, False, 1, [1, 3, 6]), (7, 1, True, 2, None), (7, 1, False, 4, None),
        (9, 1, True, 5, None)]
    assert sum(table.column("count").to_pylist()) == len(rows)
    assert set(table.column("replica").to_pylist()) == {"host-a:1"}
    assert all(first <= last for first, last in seen)
    assert got[1]["full"] == got[0]["first"] and got[1]["dtypes"] == ["float32", "int64"]
    assert got[1]["ints"] == [5 % 3] and got[1]["strides"] == [[4, 1], [1]]
    assert table.schema.field("first_seen").type == pa.timestamp("ns", tz="UTC")
    # The corpus gives every call back: 7 samples, the signature rows materialising as recorded.
    corpus = load_corpus(tmp_path / "t")
    samples = described(corpus)
    assert [index for index, *_ in samples] == list(range(len(rows)))
    assert [s[2] for s in samples] == [signature(*call(n), inference=False) for n in rows]  # sample i: call i


def test_duckdb_finds_the_counts_of_a_traffic_log(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    traffic(tmp_path / "t", [3, 4, 3, 3, 4] * 20, shard_size=2)
    query = (f"SELECT sizes[1][1] AS rows, sum(count) AS calls FROM '{tmp_path}/t/shard-*.parquet' "
             "GROUP BY rows ORDER BY rows")
    assert duckdb.sql(query).fetchall() == [(3, 60), (4, 40)]


def test_a_window_of_rows_is_one_file_per_flush_and_the_order_is_the_rows(tmp_path):
    writer = CorpusWriter(tmp_path / "t", model=MODEL, keep="signatures", log="parquet", full_per_signature=0)
    sig_a, sig_b = signature(*call(2), inference=False), signature(*call(3), inference=False)
    for sig, when in [(sig_a, 10), (sig_b, 20), (sig_a, 30)]:
        assert writer.add_signature(sig, {"cpu"}, when=when) is None  # indices are given at the flush
    writer.flush()
    writer.add_signature(sig_a, {"cpu"}, when=40)
    writer.close()
    manifest = read_manifest(tmp_path / "t")
    assert [s.file for s in manifest.shards] == ["shard-00000.parquet", "shard-00001.parquet"]
    assert all(s.data is None for s in manifest.shards)  # nothing kept in full: no data shard
    first = pq.read_table(tmp_path / "t" / "shard-00000.parquet")
    assert list(zip(*(first.column(name).cast(pa.int64()).to_pylist()
                      for name in ("count", "first", "first_seen", "last_seen")))) == [(2, 0, 10, 30), (1, 1, 20, 20)]
    assert first.column("positions").to_pylist() == [[0, 2], None]
    corpus = load_corpus(tmp_path / "t")
    assert [s[2] for s in described(corpus)] == [sig_a, sig_b, sig_a, sig_a]  # as the calls came


def test_convert_keeps_every_sample_at_its_index(tmp_path):
    with CorpusWriter(tmp_path / "old", model=MODEL, keep="signatures", shard_size=3) as writer:
        for rows in [2, 2, 3, 2, 3, 3, 4]:
            writer.add(*call(rows)[0], **call(rows)[1])
    old = load_corpus(tmp_path / "old")
    converted = convert_corpus(tmp_path / "old", tmp_path / "new", replica="r")
    assert "7 samples" in converted.summary()
    new = load_corpus(tmp_path / "new")
    assert new.manifest.format_version == 5 and len(new) == len(old) == 7
    assert described(new) == described(old)
    table = pa.concat_tables(pq.read_table(tmp_path / "new" / s.file) for s in new.manifest.shards)
    assert table.column("first_seen").null_count == len(table)  # the source recorded no times
    with pytest.raises(CorpusError, match="is the corpus being converted"):
        convert_corpus(tmp_path / "new", tmp_path / "new")


def test_a_truncated_or_foreign_parquet_file_is_refused_naming_it(tmp_path):
    traffic(tmp_path / "t", [2, 3, 2, 4], shard_size=2, full_per_signature=0)
    manifest = read_manifest(tmp_path / "t")
    assert len(manifest.shards) >= 2
    bad = tmp_path / "t" / manifest.shards[0].file
    data = bad.read_bytes()

    def refused(content: bytes) -> str:
        bad.write_bytes(content)
        # As if recorded so: the manifest's checksum matches, so the content itself is judged.
        raw = json.loads((tmp_path / "t" / "corpus.json").read_text())
        import hashlib
        raw["shards"][0]["sha256"] = hashlib.sha256(content).hexdigest()
        (tmp_path / "t" / "corpus.json").write_text(json.dumps(raw))
        corpus = load_corpus(tmp_path / "t")
        with pytest.raises(ShardError) as caught:
            corpus.load_records(corpus.manifest.shards[0])
        message = str(caught.value)
        assert "\n" not in message and str(bad) in message
        # The rest of the corpus still loads.
        assert corpus.load_records(corpus.manifest.shards[1])
        return message

    assert "not a readable Parquet file" in refused(data[: len(data) // 2])
    foreign = pa.table({"first": [0], "count": [1]})
    sink = pa.BufferOutputStream()
    pq.write_table(foreign, sink)
    assert "not a guardscope traffic log" in refused(sink.getvalue().to_pybytes())
    # A log whose row does not fit its call template: named with its row and sample.
    table = pq.read_table(pa.BufferReader(data))
    sizes = table.column("sizes").to_pylist()
    sizes[0] = [[2, 4, 1], [2]]
    broken = table.set_column(table.schema.get_field_index("sizes"), "sizes",
                              pa.array(sizes, type=table.schema.field("sizes").type))
    sink = pa.BufferOutputStream()
    pq.write_table(broken, sink)
    message = refused(sink.getvalue().to_pybytes())
    assert "row 0 (sample 0)" in message and "dims" in message


def test_a_changed_checksum_still_names_the_log(tmp_path):
    traffic(tmp_path / "t", [2, 3])
    manifest = read_manifest(tmp_path / "t")
    path = tmp_path / "t" / manifest.shards[0].file
    path.write_bytes(path.read_bytes()[:-10])
    corpus = load_corpus(tmp_path / "t")
    with pytest.raises(ShardError, match="fails its checksum"):
        corpus.load_records(corpus.manifest.shards[0])


def test_the_writer_refuses_a_log_without_signatures_and_a_bad_replica(tmp_path):
    with pytest.raises(CorpusError, match='use it with keep="signatures"'):
        CorpusWriter(tmp_path / "a", model=MODEL, log="parquet")
    with pytest.raises(CorpusError, match="log must be one of"):
        CorpusWriter(tmp_path / "b", model=MODEL, keep="signatures", log="csv")
    with pytest.raises(CorpusError, match="replica must be a non-empty str"):
        CorpusWriter(tmp_path / "c", model=MODEL, keep="signatures", log="parquet", replica="")


def test_a_signature_with_shared_storage_keeps_its_text_and_a_template_fills_back():
    base = torch.zeros(4, 3)
    shared = signature((base, base[1:]), {}, inference=False)
    layout = layout_of(shared, "d")
    assert layout.template is None and json.loads(layout.signature)[0] == "call"
    plain = signature(*call(6), inference=False)
    layout = layout_of(plain, "d")
    template = signature(*call(1), inference=False)
    assert layout.template == layout_of(template, "d").template  # one template for every size
    assert signature_with(template, layout.sizes, layout.strides, layout.offsets, layout.ints) == plain
    with pytest.raises(ValueError, match="fewer tensors"):
        signature_with(template, layout.sizes[:1], layout.strides[:1], layout.offsets[:1], layout.ints)


def test_a_signature_record_of_a_log_materialises_as_recorded(tmp_path):
    traffic(tmp_path / "t", [3, 3, 3], full_per_signature=0)
    corpus = load_corpus(tmp_path / "t")
    (record,) = corpus.iter_records()
    assert type(record) is SignatureRecord and record.repeat == 3 and record.call is not None
    sample = record.sample(2)
    assert sample.index == 2 and signature(sample.args, sample.kwargs, inference=False) == record.signature
    shutil.rmtree(tmp_path / "t")


def test_every_call_keeps_its_index_through_windows_and_calls_kept_in_full(tmp_path):
    """Issue 53: a log by signature gathers a signature's repeats on one row per window, yet
    sample i is the i-th call, the calls kept in full and the tagged ones included."""
    rows = [2, 3, 2, 4, 2, 3, 2, 5, 4, 4, 2, 3]
    writer = CorpusWriter(tmp_path / "t", model=MODEL, keep="signatures", log="parquet")
    for position, count in enumerate(rows):
        args, kwargs = call(count)
        if position == 6:
            with writer.request("req-1"):
                writer.add(*args, **kwargs)
        else:
            writer.add(*args, **kwargs)
        if position == 7:
            writer.flush()  # a second window
    writer.close()
    corpus = load_corpus(tmp_path / "t")
    assert [s[2] for s in described(corpus)] == [signature(*call(n), inference=False) for n in rows]
    for index, count in enumerate(rows):
        sample = corpus.sample(index)
        assert sample.index == index and sample.args[0].shape[0] == count
    # Each signature's first call was kept in full, and the later ones name it.
    assert [s.recorded for s in corpus] == ["full", "full", "signature", "full", "signature", "signature",
                                            "signature", "full", "signature", "signature", "signature", "signature"]
    assert [s.data_of for s in corpus][8:] == [3, 3, 0, 1]
    assert corpus.requests.of(6) == ("req-1", 0)
    assert not corpus.row_indices
    table = pq.read_table(tmp_path / "t" / corpus.manifest.shards[0].file)
    assert [p for p in table.column("positions").to_pylist() if p is not None] == [[2, 4]]


def test_an_old_log_that_gathered_repeats_says_its_indices_are_rows(tmp_path):
    """A version 1 log (before issue 53) still reads; where it gathered a signature's repeats
    its indices are its rows' order, and the corpus says so; one whose rows are each one call
    is exact."""
    traffic(tmp_path / "gathered", [2, 3, 2, 4, 2], full_per_signature=0)
    traffic(tmp_path / "single", [2, 3, 4], full_per_signature=0)
    for name in ("gathered", "single"):
        as_log_version_1(tmp_path / name)
    gathered, single = load_corpus(tmp_path / "gathered"), load_corpus(tmp_path / "single")
    assert [s[2][1][2][2][0] for s in described(gathered)] == [2, 2, 2, 3, 4]  # the rows' order
    assert gathered.row_indices
    assert [s[2][1][2][2][0] for s in described(single)] == [2, 3, 4] and not single.row_indices


def test_windows_are_folded_into_one_file_past_roll_bytes_and_at_close(tmp_path):
    """Issue 53: each flush writes its window as a file of its own; past ``roll_bytes`` (and at
    close) the open file's windows become one file, its data shard the windows' calls kept in
    full, the windows deleted and the manifest listing the folded file in their place."""
    rows = [2, 3, 2, 4, 5, 2, 6, 3, 7, 2, 8, 9, 2, 3]
    writer = CorpusWriter(tmp_path / "t", model=MODEL, keep="signatures", log="parquet", roll_bytes=1)
    for position, count in enumerate(rows):
        args, kwargs = call(count)
        writer.add(*args, **kwargs)
        if position % 3 == 2:
            writer.flush()
            listed = read_manifest(tmp_path / "t").shards
            assert listed and all(pq.read_table(tmp_path / "t" / s.file).num_rows for s in listed)
    writer.close()
    manifest = read_manifest(tmp_path / "t")
    names = sorted(path.name for path in (tmp_path / "t").iterdir())
    assert names == sorted(["corpus.json", *(s.file for s in manifest.shards),
                            *(s.data[0] for s in manifest.shards if s.data)])
    assert len(manifest.shards) < 5  # a file per flush would be 5
    assert any(pq.read_metadata(tmp_path / "t" / s.file).num_row_groups > 1 for s in manifest.shards)
    corpus = load_corpus(tmp_path / "t")
    assert [s[2] for s in described(corpus)] == [signature(*call(n), inference=False) for n in rows]
    kept = [sample for sample in corpus if sample.recorded == "full"]
    assert [sample.args[0].shape[0] for sample in kept] == [2, 3, 4, 5, 6, 7, 8, 9]  # each first, with data
    with pytest.raises(CorpusError, match="roll_bytes must be a positive int"):
        CorpusWriter(tmp_path / "u", model=MODEL, keep="signatures", log="parquet", roll_bytes=0)


def test_windows_are_folded_as_they_come_without_reading_them_back(tmp_path, monkeypatch):
    """Issue 53 (10M calls): the open file's windows are appended to the file being folded as they
    are written, so a roll writes its bytes and reads no window back; a window of another call
    template begins a new file (a file's metadata names its templates), one of much data in full
    stays a file of its own after the file before it, and every call keeps its index."""
    from guardscope.corpus.traffic_log import files as log_files

    monkeypatch.setattr(log_files, "KEEP_DATA_BYTES", 10_000)  # call(1000)'s 24 KB: "much data"
    read = pq.read_table
    monkeypatch.setattr(pq, "read_table", lambda source, *a, **k: (
        pytest.fail(f"a window read back from {source}") if isinstance(source, (str, pathlib.Path)) else
        read(source, *a, **k)))
    other = ((torch.zeros(2, 2),), {})  # another call template
    windows = [[call(1), call(1)], [call(1), call(1)], [other, other], [call(1)], [call(1000)], [call(1), call(1)],
               [call(1)]]
    writer = CorpusWriter(tmp_path / "t", model=MODEL, keep="signatures", log="parquet", roll_bytes=2**30)
    for window in windows:
        for args, kwargs in window:
            writer.add(*args, **kwargs)
        writer.flush()
    monkeypatch.setattr(pq, "read_table", read)
    writer.close()
    manifest = read_manifest(tmp_path / "t")
    groups = [pq.read_metadata(tmp_path / "t" / s.file).num_row_groups for s in manifest.shards]
    # windows 1-2 folded; 3 (another template) alone; 4 alone (3's template differs); 5 (much data)
    # alone, the file before it closed first; 6-7 folded.
    assert [s.samples for s in manifest.shards] == [4, 2, 1, 1, 3] and groups == [2, 1, 1, 1, 2]
    names = sorted(path.name for path in (tmp_path / "t").iterdir())
    assert names == sorted(["corpus.json", *(s.file for s in manifest.shards),
                            *(s.data[0] for s in manifest.shards if s.data)])
    calls = [item for window in windows for item in window]
    corpus = load_corpus(tmp_path / "t")
    assert [s[2] for s in described(corpus)] == [signature(*c, inference=False) for c in calls]
    kept = [sample.index for sample in corpus if sample.recorded == "full"]
    assert kept == [0, 4, 7]  # each signature's first call, with its data
    assert all(torch.equal(corpus.sample(i).args[0], calls[i][0][0]) for i in kept)
