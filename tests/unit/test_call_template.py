"""Call templates (``corpus.signatures.call_template.CallTemplate``): the signatures a replay checks without rebuilding
each call, and the signature records a corpus reads for it (``Corpus.load_records``)."""

from __future__ import annotations

import hashlib
import io
import json
import zlib

import pytest
import torch

from guardscope.corpus.signatures.call_template import CallTemplate, NoTemplate
from guardscope.corpus.reader import SignatureRecord, load_corpus, records_from
from guardscope.corpus.signatures.signature import signature, signature_to_json
from guardscope.corpus.writer import CorpusWriter
from guardscope.errors import ShardError
from guardscope.model import Sample


def array_of(args: tuple, kwargs: dict) -> list:
    """A call's signature as a corpus shard holds it (a JSON array, parsed)."""
    return json.loads(json.dumps(signature_to_json(signature(args, kwargs, inference=False))))


def call(rows: int, cols: int = 4, *, steps: int = 3, grad: bool = False) -> tuple[tuple, dict]:
    x = torch.randn(rows, cols, requires_grad=grad)
    return (x, torch.ones(rows, dtype=torch.int64)[::2]), {"steps": steps, "mode": "sum", "mask": None,
                                                          "scale": 0.5, "dtype": torch.float16}


def test_a_key_gives_arguments_with_exactly_that_signature():
    template = CallTemplate(signature(*call(5), inference=False))
    for rows, cols, steps in [(5, 4, 3), (0, 4, 3), (7, 1, -2), (1, 9, 0)]:
        args, kwargs = call(rows, cols, steps=steps)
        key = template.match(array_of(args, kwargs))
        assert key is not None
        built_args, built_kwargs, tensors = template.arguments(key)
        assert signature(built_args, built_kwargs, inference=False) == signature(args, kwargs, inference=False)
        assert list(built_kwargs) == ["steps", "mode", "mask", "scale", "dtype"]
        assert [t.shape for t in tensors] == [a.shape for a in args]


def test_tensors_are_built_once_per_argument_and_size():
    template = CallTemplate(signature(*call(5), inference=False))
    first = template.arguments(template.match(array_of(*call(5))))[2]
    again = template.arguments(template.match(array_of(*call(5, steps=8))))[2]
    other = template.arguments(template.match(array_of(*call(7))))[2]
    assert all(a is b for a, b in zip(first, again))
    assert not any(a is b for a, b in zip(first, other))
    assert first[0] is not first[1] and first[0].untyped_storage().data_ptr() != first[1].untyped_storage().data_ptr()


@pytest.mark.parametrize("change", [
    lambda: call(5, grad=True),                                             # requires_grad
    lambda: ((torch.randn(5, 4, 1), torch.ones(5, dtype=torch.int64)[::2]), call(5)[1]),  # dims
    lambda: ((torch.randn(5, 4).double(), torch.ones(5, dtype=torch.int64)[::2]), call(5)[1]),  # dtype
    lambda: (call(5)[0], {**call(5)[1], "mode": "mean"}),                   # a constant
    lambda: (call(5)[0], {**call(5)[1], "scale": 0.25}),                    # a float
    lambda: (call(5)[0], {**call(5)[1], "mask": torch.ones(1)}),            # None -> tensor
    lambda: (call(5)[0], {k: v for k, v in reversed(call(5)[1].items())}),  # keyword order
    lambda: (call(5)[0][:1], call(5)[1]),                                   # fewer arguments
    lambda: (call(5)[0], {**call(5)[1], "steps": True}),                    # an int becomes a bool
])
def test_a_signature_of_another_call_does_not_match(change):
    template = CallTemplate(signature(*call(5), inference=False))
    assert template.match(array_of(*change())) is None


def nested(rows: int, layers: int = 2) -> tuple[tuple, dict]:
    """Containers: a list of (key, value) tuples, a dict with an int, a None and a tensor."""
    cache = [(torch.ones(1, rows, 4), torch.ones(1, rows, 4)[..., ::2]) for _ in range(layers)]
    return (torch.ones(rows, 8), cache), {"extra": {"steps": rows % 3, "mask": None, 7: torch.ones(rows)}}


def test_containers_are_rebuilt_around_the_shared_tensors():
    template = CallTemplate(signature(*nested(5), inference=False))
    assert not template.flat
    for rows in (5, 0, 9):
        args, kwargs = nested(rows)
        key = template.match(array_of(args, kwargs))
        built_args, built_kwargs, tensors = template.arguments(key)
        assert signature(built_args, built_kwargs, inference=False) == signature(args, kwargs, inference=False)
        assert type(built_args[1]) is list and type(built_args[1][0]) is tuple
        assert list(built_kwargs["extra"]) == ["steps", "mask", 7]
        assert len(tensors) == 6
    again = template.arguments(template.match(array_of(*nested(5))))
    assert again[0][1] is not template.arguments(template.match(array_of(*nested(5))))[0][1]  # fresh containers
    assert again[2][0] is template.arguments(template.match(array_of(*nested(5))))[2][0]  # shared tensors


@pytest.mark.parametrize("change", [
    lambda: nested(5, layers=3),                                            # a longer list
    lambda: ((nested(5)[0][0], tuple(nested(5)[0][1])), nested(5)[1]),       # a tuple, not a list
    lambda: (nested(5)[0], {"extra": {"mask": None, "steps": 2, 7: torch.ones(5)}}),  # dict order
    lambda: (nested(5)[0], {"extra": {"steps": 2, "mask": None, 8: torch.ones(5)}}),  # another key
    lambda: (nested(5)[0], {"extra": {"steps": 2, "mask": torch.ones(1), 7: torch.ones(5)}}),
])
def test_other_containers_do_not_match(change):
    template = CallTemplate(signature(*nested(5), inference=False))
    assert template.match(array_of(*change())) is None


def test_an_object_argument_has_no_template():
    with pytest.raises(NoTemplate):
        CallTemplate(("call", ("tuple", 1, ("object", "pkg.Thing")), ("dict",)))


def test_a_call_whose_tensors_share_storage_is_not_flat():
    base = torch.ones(4, 4)
    with pytest.raises(NoTemplate, match="share storage"):
        CallTemplate(signature((base, base[1:]), {}))


@pytest.mark.parametrize("numbers", [(-1, 4, 4, 1, 0), (5, 4, 4, 1, 2**62), (5.5, 4, 4, 1, 0)])
def test_impossible_sizes_are_refused(numbers):
    template = CallTemplate(signature((torch.ones(5, 4),), {}))
    array = array_of((torch.ones(5, 4),), {})
    tensor = array[1][2]
    tensor[2], tensor[3], tensor[4] = list(numbers[:2]), list(numbers[2:4]), numbers[4]
    with pytest.raises(ValueError, match="non-negative ints"):
        template.match(array)


def test_built_tensors_go_where_asked():
    template = CallTemplate(signature((torch.ones(3),), {}), device="meta")
    args, _, _ = template.arguments(template.match(array_of((torch.ones(3),), {})))
    assert args[0].device.type == "meta"


# ---- records as a corpus reads them -----------------------------------------------------------


def write(directory, calls, **options):
    with CorpusWriter(directory, model="pkg.models:build", keep="signatures", shard_size=4, **options) as writer:
        for args, kwargs in calls:
            writer.add(*args, **kwargs)


def rewrite_index(directory, edit) -> None:
    """Edit the first shard's (deflated JSON) index in place, its checksum updated."""
    shard = directory / "shard-00000.pt"
    content = torch.load(shard, weights_only=True)
    index = json.loads(zlib.decompress(content["index"].numpy().tobytes()))
    edit(index)
    content["index"] = torch.frombuffer(bytearray(zlib.compress(json.dumps(index).encode())), dtype=torch.uint8)
    buffer = io.BytesIO()
    torch.save(content, buffer)
    shard.write_bytes(buffer.getvalue())
    manifest = json.loads((directory / "corpus.json").read_text())
    manifest["shards"][0]["sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
    (directory / "corpus.json").write_text(json.dumps(manifest))


def test_records_and_samples_of_a_corpus_agree(tmp_path):
    base = torch.ones(4, 2)
    calls = [call(5), call(5), call(6), ((torch.ones(2), [torch.ones(1)]), {}), call(5), ((base, base[1:]), {}),
             call(7)]
    write(tmp_path / "c", calls, full_per_signature=0)
    corpus = load_corpus(tmp_path / "c")
    records = [item for shard in corpus.manifest.shards for item in corpus.load_records(shard)]
    assert [(r.first, r.repeat) for r in records] == [(0, 2), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1)]
    assert all(type(r) is SignatureRecord for r in records)
    # The list argument's call has a template too; the aliasing one does not.
    assert [r.key is not None for r in records] == [True, True, True, True, False, True]
    samples = list(corpus)
    for record in records:
        for offset in range(record.repeat):
            sample = samples[record.first + offset]
            assert record.signature == sample.signature == signature(*calls[sample.index], inference=False)
            if record.key is not None:
                args, kwargs, _ = record.arguments()
                assert signature(args, kwargs, inference=False) == sample.signature
            rebuilt = record.sample(offset)
            assert (rebuilt.index, rebuilt.signature, rebuilt.data_of) == (sample.index, sample.signature, None)


def test_a_full_sample_stays_a_sample(tmp_path):
    write(tmp_path / "c", [call(5), call(5)])
    corpus = load_corpus(tmp_path / "c")
    first, second = corpus.load_records(corpus.manifest.shards[0])
    assert type(first) is Sample and type(second) is SignatureRecord and second.full == 0


def test_a_signature_record_with_impossible_sizes_is_refused_when_read(tmp_path):
    write(tmp_path / "c", [call(5), call(6)], full_per_signature=0)
    def edit(index):
        index["samples"][1]["signature"][1][2][2][0] = -6

    rewrite_index(tmp_path / "c", edit)
    corpus = load_corpus(tmp_path / "c")
    with pytest.raises(ShardError, match="sample 1's signature cannot be rebuilt.*non-negative"):
        corpus.load_records(corpus.manifest.shards[0])


def test_a_resumed_replay_starts_inside_a_record(tmp_path):
    write(tmp_path / "c", [call(5)] * 3 + [call(6)], full_per_signature=0)
    corpus = load_corpus(tmp_path / "c")
    records = corpus.load_records(corpus.manifest.shards[0])
    assert [(r.first, r.repeat) for r in records_from(records, 0)] == [(0, 3), (3, 1)]
    assert [(r.first, r.repeat) for r in records_from(records, 1)] == [(1, 2), (3, 1)]
    assert [(r.first, r.repeat) for r in records_from(records, 3)] == [(3, 1)]
    assert records_from(records, 4) == []
    assert records_from(records, 2)[0].sample(0).index == 2
    assert [(r.first, r.repeat) for r in corpus.iter_records(2)] == [(2, 1), (3, 1)]
    with pytest.raises(IndexError):
        records[0].sample(3)


def test_iter_records_streams_the_corpus_from_a_sample_on(tmp_path):
    write(tmp_path / "c", [call(5)] * 6 + [call(6), call(7)] + [call(5)] * 3, full_per_signature=1)
    corpus = load_corpus(tmp_path / "c")
    assert [shard.samples for shard in corpus.manifest.shards] == [8, 3]  # four records, then one

    def spans(items):
        return [(r.index, 1) if type(r) is Sample else (r.first, r.repeat) for r in items]

    assert spans(corpus.iter_records()) == [(0, 1), (1, 5), (6, 1), (7, 1), (8, 3)]
    assert spans(corpus.iter_records(5)) == [(5, 1), (6, 1), (7, 1), (8, 3)]
    assert spans(corpus.iter_records(9)) == [(9, 2)]
    assert list(corpus.iter_records(11)) == []



@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_record_on_a_device_this_machine_lacks_is_refused_when_read(tmp_path):
    write(tmp_path / "c", [call(5)], full_per_signature=0)
    def edit(index):
        for tensor in index["samples"][0]["signature"][1][2:]:
            tensor[6] = "cuda:0"

    rewrite_index(tmp_path / "c", edit)
    corpus = load_corpus(tmp_path / "c")
    with pytest.raises(ShardError, match="sample 0's signature cannot be rebuilt"):
        corpus.load_records(corpus.manifest.shards[0])
    assert len(load_corpus(tmp_path / "c", map_location="cpu").load_records(corpus.manifest.shards[0])) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_nested_record_on_a_device_this_machine_lacks_is_refused_when_read(tmp_path):
    write(tmp_path / "c", [((torch.ones(2), [torch.ones(3)]), {})], full_per_signature=0)
    def edit(index):
        index["samples"][0]["signature"][1][3][2][6] = "cuda:0"  # the tensor in the list

    rewrite_index(tmp_path / "c", edit)
    with pytest.raises(ShardError, match="sample 0's signature cannot be rebuilt.*cuda:0 cannot be built here"):
        list(load_corpus(tmp_path / "c"))
    assert list(load_corpus(tmp_path / "c", map_location="cpu"))[0].args[1][0].device.type == "cpu"


def test_built_tensors_are_bounded_in_bytes(monkeypatch):
    """Tensors of one argument are views of one zero-filled storage, grown by half again when a
    size needs more; past the byte bound the template starts afresh."""
    from guardscope.corpus.signatures import call_template

    monkeypatch.setattr(call_template, "TEMPLATE_BYTES_KEPT", 120)
    template = CallTemplate(signature((torch.ones(5, 4),), {}))
    keys = [template.match(array_of((torch.ones(5, cols),), {})) for cols in (4, 4, 1)]
    first = template.arguments(keys[0])[2][0]
    assert template.arguments(keys[1])[2][0] is first
    smaller = template.arguments(keys[2])[2][0]  # fits the 80 bytes already there: no new storage
    assert smaller.shape == (5, 1) and smaller.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
    assert template.arguments(keys[0])[2][0] is first
    grown = template.arguments(template.match(array_of((torch.ones(5, 7),), {})))[2][0]  # 140 bytes: a new pool
    assert grown.untyped_storage().nbytes() == 140 and not grown.any()
    assert template.arguments(keys[0])[2][0] is first  # kept until the bound is passed (80 + 140 > 120)
    template.arguments(template.match(array_of((torch.ones(5, 2),), {})))  # a new size: start afresh
    assert template.arguments(keys[0])[2][0] is not first


# ---- signatures read from a shard's text ---------------------------------------------------------


def compact(args: tuple, kwargs: dict) -> str:
    """A call's signature as the corpus writer spells it in a shard's index."""
    return json.dumps(signature_to_json(signature(args, kwargs, inference=False)), separators=(",", ":"))


@pytest.mark.parametrize("make", [call, nested])
def test_a_signature_matched_in_its_text_has_the_key_of_its_array(make):
    template = CallTemplate(signature(*make(5), inference=False))
    for rows in (5, 0, 1, 9, 123456):
        text = compact(*make(rows))
        padded = f'xx{text},"repeat":1'
        key, end = template.match_text(padded, 2)
        assert key == template.match(json.loads(text)) and padded[end:] == ',"repeat":1'
    if make is call:
        assert template.match_text(compact(*call(5, steps=-7)), 0)[0] == template.match(array_of(*call(5, steps=-7)))


@pytest.mark.parametrize("edit", [
    lambda text: text.replace(",", ", "),                        # spelled with spaces: parse it instead
    lambda text: text.replace("[5,4]", "[5.0,4]", 1),            # a float where a size belongs
    lambda text: text.replace("[5,4]", "[05,4]", 1),             # not JSON
    lambda text: text.replace("[5,4]", "[-5,4]", 1),             # impossible: match refuses it
    lambda text: text.replace("[5,4]", f"[{2**62},4]", 1),      # too large for a size
    lambda text: text.replace("false", "0", 1),                  # 0 equals False, but is not how it is written
    lambda text: text.replace('"sum"', '"max"'),                 # another constant: another call
])
def test_a_text_not_spelled_as_the_writer_spells_it_is_not_matched(edit):
    template = CallTemplate(signature(*call(5), inference=False))
    text = compact(*call(5))
    assert template.match_text(text, 0) is not None
    assert template.match_text(edit(text), 0) is None


def records_of(corpus) -> list:
    return [record for shard in corpus.manifest.shards for record in corpus.load_records(shard)]


def test_records_read_from_the_text_equal_those_parsed(tmp_path, monkeypatch):
    base = torch.ones(4, 2)
    calls = [call(5), call(6), call(6), call(7, steps=-2), nested(3), nested(4), call(5, grad=True), call(0),
             ((base, base[1:]), {}), nested(0), call(9), ((torch.ones(2), [torch.ones(1)]), {}), call(11), nested(2)]
    write(tmp_path / "c", calls * 3, full_per_signature=0)
    fast = records_of(load_corpus(tmp_path / "c"))
    # Later shards' signatures are matched in their text, kept unparsed until asked for.
    assert sum(type(record._array) is str for record in fast) >= 20
    monkeypatch.setattr("guardscope.corpus.reader.Corpus._prematch", lambda self, text: (text, [], []))
    parsed = records_of(load_corpus(tmp_path / "c"))
    assert not any(type(record._array) is str for record in parsed)
    assert [(r.first, r.repeat, r.full, r.key, r.array, r.signature) for r in fast] == [
        (r.first, r.repeat, r.full, r.key, r.array, r.signature) for r in parsed]
    # The same records share a call template either way.
    assert [[fast.index(o) for o in fast if o.call is r.call] for r in fast if r.call is not None] == [
        [parsed.index(o) for o in parsed if o.call is r.call] for r in parsed if r.call is not None]


def test_a_broken_record_after_matched_ones_is_refused_as_without_matching(tmp_path):
    write(tmp_path / "c", [call(n) for n in range(1, 9)], full_per_signature=0)
    shard = tmp_path / "c" / "shard-00001.pt"
    content = torch.load(shard, weights_only=True)
    text = zlib.decompress(content["index"].numpy().tobytes()).decode()
    content["index"] = torch.frombuffer(bytearray(zlib.compress(text.replace('"repeat":1', '"repeat":0', 1).encode())),
                                        dtype=torch.uint8)
    buffer = io.BytesIO()
    torch.save(content, buffer)
    shard.write_bytes(buffer.getvalue())
    manifest = json.loads((tmp_path / "c" / "corpus.json").read_text())
    manifest["shards"][1]["sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
    (tmp_path / "c" / "corpus.json").write_text(json.dumps(manifest))
    corpus = load_corpus(tmp_path / "c")
    corpus.load_records(corpus.manifest.shards[0])  # its call template is known from here on
    with pytest.raises(ShardError, match=r"repeat is a positive int\): \{'signature': \['call'"):
        corpus.load_records(corpus.manifest.shards[1])
