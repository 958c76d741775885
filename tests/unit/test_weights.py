"""The shape of the recorded model's weights in the manifest, and the warning when an analysis
builds another model (guardscope.corpus.storage.weights). No compile runs here."""

from __future__ import annotations

import functools
import json

import pytest
import torch

import guardscope
from guardscope.corpus.storage.format import ModelPrint, read_manifest
from guardscope.corpus.storage.weights import model_print, module_of, recorded_model_warning
from guardscope.errors import CorpusError, ManifestError, ServeError


def _mlp(hidden: int = 8, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    model = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))
    model.register_buffer("scale", torch.ones(2))
    return model.to(dtype)


def test_the_print_is_the_modules_whatever_wraps_it_and_wherever_it_lives():
    model = _mlp()
    printed = model_print(model)
    assert printed == ModelPrint("Sequential", 5, 4 * 8 + 8 + 8 * 2 + 2 + 2, ("float32",), printed.sha256)

    @functools.wraps(model.forward)
    def decorated(*args):
        return model(*args)

    # torch.compile's wrappers: tests/integration/test_recorded_model.py
    for callable_ in (model.forward, decorated):
        assert module_of(callable_) is model and model_print(callable_) == printed
    assert model_print(_mlp().to("meta")) == printed  # the device is left out
    assert model_print(lambda x: x) is None and module_of(object()) is None
    assert model_print(torch.nn.LazyLinear(3)) is None  # no sizes before its first call


def test_another_configuration_or_dtype_is_named_in_the_warning():
    recorded = model_print(_mlp())
    assert recorded_model_warning(recorded, _mlp()) is None
    assert recorded_model_warning(None, _mlp()) is None
    wider = recorded_model_warning(recorded, _mlp(hidden=16))
    assert wider.startswith("the corpus was recorded from Sequential (60 elements in 5 tensors, float32), "
                            "but the model spec gives Sequential (116 elements in 5 tensors, float32): "
                            "their sizes differ")
    assert "--model SPEC" in wider
    assert "their dtypes differ" in recorded_model_warning(recorded, _mlp(dtype=torch.bfloat16))
    renamed = torch.nn.Sequential(*_mlp())
    renamed.register_buffer("gain", torch.ones(2))
    assert "their tensor names, sizes or dtypes differ" in recorded_model_warning(recorded, renamed)
    # The same dtypes in all, swapped between layers: the totals agree, the tensors do not.
    swapped, mixed = _mlp(), _mlp()
    swapped[0].half()
    mixed[2].half()
    assert "their tensor names, sizes or dtypes differ" in recorded_model_warning(model_print(swapped), mixed)
    assert "their classes and sizes differ" in recorded_model_warning(recorded, torch.nn.Linear(4, 8))

    # Another class with the same weights (its own forward, so perhaps other code): named.
    class Scaled(torch.nn.Linear):
        def forward(self, x):
            return super().forward(x) * 2

    plain = torch.nn.Linear(4, 8)
    assert "their classes differ, so" in recorded_model_warning(model_print(plain), Scaled(4, 8))


def test_the_manifest_keeps_the_print_and_refuses_a_malformed_one(tmp_path):
    model = _mlp()
    with guardscope.CorpusWriter(tmp_path / "c", model="pkg.mod:build", recorded_from=model.forward) as writer:
        writer.add(torch.ones(3, 4))
    assert read_manifest(tmp_path / "c").recorded_model == model_print(model)
    raw = json.loads((tmp_path / "c" / "corpus.json").read_text())
    assert raw["recorded_model"]["class"] == "Sequential" and "weight" not in json.dumps(raw)
    printed = raw["recorded_model"]
    for bad, words in (({"class": "X"}, "exactly the keys class, tensors, elements, dtypes, sha256"),
                       ({**printed, "tensors": -1}, "'tensors' must be an integer >= 0, got -1"),
                       ({**printed, "class": ""}, "'class' must be a class name"),
                       ({**printed, "dtypes": ["x", "x"]}, "sorted list of distinct dtype names"),
                       ({**printed, "sha256": "A" * 64}, "64 lowercase hex digits")):
        (tmp_path / "c" / "corpus.json").write_text(json.dumps({**raw, "recorded_model": bad}))
        with pytest.raises(ManifestError, match=f"field 'recorded_model' .*{words}"):
            read_manifest(tmp_path / "c")
    # Without recorded_from the manifest says nothing of the model's weights.
    with guardscope.CorpusWriter(tmp_path / "d", model="pkg.mod:build") as writer:
        writer.add(torch.ones(3, 4))
    assert "recorded_model" not in json.loads((tmp_path / "d" / "corpus.json").read_text())


def test_recorded_from_must_be_a_model(tmp_path):
    from guardscope.runtime import TrafficRecorder

    with pytest.raises(CorpusError, match="recorded_from must be the served model .* got a str"):
        guardscope.CorpusWriter(tmp_path / "c", model="pkg.mod:build", recorded_from="model")
    with pytest.raises(ServeError, match="recorded_from must be the served model"):
        TrafficRecorder(tmp_path / "t", model="pkg.mod:build", recorded_from=lambda x: x)


def test_wrap_keeps_the_wrapped_modules_print(tmp_path):
    from guardscope.runtime import TrafficRecorder

    model = _mlp()
    traffic = TrafficRecorder(tmp_path / "t", model="pkg.mod:build")
    model.forward = traffic.wrap(model.forward)
    model(torch.ones(3, 4))
    traffic.close()
    manifest = read_manifest(tmp_path / "t")
    assert manifest.method == "forward" and manifest.recorded_model == model_print(model)
