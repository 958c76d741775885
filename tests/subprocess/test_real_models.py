"""Real third-party models (tests/real_models.py): a Hugging Face decoder and encoder called
directly, a PyTorch Geometric model with graph breaks, a CNN with mixed layouts and dtypes, and a
model with an ``.item()`` branch and optional arguments — analysed with torch's default
``dynamic=None`` and with ``dynamic=True``.

The analysis must agree with a plain ``torch.compile`` replay that uses no guardscope code: the
same compiles (compile id and sample) in every frame. Every analysed sample belongs to a topology,
and at most 5% of guard failures are unclassified.

This file holds the tests that start child processes, compile with inductor or drive the browser;
the others are in tests/integration/test_real_models.py.
"""

from __future__ import annotations

import json

import pytest
import torch

import guardscope
from guardscope import CorpusWriter, pipeline

from .. import real_models
from ..sessions import REAL_SAMPLES

pytestmark = pytest.mark.slow

MODELS = sorted(real_models.MODELS)
SAMPLES = REAL_SAMPLES  # the corpora the shared analyses replay
SPEC = f"{real_models.__file__}:{{name}}"


def write_corpus(directory, name: str, dynamic: bool | None, count: int = SAMPLES):
    _, requests = real_models.MODELS[name]
    with CorpusWriter(directory, model=SPEC.format(name=name), compile={"dynamic": dynamic}) as writer:
        for args, kwargs in requests(count, seed=1):
            writer.add(*args, **kwargs)
    return directory


# --- fixes across frames ------------------------------------------------------------------------


def compiles_during(model, plan_module, corpus, *, unbacked: bool, dynamic) -> list[str]:
    """A plain-PyTorch serving loop (no guardscope code but the emitted module): compile, apply
    the plan as its docstring says, then replay the corpus; the compile ids made after set-up."""
    made: list[str] = []
    torch._dynamo.reset()
    limit = torch._dynamo.config.recompile_limit  # warmup() raises it for the process: put it back
    try:
        if unbacked:
            plan_module.configure()
        compiled = torch.compile(model, backend="eager", dynamic=dynamic)
        plan_module.warmup(compiled)
        torch._dynamo.callback.on_compile_end(lambda args: made.append(str(args.compile_id)))
        with torch.inference_mode():
            for sample in corpus:
                if unbacked:
                    plan_module.mark(*sample.args, **sample.kwargs)
                compiled(*sample.args, **sample.kwargs)
    finally:
        import torch.fx.experimental._config as fx_config

        fx_config.use_duck_shape = True
        torch._dynamo.config.recompile_limit = limit
        torch._dynamo.reset()
    return made


@pytest.mark.parametrize("name", MODELS)
def test_warmup_and_unbacked_hold_in_every_frame(fixed, name):
    """Slow: the first test to ask for a model's ``fixed`` analysis pays for it (record, analyze,
    plan the warmup and unbacked plans, verify both in child processes), up to BERT's 90 s."""
    from guardscope.proving.isolation import import_file

    corpus, out, fixes, document = fixed(name)
    results = {r["name"]: r for r in document["artifacts"]}
    assert results["warmup"]["status"] == "passed", results["warmup"]
    assert results["warmup"]["replay_recompiles"] == 0
    # emit-warmup and verify agree on the graphs each plan compiles, every frame counted.
    assert results["warmup"]["setup_graphs"] == fixes.warmup.graphs
    if fixes.unbacked.status == "ok":
        assert results["unbacked"]["status"] == "passed", results["unbacked"]
        assert results["unbacked"]["setup_graphs"] == fixes.unbacked.graphs
    else:
        assert results["unbacked"]["status"] == "infeasible" and fixes.unbacked.reason
    if len(frames_of(out)) == 1:
        return  # one frame: verify's child counts compiles as the seed's plain script confirms them
    # Several frames: confirmed by a plain torch.compile loop that imports the emitted module, and
    # counts compiles in every frame through Dynamo's own callback, with no guardscope code.
    factory, _ = real_models.MODELS[name]
    samples = list(guardscope.load_corpus(corpus))
    assert compiles_during(factory(), import_file(out / "warmup.py"), samples, unbacked=False, dynamic=None) == []
    if fixes.unbacked.status == "ok":
        assert compiles_during(factory(), import_file(out / "unbacked.py"), samples, unbacked=True, dynamic=None) == []


def frames_of(out) -> list[dict]:
    """The frames Dynamo compiled in the analysis in ``out``."""
    return json.loads((out / "catalog.json").read_text())["frames"]


def test_unbacked_plan_marks_inputs_only_and_says_what_it_left_out(fixed, analyses):
    """Slow: when it runs before the per-model tests, it makes the gated and GCN ``fixed`` analyses
    they share (record, analyze, plan, verify in child processes)."""
    for name in ("gated", "gcn"):
        _, out, fixes, _ = fixed(name)
        _, _, catalog = analyses(name, None)
        plan = fixes.unbacked
        inputs = {d["dim"] for d in catalog["dimensions"]}
        assert all(f"{d.argument}.size()[{d.axis}]" in inputs for d in plan.dims)
        inner = {dim for c in catalog["compiles"] if c["frame"] != 0 for f in c["failures"]
                 if "zero_one_specialization" in f["causes"] for dim in f["dims"]}
        skipped = dict(plan.skipped)
        for dim in inner:
            assert "computed inside the model" in skipped[dim], dim
        if plan.status == "ok":
            text = (out / "unbacked.py").read_text()
            assert all(f"# not marked, {dim}" in text for dim in skipped)


def test_an_unbacked_plan_that_breaks_fullgraph_is_infeasible_not_written(tmp_path):
    """GPT-2 under fullgraph=True: marking its sequence dims unbacked makes every marked sample
    fail to compile (data-dependent masking code). The plan is not written; verify says why, and
    the warmup still passes."""
    corpus = real_models.write_corpus("gpt2", str(tmp_path / "corpus"), 12)
    manifest = json.loads((tmp_path / "corpus" / "corpus.json").read_text())
    manifest["compile"] = {"dynamic": None, "fullgraph": True}
    (tmp_path / "corpus" / "corpus.json").write_text(json.dumps(manifest))
    analysis = guardscope.analyze(corpus, tmp_path / "out")
    fixes = pipeline.emit_warmup(analysis.out_dir, only=("warmup", "unbacked"))
    assert fixes.unbacked.status == "infeasible"
    assert "raise once these dims are marked unbacked" in fixes.unbacked.reason
    assert "Error: " in fixes.unbacked.reason  # torch's exception type, whole
    assert not (analysis.out_dir / "unbacked.py").exists()
    document = pipeline.verify(analysis.out_dir, artifacts=("warmup", "unbacked"), bundle=False, backend="eager")
    statuses = {r["name"]: r["status"] for r in document["artifacts"]}
    assert statuses == {"warmup": "passed", "unbacked": "infeasible"} and document["passed"]
