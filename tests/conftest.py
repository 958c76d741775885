from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

# Before torch is imported (importing Dynamo fixes the inductor cache folder): the test run gets
# inductor cache folders of its own, made by the process that loads this first (pytest-xdist's
# controller, or the one process) and inherited by the workers it starts and their children, so a
# kernel one test compiled is a cache hit for the next (inductor writes its cache entries atomically:
# a reader never sees half a file) and no run reuses kernels an earlier run compiled
# (/tmp/torchinductor_<user> otherwise). Workers share the machine's cores, so
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
    seed_verified,
    sharded_seed,
    shipped_fleet,
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
    _note_budget(item, report)
    if os.environ.get("GUARDSCOPE_SKIP_ABSENT") != "1" or not report.failed:
        return
    # raised in the test, or reported by a command the test ran (CliRunner's output, a child's stderr)
    error = call.excinfo.value if call.excinfo is not None else None
    said = re.search(r"No module named '([\w.]+)'", str(report.longrepr))
    name = error.name if isinstance(error, ModuleNotFoundError) and error.name else said.group(1) if said else ""
    if name.split(".")[0] in OPTIONAL_PACKAGES:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"needs {name}, not installed here")


# The per-test budget (docs/development.md, "How the suite stays fast"): a test whose set-up and call
# take over BUDGET_SECONDS says why in its docstring, in a sentence starting "Slow:". The run ends
# with the list of those that do not (printed, not failed: a loaded machine must not fail a test).
BUDGET_SECONDS = 60.0
_OVER_BUDGET: dict[str, float] = {}


def slow_reason(function) -> str | None:
    """The test's "Slow: ..." sentence, where its docstring has one."""
    found = re.search(r"Slow: [^.]*\.", " ".join((getattr(function, "__doc__", None) or "").split()))
    return found.group(0) if found else None


def _note_budget(item, report) -> None:
    """In the process that runs the test: its set-up and call seconds, marked on the call's report
    (which pytest-xdist hands to the controller) when over the budget without a reason."""
    if report.when == "setup":
        item.setup_seconds = report.duration
    elif report.when == "call":
        seconds = getattr(item, "setup_seconds", 0.0) + report.duration
        if seconds > BUDGET_SECONDS and slow_reason(getattr(item, "function", None)) is None:
            report.user_properties.append(("over_budget_seconds", round(seconds, 1)))


def pytest_runtest_logreport(report):
    for name, value in report.user_properties:
        if name == "over_budget_seconds":
            _OVER_BUDGET[report.nodeid] = value


def pytest_terminal_summary(terminalreporter):
    if not _OVER_BUDGET:
        return
    terminalreporter.section(f"over the {BUDGET_SECONDS:.0f} s per-test budget without a 'Slow:' reason")
    for nodeid, seconds in sorted(_OVER_BUDGET.items(), key=lambda entry: -entry[1]):
        terminalreporter.write_line(f"{seconds:7.1f} s  {nodeid}")
