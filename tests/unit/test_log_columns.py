"""Issue 37: a traffic log's rows of flat, tensors-only call templates read as columns
(``Corpus.load_columns``, :class:`~guardscope.corpus.traffic_log.columns.RecordColumns`) and a catalog
builder fed whole columns (``CatalogBuilder.add_rows``) give exactly what the row-by-row path
gives: the same records, cut the same way, and the same builder state. No compile."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from guardscope.catalog.builder import CatalogBuilder
from guardscope.corpus.traffic_log.columns import RecordColumns
from guardscope.corpus.reader import SignatureRecord, load_corpus, records_from
from guardscope.corpus.writer import CorpusWriter
from guardscope.errors import ShardError
from guardscope.model import Sample, SampleMeta, ServedRows, TensorMeta

MODEL = "pkg.models:build"


def _write(directory, calls, **options):
    options = {"keep": "signatures", "log": "parquet", "replica": "host-a:1", "shard_size": 8, **options}
    with CorpusWriter(directory, model=MODEL, compile={"dynamic": None}, **options) as writer:
        for args, kwargs in calls:
            writer.add(*args, **kwargs)
    return load_corpus(directory)


def _calls(count: int, seed: int = 0) -> list[tuple[tuple, dict]]:
    """Tensors-only calls (two structures), calls with an int argument, repeats."""
    rng = random.Random(seed)
    calls = []
    for _ in range(count):
        n = rng.choice([1, 2, 3, 5, 8])
        kind = rng.random()
        if kind < 0.5:
            calls.append(((torch.zeros(n, 4), torch.zeros(n, dtype=torch.int64)), {}))
        elif kind < 0.8:
            calls.append(((torch.zeros(n, 4).t(),), {"scale": torch.zeros(1)}))  # another template, transposed
        else:
            calls.append(((torch.zeros(n, 4),), {"steps": n}))  # an int: never in columns
    return calls


def _expanded(items) -> list[tuple]:
    """Each record as (kind, first, repeat, full, key), RecordColumns expanded row by row (a row
    naming itself as its full sample is a call kept in full, checked over columns with the others)."""
    out = []
    for item in items:
        if type(item) is RecordColumns:
            out += [("sample", r.first, 1, None, None) if r.full == r.first else ("record", r.first, r.repeat, r.full, r.key)
                    for r in item.records()]
        elif type(item) is SignatureRecord:
            out.append(("record", item.first, item.repeat, item.full, item.key if item.call is not None else
                        item.signature))
        else:
            assert type(item) is Sample
            out.append(("sample", item.index, 1, None, None))
    return out


@pytest.mark.parametrize("full_per_signature", [0, 1])
def test_columns_hold_the_records_the_rows_give(tmp_path, full_per_signature):
    corpus = _write(tmp_path / "log", _calls(90) + _calls(30)[:10] * 3, full_per_signature=full_per_signature)
    assert corpus.manifest.format_version == 5 and len(corpus.manifest.shards) > 3
    columns_seen = 0
    for shard in corpus.manifest.shards:
        rows, columns = corpus.load_records(shard), corpus.load_columns(shard)
        columns_seen += sum(type(item) is RecordColumns for item in columns)
        assert _expanded(columns) == _expanded(rows)
        # A resumed replay cuts both alike, inside a row of several samples too.
        for start in range(shard.first, shard.first + shard.samples + 1):
            assert _expanded(records_from(columns, start)) == _expanded(records_from(rows, start)), start
    assert columns_seen
    # Corpus.sample reaches a sample inside a run of columns, a call kept in full with its data.
    assert all(corpus.sample(i).index == i for i in range(0, len(corpus), 7))
    recorded = [(sample.index, sample.recorded) for sample in corpus]
    assert all(corpus.sample(i).recorded == kind for i, kind in recorded)


def test_a_cut_before_a_stop_ends_inside_a_row():
    from guardscope.corpus.signatures.call_template import CallTemplate
    from guardscope.corpus.signatures.signature import signature

    call = CallTemplate(signature((torch.zeros(2, 3),), {}, inference=False))
    numbers = [np.array([[2, 3, 3, 1, 0], [4, 3, 3, 1, 0], [5, 3, 3, 1, 0]], dtype=np.int64)]
    chunk = RecordColumns(call, np.array([10, 13, 14]), np.array([3, 1, 4]), np.array([-1, 10, -1]), numbers, None)
    assert chunk.before(10) is None
    assert [(r.first, r.repeat) for r in chunk.before(12).records()] == [(10, 2)]
    assert [(r.first, r.repeat, r.full) for r in chunk.before(16).records()] == [(10, 3, None), (13, 1, 10), (14, 2, None)]
    assert chunk.before(99) is chunk and chunk.starting_at(18) is None
    assert [(r.first, r.repeat) for r in chunk.starting_at(15).records()] == [(15, 3)]
    assert chunk.record(2).key == ((5, 3, 3, 1, 0),)
    assert chunk.samples == 8 and chunk.end == 18


def test_a_bad_row_is_named_by_the_column_reader_as_by_the_row_reader(tmp_path):
    corpus = _write(tmp_path / "log", [((torch.zeros(n, 4),), {}) for n in (2, 3, 2, 4, 5)], shard_size=16,
                    full_per_signature=0)
    (shard,) = corpus.manifest.shards
    path = tmp_path / "log" / shard.file
    table = pq.read_table(path)
    metadata = table.schema.metadata

    def refused(column: str, values: list) -> str:
        changed = table.set_column(table.schema.get_field_index(column), column,
                                   pa.array(values, type=table.schema.field(column).type))
        sink = pa.BufferOutputStream()
        pq.write_table(changed.replace_schema_metadata(metadata), sink)
        content = sink.getvalue().to_pybytes()
        path.write_bytes(content)
        raw = json.loads((tmp_path / "log" / "corpus.json").read_text())
        import hashlib
        raw["shards"][0]["sha256"] = hashlib.sha256(content).hexdigest()
        (tmp_path / "log" / "corpus.json").write_text(json.dumps(raw))
        fresh = load_corpus(tmp_path / "log")
        messages = []
        for load in (fresh.load_records, fresh.load_columns):
            with pytest.raises(ShardError) as caught:
                load(fresh.manifest.shards[0])
            messages.append(str(caught.value))
        assert messages[0] == messages[1]
        return messages[0]

    firsts = table.column("first").to_pylist()
    assert len(firsts) >= 3
    assert f"row 2 (sample {firsts[2]}): 'first' 99" in refused("first", firsts[:2] + [99] + firsts[3:])
    fulls = [None, None, firsts[2] + 1] + [None] * (len(firsts) - 3)
    assert f"row 2 (sample {firsts[2]}) names sample {firsts[2] + 1}" in refused("full", fulls)
    sizes = table.column("sizes").to_pylist()
    assert f"row 1 (sample {firsts[1]})" in refused("sizes", [sizes[0], [[3, 4, 1]], *sizes[2:]])


def _meta(index: int, shapes: dict[str, tuple], serving: str) -> SampleMeta:
    return SampleMeta(index=index, tensors=tuple((path, TensorMeta(shape, (), "float32", "cpu", False))
                                                 for path, shape in shapes.items()),
                      lengths=(), scalars=(), serving=serving, recorded="signature")


def test_a_builder_fed_columns_ends_as_one_fed_sample_by_sample():
    rng = np.random.default_rng(4)
    rows = 200
    n = rng.choice([0, 1, 2, 5, 8], size=rows)
    m = np.where(rng.random(rows) < 0.9, n, rng.choice([1, 3], size=rows))  # mostly equal to n
    shapes = {"x": np.stack([n, np.full(rows, 4)], axis=1), "idx": m[:, None], "w": np.full((rows, 2), 4)}
    first = np.cumsum(np.concatenate([[3], rng.integers(1, 4, size=rows - 1)]))
    count = np.diff(np.concatenate([first, [first[-1] + 2]]))
    graph = rng.integers(0, 3, size=rows)
    graphs = ("0/1", "0/2", "0/3")

    def describe(row: int) -> SampleMeta:
        return _meta(int(first[row]), {path: tuple(sizes[row].tolist()) for path, sizes in shapes.items()},
                     graphs[int(graph[row])])

    served = ServedRows(first, count, graph, graphs, tuple(shapes.items()), describe)
    # Samples before: another argument set (so some dims are not fresh), a graph seen already.
    before = [_meta(0, {"x": (5, 4), "idx": (5,)}, "0/0"), _meta(1, {"x": (2, 4), "other": (2,)}, "0/2"),
              _meta(2, {"x": (7, 4), "idx": (7,)}, "0/0")]
    one_by_one, columns = CatalogBuilder(), CatalogBuilder()
    for builder in (one_by_one, columns):
        for meta in before:
            builder.add_sample(meta)
    for meta in served.metas():
        one_by_one.add_sample(meta)
    # In two runs, as a replay hands them (a miss between them).
    split = rows // 2
    half = ServedRows(first[:split], count[:split], graph[:split], graphs,
                      tuple((path, sizes[:split]) for path, sizes in shapes.items()), describe)
    rest = ServedRows(first[split:], count[split:], graph[split:], graphs,
                      tuple((path, sizes[split:]) for path, sizes in shapes.items()), lambda row: describe(row + split))
    columns.add_rows(half)
    columns.add_rows(rest)
    assert columns.to_state() == one_by_one.to_state()
    assert list(columns.members) == list(one_by_one.members)
    assert columns.equal_candidates == one_by_one.equal_candidates
    assert served.samples == int(count.sum()) and len(list(served.metas())) == served.samples
