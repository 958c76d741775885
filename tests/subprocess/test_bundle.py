"""Compile-cache bundles: a tiny model's plan compiled with inductor on the CPU, bundled, and
warm-started in fresh processes with empty cache folders; mismatches fall back with a warning.

This file holds the tests that start child processes, compile with inductor or drive the browser;
the others are in tests/unit/test_bundle.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from click.testing import CliRunner

import guardscope
from guardscope import cli, pipeline
from guardscope.bundle import BundleWarning, load_bundle, plan_hash
from guardscope.corpus.reader import load_corpus
from guardscope.corpus.writer import CorpusWriter
from guardscope.proving.setup import isolated_caches

from ..builders import write_sized_corpus
from ..conftest import REPO, model_spec
from ..models import Elementwise
from ..pages import parse, words
from ..sessions import made_once

SIZES = (5, 1, 7, 9, 1, 3)  # sizes >= 2 share one graph, size 1 (0/1 specialization) needs its own


def _import(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    """Analysis, plans and the warmup plan's bundle (inductor, CPU) of a six-sample corpus."""
    def make(root):
        out = root / "out"
        guardscope.analyze(write_sized_corpus(root / "corpus", SIZES), out, strict=True)
        pipeline.emit_warmup(out)
        (manifest,) = pipeline.bundle(out, artifacts=("warmup",))
        return out, manifest

    return made_once(tmp_path_factory, "bundled", make)


# --- real bundles ------------------------------------------------------------------------------


def test_bundle_manifest(bundled):
    out, manifest = bundled
    module = _import(out / "warmup.py", "bundled_warmup")
    assert manifest["plan_hash"] == plan_hash(module.PLAN, module.WARMUP_DIR)
    assert manifest["torch_version"] == str(torch.__version__) and manifest["device"] == "cpu"
    assert manifest["compile"]["backend"] == "inductor" and manifest["compiled"]["backend"] == "inductor"
    assert manifest["graphs"] == 2 and manifest["artifacts"]["inductor"] == 2
    # made in a process with empty caches: every graph was generated, none read from a cache
    assert manifest["cache"]["fxgraph_misses"] == 2 and manifest["cache"]["fxgraph_hits"] == 0
    saved = json.loads((out / "warmup.compile-cache.json").read_text())
    assert saved == manifest and (out / "warmup.compile-cache.bin").stat().st_size == manifest["bytes"]
    code = (out / "warmup.py").read_text()
    assert "BUNDLE = WARMUP_DIR.parent / 'warmup.compile-cache.bin'" in code and str(out) not in code


def test_a_fresh_process_warm_starts_from_the_bundle(bundled):
    """A plain serving script: empty cache folders, the generated module loads the bundle and the
    warmup's graphs come from the cache; the corpus then compiles nothing."""
    out, _ = bundled
    script = textwrap.dedent(f"""
        import json, sys, torch
        sys.path.insert(0, {str(out)!r}); sys.path.insert(0, {str(REPO)!r})
        from guardscope.proving.setup import cache_dirs_empty
        empty = cache_dirs_empty()
        import warmup
        from guardscope import load_corpus
        from guardscope.torch_compat import compile_cache_counters
        from tests.models import Elementwise
        compiled = torch.compile(Elementwise(), dynamic=True, fullgraph=True)
        warmup.warmup(compiled)
        counters = torch._dynamo.utils.counters
        graphs = counters["stats"]["unique_graphs"]
        corpus = list(load_corpus({str(out.parent / "corpus")!r}))  # outside inference mode, as served
        with torch.inference_mode():
            for sample in corpus:
                compiled(*sample.args)
        print(json.dumps({{"empty": empty, "cache": compile_cache_counters(), "graphs": graphs,
                          "new": counters["stats"]["unique_graphs"] - graphs}}))
    """)
    with isolated_caches() as caches:
        completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                                   env={**os.environ, **caches})
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["empty"] is True, result
    assert result["cache"]["fxgraph_hits"] == 2 and result["cache"]["fxgraph_misses"] == 0
    assert result["cache"]["aot_autograd_hits"] == 2
    assert result["graphs"] == 2 and result["new"] == 0
    assert "loaded compile-cache bundle warmup.compile-cache.bin" in completed.stderr


def test_a_bundle_that_does_not_fit_warns_and_compiles_without_it(bundled, tmp_path):
    source, _ = bundled
    out = tmp_path / "out"
    shutil.copytree(source, out)
    module = _import(out / "warmup.py", "mismatched_warmup")
    manifest_path = out / "warmup.compile-cache.json"
    manifest = json.loads(manifest_path.read_text())
    model = torch.compile(torch.nn.Identity(), dynamic=True, fullgraph=True)

    manifest_path.write_text(json.dumps({**manifest, "torch_version": "0.0.0"}))
    with pytest.warns(BundleWarning, match=r"not used: it was made with torch 0\.0\.0, this is torch"):
        assert module.load_bundle(model).status == "incompatible"
    manifest_path.write_text(json.dumps(manifest))

    eager = torch.compile(Elementwise(), backend="eager", dynamic=True, fullgraph=True)
    with pytest.warns(BundleWarning, match="made for backend 'inductor', the model is compiled with backend 'eager'"):
        assert module.warmup(eager) == 2  # compiled without it: the warmup still runs

    (out / "warmup.compile-cache.bin").write_bytes(b"not a bundle")
    with pytest.warns(BundleWarning, match="checksum"):
        assert module.load_bundle(model).status == "unreadable"

    # the plan changed: a warmup corpus without its second sample
    samples = list(load_corpus(out / "warmup"))
    shutil.rmtree(out / "warmup")
    with CorpusWriter(out / "warmup", model=model_spec("Elementwise"), compile={"dynamic": True}) as writer:
        writer.add(*samples[0].args)
    with pytest.warns(BundleWarning, match="made for another plan"):
        assert module.load_bundle(model).status == "incompatible"

    for name in ("warmup.compile-cache.bin", "warmup.compile-cache.json"):
        (out / name).unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_bundle(out / "warmup.compile-cache.bin", module.PLAN, out / "warmup", model=model,
                           device="cpu").status == "absent"


def test_verify_measures_set_up_with_and_without_the_bundle(bundled, tmp_path):
    source, _ = bundled
    shutil.copytree(source.parent, tmp_path / "root")  # the analysis names its corpus as ../corpus
    out = tmp_path / "root" / "out"
    document = pipeline.verify(out, artifacts=("warmup",), backend="eager")
    (result,) = document["artifacts"]
    assert result["status"] == "passed", result
    measured = result["bundle"]
    assert measured["status"] == "used", measured
    without, with_ = measured["without"], measured["with"]
    assert without["cache_dirs_empty"] and with_["cache_dirs_empty"]
    assert without["cache"]["fxgraph_misses"] == 2 and without["cache"]["fxgraph_hits"] == 0
    assert with_["cache"]["fxgraph_hits"] == 2 and with_["cache"]["fxgraph_misses"] == 0
    assert with_["bundle_load"]["status"] == "loaded" and without["bundle_load"] is None
    assert with_["replay_recompiles"] == 0 and with_["samples_replayed"] == len(SIZES)
    assert without["backend"] == with_["backend"] == "inductor"
    card = parse((out / "report.html").read_text()).find(id="bundle-warmup")
    rows = [[words(cell) for cell in row.find_all("td")] for row in card.find("table").find_all("tr")]
    assert ["graphs from the cache", "0", "2"] in rows and ["recompiles on replay", "0", "0"] in rows
    assert words(card.find(class_="badge")) == "used"


def test_bundle_command(bundled, tmp_path):
    source, _ = bundled
    runner = CliRunner()
    empty = tmp_path / "no-plans"
    empty.mkdir()
    shutil.copy(source / "catalog.json", empty / "catalog.json")
    result = runner.invoke(cli.main, ["bundle", str(empty)])
    assert result.exit_code == 2 and "warmup.py, unbacked.py not found" in result.output
    result = runner.invoke(cli.main, ["bundle", str(source), "--artifact", "export"])
    assert result.exit_code == 2
    help_text = runner.invoke(cli.main, ["bundle", "--help"]).output
    assert "guardscope bundle out/ --device cuda" in help_text


def test_verify_reports_a_bundle_for_another_device_as_not_measured(bundled, tmp_path):
    """A bundle made on a GPU machine, verified where there is no GPU: the plan still passes."""
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    source, _ = bundled
    shutil.copytree(source.parent, tmp_path / "root")
    out = tmp_path / "root" / "out"
    manifest_path = out / "warmup.compile-cache.json"
    manifest_path.write_text(json.dumps({**json.loads(manifest_path.read_text()), "device": "cuda"}))
    result = CliRunner().invoke(cli.main, ["verify", str(out), "--artifact", "warmup", "--backend", "eager"])
    assert result.exit_code == 0, result.output
    assert "bundle NOT MEASURED; device 'cuda' was asked for" in result.output
    (verified,) = json.loads((out / "verification.json").read_text())["artifacts"]
    assert verified["status"] == "passed" and verified["bundle"]["with"]["status"] == "skipped"
