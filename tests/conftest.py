from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

# Before torch is imported (importing Dynamo fixes the inductor cache folder): each test process, a
# pytest-xdist worker or the one process, gets inductor cache folders of its own, which its child
# processes inherit, so no worker reads another's half-written kernels and no run reuses kernels an
# earlier run compiled (/tmp/torchinductor_<user> otherwise). Workers share the machine's cores, so
# each keeps torch to one intra-op thread (its children too) instead of spinning a thread per core.
_OWN_CACHE: list[str] = []
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    _OWN_CACHE.append(tempfile.mkdtemp(prefix="guardscope-tests-inductor-"))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _OWN_CACHE[0]
    os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_OWN_CACHE[0], "triton"))
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

from guardscope import CorpusWriter

from .paths import MODELS, REPO, SEED_CORPUS, model_spec  # noqa: F401  (tests import them from here)

# Shared session analyses, registered here so every folder (unit, integration, subprocess) sees them.
from .sessions import (  # noqa: F401
    _elementwise_analysis,
    analyses,
    copy_analysis,
    elementwise_analysis,
    emitted,
    fixed,
    pair,
    probed,
    repeats,
    seed_analysis,
    seed_fixes,
    seed_report,
    sharded_seed,
    tiny_plan,
)


# The slowest folders first: pytest-xdist's work stealing then ends the run on quick unit tests
# instead of leaving one worker alone with a long subprocess test at the end.
FOLDER_ORDER = ("subprocess", "integration", "unit")


def pytest_collection_modifyitems(items):
    def folder(item) -> int:
        parts = Path(str(item.path)).relative_to(Path(__file__).parent).parts
        return FOLDER_ORDER.index(parts[0]) if parts[0] in FOLDER_ORDER else len(FOLDER_ORDER)

    items.sort(key=folder)  # stable: each folder keeps its collection order


def pytest_unconfigure(config):
    for folder in _OWN_CACHE:
        shutil.rmtree(folder, ignore_errors=True)


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


@pytest.fixture
def small_corpus(tmp_path):
    """Three calls of Elementwise (4, 5 and 6 rows of 3), a corpus the CLI tests run on."""
    with CorpusWriter(tmp_path / "corpus", model=model_spec("Elementwise"), compile={"dynamic": True}) as writer:
        for rows in (4, 5, 6):
            writer.add(torch.randn(rows, 3))
    return tmp_path / "corpus"


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    # Emitted warmup modules raise the recompile limit, and unbacked.configure() turns duck sizing
    # off, for the thread that runs them, as documented: no test may leave either for the next (a
    # warmup planned without duck sizing needs other graphs than production compiles).
    import torch.fx.experimental._config as fx_config

    limit, duck = torch._dynamo.config.recompile_limit, fx_config.use_duck_shape
    torch._dynamo.reset()
    yield
    torch._dynamo.config.recompile_limit = limit
    fx_config.use_duck_shape = duck
    torch._dynamo.reset()


def read_catalog(out: Path) -> dict:
    return json.loads((out / "catalog.json").read_text())


# A machine without the test extra's optional packages (the GPU machine: no pyarrow, torch_geometric,
# hypothesis...) runs what it can: with GUARDSCOPE_SKIP_ABSENT=1 a test that stops on importing one
# of these is reported as skipped, naming the package, instead of failed. Off by default: CI and
# the torch matrix install the whole extra, and there a missing package is a failure.
OPTIONAL_PACKAGES = {"pyarrow", "torch_geometric", "hypothesis", "duckdb", "dask", "distributed", "transformers",
                     "xdist"}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("GUARDSCOPE_SKIP_ABSENT") != "1" or not report.failed:
        return
    # raised in the test, or reported by a command the test ran (CliRunner's output, a child's stderr)
    error = call.excinfo.value if call.excinfo is not None else None
    said = re.search(r"No module named '([\w.]+)'", str(report.longrepr))
    name = error.name if isinstance(error, ModuleNotFoundError) and error.name else said.group(1) if said else ""
    if name.split(".")[0] in OPTIONAL_PACKAGES:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"needs {name}, not installed here")
