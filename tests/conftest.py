from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from guardscope import CorpusWriter

REPO = Path(__file__).resolve().parents[1]
SEED_CORPUS = REPO / "samples" / "gnn" / "corpus"
MODELS = Path(__file__).resolve().parent / "models.py"


def model_spec(name: str) -> str:
    return f"{MODELS}:{name}"


@pytest.fixture
def make_corpus(tmp_path):
    """Write a corpus of (args, kwargs) calls for a model in tests/models.py."""

    def make(name: str, calls, compile_options=None, directory="corpus"):
        path = tmp_path / directory
        with CorpusWriter(path, model=model_spec(name), compile=compile_options or {"dynamic": True}) as writer:
            for args, kwargs in calls:
                writer.add(*args, **kwargs)
        return path

    return make


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    # Emitted warmup modules raise the recompile limit for the process, as documented: no test
    # may leave it raised for the next.
    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.reset()
    yield
    torch._dynamo.config.recompile_limit = limit
    torch._dynamo.reset()


def read_catalog(out: Path) -> dict:
    return json.loads((out / "catalog.json").read_text())
