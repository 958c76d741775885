"""Compile-cache bundles: a tiny model's plan compiled with inductor on the CPU, bundled, and
warm-started in fresh processes with empty cache folders; mismatches fall back with a warning."""

from __future__ import annotations

import copy
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
from guardscope.bundle import (
    BundleWarning,
    check_manifest,
    isolated_caches,
    load_bundle,
    plan_hash,
)
from guardscope.corpus import CorpusWriter, load_corpus
from guardscope.report import bundle_context
from guardscope.verify import bundle_status

from .conftest import REPO, model_spec
from .models import Elementwise
from .test_report import parse, words

SIZES = (5, 1, 7, 9, 1, 3)  # sizes >= 2 share one graph, size 1 (0/1 specialization) needs its own


def _import(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_corpus(path, sizes, seed=0):
    generator = torch.Generator().manual_seed(seed)
    with CorpusWriter(path, model=model_spec("Elementwise"), compile={"dynamic": True, "fullgraph": True}) as writer:
        for size in sizes:
            writer.add(torch.randn(size, generator=generator))
    return path


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    """Analysis, plans and the warmup plan's bundle (inductor, CPU) of a six-sample corpus."""
    root = tmp_path_factory.mktemp("bundle")
    corpus = _write_corpus(root / "corpus", SIZES)
    out = root / "out"
    guardscope.analyze(corpus, out, strict=True)
    pipeline.emit_warmup(out)
    (manifest,) = pipeline.bundle(out, artifacts=("warmup",))
    return out, manifest


# --- pure parts --------------------------------------------------------------------------------

FACTS = {
    "torch_version": "2.11.0+cu128",
    "device_name": "NVIDIA H200",
    "compiled": {"backend": "inductor", "dynamic": True, "options": {}},
    "plan_hash": "a" * 64,
}
MANIFEST = {"format": 1, "torch_version": "2.11.0+cu128", "device_name": "NVIDIA H200",
            "compiled": {"backend": "inductor", "dynamic": True, "options": {}}, "plan_hash": "a" * 64}


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("format", 2, "format 2"),
    ("torch_version", "2.13.0+cpu", "made with torch 2.13.0+cpu, this is torch 2.11.0+cu128"),
    ("device_name", "NVIDIA A100", "made on NVIDIA A100, this runs on NVIDIA H200"),
    ("compiled", {"backend": "aot_eager", "dynamic": True, "options": {}}, "backend 'aot_eager'"),
    ("compiled", {"backend": "inductor", "dynamic": None, "options": {}}, "dynamic=None"),
    ("compiled", {"backend": "inductor", "dynamic": True, "options": {"max_autotune": True}}, "max_autotune"),
    ("plan_hash", "b" * 64, "another plan"),
])
def test_check_manifest_names_the_mismatch(field, value, reason):
    assert check_manifest(MANIFEST, FACTS) is None
    manifest = {**MANIFEST, field: value}
    assert reason in check_manifest(manifest, FACTS)


def test_check_manifest_skips_settings_torch_does_not_describe():
    # a compiled function (not an nn.Module) has no readable backend: the rest is still checked
    facts = {**FACTS, "compiled": None}
    assert check_manifest(MANIFEST, facts) is None
    assert "another plan" in check_manifest({**MANIFEST, "plan_hash": "c" * 64}, facts)
    assert "format None" in check_manifest(["not", "a", "manifest"], facts)


def test_plan_hash_follows_samples_marks_and_options(tmp_path):
    first = _write_corpus(tmp_path / "a", (5, 1))
    same = _write_corpus(tmp_path / "b", (5, 1))
    other = _write_corpus(tmp_path / "c", (5, 1), seed=1)
    plan = {"artifact": "unbacked", "compile": {"dynamic": True, "fullgraph": True, "mode": None},
            "dims": (("x", 0),), "duck_shape": True}
    assert plan_hash(plan, first) == plan_hash(copy.deepcopy(plan), same)  # same content, same hash
    assert plan_hash(plan, other) != plan_hash(plan, first)  # other warmup samples
    changed = [
        {**plan, "dims": (("x", 0), ("y", 1))},
        {**plan, "duck_shape": False},
        {**plan, "compile": {**plan["compile"], "mode": "max-autotune"}},
    ]
    assert len({plan_hash(p, first) for p in [plan, *changed]}) == 4


def test_bundle_context_rows():
    measured = {
        "status": "used", "reason": None, "file": "warmup.compile-cache.bin", "bytes": 12_700_000,
        "backend": "inductor", "device": "cuda", "device_name": "NVIDIA H200", "torch_version": "2.11.0",
        "without": {"setup_seconds": 58.4, "cache": {"fxgraph_hits": 0, "fxgraph_misses": 10},
                    "cache_dirs_empty": True, "replay_recompiles": 0},
        "with": {"setup_seconds": 13.1, "cache": {"fxgraph_hits": 10, "fxgraph_misses": 0},
                 "cache_dirs_empty": True, "replay_recompiles": 0,
                 "bundle_load": {"status": "loaded", "seconds": 0.33}},
    }
    context = bundle_context(None, measured)
    rows = {label: (without, with_) for label, without, with_ in context["rows"]}
    assert rows["set-up (load + warmup)"] == ("58.40 s", "13.10 s")
    assert rows["graphs from the cache"] == ("0", "10") and rows["bundle load"] == ("—", "330 ms")
    assert context["size"] == "12.7 MB" and context["badge"] == "passed"
    assert bundle_context(None, None) is None
    made_only = bundle_context({"file": "x.compile-cache.bin", "bytes": 10, "compile": {"backend": "inductor"}}, None)
    assert made_only["rows"] == [] and made_only["status"] is None and made_only["backend"] == "inductor"


def test_bundle_status_from_the_two_set_ups():
    loaded = {"status": "loaded", "reason": None}
    ok = {"status": "passed", "reason": None, "cache": {"fxgraph_hits": 3, "fxgraph_misses": 0}, "bundle_load": loaded}
    plain = {"status": "passed", "reason": None, "cache": {"fxgraph_hits": 0, "fxgraph_misses": 3}, "bundle_load": None}
    assert bundle_status(plain, ok, "inductor on cuda") == ("used", None)
    partial = {**ok, "cache": {"fxgraph_hits": 2, "fxgraph_misses": 1}}
    assert bundle_status(plain, partial, "inductor on cuda") == (
        "partial", "1 graph(s) compiled from scratch despite the bundle (2 from the cache)")
    refused = {**ok, "bundle_load": {"status": "incompatible", "reason": "it was made on NVIDIA A100, ..."}}
    assert bundle_status(plain, refused, "x") == ("not used", "it was made on NVIDIA A100, ...")
    skipped = {"status": "skipped", "reason": "device 'cuda' was asked for but ..."}
    assert bundle_status(skipped, skipped, "x") == ("not measured", "device 'cuda' was asked for but ...")
    died = {"status": "crashed", "reason": "the verification process died of SIGSEGV"}
    assert bundle_status(plain, died, "inductor on cuda") == (
        "crashed", "set-up with inductor on cuda with the bundle crashed: the verification process died of SIGSEGV")


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
        from guardscope.bundle import cache_dirs_empty
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
    document = pipeline.verify(out, artifacts=("warmup",))
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
    result = CliRunner().invoke(cli.main, ["verify", str(out), "--artifact", "warmup"])
    assert result.exit_code == 0, result.output
    assert "bundle NOT MEASURED; device 'cuda' was asked for" in result.output
    (verified,) = json.loads((out / "verification.json").read_text())["artifacts"]
    assert verified["status"] == "passed" and verified["bundle"]["with"]["status"] == "skipped"
