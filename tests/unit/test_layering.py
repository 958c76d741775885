"""The package's shape, checked on every CI run (docs/architecture.md): imports go only downward
through the layers declared in pyproject.toml (imports inside functions included), no module
imports itself through a circle, the plan names have one definition, and only ``store`` names the
analysis folder's files or reads and writes files."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import networkx as nx
import pytest
from importlinter import configuration
from importlinter.application.use_cases import lint_imports

from guardscope import plans, store

from ..conftest import REPO

PACKAGE = REPO / "guardscope"
configuration.configure()  # import-linter's readers and contract types, as its CLI sets them up


def sources(root: Path = PACKAGE):
    for path in sorted(root.rglob("*.py")):
        yield path, ast.parse(path.read_text(), filename=str(path))


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# --- imports ---------------------------------------------------------------------------------------


def test_layering_contract_holds():
    assert lint_imports(config_filename=str(REPO / "pyproject.toml"), cache_dir=None, no_logo=True)


def test_layering_contract_sees_an_upward_import_inside_a_function(tmp_path, monkeypatch):
    """The same checker on a two-layer package: clean, then broken by one import inside a function."""
    package = tmp_path / "twolayers"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "high.py").write_text("from . import low\n")
    (package / "low.py").write_text("def helper():\n    return 1\n")
    config = tmp_path / "contract.toml"
    config.write_text('[tool.importlinter]\nroot_package = "twolayers"\n\n'
                      '[[tool.importlinter.contracts]]\nname = "down"\ntype = "layers"\n'
                      'containers = ["twolayers"]\nlayers = ["high", "low"]\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    assert lint_imports(config_filename=str(config), cache_dir=None, no_logo=True)
    (package / "low.py").write_text("def helper():\n    from . import high\n    return high\n")
    assert not lint_imports(config_filename=str(config), cache_dir=None, no_logo=True)


def test_no_import_circles_counting_imports_inside_functions():
    graph = grimp.build_graph("guardscope", cache_dir=None)
    edges = nx.DiGraph()
    for module in graph.modules:
        edges.add_node(module)
        for imported in graph.find_modules_directly_imported_by(module):
            # A package's __init__ is its own node: "from .. import x" names the package and x.
            if not module.startswith(imported + "."):
                edges.add_edge(module, imported)
    circles = [sorted(c) for c in nx.strongly_connected_components(edges) if len(c) > 1]
    assert circles == []


# --- one definition per fact -----------------------------------------------------------------------


def literal_strings(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    if isinstance(node, ast.Dict):
        return [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return []


@pytest.mark.parametrize("root", ["guardscope", "bench"])
def test_plan_names_are_listed_only_in_plans(root):
    listed = []
    for path, tree in sources(REPO / root):
        if path == PACKAGE / "plans.py":
            continue
        for node in ast.walk(tree):
            names = [s for s in literal_strings(node) if s in plans.NAMES]
            if len(names) >= 2:
                listed.append(f"{path.relative_to(REPO)}:{node.lineno}: {names}")
    assert listed == []


FOLDER_FILES = {value for name, value in vars(store).items()
                if name.isupper() and isinstance(value, str) and "." in value}
RAW_IO = {"write_text", "write_bytes", "read_text", "read_bytes"}
# The corpus directory has its own reader and writer (manifest: format, shards: shards); the child runners read their
# children's results (temporary files outside the analysis folder: isolation's, and the background compile process's
# job folder); files holds the one atomic writer; checkpoint, beside store, appends to the checkpoint's members file.
RAW_IO_ALLOWED = {"guardscope.store", "guardscope.checkpoint", "guardscope.files", "guardscope.corpus.storage.format",
                  "guardscope.corpus.storage.requests", "guardscope.corpus.storage.compile_log",
                  "guardscope.corpus.storage.shards", "guardscope.proving.isolation", "guardscope.runtime.child_compile"}


def test_store_names_the_analysis_folder_files():
    assert {"catalog.json", "fixes.json", "report.html", "verification.json"} <= FOLDER_FILES
    named = []
    for path, tree in sources():
        if path == PACKAGE / "store.py":
            continue
        templates = {id(a) for node in ast.walk(tree) if isinstance(node, ast.Call)
                     and getattr(node.func, "attr", "") == "get_template" for a in node.args}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in FOLDER_FILES and id(node) not in templates:
                named.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    assert named == []


def test_only_store_reads_and_writes_files():
    found = []
    for path, tree in sources():
        if module_name(path) in RAW_IO_ALLOWED:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "store":
                continue  # store's own functions
            raw = (isinstance(func, ast.Attribute) and func.attr in RAW_IO) or \
                  (isinstance(func, ast.Name) and func.id == "open") or \
                  (isinstance(func, ast.Attribute) and func.attr in ("dump", "load")
                   and getattr(func.value, "id", "") == "json")
            if raw:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []


def test_every_package_folder_is_in_the_wheel():
    """A split that makes a new package (a folder with an __init__.py) must list it in pyproject's
    [tool.setuptools] packages, or an installed guardscope (not an editable one) lacks it."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {module_name(path) for path in PACKAGE.rglob("__init__.py")}
    assert folders - listed == set()
