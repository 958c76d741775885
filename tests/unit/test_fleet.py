"""Many replicas' traffic logs as one corpus in fleet order (guardscope.corpus.fleet.merge, ``guardscope
merge``) and a fleet catalog's calls per replica (guardscope.catalog.fleet); no compile."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from guardscope.catalog.fleet import sample_groups, single_replica_topologies, with_fleet
from guardscope.cli import main
from guardscope.corpus.fleet.merge import merge_fleet
from guardscope.corpus.fleet.replicas import find_corpora, fleet_of, open_fleet
from guardscope.corpus.fleet.samples import group_tally, replica_of_samples
from guardscope.corpus.storage.format import read_manifest
from guardscope.corpus.reader import load_corpus
from guardscope.corpus.signatures.signature import signature
from guardscope.corpus.writer import CorpusWriter
from guardscope.errors import CorpusError, ShardError
from guardscope.model import Catalog, Topology

MODEL = "pkg.models:build"
EPOCH = 1_700_000_000_000_000_000


def call(rows: int) -> tuple[tuple, dict]:
    return (torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2),), {}


def write_replica(path, name, calls, *, compile_options=None, requests=None, **options):
    """A replica's traffic log: ``calls`` are (rows, when) pairs; the first call of each size is
    kept in full, the rest by signature; ``requests``: a tag per call (or None)."""
    options = {"aggregate": False, "full_per_signature": 1, **options}
    writer = CorpusWriter(path, model=MODEL, compile=compile_options or {"dynamic": True}, keep="signatures",
                          log="parquet", replica=name, dynamo_config={}, grad_mode="no_grad", **options)
    with writer:
        for position, (rows, when) in enumerate(calls):
            args, kwargs = call(rows)
            tag = None if requests is None else (requests[position], 0)
            writer.add_snapshot(args, kwargs, request=tag, when=when)
    return path


def rows_of(corpus_path):
    """(replica, rows of the call) of every sample of a corpus, in its order."""
    corpus = load_corpus(corpus_path)
    names, codes = replica_of_samples(corpus)
    return [(names[code], sample.args[0].shape[0]) for code, sample in zip(codes, corpus)]


def test_calls_are_merged_by_first_seen_time_then_replica_with_each_replica_s_order_kept(tmp_path):
    # b's clock steps back at its third call (NTP): its own order stays, at the time it had reached.
    write_replica(tmp_path / "a", "a", [(1, EPOCH + 10), (2, EPOCH + 20), (3, EPOCH + 30), (1, EPOCH + 40)])
    write_replica(tmp_path / "b", "b", [(4, EPOCH + 5), (5, EPOCH + 20), (6, EPOCH + 1), (4, EPOCH + 35)])
    merged = merge_fleet(open_fleet([tmp_path / "a", tmp_path / "b"]), tmp_path / "fleet")
    assert (merged.samples, merged.rows, merged.replicas) == (8, 8, {"a": 4, "b": 4})
    # ties at 20: a before b by name; b's 6 comes at 20 (its clock's latest), after b's 5.
    assert rows_of(tmp_path / "fleet") == [("b", 4), ("a", 1), ("a", 2), ("b", 5), ("b", 6), ("a", 3), ("b", 4),
                                           ("a", 1)]
    fleet = load_corpus(tmp_path / "fleet")
    samples = list(fleet)
    # Each signature's full recording is the merged corpus's own sample, still before its repeats.
    assert [s.recorded for s in samples] == ["full"] * 6 + ["signature"] * 2
    assert samples[6].data_of == 0 and samples[7].data_of == 1
    for sample in samples:
        assert signature(sample.args, sample.kwargs) == signature(*call(sample.args[0].shape[0]))
    assert torch.equal(samples[2].args[0], call(2)[0][0])


def test_a_merge_is_deterministic_and_plain_pyarrow_counts_its_replicas(tmp_path):
    write_replica(tmp_path / "r" / "x", "x", [(n % 3 + 1, EPOCH + n) for n in range(0, 40, 2)], shard_size=7)
    write_replica(tmp_path / "r" / "y", "y", [(n % 5 + 1, EPOCH + n) for n in range(1, 40, 3)], shard_size=7)
    first = merge_fleet(open_fleet([tmp_path / "r"]), tmp_path / "m1", shard_rows=10)
    merge_fleet(open_fleet([tmp_path / "r"]), tmp_path / "m2", shard_rows=10)
    files = sorted(p.name for p in (tmp_path / "m1").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "m2").iterdir())
    for name in files:
        assert (tmp_path / "m1" / name).read_bytes() == (tmp_path / "m2" / name).read_bytes(), name
    assert first.shards == 4 and read_manifest(tmp_path / "m1").samples == 33
    table = pq.read_table(sorted((tmp_path / "m1").glob("shard-*.parquet")))
    counts: dict[str, int] = {}
    for name, count in zip(table.column("replica").to_pylist(), table.column("count").to_pylist()):
        counts[name] = counts.get(name, 0) + count
    assert counts == first.replicas == {"x": 20, "y": 13}
    assert len(load_corpus(tmp_path / "m1")) == 33  # every shard loads, its references checked


def test_aggregated_rows_keep_their_counts_and_request_tags_name_their_replica(tmp_path):
    write_replica(tmp_path / "a", "a", [(2, EPOCH + n) for n in range(5)], aggregate=True)
    write_replica(tmp_path / "b", "b", [(3, EPOCH + 2), (3, EPOCH + 3)], requests=["q1", "q2"])
    merge_fleet(open_fleet([tmp_path / "a", tmp_path / "b"]), tmp_path / "fleet")
    fleet = load_corpus(tmp_path / "fleet")
    assert rows_of(tmp_path / "fleet") == [("a", 2), ("a", 2), ("a", 2), ("a", 2), ("a", 2), ("b", 3), ("b", 3)]
    assert fleet.requests is not None
    assert [fleet.requests.of(i) for i in range(7)] == [None] * 5 + [("b/q1", 0), ("b/q2", 0)]


def test_the_merged_corpus_keeps_the_torch_version_its_replicas_were_recorded_with(tmp_path):
    for name in ("a", "b"):
        write_replica(tmp_path / name, name, [(1, EPOCH)])
        manifest = json.loads((tmp_path / name / "corpus.json").read_text())
        (tmp_path / name / "corpus.json").write_text(json.dumps({**manifest, "torch_version": "2.11.0+cu128"}))
    merge_fleet(open_fleet([tmp_path / "a", tmp_path / "b"]), tmp_path / "fleet")
    assert read_manifest(tmp_path / "fleet").torch_version == "2.11.0+cu128"
    manifest = json.loads((tmp_path / "b" / "corpus.json").read_text())
    (tmp_path / "b" / "corpus.json").write_text(json.dumps({**manifest, "torch_version": "2.13.0+cpu"}))
    with pytest.raises(CorpusError, match="different torch version"):
        open_fleet([tmp_path / "a", tmp_path / "b"])


def test_replicas_recorded_differently_are_refused_naming_which(tmp_path):
    write_replica(tmp_path / "a", "a", [(1, EPOCH)])
    write_replica(tmp_path / "b", "b", [(1, EPOCH)])
    write_replica(tmp_path / "c", "c", [(1, EPOCH)], compile_options={"dynamic": False})
    with pytest.raises(CorpusError) as refused:
        open_fleet([tmp_path / "a", tmp_path / "b", tmp_path / "c"])
    message = str(refused.value)
    assert "different compile options" in message and "\n" not in message
    assert f"{tmp_path / 'a'}, {tmp_path / 'b'} have" in message and f"{tmp_path / 'c'} has" in message


def test_two_folders_with_one_replica_name_are_refused(tmp_path):
    write_replica(tmp_path / "a", "web", [(1, EPOCH)])
    write_replica(tmp_path / "b", "web", [(2, EPOCH)])
    with pytest.raises(CorpusError, match="both name their calls 'web'"):
        merge_fleet(open_fleet([tmp_path / "a", tmp_path / "b"]), tmp_path / "fleet")
    assert not (tmp_path / "fleet").exists()  # refused before anything was written


def test_corpora_without_timestamps_are_refused(tmp_path):
    write_replica(tmp_path / "a", "a", [(1, EPOCH)])
    with CorpusWriter(tmp_path / "old", model=MODEL, compile={"dynamic": True}) as writer:
        writer.add(*call(1)[0])
    with pytest.raises(CorpusError, match="format 2 corpus: its calls carry no timestamps"):
        open_fleet([tmp_path / "a", tmp_path / "old"])
    write_replica(tmp_path / "untimed", "u", [(1, EPOCH)], timestamps=False)
    with pytest.raises(CorpusError, match="rows without a timestamp"):
        merge_fleet(open_fleet([tmp_path / "a", tmp_path / "untimed"]), tmp_path / "fleet")


def test_an_unreadable_shard_is_named_or_skipped_and_counted(tmp_path):
    write_replica(tmp_path / "a", "a", [(1 + n % 2, EPOCH + n) for n in range(6)], shard_size=2)
    write_replica(tmp_path / "b", "b", [(3, EPOCH + n) for n in range(4)])
    broken = tmp_path / "a" / "shard-00001.parquet"
    broken.write_bytes(broken.read_bytes()[:40])  # truncated
    with pytest.raises(ShardError) as refused:
        merge_fleet(open_fleet([tmp_path / "a", tmp_path / "b"]), tmp_path / "fleet")
    assert str(broken) in str(refused.value) and "\n" not in str(refused.value)
    merged = merge_fleet(open_fleet([tmp_path / "a", tmp_path / "b"]), tmp_path / "fleet", skip_bad_shards=True)
    assert len(merged.skipped) == 1 and str(broken) in merged.skipped[0]
    assert merged.replicas == {"a": 4, "b": 4}  # a's other shards and all of b's
    assert "1 unreadable shard skipped" in merged.summary()
    assert len(load_corpus(tmp_path / "fleet")) == 8


def test_replica_folders_are_found_by_folder_glob_or_name_and_a_stray_path_is_named(tmp_path):
    for name in ("r2", "r1"):
        write_replica(tmp_path / "traffic" / name, name, [(1, EPOCH)])
    (tmp_path / "traffic" / "README").write_text("notes")
    found = [tmp_path / "traffic" / "r1", tmp_path / "traffic" / "r2"]
    assert find_corpora([tmp_path / "traffic"]) == found
    assert find_corpora([str(tmp_path / "traffic" / "*")]) == found
    with pytest.raises(CorpusError, match="is neither a corpus folder"):
        find_corpora([tmp_path / "nothing"])
    with pytest.raises(CorpusError, match="named twice"):
        find_corpora([tmp_path / "traffic", tmp_path / "traffic" / "r1"])
    with pytest.raises(CorpusError, match="is the replica"):
        merge_fleet(open_fleet([tmp_path / "traffic"]), tmp_path / "traffic" / "r1", overwrite=True)


def test_one_place_answers_whether_the_corpus_arguments_are_a_fleet(tmp_path):
    """fleet_of: one corpus folder is replayed as it is (None); several paths, a glob or a folder
    of corpus folders are a fleet, its replicas opened and checked once."""
    for name in ("r2", "r1"):
        write_replica(tmp_path / "traffic" / name, name, [(1, EPOCH)])
    assert fleet_of([tmp_path / "traffic" / "r1"]) is None
    for named in ([tmp_path / "traffic"], [str(tmp_path / "traffic" / "r*")],
                  [tmp_path / "traffic" / "r1", tmp_path / "traffic" / "r2"]):
        assert [replica.label for replica in fleet_of(named)] == [str(tmp_path / "traffic" / n) for n in ("r1", "r2")]
    assert [replica.label for replica in fleet_of([str(tmp_path / "traffic" / "r1*")])] == [
        str(tmp_path / "traffic" / "r1")]  # a glob is a fleet, even of one replica


def test_the_merge_command_says_what_it_wrote_and_refuses_in_one_line(tmp_path):
    write_replica(tmp_path / "a", "a", [(1, EPOCH), (2, EPOCH + 1)])
    write_replica(tmp_path / "b", "b", [(1, EPOCH + 2)])
    result = CliRunner().invoke(main, ["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out",
                                       str(tmp_path / "fleet")])
    assert result.exit_code == 0, result.output
    assert f"wrote       {tmp_path / 'fleet'}: 3 calls of 2 replicas in 3 rows (one per signature, compact), 1 shard" \
        in result.output
    ordered = CliRunner().invoke(main, ["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out",
                                        str(tmp_path / "ordered"), "--keep-order"])
    assert f"wrote       {tmp_path / 'ordered'}: 3 calls of 2 replicas in 3 rows, 1 shard" in ordered.output
    again = CliRunner().invoke(main, ["merge", str(tmp_path / "a"), "--out", str(tmp_path / "fleet")])
    assert again.exit_code == 2 and "already holds a corpus" in again.output


def test_a_fleet_catalog_counts_each_topology_s_calls_per_replica():
    topologies = (Topology(0, "0/0", 0, (0, 2, 3), ()), Topology(1, "0/1", 1, (1, 4), ()),
                  Topology(2, "0/2", 5, (), ()))
    catalog = Catalog("2.13", "c", 6, "m:f", {}, (), topologies, ())
    import numpy as np

    assert sample_groups(catalog).tolist() == [0, 1, 0, 0, 1, -1]  # sample 5: in no topology
    calls = np.array([[3, 0], [0, 2], [0, 0], [0, 1]])
    fleet = with_fleet(catalog, ["a", "b"], calls, np.array([10, 20, 0]), np.array([30, 40, 0]))
    assert fleet.replicas == {"a": 3, "b": 3}
    assert [t.replicas for t in fleet.topologies] == [{"a": 3}, {"b": 2}, {}]
    assert [(t.first_seen, t.last_seen) for t in fleet.topologies][1:] == [
        ("1970-01-01T00:00:00.000000Z", "1970-01-01T00:00:00.000000Z"), (None, None)]
    assert single_replica_topologies(fleet) == [0, 1]
    document = fleet.to_json()
    assert document["replicas"] == {"a": 3, "b": 3} and document["topologies"][1]["replicas"] == {"b": 2}
    assert "replicas" not in catalog.to_json() and "replicas" not in catalog.to_json()["topologies"][0]
    json.dumps(document)
    alone = with_fleet(catalog, ["a"], calls[:, :1].copy() + np.array([[0], [2], [0], [1]]))
    assert alone.replicas is None and alone.topologies[0].replicas is None  # one replica: no per-replica view
    with pytest.raises(ValueError, match="5 calls tallied for a catalog of 6 samples"):
        with_fleet(catalog, ["a", "b"], calls - np.array([[0, 0], [0, 0], [0, 0], [0, 1]]))
    with pytest.raises(ValueError, match="calls of 2 topologies for a catalog of 3"):
        with_fleet(catalog, ["a", "b"], calls[1:])


def test_a_merged_fleet_s_topologies_are_tallied_a_shard_at_a_time(tmp_path):
    import numpy as np

    write_replica(tmp_path / "a", "a", [(2, EPOCH + 1000), (3, EPOCH + 3000), (2, EPOCH + 5000)])
    write_replica(tmp_path / "b", "b", [(3, EPOCH + 2000), (4, EPOCH + 4000)])
    replicas = [tmp_path / "a", tmp_path / "b"]
    merge_fleet(open_fleet(replicas), tmp_path / "ordered")
    merge_fleet(open_fleet(replicas), tmp_path / "compact", compact=True)
    for merged in ("ordered", "compact"):
        corpus = load_corpus(tmp_path / merged)
        # Each sample's topology: by its rows, 2, 3 or 4.
        group = np.array([{2: 0, 3: 1, 4: 2}[rows] for _, rows in rows_of(tmp_path / merged)], dtype=np.int32)
        tally = group_tally(corpus, group, 3)
        assert tally.names == ["a", "b"]
        assert tally.calls.tolist() == [[2, 0], [1, 1], [0, 1], [0, 0]]
        assert (tally.first_ns - EPOCH).tolist() == [1000, 2000, 4000]
        assert (tally.last_ns - EPOCH).tolist() == [5000, 3000, 4000]
        group[group == 2] = -1  # a sample in no topology: tallied in the last row
        assert group_tally(corpus, group, 3).calls.tolist() == [[2, 0], [1, 1], [0, 0], [0, 1]]
        assert group_tally(corpus, group[:4], 3) is None  # the log holds more samples than the grouping
        skipped = {shard.file for shard in corpus.manifest.shards}  # an analysis's skipped shards: not read
        assert group_tally(corpus, group[:1], 3, skipped).calls.sum() == 0
    assert [rows for _, rows in rows_of(tmp_path / "ordered")] == [2, 3, 3, 4, 2]


def test_verify_s_replicas_line_names_the_replicas_that_would_compile():
    from guardscope.terminal import format_replicas

    calm = {name: {"status": "passed", "samples": 5, "recompiles": 0, "recompile_samples": [], "from": "fleet"}
            for name in ("a", "b")}
    assert format_replicas(calm) == "replicas  2: 0 recompiles on each (the fleet's replay compiled nothing)"
    alone = {name: {**r, "from": "replayed"} for name, r in calm.items()}
    assert format_replicas(alone) == "replicas  2: 0 recompiles on each (each replayed alone)"
    alone["b"] = {"status": "failed", "samples": 5, "recompiles": 2, "recompile_samples": [12, 40], "from": "replayed"}
    alone["c"] = {"status": "crashed", "samples": None, "recompiles": None, "recompile_samples": [], "from": "replayed"}
    assert format_replicas(alone) == ("replicas  2 of 3 would compile: b 2 recompiles, first at sample 12; "
                                      "c crashed")


def test_a_compact_merge_is_one_row_per_signature_with_its_calls_per_replica(tmp_path):
    import pyarrow.parquet as pq

    write_replica(tmp_path / "a", "a", [(1, EPOCH), (1, EPOCH + 2), (1, EPOCH + 4), (2, EPOCH + 6)])
    write_replica(tmp_path / "b", "b", [(1, EPOCH + 1), (1, EPOCH + 3)])
    merged = merge_fleet(open_fleet([tmp_path / "a", tmp_path / "b"]), tmp_path / "fleet", compact=True)
    assert (merged.samples, merged.rows, merged.replicas) == (6, 3, {"a": 4, "b": 2})
    table = pq.read_table(tmp_path / "fleet" / "shard-00000.parquet")
    times = [table.column(name).cast("int64").to_pylist() for name in ("first_seen", "last_seen")]
    rows = table.drop_columns(["first_seen", "last_seen"]).to_pylist()
    # a's first call of size 1 kept in full; the other four (b's full one too) on one row at the
    # first of them (b's), with their times and calls per replica; a's call of size 2 in full.
    assert [(r["first"], r["count"], r["replica"], r["replicas"], r["full"], r["data"] is not None) for r in rows] == [
        (0, 1, "a", None, None, True),
        (1, 4, "b", [{"name": "a", "count": 2}, {"name": "b", "count": 2}], 0, False),
        (5, 1, "a", None, None, True)]
    assert [(first - EPOCH, last - EPOCH) for first, last in zip(*times)] == [(0, 0), (1, 4), (6, 6)]
    # Read back, each sample has its replica: a row's calls in the order of its list.
    assert rows_of(tmp_path / "fleet") == [("a", 1), ("a", 1), ("a", 1), ("b", 1), ("b", 1), ("a", 2)]
    assert len(load_corpus(tmp_path / "fleet")) == 6


def test_a_compact_merge_says_it_drops_request_tags_and_keep_order_keeps_them(tmp_path):
    write_replica(tmp_path / "a", "a", [(1, EPOCH), (1, EPOCH + 2)], requests=["q1", "q1"])
    write_replica(tmp_path / "b", "b", [(1, EPOCH + 1)])
    result = CliRunner().invoke(main, ["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out",
                                       str(tmp_path / "compact")])
    assert result.exit_code == 0, result.output
    assert "note        2 calls were tagged with a request; a compact merge keeps the calls, not the tags" \
        in result.output
    assert load_corpus(tmp_path / "compact").requests is None and len(load_corpus(tmp_path / "compact")) == 3
    ordered = CliRunner().invoke(main, ["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out",
                                        str(tmp_path / "ordered"), "--keep-order"])
    assert ordered.exit_code == 0 and "note" not in ordered.output
    assert load_corpus(tmp_path / "ordered").requests is not None


def test_compact_merges_of_parts_of_a_fleet_merge_into_the_compact_merge_of_the_whole(tmp_path):
    import pyarrow.parquet as pq

    calls = {"a": [(1, EPOCH), (1, EPOCH + 3), (2, EPOCH + 6), (1, EPOCH + 9)],
             "b": [(1, EPOCH + 1), (3, EPOCH + 4), (1, EPOCH + 7)],
             "c": [(2, EPOCH + 2), (1, EPOCH + 5), (3, EPOCH + 8), (1, EPOCH + 10)]}
    for name, recorded in calls.items():
        write_replica(tmp_path / name, name, recorded)
    whole = merge_fleet(open_fleet([tmp_path / name for name in calls]), tmp_path / "whole", compact=True)
    merge_fleet(open_fleet([tmp_path / "a", tmp_path / "b"]), tmp_path / "ab", compact=True)
    # Each replica compacted where it runs, then the fleet: the same rows as the whole at once.
    parts = merge_fleet(open_fleet([tmp_path / "ab", tmp_path / "c"]), tmp_path / "parts", compact=True)
    assert (parts.samples, parts.rows, parts.replicas) == (whole.samples, whole.rows, whole.replicas)
    assert whole.replicas == {"a": 4, "b": 3, "c": 4}

    def rows(folder) -> list:
        table = pq.read_table(sorted((tmp_path / folder).glob("shard-*.parquet")))
        return table.drop_columns(["first_seen", "last_seen"]).to_pylist(), [
            table.column(name).cast("int64").to_pylist() for name in ("first_seen", "last_seen")]

    assert rows("parts") == rows("whole")
    assert rows_of(tmp_path / "parts") == rows_of(tmp_path / "whole")
    with pytest.raises(CorpusError, match="is a compact merge"):
        merge_fleet(open_fleet([tmp_path / "ab", tmp_path / "c"]), tmp_path / "ordered")


def test_the_summary_gives_each_replica_s_compiles_beside_the_union_or_says_they_were_not_counted():
    """Issue 51, item 4: a fleet's analysis is one process; each replica's own process compiles its
    own first call's graph and each later one its calls need."""
    from guardscope.terminal import replica_compile_lines

    assert replica_compile_lines({"web-a": 4, "web-b": 4}, 4, {"web-a": 90, "web-b": 60}) == [
        "  replicas  each replica's own process compiles web-a 4, web-b 4 graphs, its first call's included: "
        "8 in the fleet against the union's 4"]
    assert replica_compile_lines(None, 4, {f"r{k}": 1 for k in range(64)}) == [
        "  replicas  each of the 64 replicas compiles its own first call's graph and those its calls need, "
        "whatever the others compiled: not counted (--replica-compiles replays each replica alone)"]
    assert replica_compile_lines(None, 4, None) == []
