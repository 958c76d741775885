"""Signature records (corpus format 3): recording with keep="signatures", repeat counts, loading,
materialising arguments from a signature, refusing malformed records; no compile."""

from __future__ import annotations

import hashlib
import io
import json
import pathlib
import zlib

import pytest
import torch

from guardscope.catalog.builder import CatalogBuilder
from guardscope.catalog.caveats import signature_warnings
from guardscope.corpus.storage.format import FORMAT, read_manifest
from guardscope.corpus.signatures.materialising import materialise
from guardscope.corpus.reader import load_corpus
from guardscope.corpus.signatures.signature import signature, signature_from_json, signature_to_json
from guardscope.corpus.values.sample import snapshot
from guardscope.corpus.writer import CorpusWriter
from guardscope.errors import CorpusError, SampleError, ShardError
from guardscope.model import Catalog, SampleMeta

from ..builders import replace_shard

MODEL = "pkg.models:build"


def request(rows: int, seed: int = 0) -> tuple[tuple, dict]:
    """A call whose signature depends on ``rows`` only: a tensor, a view of it, a scalar."""
    base = torch.randn(rows, 4, generator=torch.Generator().manual_seed(seed))
    return (base, base[1:, ::2]), {"scale": 0.5, "mask": None}


def record(directory: pathlib.Path, rows: list[int], **options) -> CorpusWriter:
    with CorpusWriter(directory, model=MODEL, compile={"dynamic": True}, keep="signatures", **options) as writer:
        for number, count in enumerate(rows):
            args, kwargs = request(count, seed=number)
            assert writer.add(*args, **kwargs) == number
    return writer


def shard_index(directory: pathlib.Path, number: int = 0) -> dict:
    content = torch.load(directory / f"shard-{number:05d}.pt", weights_only=True)
    return json.loads(zlib.decompress(content["index"].numpy().tobytes()))


# ---- signatures as JSON, and arguments materialised from them ---------------------------------

base = torch.arange(24.0).reshape(4, 6)


CALLS = [
    ((base, base[1:, ::2], base.t()), {}),                                      # aliasing, strides
    ((torch.ones(1, 6).expand(4, 6),), {"e": torch.empty_strided((2, 0), (0, 1))}),  # zero strides, no elements
    ((base[2:],), {"offset": base[1, 3:]}),                                     # storage offsets
    ((None, [torch.ones(2), torch.ones(3)], (1, 2.5, -0.0, 1 + 2j)), {}),       # None, list lengths, scalars
    ((), {"d": {"a": torch.ones(2), 3: "x"}, "dt": torch.float16, "dev": torch.device("cpu")}),
    ((torch.ones(3, requires_grad=True), torch.ones(2, dtype=torch.int64)), {"flag": True}),
    ((torch.ones(2, 2).view(torch.int32), torch.ones(2, 2)), {}),               # two dtypes of one storage
]


@pytest.mark.parametrize("args,kwargs", CALLS)
def test_a_snapshot_has_the_signature_of_its_original(args, kwargs):
    # The traffic recorder takes a call's signature once, on the serving thread, for its copy.
    assert signature(*snapshot(args, kwargs), inference=False) == signature(args, kwargs, inference=False)


@pytest.mark.parametrize("args,kwargs", CALLS)
def test_a_materialised_call_has_the_signature_it_was_built_from(args, kwargs):
    sig = signature(args, kwargs)
    assert signature_from_json(json.loads(json.dumps(signature_to_json(sig)))) == sig
    built_args, built_kwargs = materialise(sig)
    assert signature(built_args, built_kwargs) == sig
    for value in [*built_args, *built_kwargs.values()]:
        if isinstance(value, torch.Tensor) and value.numel() and not value.requires_grad:
            assert not value.any()  # zero-filled: no data is made up


def test_materialised_tensors_share_storage_as_recorded():
    view = base[1:, ::2]
    built, _ = materialise(signature((base, view, torch.ones(2)), {}))
    assert built[0].untyped_storage().data_ptr() == built[1].untyped_storage().data_ptr()
    assert built[2].untyped_storage().data_ptr() != built[0].untyped_storage().data_ptr()
    assert built[0].untyped_storage().nbytes() == base.untyped_storage().nbytes()


def test_an_inference_tensor_is_rebuilt_as_one():
    with torch.inference_mode():
        inner = torch.ones(3)
    sig = signature((inner,), {})
    assert materialise(sig)[0][0].is_inference()
    assert signature((inner,), {}, inference=False) == signature((torch.ones(3),), {})


def test_materialise_places_tensors_where_asked():
    sig = signature((base, base[1:]), {"k": 2})
    args, kwargs = materialise(sig, device="meta")
    assert [t.device.type for t in args] == ["meta", "meta"] and kwargs == {"k": 2}
    args, _ = materialise(sig, device=lambda recorded: torch.device("meta" if recorded == "cpu" else "cpu"))
    assert args[1].device.type == "meta" and args[1].shape == (3, 6)


@pytest.mark.parametrize("sig,message", [
    (("call", ("tuple", 1, ("object", "builtins.set")), ("dict",)), "cannot be rebuilt"),
    (("call", ("tuple", 1, ("tensor", "Parameter", (2,), (1,), 0, "float32", "cpu", "torch.strided",
                            False, False, None)), ("dict",)), "plain strided"),
    (("call", ("tuple", 1, ("tensor", "Tensor", (2,), (1,), -1, "float32", "cpu", "torch.strided",
                            False, False, None)), ("dict",)), "non-negative"),
    (("call", ("tuple", 1, ("tensor", "Tensor", (2,), (1,), 0, "float99", "cpu", "torch.strided",
                            False, False, None)), ("dict",)), "unknown dtype"),
    (("call", ("tuple", 1, ("tensor", "Tensor", (2,), (1,), 0, "float32", "cpu", "torch.strided",
                            False, False, 3)), ("dict",)), "aliases 3"),
    (("call", ("tuple", 2, ("int", 1)), ("dict",)), "cannot be rebuilt"),   # a length that lies
    (("call", ("tuple", 0), ("dict", ("[1]", ("int", 1)))), "str or int"),
    (("nope",), "not a call signature"),
])
def test_a_signature_that_cannot_be_rebuilt_says_why(sig, message):
    with pytest.raises(ValueError, match=message):
        materialise(sig)


@pytest.mark.parametrize("value", [{"a": 1}, [1.5], [[True, {"x": 1}]], "text"])
def test_signature_json_holds_arrays_ints_strings_bools_and_null_only(value):
    with pytest.raises(ValueError):
        signature_from_json(value)


# ---- recording ----------------------------------------------------------------------------------


def test_the_first_call_of_each_signature_is_full_and_repeats_are_counted(tmp_path):
    writer = record(tmp_path / "c", [3, 3, 3, 5, 3, 5, 5, 5, 7], shard_size=4)
    assert writer.signature_samples == 6
    manifest = read_manifest(tmp_path / "c")
    assert manifest.format_version == 3 and manifest.samples == 9
    assert [(s.first, s.samples) for s in manifest.shards] == [(0, 5), (5, 4)]
    records = shard_index(tmp_path / "c")["samples"]
    assert [r["repeat"] if isinstance(r, dict) else "full" for r in records] == ["full", 2, "full", 1]
    assert records[3]["full"] == 0 and records[1]["full"] == 0
    corpus = load_corpus(tmp_path / "c")
    samples = list(corpus)
    assert [s.index for s in samples] == list(range(9))
    assert [s.recorded for s in samples] == ["full", "signature", "signature", "full", "signature",
                                             "signature", "signature", "signature", "full"]
    assert [s.data_of for s in samples] == [None, 0, 0, None, 0, 3, 3, 3, None]
    for sample in samples:
        # A signature sample's arguments have its signature, which equals its full twin's.
        assert signature(sample.args, sample.kwargs) == signature(*request(sample.args[0].shape[0]))
        if sample.recorded == "signature":
            assert sample.signature == signature(sample.args, sample.kwargs)
    assert corpus.sample(6).data_of == 3 and corpus.sample(-1).recorded == "full"
    full = corpus.full_sample(3)
    assert full.recorded == "full" and torch.equal(full.args[0], request(5, seed=3)[0][0])
    full.args[0].add_(1)  # a fresh copy every time
    assert torch.equal(corpus.full_sample(3).args[0], request(5, seed=3)[0][0])
    for index in range(9):  # any sample, a signature record's too, each as loading gives it
        got, expected = corpus.full_sample(index), samples[index]
        assert (got.index, got.recorded, got.signature, got.data_of) == (
            expected.index, expected.recorded, expected.signature, expected.data_of)
        assert signature(got.args, got.kwargs) == signature(expected.args, expected.kwargs)


def test_signature_records_keep_no_tensor_data(tmp_path):
    record(tmp_path / "full", [64] * 50, full_per_signature=50)
    record(tmp_path / "sigs", [64] * 50)
    sizes = {name: sum(p.stat().st_size for p in (tmp_path / name).glob("shard-*.pt")) for name in ("full", "sigs")}
    assert sizes["sigs"] * 10 < sizes["full"]
    assert len(shard_index(tmp_path / "sigs")["samples"]) == 2  # one full sample, one record of 49


def test_full_per_signature_keeps_that_many_in_full(tmp_path):
    record(tmp_path / "two", [3, 3, 3, 3], full_per_signature=2)
    assert [s.recorded for s in load_corpus(tmp_path / "two")] == ["full", "full", "signature", "signature"]
    record(tmp_path / "none", [3, 3, 4], full_per_signature=0)
    samples = list(load_corpus(tmp_path / "none"))
    assert [(s.recorded, s.data_of) for s in samples] == [("signature", None)] * 3
    assert [tuple(s.args[0].shape) for s in samples] == [(3, 4), (3, 4), (4, 4)]


def test_max_full_bytes_bounds_the_data_kept_in_full(tmp_path):
    # request(rows): one storage of rows x 4 float32 (the view shares it): 16 * rows bytes.
    writer = record(tmp_path / "c", [3, 4, 3, 5, 6, 5, 2], max_full_bytes=16 * (3 + 4 + 2))
    samples = list(load_corpus(tmp_path / "c"))
    assert [(s.recorded, s.data_of) for s in samples] == [
        ("full", None), ("full", None), ("signature", 0), ("signature", None), ("signature", None),
        ("signature", None), ("full", None)]
    assert writer.full_bytes == 16 * (3 + 4 + 2)


def test_keep_all_still_writes_format_2(tmp_path):
    with CorpusWriter(tmp_path / "c", model=MODEL) as writer:
        writer.add(*request(3)[0])
    assert read_manifest(tmp_path / "c").format_version == 2


@pytest.mark.parametrize("options,message", [
    ({"keep": "some"}, "keep must be one of 'all', 'signatures'"),
    ({"full_per_signature": -1}, "full_per_signature must be an int >= 0"),
    ({"full_per_signature": 1.5}, "full_per_signature must be an int >= 0"),
    ({"keep": "signatures", "max_full_bytes": -1}, "max_full_bytes must be an int >= 0"),
    ({"max_full_bytes": 1024}, 'max_full_bytes bounds .* use keep="signatures"'),
])
def test_bad_writer_options_are_refused(tmp_path, options, message):
    with pytest.raises(CorpusError, match=message):
        CorpusWriter(tmp_path / "c", model=MODEL, **options)


def test_recording_is_deterministic(tmp_path):
    record(tmp_path / "a", [3, 3, 4, 3])
    record(tmp_path / "b", [3, 3, 4, 3])
    for name in ("corpus.json", "shard-00000.pt"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


# ---- malformed records --------------------------------------------------------------------------


def rewrite_first_shard(directory: pathlib.Path, edit) -> None:
    path = directory / "shard-00000.pt"
    content = torch.load(path, weights_only=True)
    index = shard_index(directory)
    edit(index["samples"])
    content["index"] = torch.frombuffer(bytearray(zlib.compress(json.dumps(index).encode())), dtype=torch.uint8)
    buffer = io.BytesIO()
    torch.save(content, buffer)
    path.write_bytes(buffer.getvalue())
    manifest_path = directory / "corpus.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["shards"][0]["sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
    manifest_path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("edit,message", [
    (lambda records: records[1].update(repeat=0), "repeat is a positive int"),
    (lambda records: records[1].update(repeat=True), "repeat is a positive int"),
    (lambda records: records[1].update(repeat=3), "holds 4 samples but the manifest lists 3"),
    (lambda records: records[1].update(full=1), "names sample 1 as its full recording"),
    (lambda records: records[1].update(full="0"), "full is a sample index or null"),
    (lambda records: records[1].update(extra=1), "holds signature, repeat and full"),
    (lambda records: records[1].update(signature={"a": 1}), "not a signature"),
    (lambda records: records[1].update(signature=["call", ["nope"], ["dict"]]), "cannot be rebuilt"),
])
def test_a_malformed_signature_record_is_refused(tmp_path, edit, message):
    record(tmp_path / "c", [3, 3, 3])
    rewrite_first_shard(tmp_path / "c", edit)
    with pytest.raises(ShardError, match=message):
        list(load_corpus(tmp_path / "c"))


@pytest.mark.parametrize("index", [
    "{}",                                                              # JSON text: format 2's index
    torch.zeros(8, dtype=torch.uint8),                                 # not deflated
    torch.frombuffer(bytearray(zlib.compress(b"{}")[:-3]), dtype=torch.uint8),  # cut short
    torch.frombuffer(bytearray(zlib.compress(b"\xff\xfe")), dtype=torch.uint8),  # not UTF-8
])
def test_a_format_3_index_must_be_deflated_json(tmp_path, index):
    record(tmp_path / "c", [3, 3])
    path = tmp_path / "c" / "shard-00000.pt"
    content = torch.load(path, weights_only=True)
    content["index"] = index
    replace_shard(tmp_path / "c", content)
    with pytest.raises(ShardError, match="no 'index'.*deflated"):
        list(load_corpus(tmp_path / "c"))


def test_a_signature_record_in_a_format_2_corpus_is_refused(tmp_path):
    record(tmp_path / "c", [3, 3])
    manifest = json.loads((tmp_path / "c" / "corpus.json").read_text())
    manifest["format_version"] = 2
    (tmp_path / "c" / "corpus.json").write_text(json.dumps(manifest))
    with pytest.raises(ShardError, match="not a format 2 shard"):
        list(load_corpus(tmp_path / "c"))
    content = torch.load(tmp_path / "c" / "shard-00000.pt", weights_only=True)
    assert content["format"] == FORMAT and content["format_version"] == 3


# ---- what the catalog says ----------------------------------------------------------------------


def meta(index: int, recorded: str = "full", ran_on: str | None = None) -> SampleMeta:
    return SampleMeta(index, (), (), (), serving="0/0", recorded=recorded, ran_on=ran_on)


def catalog_of(builder: CatalogBuilder, frames: int) -> Catalog:
    section = builder.signature_section(frames)
    return Catalog("2.13", "corpus", builder.samples, MODEL, {}, (), (), (), signatures=section,
                   frames=tuple({"frame": n} for n in range(frames)))


def test_the_catalog_counts_signature_samples_and_what_they_ran_on():
    builder = CatalogBuilder()
    for sample in [meta(0), meta(1, "signature"), meta(2, "signature", "full"), meta(3, "signature", "materialised")]:
        builder.add_sample(sample)
    restored = CatalogBuilder.from_state(json.loads(json.dumps(builder.to_state())))
    for made in (builder, restored):
        assert made.signature_section(1) == {"samples": 3, "ran_on_full": 1, "ran_on_materialised": 1,
                                             "materialised_samples": [3], "later_frames_exact": True}
    (warning,) = signature_warnings(catalog_of(builder, 1))
    assert "1 signature-only samples had no full sample" in warning and "catalog is exact" in warning
    (warning,) = signature_warnings(catalog_of(builder, 3))
    assert "3 of 4 samples were recorded as their signature only" in warning and "3 frames" in warning
    full_only = CatalogBuilder()
    full_only.add_sample(meta(0))
    assert full_only.signature_section(1) is None
    assert "signatures" not in catalog_of(full_only, 1).to_json()["corpus"]


def test_add_signature_records_a_call_known_by_its_signature(tmp_path):
    args, kwargs = request(3)
    sig = signature(args, kwargs, inference=False)
    with CorpusWriter(tmp_path / "c", model=MODEL, keep="signatures") as writer:
        assert writer.add_signature(sig, {"cpu"}) == 0      # no full sample of it yet
        assert writer.add(*args, **kwargs) == 1             # the first one in full
        assert writer.add_signature(sig) == 2
        with pytest.raises(SampleError, match="not a call signature this corpus format can store"):
            writer.add_signature(("call", ("tuple", 1, ("object", "builtins.set")), ("dict",)))
    assert [(s.recorded, s.data_of) for s in load_corpus(tmp_path / "c")] == [
        ("signature", None), ("full", None), ("signature", 1)]
    with CorpusWriter(tmp_path / "d", model=MODEL) as writer:
        with pytest.raises(CorpusError, match='keep="signatures"'):
            writer.add_signature(sig)


def test_max_signatures_bounds_what_the_writer_remembers(tmp_path):
    record(tmp_path / "c", [3, 4, 5, 3, 5], max_signatures=2)
    # 3 and 4 are remembered; 5 is not, so its second call is recorded in full again.
    assert [s.recorded for s in load_corpus(tmp_path / "c")] == ["full", "full", "full", "signature", "full"]
    with pytest.raises(CorpusError, match="max_signatures must be an int >= 0 or None"):
        CorpusWriter(tmp_path / "d", model=MODEL, max_signatures=-1)
