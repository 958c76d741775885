"""Precompiled warmups on the CPU with inductor: a tiny model's warmup compiled ahead of time in
a fresh process, then loaded by a plain serving script in another fresh process with empty cache
folders, which serves the corpus without compiling, sends a call no graph accepts to the ordinary
compile path, and works under both no_grad and inference_mode; verify proves it. The pure parts
are in tests/unit/test_precompiled.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import guardscope
from guardscope import pipeline
from guardscope.corpus.writer import CorpusWriter
from guardscope.proving.setup import isolated_caches

from ..conftest import REPO, model_spec
from ..sessions import made_once

pytestmark = pytest.mark.slow

SIZES = (5, 1, 7, 9, 1, 3)  # sizes >= 2 share one graph, size 1 (0/1 specialization) needs its own


def _precompile(root, grad_mode):
    corpus = root / "corpus"
    generator = torch.Generator().manual_seed(0)
    with CorpusWriter(corpus, model=model_spec("Elementwise"), compile={"dynamic": True, "fullgraph": True},
                      grad_mode=grad_mode) as writer:
        for size in SIZES:
            writer.add(torch.randn(size, generator=generator))
    out = root / "out"
    guardscope.analyze(corpus, out, strict=True)
    pipeline.emit_warmup(out, only=("warmup",))  # the plan precompiled
    return out, pipeline.precompile(out)


def _made(tmp_path_factory, grad_mode):
    return made_once(tmp_path_factory, f"precompiled-{grad_mode}", lambda root: _precompile(root, grad_mode))


@pytest.fixture(scope="module", params=["inference_mode", "no_grad"])
def precompiled(request, tmp_path_factory):
    """Both grad modes production serves under (the guards differ: see torch_compat.aot_compile)."""
    return _made(tmp_path_factory, request.param)


@pytest.fixture(scope="module")
def inference_mode_build(tmp_path_factory):
    return _made(tmp_path_factory, "inference_mode")


@pytest.fixture(scope="module")
def no_grad_build(tmp_path_factory):
    return _made(tmp_path_factory, "no_grad")


SERVE = """
import json, sys, torch
sys.path.insert(0, {out!r}); sys.path.insert(0, {repo!r})
import warmup
from guardscope import load_corpus
from tests.models import Elementwise
model = Elementwise()
compiled = torch.compile(model, dynamic=True, fullgraph=True)
ran = warmup.warmup(compiled)
unique = lambda: torch._dynamo.utils.counters["stats"]["unique_graphs"]
corpus = list(load_corpus({corpus!r}))  # outside inference mode, as served
grad = torch.inference_mode if {grad_mode!r} == "inference_mode" else torch.no_grad
unseen = torch.randn(4, dtype=torch.float64)  # a dtype no precompiled graph was built for
with grad():
    outputs = [compiled(*sample.args) for sample in corpus]
    served = unique()
    fallback = compiled(unseen)
equal = all(torch.allclose(o, model(*s.args), atol=1e-5) for o, s in zip(outputs, corpus))
print(json.dumps({{"ran": ran, "served_compiles": served, "equal": equal, "fallback_equal":
                  bool(torch.allclose(fallback, model(unseen))), "stats": compiled.forward.stats.to_json()}}))
"""


def test_precompiled_manifest(precompiled):
    out, manifest = precompiled
    assert manifest["graphs"] == 2 and len(manifest["steps"]) == 2
    assert manifest["compile"] == {"backend": "inductor", "dynamic": True, "fullgraph": True, "mode": None}
    assert manifest["kernel_files"] > 0 and manifest["device_name"].startswith("cpu")
    saved = json.loads((out / "warmup.precompiled.json").read_text())
    assert saved == manifest and (out / "warmup.precompiled.bin").stat().st_size == manifest["bytes"]
    code = (out / "warmup.py").read_text()
    assert "PRECOMPILED = WARMUP_DIR.parent / 'warmup.precompiled.bin'" in code and str(out) not in code


def test_a_fresh_process_serves_from_the_precompiled_warmup_and_falls_back_on_a_miss(precompiled):
    """Empty caches: the warmup's samples and the corpus compile nothing and match eager; a
    float64 call no graph accepts compiles once through torch.compile, counted and logged."""
    out, manifest = precompiled
    script = SERVE.format(out=str(out), repo=str(REPO), corpus=str(out.parent / "corpus"),
                          grad_mode=manifest["grad_mode"])
    with isolated_caches() as caches:
        completed = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                                   timeout=600, env={**os.environ, **caches})
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    # the warmup's samples ran through the precompiled graphs (their kernels loaded), compiling nothing
    assert result["ran"] == manifest["graphs"] and result["served_compiles"] == 0 and result["equal"]
    assert result["stats"]["precompiled_calls"] == manifest["graphs"] + len(SIZES)
    assert result["stats"]["misses"] == 1 and result["stats"]["compiles"] == 1 and result["fallback_equal"]
    assert "dtype mismatch" in result["stats"]["missed_guards"][0]
    assert "loaded precompiled warmup warmup.precompiled.bin (2 graphs" in completed.stderr
    assert "a call no precompiled graph of warmup.precompiled.bin accepts compiled 1 graph(s)" in completed.stderr


def test_verify_proves_the_precompiled_warmup(inference_mode_build, tmp_path):
    source, _ = inference_mode_build
    out = tmp_path / "out"
    import shutil

    shutil.copytree(source, out)
    document = pipeline.verify(out, artifacts=("warmup",))
    (warmup,) = document["artifacts"]
    assert warmup["status"] == "passed", warmup["reason"]
    proof = warmup["precompiled"]
    assert proof["status"] == "used", proof["reason"]
    run = proof["run"]
    assert run["precompiled_load"]["status"] == "loaded" and run["cache_dirs_empty"] is True
    assert run["replay_recompiles"] == 0 and run["samples_replayed"] == len(SIZES)
    assert run["precompiled"]["stats"]["misses"] == 0 and run["precompiled"]["outputs"]["equal"]


def test_serve_starts_from_the_precompiled_warmup(no_grad_build):
    """guardscope.runtime.serve(): the warmup's precompiled graphs serve the corpus; a call none
    accepts is a fallback run eagerly, as with any plan (serving never compiles)."""
    import guardscope.runtime
    from guardscope import load_corpus

    from ..models import Elementwise

    out, manifest = no_grad_build
    corpus = list(load_corpus(out.parent / "corpus"))
    served = guardscope.runtime.serve(Elementwise(), out, plan="warmup", device="cpu")
    with served:
        assert served.precompiled is not None and served.graphs == manifest["graphs"]
        for sample in corpus:
            served(*sample.args)
        served(torch.randn(3, dtype=torch.float64))
        stats = served.stats
    assert stats.calls == len(SIZES) + 1 and stats.compiled == len(SIZES) and stats.precompiled == len(SIZES)
    assert stats.fallbacks == 1 and served.precompiled.stats.compiles == 0


def test_bench_measures_the_precompiled_row_beside_the_bundle_free_warmup(no_grad_build, tmp_path):
    """One bench run: the warmup compiles its graphs at set-up, the precompiled row loads them
    (nothing traced or compiled) and serves the corpus without a recompile."""
    import shutil

    source, manifest = no_grad_build
    out = tmp_path / "out"
    shutil.copytree(source, out)
    document = pipeline.bench(out, device="cpu", strategies=("warmup", "precompiled"), paired=0)
    rows = {row["name"]: row for row in document["strategies"]}
    warmup, precompiled_row = rows["warmup"], rows["precompiled"]
    assert warmup["status"] == precompiled_row["status"] == "ok"
    assert precompiled_row["precompiled"]["status"] == "loaded" and precompiled_row["setup_graphs"] == manifest["graphs"]
    assert precompiled_row["recompiles"] == 0 and precompiled_row["replay_compiles"] == 0
    assert precompiled_row["requests"] == len(SIZES) and precompiled_row["first_request_ms"] is not None
    assert precompiled_row["setup_seconds"] < warmup["setup_seconds"]


@pytest.fixture(scope="module")
def vision(tmp_path_factory):
    """A small CNN at mixed image sizes, dtypes and layouts, compiled as vision services are
    (dynamic=None: the first graph static, later ones dynamic), served under inference_mode."""
    from ..real_models import MODELS

    def make(root):
        _, requests = MODELS["cnn"]
        with CorpusWriter(root / "corpus", model=f"{REPO / 'tests' / 'real_models.py'}:cnn",
                          compile={"dynamic": None, "fullgraph": True}, grad_mode="inference_mode") as writer:
            for args, kwargs in requests(16, seed=1):
                writer.add(*args, **kwargs)
        out = root / "out"
        guardscope.analyze(root / "corpus", out, strict=True)
        pipeline.emit_warmup(out, only=("warmup",))  # the plan precompiled
        return out, pipeline.precompile(out)

    return made_once(tmp_path_factory, "precompiled-vision", make)


def test_a_vision_model_under_dynamic_none_is_precompiled_and_proved(vision, tmp_path):
    """Its ``images.float() / 255.0`` makes the AOT trace ask for a restart (traced again), its
    first graph is static; verify's fresh process with empty caches serves every call from the
    precompiled graphs, outputs equal to eager's. Slow: the vision fixture precompiles a CNN's
    graphs with inductor in a child, and verify loads and serves them in another."""
    import shutil

    source, manifest = vision
    assert manifest["compile"]["dynamic"] is None and manifest["graphs"] > 2
    out = tmp_path / "out"
    shutil.copytree(source, out)
    (warmup,) = pipeline.verify(out, artifacts=("warmup",))["artifacts"]
    proof = warmup["precompiled"]
    assert warmup["status"] == "passed" and proof["status"] == "used", (warmup["reason"], proof["reason"])
    assert proof["run"]["replay_recompiles"] == 0 and proof["run"]["precompiled"]["stats"]["misses"] == 0
    assert proof["run"]["precompiled"]["outputs"]["equal"]
