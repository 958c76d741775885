"""A corpus keeps the shape of the model it was recorded from; an analysis that builds another
model (here the seed's full configuration instead of the small one that served) says so."""

from __future__ import annotations

import torch

import guardscope
from guardscope import pipeline
from guardscope.corpus.reader import load_corpus
from guardscope.corpus.storage.weights import model_print

from ..conftest import REPO, SEED_CORPUS

SEED_MODEL = REPO / "samples" / "gnn" / "model.py"


def _seed_model(name: str) -> torch.nn.Module:
    from guardscope.corpus.spec import load_model

    return load_model(f"{SEED_MODEL}:{name}")


def test_an_analysis_of_another_model_than_the_recorded_one_warns(tmp_path):
    served = _seed_model("small")
    compiled = torch.compile(served, backend="eager", dynamic=True)
    seed = load_corpus(SEED_CORPUS)
    with guardscope.CorpusWriter(tmp_path / "c", model=f"{SEED_MODEL}:small", compile={"dynamic": True},
                                 recorded_from=compiled) as writer:  # torch.compile's wrapper: the module's print
        for index in range(3):
            writer.add(*seed.sample(index).args, **seed.sample(index).kwargs)
    assert load_corpus(tmp_path / "c").manifest.recorded_model == model_print(served)

    same = guardscope.analyze(tmp_path / "c", tmp_path / "same", model=f"{SEED_MODEL}:small")
    assert not [w for w in same.warnings if "recorded from" in w]
    # The corpora guardscope derives from it (the warmup samples) keep the print.
    pipeline.emit_warmup(tmp_path / "same")
    assert load_corpus(tmp_path / "same" / "warmup").manifest.recorded_model == model_print(served)
    other = guardscope.analyze(tmp_path / "c", tmp_path / "other", model=f"{SEED_MODEL}:full")
    [warning] = [w for w in other.warnings if "recorded from" in w]
    assert warning.startswith("the corpus was recorded from MessagePassingModel (5,444 elements in 14 tensors, "
                              "float32), but the model spec gives MessagePassingModel (18,928,132 elements")
    assert "their sizes differ" in warning
    assert model_print(torch.compile(served.forward)) == model_print(served)
