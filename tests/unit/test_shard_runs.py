"""Signature records read from a shard's text by runs (``Corpus._prematch``: one ``split`` of the
text for the most recently matched call template, the text between scanned record by record for
the others), against the same shards parsed whole; and the replay's paced garbage collection
(``ShardCollector``) freezing what survives a full pass."""

from __future__ import annotations

import gc
import hashlib
import io
import json
import zlib

import pytest
import torch

from guardscope.corpus.reader import SignatureRecord, load_corpus
from guardscope.corpus.signatures.signature import signature
from guardscope.corpus.writer import CorpusWriter
from guardscope.errors import ShardError
from guardscope.replay.resumable import ShardCollector


def flat_call(rows: int, *, steps: int = 3) -> tuple[tuple, dict]:
    """Two tensors, an int and constants (a template whose key holds ints and Nones)."""
    return (torch.ones(rows, 4), torch.ones(rows, dtype=torch.int64)[::2]), {"steps": steps, "mode": "sum",
                                                                             "mask": None}


def nested_call(rows: int) -> tuple[tuple, dict]:
    """Containers around the tensors: another call template."""
    return (torch.ones(rows, 8), [(torch.ones(1, rows, 4), torch.ones(1, rows, 4)[..., ::2])]), {"n": rows % 3}


def shared_call(rows: int) -> tuple[tuple, dict]:
    """Two views of one storage: no call template (parsed and rebuilt whole)."""
    base = torch.ones(rows + 1, 2)
    return (base, base[1:]), {}


def calls() -> list[tuple[tuple, dict]]:
    made = []
    for round_ in range(6):
        for rows in range(2, 30):
            made.append(flat_call(rows, steps=rows % 4))
            if rows % 5 == 0:
                made.append(flat_call(rows, steps=rows % 4))  # the same signature again: repeat 2
            if rows % 7 == round_ % 2:
                made.append(nested_call(rows))  # another template inside a run of the first
            if rows % 11 == round_ % 2:
                made.append(shared_call(rows))
    return made


def write(directory, **options) -> None:
    with CorpusWriter(directory, model="pkg.models:build", keep="signatures", shard_size=64, **options) as writer:
        for args, kwargs in calls():
            writer.add(*args, **kwargs)


def edit_text(directory, shard_name: str, edit) -> None:
    """Edit a shard's index text (deflated JSON) in place, its checksum in the manifest updated."""
    shard = directory / shard_name
    content = torch.load(shard, weights_only=True)
    text = zlib.decompress(content["index"].numpy().tobytes()).decode()
    edited = edit(text)
    assert edited != text
    content["index"] = torch.frombuffer(bytearray(zlib.compress(edited.encode())), dtype=torch.uint8)
    buffer = io.BytesIO()
    torch.save(content, buffer)
    shard.write_bytes(buffer.getvalue())
    manifest = json.loads((directory / "corpus.json").read_text())
    for entry in manifest["shards"]:
        if entry["file"] == shard_name:
            entry["sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
    (directory / "corpus.json").write_text(json.dumps(manifest))


def read_all(directory) -> tuple[list, list]:
    """Every shard's records, described, and the order of the corpus's call templates after each
    shard (each template named by the first record that has it)."""
    corpus = load_corpus(directory)
    described, orders = [], []
    names: dict[int, int] = {}
    for shard in corpus.manifest.shards:
        for record in corpus.load_records(shard):
            if type(record) is SignatureRecord:
                name = None if record.call is None else names.setdefault(id(record.call), record.first)
                described.append(("signature", record.first, record.repeat, record.full, record.key, name,
                                  record.array, record.signature))
            else:
                described.append(("full", record.index, signature(record.args, record.kwargs)))
        orders.append([names.get(id(call)) for call in corpus._templates])
    return described, orders


def parsed_whole(monkeypatch) -> None:
    """Read as without matching any text: every shard's index parsed whole."""
    monkeypatch.setattr("guardscope.corpus.reader.Corpus._prematch", lambda self, text: (text, [], []))


@pytest.mark.parametrize("full_per_signature", [0, 1])
def test_records_read_by_runs_equal_those_parsed_whole(tmp_path, monkeypatch, full_per_signature):
    directory = tmp_path / "c"
    write(directory, full_per_signature=full_per_signature)
    # One record spelled otherwise (a space): the run it is in breaks there, and it is parsed.
    edit_text(directory, "shard-00002.pt", lambda text: text.replace(',"repeat":1,', ', "repeat":1,', 1))
    fast, fast_orders = read_all(directory)
    kinds = {entry[0] for entry in fast}
    assert kinds == ({"signature", "full"} if full_per_signature else {"signature"})
    assert {entry[2] for entry in fast if entry[0] == "signature"} == {1, 2}  # repeats
    assert len({entry[5] for entry in fast if entry[0] == "signature"}) == 3  # two templates, and none
    parsed_whole(monkeypatch)
    parsed, parsed_orders = read_all(directory)
    assert fast == parsed
    assert fast_orders == parsed_orders


def test_templates_too_large_for_a_pattern_are_parsed_record_by_record(tmp_path, monkeypatch):
    directory = tmp_path / "c"
    write(directory, full_per_signature=0)
    monkeypatch.setattr("guardscope.corpus.signatures.call_template._MAX_TEXT_GROUPS", 1)  # no template gets a pattern
    fast = read_all(directory)
    parsed_whole(monkeypatch)
    assert fast == read_all(directory)


def test_a_shard_is_read_as_a_few_runs_not_record_by_record(tmp_path):
    directory = tmp_path / "c"
    write(directory, full_per_signature=0)
    corpus = load_corpus(directory)
    corpus.load_records(corpus.manifest.shards[0])  # its call templates are known from here on
    shard = corpus.manifest.shards[1]
    content = torch.load(directory / shard.file, weights_only=True)
    text = zlib.decompress(content["index"].numpy().tobytes()).decode()
    reduced, names, runs = corpus._prematch(text)
    records = text.count('{"signature":')
    # Runs broken only by the other template's records and by those no template holds.
    assert len(names) == len(runs) < records / 2
    assert sum(len(run.keys) for run in runs) + reduced.count('{"signature":') == records
    assert json.loads(reduced)["samples"].count(names[0]) == 1


def test_a_record_naming_a_later_full_sample_is_refused_as_without_runs(tmp_path, monkeypatch):
    directory = tmp_path / "c"
    write(directory, full_per_signature=0)
    edit_text(directory, "shard-00001.pt", lambda text: text.replace('"full":null', '"full":99999', 3))
    messages = []
    for whole in (False, True):
        if whole:
            parsed_whole(monkeypatch)
        corpus = load_corpus(directory)
        corpus.load_records(corpus.manifest.shards[0])
        with pytest.raises(ShardError, match="names sample 99999 as its full recording") as refused:
            corpus.load_records(corpus.manifest.shards[1])
        messages.append((str(refused.value), len(corpus._templates)))
    assert messages[0] == messages[1]


def test_the_collector_freezes_what_survives_and_unfreezes_it_when_closed():
    assert gc.get_freeze_count() == 0
    enabled = gc.isenabled()
    collector = ShardCollector()
    try:
        assert not gc.isenabled() and gc.get_freeze_count() > 0  # what the replay starts with
        kept = [[index] for index in range(1000)]  # survives the full pass below
        for _ in range(ShardCollector.FULL_EVERY):
            collector.shard_done()
        assert gc.is_tracked(kept) and not any(kept is obj for obj in gc.get_objects())  # frozen
    finally:
        collector.close()
    assert gc.get_freeze_count() == 0 and gc.isenabled() == enabled
    assert any(kept is obj for obj in gc.get_objects())


def test_the_collector_leaves_objects_frozen_by_others_as_they_are():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        collector = ShardCollector()
        for _ in range(ShardCollector.FULL_EVERY):
            collector.shard_done()
        collector.close()
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
