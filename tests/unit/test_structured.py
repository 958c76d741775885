"""Objects in the corpus (guardscope.corpus.values.structured): stored as a registered type name and a
state, rebuilt through the registry only; transformers caches, PyG batches, named tuples,
dataclasses and the user's own classes."""

from __future__ import annotations

import collections
import dataclasses
import sys
import zlib

import pytest
import torch

import guardscope
from guardscope.corpus.reader import load_corpus
from guardscope.corpus.signatures.signature import signature
from guardscope.corpus.values.structured import Structured
from guardscope.corpus.writer import CorpusWriter
from guardscope.errors import SampleError, ShardError

from ..builders import replace_shard

Pair = collections.namedtuple("Pair", ["left", "right"])


@dataclasses.dataclass
class Options:
    scale: torch.Tensor
    steps: int = 3


class Opaque:
    """A class nobody registered."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t


class Box:
    def __init__(self, t: torch.Tensor, label: str) -> None:
        self.t, self.label = t, label


class Fragile:
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t


guardscope.register_type(Box)
guardscope.register_type(Fragile, lambda value: {"t": value.t},
                         lambda state: (_ for _ in ()).throw(RuntimeError("cannot rebuild a Fragile")))


def _dynamic_cache(batch: int = 2, length: int = 5, layers: int = 2):
    from transformers import DynamicCache

    cache = DynamicCache()
    for layer in range(layers):
        cache.update(torch.randn(batch, 2, length, 4), torch.randn(batch, 2, length, 4), layer)
    return cache


def _batch():
    from torch_geometric.data import Batch, Data

    graphs = [Data(x=torch.randn(3, 4), edge_index=torch.tensor([[0, 1], [1, 2]])),
              Data(x=torch.randn(1, 4), edge_index=torch.zeros(2, 0, dtype=torch.long))]
    return Batch.from_data_list(graphs)


def _record(path, calls, **options):
    with CorpusWriter(path, model="m.py:f", **options) as writer:
        for args, kwargs in calls:
            writer.add(*args, **kwargs)
    return load_corpus(path)


@pytest.mark.parametrize("keep", ["all", "signatures"])
def test_objects_round_trip_with_their_structure_and_signature(tmp_path, keep):
    cache, batch = _dynamic_cache(), _batch()
    calls = [
        ((Pair(torch.ones(2), 3), Options(torch.zeros(3))), {"box": Box(torch.arange(4), "a")}),
        ((batch,), {}),
        ((), {"input_ids": torch.ones(2, 1, dtype=torch.long), "cache": cache}),
    ]
    expected = [signature(args, kwargs, inference=False) for args, kwargs in calls]
    corpus = _record(tmp_path / "c", calls, keep=keep, full_per_signature=0 if keep == "signatures" else 1)
    assert corpus.manifest.format_version == 4
    samples = list(corpus)
    assert [signature(s.args, s.kwargs, inference=False) for s in samples] == expected
    pair, options = samples[0].args
    assert type(pair) is Pair and pair.right == 3 and type(options) is Options and options.steps == 3
    assert type(samples[0].kwargs["box"]) is Box and samples[0].kwargs["box"].label == "a"
    rebuilt = samples[1].args[0]
    assert type(rebuilt) is type(batch) and rebuilt.num_graphs == 2
    assert rebuilt.ptr.shape == batch.ptr.shape and list(rebuilt._store._mapping) == list(batch._store._mapping)
    loaded = samples[2].kwargs["cache"]
    assert type(loaded) is type(cache) and len(loaded.layers) == 2
    assert [type(layer) for layer in loaded.layers] == [type(layer) for layer in cache.layers]
    assert loaded.layers[1].keys.shape == (2, 2, 5, 4) and loaded.get_seq_length() == 5
    if keep == "all":
        assert torch.equal(loaded.layers[0].keys, cache.layers[0].keys)
        assert torch.equal(rebuilt.x, batch.x) and rebuilt.to_data_list()[1].x.shape == (1, 4)


def test_a_cache_recorded_by_signature_holds_no_tensor_data(tmp_path):
    big = _dynamic_cache(batch=4, length=256, layers=4)  # 4 MiB of keys and values
    _record(tmp_path / "c", [((), {"cache": big})], keep="signatures", full_per_signature=0)
    shard = (tmp_path / "c" / "shard-00000.pt").stat().st_size
    assert shard < 16_000


def test_static_address_marks_survive(tmp_path):
    from transformers import StaticCache

    from transformers import GPT2Config
    cache = StaticCache(config=GPT2Config(n_layer=1, n_embd=8, n_head=2), max_cache_len=6)
    cache.update(torch.randn(1, 2, 2, 4), torch.randn(1, 2, 2, 4), 0)
    marked = cache.layers[0].keys.__dict__.get("_dynamo_static_input_type")
    assert marked is not None
    loaded = _record(tmp_path / "c", [((cache,), {})]).sample(0).args[0]
    assert loaded.layers[0].keys.__dict__.get("_dynamo_static_input_type") == marked


def test_an_unregistered_type_is_refused_naming_register_type(tmp_path):
    with CorpusWriter(tmp_path / "c", model="m.py:f") as writer:
        with pytest.raises(SampleError, match=r"kwargs\['request'\].*Opaque.*register_type"):
            writer.add(torch.ones(1), request=Opaque(torch.ones(1)))
        assert len(writer) == 0
    assert load_corpus(tmp_path / "c").manifest.samples == 0


def _forged_corpus(path, name):
    """A corpus whose one sample names the type ``name``, written as a shard would be."""
    _record(path, [((Box(torch.ones(1), "x"),), {})])
    from guardscope.corpus.storage.shards import encode_shard

    replace_shard(path, encode_shard([{"args": (Structured(name, [{"t": torch.ones(1), "label": "x"}]),),
                                       "kwargs": {}}], 4))
    return path


@pytest.mark.parametrize("name", ["os.system", "namedtuple:os.system", "pytree:subprocess.Popen",
                                  "guardscope_never_imported.Payload", "namedtuple:guardscope_never_imported.P"])
def test_a_shard_naming_an_unregistered_type_is_refused_with_nothing_imported_or_run(tmp_path, name, monkeypatch):
    ran = []
    monkeypatch.setattr("os.system", lambda *a: ran.append(a))
    corpus = load_corpus(_forged_corpus(tmp_path / "c", name))
    with pytest.raises(ShardError, match=rf"sample 0.*{name}"):
        list(corpus)
    assert ran == [] and "guardscope_never_imported" not in sys.modules


def test_a_codec_whose_from_state_raises_names_the_sample_and_the_type(tmp_path):
    corpus = _record(tmp_path / "c", [((torch.ones(1),), {}), ((Fragile(torch.ones(2)),), {})])
    with pytest.raises(ShardError, match=r"sample 1.*Fragile.*cannot rebuild a Fragile"):
        list(corpus)


def test_a_signature_record_of_an_unknown_type_is_refused_when_read(tmp_path):
    _record(tmp_path / "c", [((Box(torch.ones(1), "x"),), {})] * 2, keep="signatures", full_per_signature=0)
    path = tmp_path / "c" / "shard-00000.pt"
    content = torch.load(path, weights_only=True)
    index = zlib.decompress(content["index"].numpy().tobytes()).decode().replace(
        "test_structured.Box", "os.system")
    content["index"] = torch.frombuffer(bytearray(zlib.compress(index.encode())), dtype=torch.uint8)
    replace_shard(tmp_path / "c", content)
    with pytest.raises(ShardError, match=r"sample 0.*os\.system.*not registered"):
        list(load_corpus(tmp_path / "c"))


def test_descriptions_name_the_parts_users_know():
    from guardscope.replay.arguments import describe, lookup

    cache = _dynamic_cache(layers=1)
    meta = describe({"cache": cache, "batch": _batch(), "pair": Pair(torch.ones(1), 2)}, 0, None, None)
    paths = [path for path, _ in meta.tensors]
    assert "cache.layers[0].keys" in paths and "batch.x" in paths and "batch.ptr" in paths and "pair.left" in paths
    assert ("cache", "type:transformers.DynamicCache") in meta.scalars
    assert lookup({"cache": cache}, "cache.layers[0].values") is cache.layers[0].values
    assert lookup({"pair": Pair(torch.ones(1), 2)}, "pair.right") == 2


def test_dim_words_say_what_a_library_dim_is():
    from guardscope.text import dim_words

    assert dim_words("cache.layers[3].keys.size()[2]") == "cache length (cache.layers[3].keys dim 2)"
    assert dim_words("cache.layers[0].values.size()[0]") == "batch size (cache.layers[0].values dim 0)"
    assert dim_words("data.ptr.size()[0]") == "number of graphs + 1 (data.ptr dim 0)"
    assert dim_words("x.size()[0]") == "x dim 0"


def test_cache_guards_are_classified():
    from guardscope.catalog.classify import classify_reason

    failure = classify_reason("0/0: kwargs['cache'].layers[0].is_initialized == False")
    assert failure.kind.value == "constant_value"
    failure = classify_reason("0/1: tensor 'kwargs['cache'].layers[0].keys' size mismatch at index 2. expected 5, actual 6")
    assert failure.kind.value == "size_mismatch"


def test_a_cache_flag_guard_is_a_prefill_or_decode_fact():
    from guardscope.catalog.facts import guard_atoms, render_facts
    from guardscope.text import flag_words

    lines = ["FALSE_MATCH: L['cache'].layers[0].is_initialized == False  # if not self.is_initialized",
             "FALSE_MATCH: L['cache'].layers[1].is_initialized == False  # if not self.is_initialized"]
    atoms = guard_atoms(lines)
    assert atoms == {("flag", "cache.layers[0].is_initialized", False), ("flag", "cache.layers[1].is_initialized", False)}
    assert render_facts(atoms, set(), {}, {}) == ("prefill: cache is empty (cache.layers[0].is_initialized is False)",)
    assert flag_words("cache.layers[2].is_initialized", True).startswith("decode step: cache holds tokens")
    assert flag_words("request.ready", True) == "request.ready is True"


def test_export_of_a_cache_input_says_the_remedy():
    from guardscope.fixes.exporting import explain

    text = explain("ValueError", "Unsupported input type <class 'transformers.cache_utils.DynamicCache'>. Export "
                   "only supports pytree containers", None)
    assert "use_cache=False" in text and "TorchExportableModuleWithStaticCache" in text
