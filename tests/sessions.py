"""Session-scoped analyses that tests in several folders share (tests/conftest.py registers
them): each is made once, on first use, whichever folder asks first. A test that writes into an
analysis folder copies it first (:func:`tests.conftest.copy_analysis`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import guardscope
from guardscope import pipeline
from guardscope.corpus.reader import load_corpus
from guardscope.corpus.writer import CorpusWriter

from . import real_models
from .paths import REPO, SEED_CORPUS, model_spec

REAL_SAMPLES = 40  # requests per real-model corpus in the catalog and fixes tests
EXPORT_SAMPLES = 24  # requests per real-model corpus in the export tests


def copy_analysis(analysis, destination: Path) -> Path:
    """A private copy of an analysis folder (it records where its corpus is, so the copy works)."""
    shutil.copytree(analysis.out_dir, destination)
    return destination


@pytest.fixture(scope="session")
def seed_analysis(tmp_path_factory):
    """The committed seed corpus analysed once for the whole session (strict: every sample must
    run). Read it, never write into it: a test that writes copies it first (:func:`copy_analysis`)."""
    return guardscope.analyze(SEED_CORPUS, tmp_path_factory.mktemp("seed") / "out", strict=True)


@pytest.fixture(scope="session")
def analyses(tmp_path_factory):
    """One analysis per (real model, dynamic), made on first use: (corpus, Analysis, catalog)."""
    made: dict[tuple[str, bool | None], tuple] = {}

    def get(name: str, dynamic: bool | None):
        key = (name, dynamic)
        if key not in made:
            root = tmp_path_factory.mktemp(f"{name}-{dynamic}")
            corpus = real_models.write_corpus(name, root / "corpus", REAL_SAMPLES, dynamic=dynamic)
            analysis = guardscope.analyze(corpus, root / "out")
            made[key] = (corpus, analysis, json.loads((root / "out" / "catalog.json").read_text()))
        return made[key]

    return get


@pytest.fixture(scope="session")
def fixed(analyses):
    """emit-warmup then verify (warmup and unbacked) per real model, dynamic=None."""
    made: dict[str, tuple] = {}

    def get(name: str):
        if name not in made:
            corpus, analysis, _ = analyses(name, None)
            fixes = pipeline.emit_warmup(analysis.out_dir)
            document = pipeline.verify(analysis.out_dir, artifacts=("warmup", "unbacked"), bundle=False)
            made[name] = (corpus, analysis.out_dir, fixes, document)
        return made[name]

    return get


@pytest.fixture(scope="session")
def emitted(tmp_path_factory):
    """analyze + emit-warmup per real model (dynamic=True), made on first use: (out, export plan)."""
    made: dict[str, tuple] = {}

    def get(name: str):
        if name not in made:
            root = tmp_path_factory.mktemp(name)
            guardscope.analyze(real_models.write_corpus(name, root / "corpus", EXPORT_SAMPLES, dynamic=True), root / "out")
            fixes = pipeline.emit_warmup(root / "out")
            made[name] = (root / "out", fixes.export)
        return made[name]

    return get


@pytest.fixture(scope="module")
def seed_report(tmp_path_factory, seed_analysis):
    """The session's seed analysis copied for one test module, with its report written."""
    from guardscope.report.page import write_report

    out = copy_analysis(seed_analysis, tmp_path_factory.mktemp("seed-report") / "out")
    write_report(out)
    return out


@pytest.fixture(scope="session")
def seed_fixes(tmp_path_factory, seed_analysis):
    """A copy of the session's seed analysis with emit-warmup run: (out, Fixes)."""
    out = copy_analysis(seed_analysis, tmp_path_factory.mktemp("fixes") / "out")
    fixes = pipeline.emit_warmup(out)
    return out, fixes


@pytest.fixture(scope="session")
def probed(tmp_path_factory, seed_analysis):
    """A copy of the session's seed analysis probed with size 1 only: (out, ProbeResult)."""
    out = copy_analysis(seed_analysis, tmp_path_factory.mktemp("probe") / "out")
    result = pipeline.probe(out, values=(1,), pairwise="none")
    return out, result


@pytest.fixture(scope="session")
def pair(tmp_path_factory, seed_analysis):
    """Two real analyses of the seed corpus: the session's (duck sizing on) and one without duck
    sizing (real torch.compile, about 20 s)."""
    root = tmp_path_factory.mktemp("diff")
    guardscope.analyze(SEED_CORPUS, root / "noduck", strict=True, duck_shape=False)
    return seed_analysis.out_dir, root / "noduck"


# --- corpora and small analyses ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def sharded_seed(tmp_path_factory):
    """The seed corpus re-recorded in shards of 40 samples (8 shards)."""
    path = tmp_path_factory.mktemp("sharded") / "corpus"
    source = load_corpus(SEED_CORPUS)
    spec = f"{(REPO / 'samples' / 'gnn' / 'model.py').as_posix()}:small"
    with CorpusWriter(path, model=spec, compile=source.manifest.compile, shard_size=40) as writer:
        for sample in source:
            writer.add(*sample.args, **sample.kwargs)
    return path


REPEATED = 40


@pytest.fixture(scope="session")
def repeats(tmp_path_factory):
    """The seed's first REPEATED requests twice, in shards of 20 (read-only: tests analyse it)."""
    seed = load_corpus(SEED_CORPUS)
    path = tmp_path_factory.mktemp("repeats") / "corpus"
    with CorpusWriter(path, model=f"{SEED_CORPUS.parent / 'model.py'}:small",
                      compile=seed.manifest.compile, shard_size=20) as writer:
        for _ in range(2):
            for index in range(REPEATED):
                sample = seed.sample(index)
                writer.add(*sample.args, **sample.kwargs)
    return path


@pytest.fixture(scope="session")
def tiny_plan(tmp_path_factory):
    """A one-graph plan for ``Elementwise`` on 1-D float32 inputs of 2..9 elements (the serving
    runtime's tests; ``serve`` only reads it)."""
    base = tmp_path_factory.mktemp("tiny-plan")
    with CorpusWriter(base / "corpus", model=model_spec("Elementwise"),
                      compile={"dynamic": True, "fullgraph": True}) as writer:
        for n in range(2, 10):
            writer.add(torch.randn(n))
    guardscope.analyze(base / "corpus", base / "out", strict=True)
    pipeline.emit_warmup(base / "out")
    return base / "out"


@pytest.fixture(scope="session")
def _elementwise_analysis(tmp_path_factory):
    """Read through :func:`elementwise_analysis`, which copies it."""
    root = tmp_path_factory.mktemp("fidelity")
    with CorpusWriter(root / "corpus", model=model_spec("Elementwise"),
                      compile={"dynamic": True, "fullgraph": True}) as writer:
        for rows in (5, 7, 1, 9, 0, 6):
            writer.add(torch.randn(rows, 4))
    out = root / "out"
    guardscope.analyze(root / "corpus", out)
    return out


@pytest.fixture
def elementwise_analysis(_elementwise_analysis, tmp_path):
    """A six-sample Elementwise analysis (rows 5, 7, 1, 9, 0, 6), copied for the test to write into."""
    shutil.copytree(_elementwise_analysis, tmp_path / "elementwise")
    return tmp_path / "elementwise"
