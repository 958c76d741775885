"""The corpus directory format: round trips, streaming, refusals, safe loading, determinism."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import pathlib

import pytest
import torch

from guardscope.corpus.storage.format import FORMAT, FORMAT_VERSION, Manifest, ShardInfo
from guardscope.corpus.writer import CorpusWriter
from guardscope.corpus.storage.shards import encode_shard as encode_shard
from guardscope.corpus.storage.format import read_manifest
from guardscope.corpus.reader import load_corpus
from guardscope.errors import CorpusError, ManifestError, ModelSpecError, SampleError, ShardError

MODEL = "pkg.models:build"


def write(directory: pathlib.Path, calls, **options) -> pathlib.Path:
    """Record ``calls``, a list of (args, kwargs), and return the directory."""
    with CorpusWriter(directory, model=MODEL, compile={"dynamic": True}, **options) as writer:
        for args, kwargs in calls:
            writer.add(*args, **kwargs)
    return directory


def roundtrip(tmp_path: pathlib.Path, *args, **kwargs):
    corpus = load_corpus(write(tmp_path / "c", [(args, kwargs)]))
    (sample,) = list(corpus)
    return sample


def assert_same_tensor(loaded: torch.Tensor, original: torch.Tensor) -> None:
    assert type(loaded) is torch.Tensor
    assert loaded.shape == original.shape
    assert loaded.stride() == original.stride()
    assert loaded.storage_offset() == original.storage_offset()
    assert loaded.dtype == original.dtype
    assert loaded.device == original.device
    assert loaded.requires_grad == original.requires_grad
    assert torch.equal(loaded.detach(), original.detach())


# ---- round trips ---------------------------------------------------------------------------


def test_python_values_round_trip_with_their_containers(tmp_path):
    nested = {"b": [1, (2.5, None)], "a": {"z": True, 3: "three"}, "c": (1 + 2j, -0.0)}
    sample = roundtrip(tmp_path, 7, "text", None, [1, [2, (3,)]], (), nested=nested, flag=False)
    assert sample.index == 0
    assert sample.args == (7, "text", None, [1, [2, (3,)]], ())
    assert type(sample.args) is tuple and type(sample.args[3]) is list
    assert type(sample.args[3][1][1]) is tuple
    assert sample.kwargs == {"nested": nested, "flag": False}
    assert list(sample.kwargs) == ["nested", "flag"]
    assert list(sample.kwargs["nested"]) == ["b", "a", "c"]
    assert list(sample.kwargs["nested"]["a"]) == ["z", 3]
    assert type(sample.kwargs["nested"]["c"]) is tuple
    assert type(sample.kwargs["flag"]) is bool and type(sample.args[0]) is int


def test_dtype_and_device_values_round_trip(tmp_path):
    sample = roundtrip(tmp_path, torch.float16, device=torch.device("cpu"))
    assert sample.args == (torch.float16,)
    assert sample.kwargs == {"device": torch.device("cpu")}


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int8,
        torch.uint8,
        torch.int32,
        torch.int64,
        torch.bool,
        torch.complex64,
        torch.complex128,
        torch.float8_e4m3fn,
    ],
)
def test_tensor_dtypes_round_trip(tmp_path, dtype):
    tensor = torch.arange(6).reshape(2, 3).to(dtype)
    assert_same_tensor(roundtrip(tmp_path, tensor).args[0], tensor)


def test_strides_views_and_zero_strides_round_trip(tmp_path):
    base = torch.arange(24.0).reshape(4, 6)
    view = base[1:, 2:]
    transposed = torch.arange(12.0).reshape(3, 4).t()
    empty_edges = torch.empty_strided((2, 0), (0, 1), dtype=torch.long)
    expanded = torch.arange(4.0).reshape(4, 1).expand(4, 5)
    every_other = torch.arange(10)[::2]
    sample = roundtrip(
        tmp_path, base, view, transposed, empty_edges, expanded, every_other, again=view
    )
    loaded_base, loaded_view, loaded_t, loaded_empty, loaded_expanded, loaded_step = sample.args
    for loaded, original in zip(
        sample.args, (base, view, transposed, empty_edges, expanded, every_other), strict=True
    ):
        assert_same_tensor(loaded, original)
    assert loaded_view.storage_offset() == 8 and loaded_view.stride() == (6, 1)
    assert loaded_t.stride() == (1, 4) and not loaded_t.is_contiguous()
    assert loaded_empty.shape == (2, 0) and loaded_empty.stride() == (0, 1)
    assert loaded_expanded.stride() == (1, 0)
    assert loaded_step.stride() == (2,)
    # A view and its base keep sharing one storage; so do two references to one tensor.
    pointer = loaded_base.untyped_storage().data_ptr()
    assert loaded_view.untyped_storage().data_ptr() == pointer
    assert sample.kwargs["again"].untyped_storage().data_ptr() == pointer
    loaded_base[1, 2] = -1.0
    assert loaded_view[0, 0] == -1.0


def test_requires_grad_is_kept_and_grad_fn_is_dropped(tmp_path):
    leaf = torch.randn(3, requires_grad=True)
    computed = leaf * 2
    plain = torch.randn(3)
    sample = roundtrip(tmp_path, leaf, computed, plain)
    loaded_leaf, loaded_computed, loaded_plain = sample.args
    assert loaded_leaf.requires_grad and loaded_leaf.is_leaf
    assert loaded_computed.requires_grad and loaded_computed.grad_fn is None
    assert torch.equal(loaded_computed.detach(), computed.detach())
    assert not loaded_plain.requires_grad


def test_dynamo_marks_on_tensors_are_not_recorded(tmp_path):
    tensor = torch.randn(4, 3)
    torch._dynamo.mark_dynamic(tensor, 0)
    loaded = roundtrip(tmp_path, tensor).args[0]
    assert not hasattr(loaded, "_dynamo_dynamic_indices")
    assert hasattr(tensor, "_dynamo_dynamic_indices")  # the caller's tensor is untouched


def test_add_snapshots_the_arguments(tmp_path):
    buffer = torch.zeros(3)
    with CorpusWriter(tmp_path / "c", model=MODEL) as writer:
        writer.add(buffer)
        buffer.fill_(5.0)  # a serving loop reusing its input buffer
    assert torch.equal(load_corpus(tmp_path / "c").sample(0).args[0], torch.zeros(3))


def test_snapshot_copies_as_add_does_and_flush_writes_a_partial_shard(tmp_path):
    from guardscope.corpus.values.sample import snapshot

    base = torch.arange(6.0)
    args, kwargs = snapshot((base, base[2:]), {"n": 3})
    base.fill_(0.0)
    assert torch.equal(args[1], torch.arange(2.0, 6.0)) and kwargs == {"n": 3}
    assert args[1].untyped_storage().data_ptr() == args[0].untyped_storage().data_ptr()  # aliasing
    with pytest.raises(SampleError, match=r"args\[0\]"):
        snapshot((object(),), {})
    with CorpusWriter(tmp_path / "c", model=MODEL, shard_size=4) as writer:
        writer.add(torch.ones(1))
        writer.flush()  # on disk before the shard is full
        assert [s.index for s in load_corpus(tmp_path / "c")] == [0]
        writer.flush()  # nothing pending: no empty shard
        writer.add(torch.ones(2))
    corpus = load_corpus(tmp_path / "c")
    assert [s.samples for s in corpus.manifest.shards] == [1, 1]
    assert [tuple(s.args[0].shape) for s in corpus] == [(1,), (2,)]


def test_manifest_contents(tmp_path):
    write(tmp_path / "c", [((torch.ones(2),), {})] * 3, shard_size=2)
    raw = json.loads((tmp_path / "c" / "corpus.json").read_text())
    assert raw["format"] == FORMAT and raw["format_version"] == FORMAT_VERSION
    assert raw["model"] == MODEL and raw["compile"] == {"dynamic": True}
    assert raw["torch_version"] == torch.__version__ and raw["device"] == "cpu"
    assert raw["samples"] == 3
    assert [(s["file"], s["first"], s["samples"]) for s in raw["shards"]] == [
        ("shard-00000.pt", 0, 2),
        ("shard-00001.pt", 2, 1),
    ]
    for shard in raw["shards"]:
        data = (tmp_path / "c" / shard["file"]).read_bytes()
        assert shard["sha256"] == hashlib.sha256(data).hexdigest()
    text = (tmp_path / "c" / "corpus.json").read_text()
    assert text == json.dumps(raw, sort_keys=True, indent=2) + "\n"
    manifest = read_manifest(tmp_path / "c")
    assert isinstance(manifest, Manifest) and manifest.samples == 3
    assert manifest.shards[1] == ShardInfo("shard-00001.pt", 2, 1, raw["shards"][1]["sha256"])


def test_the_manifest_says_which_method_production_compiles(tmp_path):
    """``method="forward"`` (torch.compile(model.forward)) is written and read back; a corpus
    written without it has no such field, and loading its model gives the model itself."""
    from guardscope.corpus.spec import load_model

    write(tmp_path / "plain", [((torch.ones(2),), {})])
    assert "method" not in json.loads((tmp_path / "plain" / "corpus.json").read_text())
    with CorpusWriter(tmp_path / "c", model=MODEL, method="forward") as writer:
        writer.add(torch.ones(2))
    assert read_manifest(tmp_path / "c").method == "forward"
    with pytest.raises(ModelSpecError, match="not a method name"):
        CorpusWriter(tmp_path / "d", model=MODEL, method="forward()")
    (tmp_path / "m.py").write_text("import torch\nbuild = lambda: torch.nn.Linear(2, 2)\n")
    module = load_model("m.py:build", base_dir=tmp_path)
    assert isinstance(module, torch.nn.Linear)
    bound = load_model("m.py:build", base_dir=tmp_path, method="forward")
    assert bound.__name__ == "forward" and isinstance(bound.__self__, torch.nn.Linear)
    assert load_model("m.py:build", base_dir=tmp_path, method="extra_repr").__name__ == "extra_repr"
    with pytest.raises(ModelSpecError, match="compiles the model's method 'generate'.*Linear.*has no such method"):
        load_model("m.py:build", base_dir=tmp_path, method="generate")


# ---- streaming and random access -----------------------------------------------------------


def test_streams_across_shards_in_recorded_order(tmp_path):
    write(
        tmp_path / "c",
        [((torch.full((i + 1,), float(i)),), {"i": i}) for i in range(10)],
        shard_size=3,
    )
    corpus = load_corpus(tmp_path / "c")
    assert len(corpus) == 10
    assert [shard.samples for shard in corpus.manifest.shards] == [3, 3, 3, 1]
    assert [(s.index, s.kwargs["i"], s.args[0].shape[0]) for s in corpus] == [
        (i, i, i + 1) for i in range(10)
    ]
    shards = list(corpus.iter_shards())
    assert [[s.index for s in samples] for _, samples in shards] == [
        [0, 1, 2],
        [3, 4, 5],
        [6, 7, 8],
        [9],
    ]
    for index in (0, 2, 3, 7, 9):
        sample = corpus.sample(index)
        assert sample.index == index and sample.kwargs["i"] == index
    assert corpus.sample(-1).index == 9
    with pytest.raises(IndexError):
        corpus.sample(10)


def test_each_read_builds_fresh_objects(tmp_path):
    write(tmp_path / "c", [((torch.ones(2),), {})])
    corpus = load_corpus(tmp_path / "c")
    assert corpus.sample(0).args[0] is not corpus.sample(0).args[0]


def test_writer_returns_indices_and_close_is_idempotent(tmp_path):
    writer = CorpusWriter(tmp_path / "c", model=MODEL)
    assert [writer.add(i) for i in range(3)] == [0, 1, 2]
    writer.close()
    writer.close()
    with pytest.raises(CorpusError, match="closed"):
        writer.add(4)
    assert len(load_corpus(tmp_path / "c")) == 3


def test_context_manager_keeps_samples_on_exception(tmp_path):
    with pytest.raises(RuntimeError, match="serving crashed"):
        with CorpusWriter(tmp_path / "c", model=MODEL, shard_size=3) as writer:
            for i in range(5):
                writer.add(torch.tensor([i]))
            raise RuntimeError("serving crashed")
    assert [int(s.args[0]) for s in load_corpus(tmp_path / "c")] == [0, 1, 2, 3, 4]


def test_finished_shards_survive_an_unclosed_writer(tmp_path):
    writer = CorpusWriter(tmp_path / "c", model=MODEL, shard_size=2)
    for i in range(5):
        writer.add(i)
    # The process dies here: the two finished shards are on disk and listed in the manifest.
    corpus = load_corpus(tmp_path / "c")
    assert [s.args for s in corpus] == [(0,), (1,), (2,), (3,)]
    assert not [p for p in (tmp_path / "c").iterdir() if p.name.endswith(".tmp")]


def test_existing_corpus_needs_overwrite(tmp_path):
    write(tmp_path / "c", [((1,), {})] * 5, shard_size=2)
    with pytest.raises(CorpusError, match="overwrite=True"):
        CorpusWriter(tmp_path / "c", model=MODEL)
    write(tmp_path / "c", [((2,), {})], overwrite=True)
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["corpus.json", "shard-00000.pt"]
    assert [s.args for s in load_corpus(tmp_path / "c")] == [(2,)]


def test_model_spec_shape_is_checked(tmp_path):
    for spec in ("", "pkg.mod", ":attr", "pkg.mod:"):
        with pytest.raises(ModelSpecError):
            CorpusWriter(tmp_path / "c", model=spec)
    CorpusWriter(tmp_path / "c", model="path/to/file.py:factory").close()


# ---- refusals on write ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "where", "type_name"),
    [
        ((), {"d": [1, 2, lambda: 0]}, r"kwargs\['d'\]\[2\]", "function"),
        ((1, object()), {}, r"args\[1\]", "object"),
        (({"k": {1, 2}},), {}, r"args\[0\]\['k'\]", "set"),
        ((torch.Size([2, 3]),), {}, r"args\[0\]", "Size"),
        ((torch.nn.Parameter(torch.ones(1)),), {}, r"args\[0\]", "Parameter"),
        ((torch.ones(2).to_sparse(),), {}, r"args\[0\]", "sparse"),
    ],
)
def test_unsupported_values_are_refused_with_their_path(tmp_path, args, kwargs, where, type_name):
    with CorpusWriter(tmp_path / "c", model=MODEL) as writer:
        with pytest.raises(SampleError, match=where) as raised:
            writer.add(*args, **kwargs)
        assert type_name in str(raised.value)
        assert writer.add(1) == 0  # the refused call took no index
    assert len(load_corpus(tmp_path / "c")) == 1


def test_dict_keys_must_be_str_or_int(tmp_path):
    with CorpusWriter(tmp_path / "c", model=MODEL) as writer:
        with pytest.raises(SampleError, match=r"kwargs\['m'\] has a key \(1, 2\)"):
            writer.add(m={(1, 2): 0})


def test_cycles_are_refused(tmp_path):
    cyclic: list = [1]
    cyclic.append(cyclic)
    with CorpusWriter(tmp_path / "c", model=MODEL) as writer:
        with pytest.raises(SampleError, match=r"args\[0\]\[1\] contains itself"):
            writer.add(cyclic)


# ---- refusals on read -----------------------------------------------------------------------


def test_missing_directory(tmp_path):
    with pytest.raises(CorpusError, match="does not exist.*corpus.json"):
        load_corpus(tmp_path / "nowhere")


def test_not_a_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(CorpusError, match="not a directory"):
        load_corpus(tmp_path / "file")


def test_directory_without_manifest(tmp_path):
    with pytest.raises(CorpusError, match="no corpus.json"):
        load_corpus(tmp_path)


@pytest.fixture
def corpus_dir(tmp_path) -> pathlib.Path:
    return write(tmp_path / "c", [((torch.arange(4),), {"k": i}) for i in range(5)], shard_size=2)


def edit_manifest(directory: pathlib.Path, edit) -> None:
    path = directory / "corpus.json"
    raw = json.loads(path.read_text())
    edit(raw)
    path.write_text(json.dumps(raw))


def test_manifest_not_json(corpus_dir):
    (corpus_dir / "corpus.json").write_text("{not json")
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_corpus(corpus_dir)


@pytest.mark.parametrize(
    "field",
    [
        "format",
        "format_version",
        "model",
        "compile",
        "torch_version",
        "device",
        "samples",
        "shards",
    ],
)
def test_manifest_missing_field(corpus_dir, field):
    edit_manifest(corpus_dir, lambda raw: raw.pop(field))
    with pytest.raises(ManifestError, match=f"misses the field '{field}'"):
        load_corpus(corpus_dir)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda raw: raw.update(format_version=6), "'format_version' is 6.*upgrade guardscope"),
        (lambda raw: raw.update(format_version=0), "'format_version' is 0.*re-record"),
        (lambda raw: raw.update(format="other"), "'format' is 'other'"),
        (lambda raw: raw.update(samples="5"), "'samples' must be a JSON integer"),
        (lambda raw: raw.update(format_version=True), "'format_version' must be a JSON integer"),
        (lambda raw: raw.update(model="no-colon"), "'model'"),
        (lambda raw: raw.update(samples=6), "'samples' is 6 but the shards hold 5"),
        (lambda raw: raw["shards"][1].pop("sha256"), r"'shards\[1\].sha256'"),
        (lambda raw: raw["shards"][1].update(first=3), r"shards\[1\].first"),
        (lambda raw: raw["shards"][0].update(file="../../etc/passwd"), "not a shard-NNNNN.pt name"),
        (lambda raw: raw.update(shards={}), "'shards' must be a JSON array"),
        (lambda raw: raw.update(method="os.system"), "'method'.*not a method name"),
        (lambda raw: raw.update(method="__init__"), "'method'.*not a method name"),
        (lambda raw: raw.update(method=3), "'method' must be a JSON string"),
    ],
)
def test_manifest_malformed(corpus_dir, edit, message):
    edit_manifest(corpus_dir, edit)
    with pytest.raises(ManifestError, match=message):
        load_corpus(corpus_dir)


def test_missing_shard(corpus_dir):
    (corpus_dir / "shard-00001.pt").unlink()
    corpus = load_corpus(corpus_dir)
    assert corpus.sample(0).index == 0  # only the shard holding the sample is read
    with pytest.raises(ShardError, match="shard-00001.pt is missing"):
        list(corpus)


def test_truncated_shard(corpus_dir):
    path = corpus_dir / "shard-00001.pt"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ShardError, match="shard-00001.pt fails its checksum.*100 bytes"):
        load_corpus(corpus_dir).sample(2)


def test_truncated_shard_with_matching_checksum(corpus_dir):
    path = corpus_dir / "shard-00001.pt"
    data = path.read_bytes()[:-40]
    path.write_bytes(data)
    edit_manifest(
        corpus_dir, lambda raw: raw["shards"][1].update(sha256=hashlib.sha256(data).hexdigest())
    )
    with pytest.raises(ShardError, match="shard-00001.pt"):
        load_corpus(corpus_dir).sample(2)


def test_corrupt_checksum(corpus_dir):
    path = corpus_dir / "shard-00000.pt"
    data = bytearray(path.read_bytes())
    data[-30] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ShardError, match="shard-00000.pt fails its checksum"):
        list(load_corpus(corpus_dir))


def test_sample_count_differs_from_manifest(corpus_dir):
    replace_shard(corpus_dir, 1, encode_shard([{"args": (1,), "kwargs": {}}]))
    with pytest.raises(ShardError, match="holds 1 samples but the manifest lists 2"):
        list(load_corpus(corpus_dir))


def test_shard_of_another_format(corpus_dir):
    replace_shard(corpus_dir, 0, {"weights": torch.ones(2)})
    with pytest.raises(ShardError, match="not a guardscope-corpus shard"):
        list(load_corpus(corpus_dir))


class _Payload:
    """Unpickling this would create the marker file."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def replace_shard(directory: pathlib.Path, number: int, content) -> None:
    """Write ``content`` as shard ``number`` with a manifest checksum that matches it."""
    buffer = io.BytesIO()
    torch.save(content, buffer)
    data = buffer.getvalue()
    (directory / f"shard-{number:05d}.pt").write_bytes(data)
    edit_manifest(
        directory, lambda raw: raw["shards"][number].update(sha256=hashlib.sha256(data).hexdigest())
    )


def test_malicious_shard_is_refused_without_running_code(corpus_dir, tmp_path):
    marker = tmp_path / "PWNED"
    samples = [{"args": (_Payload(marker),), "kwargs": {}}, {"args": (), "kwargs": {}}]
    replace_shard(corpus_dir, 0, {"format": FORMAT, "samples": samples})
    with pytest.raises(ShardError, match="shard-00000.pt was refused by safe loading") as raised:
        list(load_corpus(corpus_dir))
    assert not marker.exists()
    assert "weights_only=False" not in str(raised.value)  # never advise turning the protection off
    # The payload is real: an unsafe load would have run it.
    torch.load(corpus_dir / "shard-00000.pt", weights_only=False)
    assert marker.exists()


# ---- determinism ----------------------------------------------------------------------------


def make_calls():
    generator = torch.Generator().manual_seed(5)
    calls = []
    for i in range(7):
        base = torch.randn(i + 2, 4, generator=generator)
        calls.append(
            (
                (base, base[1:].t()),
                {"edges": torch.empty_strided((2, 0), (0, 1), dtype=torch.long), "meta": {"i": i}},
            )
        )
    return calls


def test_output_is_byte_identical(tmp_path):
    first = write(tmp_path / "one", make_calls(), shard_size=3)
    second = write(tmp_path / "two", make_calls(), shard_size=3)
    names = sorted(os.listdir(first))
    assert (
        names
        == sorted(os.listdir(second))
        == ["corpus.json", "shard-00000.pt", "shard-00001.pt", "shard-00002.pt"]
    )
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


# ---- format 2 details -------------------------------------------------------------------------


def test_storages_stay_distinct_and_views_of_another_dtype_share(tmp_path):
    floats = torch.arange(6.0)
    as_ints = floats.view(torch.int32)  # the same storage seen as another dtype
    other = torch.arange(6.0)
    sample = roundtrip(tmp_path, floats, as_ints, other, floats[2:4])
    loaded_floats, loaded_ints, loaded_other, loaded_slice = sample.args
    assert_same_tensor(loaded_ints, as_ints)
    pointer = loaded_floats.untyped_storage().data_ptr()
    assert loaded_ints.untyped_storage().data_ptr() == pointer
    assert loaded_slice.untyped_storage().data_ptr() == pointer
    # Tensors of distinct storages get distinct storages, each of the recorded size.
    assert loaded_other.untyped_storage().data_ptr() != pointer
    assert loaded_floats.untyped_storage().nbytes() == floats.untyped_storage().nbytes() == 24
    assert loaded_floats._base is None and loaded_slice._base is None
    loaded_ints[0] = 1  # writes go through to the float view, as in the recording
    assert loaded_floats[0].item() != 0.0


def test_storages_are_not_shared_across_samples(tmp_path):
    tensor = torch.ones(3)
    corpus = load_corpus(write(tmp_path / "c", [((tensor,), {}), ((tensor,), {})]))
    first, second = (sample.args[0] for sample in corpus)
    assert first.untyped_storage().data_ptr() != second.untyped_storage().data_ptr()


def test_special_python_values_round_trip(tmp_path):
    key = "__guardscope_tensor__"  # no key is reserved: any str or int key is stored
    values = [math.inf, -math.inf, -0.0, 1e-310, 2**80, -(2**70), "", "\u00e9\U0001f600\x00"]
    sample = roundtrip(
        tmp_path,
        values,
        complex(math.nan, -1.5),
        torch.complex128,
        {key: [1], "T": ("d", "l")},
        ["T", 1],
        torch.device("cuda", 1),
        odd={-1: "minus", 0: None},
    )
    loaded = sample.args[0]
    assert loaded[:2] == [math.inf, -math.inf]
    assert math.copysign(1.0, loaded[2]) == -1.0
    assert loaded[3:] == values[3:]
    assert type(loaded[4]) is int
    assert math.isnan(sample.args[1].real) and sample.args[1].imag == -1.5
    assert sample.args[2] is torch.complex128
    assert sample.args[3] == {key: [1], "T": ("d", "l")}
    assert sample.args[4] == ["T", 1] and type(sample.args[4]) is list
    assert sample.args[5] == torch.device("cuda", 1)
    assert sample.kwargs == {"odd": {-1: "minus", 0: None}}
    assert math.isnan(roundtrip(tmp_path / "nan", math.nan).args[0])


def test_lazy_conjugate_views_are_stored_resolved(tmp_path):
    values = torch.tensor([1 + 2j, 3 - 4j])
    loaded = roundtrip(tmp_path, values.conj(), -values).args
    assert torch.equal(loaded[0], values.conj()) and not loaded[0].is_conj()
    assert torch.equal(loaded[1], -values)


@pytest.mark.filterwarnings("ignore:.*quantized tensor creation functions")
def test_meta_and_quantized_tensors_are_refused(tmp_path):
    with CorpusWriter(tmp_path / "c", model=MODEL) as writer:
        with pytest.raises(SampleError, match=r"args\[0\] is a meta tensor"):
            writer.add(torch.empty(2, device="meta"))
        quantized = torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8)
        with pytest.raises(SampleError, match=r"kwargs\['q'\] is a quantized tensor"):
            writer.add(q=quantized)


def test_map_location_forms(tmp_path):
    base = torch.arange(6.0)
    corpus_path = write(tmp_path / "c", [((base, base[1:]), {})])
    seen = []

    def callable_location(storage, location):
        seen.append(location)
        return storage

    for location in ("cpu", torch.device("cpu"), {"cpu": "cpu"}, callable_location):
        loaded, view = load_corpus(corpus_path, map_location=location).sample(0).args
        assert_same_tensor(view, base[1:])
        assert view.untyped_storage().data_ptr() == loaded.untyped_storage().data_ptr()
    assert seen == ["cpu"]  # once per storage


def test_format_1_corpus_still_loads(tmp_path):
    """A corpus written by the format 1 writer (kept here, in 20 lines) reads as before."""
    directory = tmp_path / "v1"
    directory.mkdir()
    base = torch.arange(12.0).reshape(3, 4)
    samples = [
        {"args": (base, base[1:, ::2]), "kwargs": {"e": torch.empty_strided((2, 0), (0, 1))}},
        {"args": ([1, (2,)],), "kwargs": {"d": {3: torch.float16}}},
    ]
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, "samples": samples}, buffer)
    data = buffer.getvalue()
    (directory / "shard-00000.pt").write_bytes(data)
    manifest = {
        "format": FORMAT,
        "format_version": 1,
        "model": MODEL,
        "compile": {},
        "torch_version": torch.__version__,
        "device": "cpu",
        "samples": 2,
        "shards": [
            {
                "file": "shard-00000.pt",
                "first": 0,
                "samples": 2,
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        ],
    }
    (directory / "corpus.json").write_text(json.dumps(manifest))
    corpus = load_corpus(directory)
    assert corpus.manifest.format_version == 1
    first, second = list(corpus)
    assert_same_tensor(first.args[1], base[1:, ::2])
    assert first.args[1].untyped_storage().data_ptr() == first.args[0].untyped_storage().data_ptr()
    assert first.kwargs["e"].stride() == (0, 1)
    assert second.args == ([1, (2,)],) and second.kwargs == {"d": {3: torch.float16}}
    # A format 2 shard where the manifest says format 1 (or the reverse) is refused.
    replace_shard(directory, 0, encode_shard(samples))
    with pytest.raises(ShardError, match="holds 0 samples|not an args/kwargs pair|shard-00000"):
        list(load_corpus(directory))


def tampered(record_edit=None, **changes):
    """A format 2 shard of one sample holding ``base`` and a view, with its index edited."""
    base = torch.arange(12.0)
    content = encode_shard([{"args": (base, base[2:5]), "kwargs": {}}])
    index = json.loads(content["index"])
    if record_edit is not None:
        record_edit(index["samples"][0][0])  # the args: ["t", base record, view record]
    index.update(changes)
    content["index"] = json.dumps(index)
    return content


def set_field(position, value, record=2):
    def edit(args):
        args[record][position] = value

    return edit


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (tampered(set_field(2, 10)), "beyond its segment"),  # offset 10 + 3 floats > 12
        (tampered(set_field(3, [13])), "beyond its segment"),
        (tampered(set_field(4, [5])), "beyond its segment"),
        (tampered(set_field(2, -1)), "non-negative ints"),
        (tampered(set_field(3, [3, 1])), "one length"),
        (tampered(set_field(3, [2.5])), "non-negative ints"),
        (tampered(set_field(3, [True])), "non-negative ints"),
        (tampered(set_field(3, [2**70])), "non-negative ints"),
        (tampered(set_field(1, 5)), "no such segment"),
        (tampered(set_field(5, "float128")), "unknown dtype"),
        (tampered(set_field(5, "complex128")), "beyond its segment"),  # 5 x 16 bytes > 48
        (tampered(set_field(6, "yes")), "requires_grad must be a bool"),
        (tampered(set_field(7, "nowhere:3", record=1)), "device 'nowhere:3'"),
        (tampered(set_field(7, "meta")), "one segment on two devices"),
        (tampered(lambda args: args[2].pop()), "8 fields"),
        (tampered(lambda args: args.__setitem__(0, "x")), "unknown tag 'x'"),
        (tampered(lambda args: args.append({"a": 1})), "JSON object"),
        (tampered(lambda args: args.append(["d", 1.5, 2])), "dict keys are str or int"),
        (tampered(lambda args: args.append(["d", "k"])), "key, value pairs"),
        (tampered(lambda args: args.append(["c", 1, 2])), "two floats"),
        (tampered(lambda args: args.append(["y", "bogus"])), "unknown dtype"),
        (tampered(lambda args: args.append(["v", "bogus"])), "not a device"),
        (tampered(lambda args: args.append([])), "unknown tag None"),
        (tampered(segments=[[0, 49]]), "within the blob"),
        (tampered(segments=[[40, 10]]), "within the blob"),
        (tampered(segments=[[-1, 4]]), "within the blob"),
        (tampered(segments=[[0, 48, 0]]), "within the blob"),
        (tampered(segments={}), "within the blob"),
        (tampered(samples="x"), "no 'samples' list"),
        (tampered(samples=[["t"]]), "an \\[args, kwargs\\] pair"),
        (tampered(samples=[[["l"], ["d"]]]), "not an args/kwargs pair"),
        ({**tampered(), "index": "{not json"}, "no 'index'"),
        ({**tampered(), "index": b"{}"}, "no 'index'"),
        ({**tampered(), "blob": torch.zeros(48)}, "no 'blob'"),
        ({**tampered(), "blob": torch.zeros(2, 24, dtype=torch.uint8)}, "no 'blob'"),
        ({**tampered(), "format_version": 1}, "not a format 2 shard"),
    ],
)
def test_tampered_format_2_shard_is_refused(tmp_path, content, message):
    directory = write(tmp_path / "c", [((torch.ones(1),), {})])
    replace_shard(directory, 0, content)
    with pytest.raises(ShardError, match=message) as raised:
        list(load_corpus(directory))
    assert "shard-00000.pt" in str(raised.value)


def test_tampered_shard_never_grows_a_storage(tmp_path):
    """torch's set_ would resize a storage to fit an out-of-range view: the bounds check runs
    first, so the blob is never read, nor a storage grown, past the recorded bytes."""
    directory = write(tmp_path / "c", [((torch.ones(1),), {})])
    replace_shard(directory, 0, tampered(set_field(3, [11])))
    with pytest.raises(ShardError, match="beyond its segment of 48 bytes"):
        list(load_corpus(directory))
    replace_shard(directory, 0, tampered(set_field(3, [10])))  # offset 2 + 10 = 12: fits
    base, view = load_corpus(directory).sample(0).args
    assert view.tolist() == [float(i) for i in range(2, 12)]
    assert view.untyped_storage().nbytes() == 48


def test_zero_size_storages_round_trip(tmp_path):
    empty = torch.empty_strided((2, 0), (0, 1), dtype=torch.long)
    offset_empty = torch.arange(5)[5:]
    sample = roundtrip(tmp_path, empty, offset_empty, torch.empty(0, 3).t())
    assert_same_tensor(sample.args[0], empty)
    assert_same_tensor(sample.args[1], offset_empty)
    assert sample.args[2].shape == (3, 0) and sample.args[2].stride() == (1, 3)


# --- production's Dynamo settings ------------------------------------------------------------------


def test_the_writer_records_productions_non_default_dynamo_settings(tmp_path):
    with torch._dynamo.config.patch(recompile_limit=16, automatic_dynamic_shapes=False):
        with CorpusWriter(tmp_path / "c", model="m:build") as writer:
            writer.add(torch.zeros(2))
    with CorpusWriter(tmp_path / "defaults", model="m:build") as writer:  # nothing differs: no field
        writer.add(torch.zeros(2))
    with CorpusWriter(tmp_path / "given", model="m:build", dynamo_config={"specialize_int": True}) as writer:
        writer.add(torch.zeros(2))
    assert read_manifest(tmp_path / "c").dynamo_config == {"automatic_dynamic_shapes": False, "recompile_limit": 16}
    assert "dynamo_config" not in json.loads((tmp_path / "defaults" / "corpus.json").read_text())
    assert read_manifest(tmp_path / "given").dynamo_config == {"specialize_int": True}
    with pytest.raises(CorpusError, match=r"dynamo_config gives recompile_limit the value \"8\""):
        CorpusWriter(tmp_path / "bad", model="m:build", dynamo_config={"recompile_limit": "8"})


@pytest.mark.parametrize("value, words", [
    ([1], "must be an object of setting names and values, got list"),
    ({"recompile limit": 8}, "names a setting \"recompile limit\", which is not a Dynamo config name"),
    ({"recompile_limit": None}, "gives recompile_limit the value null"),
])
def test_a_malformed_dynamo_config_names_the_field(tmp_path, value, words):
    with CorpusWriter(tmp_path / "c", model="m:build") as writer:
        writer.add(torch.zeros(2))
    manifest = json.loads((tmp_path / "c" / "corpus.json").read_text())
    (tmp_path / "c" / "corpus.json").write_text(json.dumps({**manifest, "dynamo_config": value}))
    with pytest.raises(ManifestError, match="field 'dynamo_config'") as raised:
        read_manifest(tmp_path / "c")
    assert words in str(raised.value)
