"""Issue 37: a guard-only replay checks the signature records of a call template over columns
(guardscope.replay.column_check) instead of record by record, and the catalog is the same. Every
model the suite has, recorded as a traffic log (format 5) with repeats, is analysed both ways:
the seed GNN, the text classifier, PyG, the vision CNN (``fullgraph=True``: the guard-only replay,
where the columns are used, and shown to be used), HF GPT-2 and BERT (``fullgraph=True``, but their
tensors sit in a wrapper frame's ``**kwargs``: checked one by one), the graph-break model
and generate() traffic (``fullgraph=False`` and ``dynamic=None``, production's defaults: every
call runs there, so no column is checked, and the test says so)."""

from __future__ import annotations

import json
import random

import pytest
import torch

import guardscope
from guardscope.corpus.reader import load_corpus
from guardscope.corpus.writer import CorpusWriter
from guardscope.replay import session

from .. import object_models as om
from .. import real_models
from ..paths import SEED_CORPUS as SEED, model_spec



def _calls(name: str) -> tuple[str, dict, list[tuple[tuple, dict]]]:
    """A model's spec, compile options and calls (each distinct call twice, shuffled: repeats
    of a signature in and across rows, as a replica records them)."""
    if name == "seed":
        corpus = load_corpus(SEED)
        spec = str((SEED / corpus.manifest.model.split(":")[0]).resolve()) + ":" + corpus.manifest.model.split(":")[1]
        calls = [(sample.args, sample.kwargs) for sample in corpus][:120]
        compile_options = dict(corpus.manifest.compile)
    elif name == "text_classifier":
        rng = random.Random(3)
        calls = []
        for _ in range(40):
            batch, length = rng.choice([1, 2, 4]), rng.choice([1, 3, 5, 8, 13])
            mask = torch.zeros(batch, length, dtype=torch.bool)
            calls.append(((torch.randint(0, 100, (batch, length)), mask), {}))
        spec, compile_options = model_spec("TextClassifier"), {"dynamic": None, "fullgraph": True}
    else:
        _, requests = real_models.MODELS[name]
        spec = f"{real_models.__file__}:{name}"
        calls = requests(30, seed=2)
        compile_options = {"dynamic": None, "fullgraph": name != "gated"}
    doubled = calls + calls
    random.Random(7).shuffle(doubled)
    return spec, compile_options, doubled


def _analysed(corpus, out, columns: bool):
    session.COLUMN_CHECKS = columns
    try:
        analysis = guardscope.analyze(corpus, out)
    finally:
        session.COLUMN_CHECKS = True
    return analysis, json.loads(analysis.catalog_path.read_text())


def _same(tmp_path, corpus) -> tuple[dict, dict | None]:
    """The log analysed with column checks, and compared with its row-by-row analysis wherever a
    column check served a record. Where none did (the callers assert which models those are),
    every record took the row-by-row path already, and a second analysis would replay the same
    code: it is not run."""
    columns, got = _analysed(corpus, tmp_path / "columns", columns=True)
    if columns.column_checks is None:
        return got, None
    rows, expected = _analysed(corpus, tmp_path / "rows", columns=False)
    assert rows.column_checks is None
    expected.pop("corpus"), got.pop("corpus")
    # Compile samples, topologies with their members and counts, failures, dimensions: all of it.
    assert got == expected
    return got, columns.column_checks


@pytest.mark.parametrize("name", ["seed", "text_classifier", "gpt2", "bert", "gcn", "cnn", "gated"])
def test_columns_give_the_row_by_row_catalog(tmp_path, name):
    spec, compile_options, calls = _calls(name)
    with CorpusWriter(tmp_path / "log", model=spec, compile=compile_options, keep="signatures", log="parquet",
                      shard_size=16) as writer:
        for args, kwargs in calls:
            writer.add(*args, **kwargs)
    assert load_corpus(tmp_path / "log").manifest.format_version == 5
    catalog, checks = _same(tmp_path, tmp_path / "log")
    assert catalog["summary"]["compile_samples"]
    if name in ("gpt2", "bert"):
        # transformers' decorators make forward's first frame a wrapper whose tensors sit in its
        # **kwargs dict, not in locals of their own: those records are checked one by one.
        assert catalog["replay_mode"] == "guards" and checks is None
    elif compile_options["fullgraph"]:
        assert catalog["replay_mode"] == "guards"
        # The columns did the work: the repeats found their graph without Dynamo's check.
        assert checks is not None and checks["samples"] >= len(calls) // 4, checks
    else:
        assert catalog["replay_mode"] == "full" and checks is None


def test_generate_traffic_gives_the_row_by_row_catalog(tmp_path):
    requests = om.prompts(3, seed=5, longest=24, max_batch=2, max_new=3)
    om.record_generation(str(tmp_path / "log"), "gpt2_forward", requests, keep="signatures", log="parquet")
    catalog, checks = _same(tmp_path, tmp_path / "log")
    # Its calls hold a KV cache object (no flat call template) and run in full: no column checks.
    assert catalog["summary"]["compile_samples"] and checks is None
