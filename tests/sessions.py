"""Session-scoped analyses that tests in several folders share (tests/conftest.py registers
them): each is made once per test run, on first use, whichever folder asks first and, when
pytest-xdist runs the suite in several processes, whichever process asks first (:func:`made_once`).
A test that writes into an analysis folder copies it first (:func:`tests.conftest.copy_analysis`)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from filelock import FileLock

import guardscope
from guardscope import pipeline
from guardscope.corpus.reader import load_corpus
from guardscope.corpus.writer import CorpusWriter

from . import real_models
from .paths import FLEET, REPO, SEED_CORPUS, model_spec

REAL_SAMPLES = 40  # requests per real-model corpus in the catalog and fixes tests
EXPORT_SAMPLES = 24  # requests per real-model corpus in the export tests


def copy_analysis(analysis, destination: Path) -> Path:
    """A private copy of an analysis folder, given as an ``Analysis`` or its path (it records where
    its corpus is, so the copy works): what a test that writes into a shared analysis writes into."""
    shutil.copytree(getattr(analysis, "out_dir", analysis), destination)
    return destination


def made_once(tmp_path_factory, name: str, make: Callable[[Path], Any]) -> Any:
    """``make(folder)`` once per test run: under pytest-xdist every worker of the run shares the
    folder, the first to ask makes it and the others wait on its lock, then load its result
    (pickled beside it). What the folder holds is read by tests in several processes at once:
    read it, never write into it. A maker that raised is tried again by the next to ask."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "made-once"
    root.mkdir(exist_ok=True)
    folder, result = root / name, root / f"{name}.pickle"
    with FileLock(str(root / f"{name}.lock")):
        if result.exists():
            return pickle.loads(result.read_bytes())
        shutil.rmtree(folder, ignore_errors=True)  # left by a maker that raised
        folder.mkdir()
        value = make(folder)
        result.write_bytes(pickle.dumps(value))
        return value


@pytest.fixture(scope="session")
def seed_analysis(tmp_path_factory):
    """The committed seed corpus analysed once for the whole session (strict: every sample must
    run). Read it, never write into it: a test that writes copies it first (:func:`copy_analysis`)."""
    return made_once(tmp_path_factory, "seed", lambda folder: guardscope.analyze(SEED_CORPUS, folder / "out", strict=True))


@pytest.fixture(scope="session")
def analyses(tmp_path_factory):
    """One analysis per (real model, dynamic), made on first use: (corpus, Analysis, catalog)."""
    made: dict[tuple[str, bool | None], tuple] = {}

    def make(name: str, dynamic: bool | None, root: Path) -> tuple:
        corpus = real_models.write_corpus(name, root / "corpus", REAL_SAMPLES, dynamic=dynamic)
        analysis = guardscope.analyze(corpus, root / "out")
        return corpus, analysis, json.loads((root / "out" / "catalog.json").read_text())

    def get(name: str, dynamic: bool | None):
        key = (name, dynamic)
        if key not in made:
            made[key] = made_once(tmp_path_factory, f"{name}-{dynamic}", lambda root: make(name, dynamic, root))
        return made[key]

    return get


@pytest.fixture(scope="session")
def fixed(tmp_path_factory, analyses):
    """emit-warmup then verify (warmup and unbacked) per real model, dynamic=None, on a copy of
    its analysis: (corpus, out, Fixes, verification document)."""
    made: dict[str, tuple] = {}

    def make(name: str, root: Path) -> tuple:
        corpus, analysis, _ = analyses(name, None)
        out = copy_analysis(analysis, root / "out")
        fixes = pipeline.emit_warmup(out, only=("warmup", "unbacked"))  # the plans verified here
        document = pipeline.verify(out, artifacts=("warmup", "unbacked"), bundle=False, backend="eager")
        return corpus, out, fixes, document

    def get(name: str):
        if name not in made:
            made[name] = made_once(tmp_path_factory, f"fixed-{name}", lambda root: make(name, root))
        return made[name]

    return get


@pytest.fixture(scope="session")
def emitted(tmp_path_factory):
    """analyze + emit-warmup per real model (dynamic=True), made on first use: (out, export plan)."""
    made: dict[str, tuple] = {}

    def make(name: str, root: Path) -> tuple:
        guardscope.analyze(real_models.write_corpus(name, root / "corpus", EXPORT_SAMPLES, dynamic=True), root / "out")
        return root / "out", pipeline.emit_warmup(root / "out", only=("export",)).export

    def get(name: str):
        if name not in made:
            made[name] = made_once(tmp_path_factory, f"emitted-{name}", lambda root: make(name, root))
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
    def make(folder: Path) -> tuple:
        out = copy_analysis(seed_analysis, folder / "out")
        return out, pipeline.emit_warmup(out)

    return made_once(tmp_path_factory, "seed-fixes", make)


@pytest.fixture(scope="session")
def shipped_fleet(tmp_path_factory):
    """samples/fleet's four replicas merged and analysed (the embedded engine): (merged corpus, out)."""
    def make(folder: Path) -> tuple:
        merged = pipeline.fleet_corpus([str(FLEET)], folder / "merged")
        return merged, pipeline.analyze(merged, folder / "out").out_dir

    return made_once(tmp_path_factory, "shipped-fleet", make)


@pytest.fixture(scope="session")
def seed_verified(tmp_path_factory, seed_fixes):
    """A copy of :func:`seed_fixes` verified as ``guardscope verify`` does by default (every plan
    that would be deployed, each in a child process; the eager backend): (out, verification)."""
    def make(folder: Path) -> tuple:
        out = copy_analysis(seed_fixes[0], folder / "out")
        return out, pipeline.verify(out, backend="eager")

    return made_once(tmp_path_factory, "seed-verified", make)


@pytest.fixture(scope="session")
def probed(tmp_path_factory, seed_analysis):
    """A copy of the session's seed analysis probed with size 1 only: (out, ProbeResult)."""
    def make(folder: Path) -> tuple:
        out = copy_analysis(seed_analysis, folder / "out")
        return out, pipeline.probe(out, values=(1,), pairwise="none")

    return made_once(tmp_path_factory, "probed", make)


@pytest.fixture(scope="session")
def pair(tmp_path_factory, seed_analysis):
    """Two real analyses of the seed corpus: the session's (duck sizing on) and one without duck
    sizing (real torch.compile, about 20 s)."""
    def make(folder: Path) -> Path:
        guardscope.analyze(SEED_CORPUS, folder / "noduck", strict=True, duck_shape=False)
        return folder / "noduck"

    return seed_analysis.out_dir, made_once(tmp_path_factory, "noduck", make)


# --- corpora and small analyses ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def sharded_seed(tmp_path_factory):
    """The seed corpus re-recorded in shards of 40 samples (8 shards)."""
    def make(folder: Path) -> Path:
        source = load_corpus(SEED_CORPUS)
        spec = f"{(REPO / 'samples' / 'gnn' / 'model.py').as_posix()}:small"
        with CorpusWriter(folder / "corpus", model=spec, compile=source.manifest.compile, shard_size=40) as writer:
            for sample in source:
                writer.add(*sample.args, **sample.kwargs)
        return folder / "corpus"

    return made_once(tmp_path_factory, "sharded", make)


REPEATED = 40


@pytest.fixture(scope="session")
def repeats(tmp_path_factory):
    """The seed's first REPEATED requests twice, in shards of 20 (read-only: tests analyse it)."""
    def make(folder: Path) -> Path:
        seed = load_corpus(SEED_CORPUS)
        with CorpusWriter(folder / "corpus", model=f"{SEED_CORPUS.parent / 'model.py'}:small",
                          compile=seed.manifest.compile, shard_size=20) as writer:
            for _ in range(2):
                for index in range(REPEATED):
                    sample = seed.sample(index)
                    writer.add(*sample.args, **sample.kwargs)
        return folder / "corpus"

    return made_once(tmp_path_factory, "repeats", make)


@pytest.fixture(scope="session")
def tiny_plan(tmp_path_factory):
    """A one-graph plan for ``Elementwise`` on 1-D float32 inputs of 2..9 elements (the serving
    runtime's tests; ``serve`` only reads it)."""
    def make(base: Path) -> Path:
        with CorpusWriter(base / "corpus", model=model_spec("Elementwise"),
                          compile={"dynamic": True, "fullgraph": True}) as writer:
            for n in range(2, 10):
                writer.add(torch.randn(n))
        guardscope.analyze(base / "corpus", base / "out", strict=True)
        pipeline.emit_warmup(base / "out")
        return base / "out"

    return made_once(tmp_path_factory, "tiny-plan", make)


@pytest.fixture(scope="session")
def _elementwise_analysis(tmp_path_factory):
    """Read through :func:`elementwise_analysis`, which copies it."""
    def make(root: Path) -> Path:
        with CorpusWriter(root / "corpus", model=model_spec("Elementwise"),
                          compile={"dynamic": True, "fullgraph": True}) as writer:
            for rows in (5, 7, 1, 9, 0, 6):
                writer.add(torch.randn(rows, 4))
        guardscope.analyze(root / "corpus", root / "out")
        return root / "out"

    return made_once(tmp_path_factory, "elementwise", make)


@pytest.fixture
def elementwise_analysis(_elementwise_analysis, tmp_path):
    """A six-sample Elementwise analysis (rows 5, 7, 1, 9, 0, 6), copied for the test to write into."""
    shutil.copytree(_elementwise_analysis, tmp_path / "elementwise")
    return tmp_path / "elementwise"
