"""Real third-party models (tests/real_models.py): a Hugging Face decoder and encoder called
directly, a PyTorch Geometric model with graph breaks, a CNN with mixed layouts and dtypes, and a
model with an ``.item()`` branch and optional arguments — analysed with torch's default
``dynamic=None`` and with ``dynamic=True``.

The analysis must agree with a plain ``torch.compile`` replay that uses no guardscope code: the
same compiles (compile id and sample) in every frame. Every analysed sample belongs to a topology,
and at most 5% of guard failures are unclassified.
"""

from __future__ import annotations

import json

import pytest
import torch

import guardscope
from guardscope import CorpusWriter, pipeline

from . import real_models

pytestmark = pytest.mark.slow

MODELS = sorted(real_models.MODELS)
SAMPLES = 40
SPEC = f"{real_models.__file__}:{{name}}"


def write_corpus(directory, name: str, dynamic: bool | None, count: int = SAMPLES):
    _, requests = real_models.MODELS[name]
    with CorpusWriter(directory, model=SPEC.format(name=name), compile={"dynamic": dynamic}) as writer:
        for args, kwargs in requests(count, seed=1):
            writer.add(*args, **kwargs)
    return directory


def plain_replay(name: str, dynamic: bool | None, count: int = SAMPLES) -> set[tuple[str, int]]:
    """(compile id, sample) of every compile a plain torch.compile replay makes, all frames."""
    factory, requests = real_models.MODELS[name]
    model = factory()
    compiled: list[tuple[str, int]] = []
    current = [-1]

    def ended(args) -> None:
        compiled.append((str(args.compile_id), current[0]))

    torch._dynamo.reset()
    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = 4096
    try:
        torch._dynamo.callback.on_compile_end(ended)
        function = torch.compile(model, backend="eager", dynamic=dynamic)
        # Requests arrive as normal tensors: made outside inference mode (a tensor made inside
        # it is an inference tensor, whose dispatch keys a graph guards on).
        calls = requests(count, seed=1)
        with torch.inference_mode():
            for index, (args, kwargs) in enumerate(calls):
                current[0] = index
                function(*args, **kwargs)
    finally:
        torch._dynamo.config.recompile_limit = limit
        torch._dynamo.reset()
    return set(compiled)


@pytest.fixture(scope="session")
def analyses(tmp_path_factory):
    """One analysis per (model, dynamic), made on first use and shared by every test."""
    made: dict[tuple[str, bool | None], tuple] = {}

    def get(name: str, dynamic: bool | None):
        key = (name, dynamic)
        if key not in made:
            root = tmp_path_factory.mktemp(f"{name}-{dynamic}")
            corpus = write_corpus(root / "corpus", name, dynamic)
            analysis = guardscope.analyze(corpus, root / "out")
            made[key] = (corpus, analysis, json.loads((root / "out" / "catalog.json").read_text()))
        return made[key]

    return get


@pytest.mark.parametrize("dynamic", [None, True], ids=["dynamic-none", "dynamic-true"])
@pytest.mark.parametrize("name", MODELS)
def test_catalog_matches_a_plain_replay(analyses, name, dynamic):
    _, _, catalog = analyses(name, dynamic)
    ours = {(c["compile_id"], c["sample"]) for c in catalog["compiles"] if c["fail_type"] is None}
    assert ours == plain_replay(name, dynamic)
    assert catalog["summary"]["compile_samples"] == sorted({sample for _, sample in ours})
    # A frame's first compile is not a recompile.
    assert catalog["summary"]["recompiles"] == sum(1 for cid, _ in ours if not cid.endswith("/0"))
    # Every analysed sample belongs to a topology.
    members = sorted(s for t in catalog["topologies"] for s in t["samples"])
    failed = {f["sample"] for f in catalog["failed_samples"]}
    assert members == [i for i in range(catalog["corpus"]["samples"]) if i not in failed]
    assert catalog["not_analysed"] == []
    failures = [f for c in catalog["compiles"] for f in c["failures"]]
    others = [f["raw"] for f in failures if f["kind"] == "other"]
    assert len(others) <= 0.05 * len(failures), others


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_hugging_face_models_are_named_by_their_own_arguments(analyses, name):
    """transformers wraps forward as wrapper(self, *args, **kwargs): Dynamo's guards read
    kwargs['input_ids'], every output says input_ids."""
    _, _, catalog = analyses(name, None)
    assert catalog["frame_arguments"]["varkw"] == "kwargs"
    assert catalog["arguments"][:1] == ["input_ids"]
    texts = json.dumps({key: catalog[key] for key in ("topologies", "dimensions")})
    texts += json.dumps([{k: f[k] for k in ("inputs", "dims", "guard")} for c in catalog["compiles"] for f in c["failures"]])
    assert "kwargs[" not in texts and "L[" not in texts
    assert {d["input"] for d in catalog["dimensions"]} >= {"input_ids"}
    assert len(catalog["topologies"]) >= 3


def test_bert_topologies_say_which_optional_arguments_were_left_out(analyses):
    _, _, catalog = analyses("bert", None)
    facts = [fact for t in catalog["topologies"] for fact in t["facts"]]
    assert any(fact.startswith("without attention_mask") for fact in facts)


def test_graph_breaks_split_the_catalog_into_frames(analyses):
    """PyG's scatter does int(index.max()): a graph break. A batch holding one graph needs a
    graph of its own in a later frame only; the catalog says so, frame by frame."""
    _, _, catalog = analyses("gcn", None)
    assert catalog["summary"]["frames"] == len(catalog["frames"]) > 1
    assert [f["frame"] for f in catalog["frames"]] == sorted(f["frame"] for f in catalog["frames"])
    assert all(f["compile_samples"] == sorted(set(f["compile_samples"])) for f in catalog["frames"])
    assert catalog["graph_breaks"] and all(b["reason"] and b["location"] for b in catalog["graph_breaks"])
    reasons = " ".join(b["reason"] for b in catalog["graph_breaks"])
    assert "item()" in reasons or "Dynamic shape operator" in reasons
    by_first_frame: dict[str, list[dict]] = {}
    for topology in catalog["topologies"]:
        assert topology["graphs"][0] == topology["compile_id"]
        by_first_frame.setdefault(topology["compile_id"], []).append(topology)
    # Topologies that share the first frame's graph differ in a later frame, and say where.
    shared = [group for group in by_first_frame.values() if len(group) > 1]
    assert shared, "single-graph batches need a later-frame graph of their own"
    for group in shared:
        assert len({tuple(t["graphs"]) for t in group}) == len(group)
        assert all(any(fact.startswith("in ") for fact in t["facts"]) for t in group)


def test_the_item_branch_and_optional_arguments(analyses):
    _, analysis, catalog = analyses("gated", None)
    assert len(catalog["frames"]) == 2
    (found,) = catalog["graph_breaks"]
    assert found["location"].startswith("tests/real_models.py:") and "item()" in found["reason"]
    assert any("fidelity" in warning for warning in analysis.warnings)
    kinds = {f["kind"] for c in catalog["compiles"] for f in c["failures"]}
    assert "other" not in kinds


# --- fixes across frames ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fixed(analyses):
    """emit-warmup then verify (warmup and unbacked) per model, dynamic=None."""
    made: dict[str, tuple] = {}

    def get(name: str):
        if name not in made:
            corpus, analysis, _ = analyses(name, None)
            fixes = pipeline.emit_warmup(analysis.out_dir)
            document = pipeline.verify(analysis.out_dir, artifacts=("warmup", "unbacked"), bundle=False)
            made[name] = (corpus, analysis.out_dir, fixes, document)
        return made[name]

    return get


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
    from guardscope.isolation import import_file

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
    # Confirmed by a plain torch.compile loop that imports the emitted module.
    factory, _ = real_models.MODELS[name]
    samples = list(guardscope.load_corpus(corpus))
    assert compiles_during(factory(), import_file(out / "warmup.py"), samples, unbacked=False, dynamic=None) == []
    if fixes.unbacked.status == "ok":
        assert compiles_during(factory(), import_file(out / "unbacked.py"), samples, unbacked=True, dynamic=None) == []


def test_unbacked_plan_marks_inputs_only_and_says_what_it_left_out(fixed, analyses):
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
    fixes = pipeline.emit_warmup(analysis.out_dir)
    assert fixes.unbacked.status == "infeasible"
    assert "raise once these dims are marked unbacked" in fixes.unbacked.reason
    assert "Error: " in fixes.unbacked.reason  # torch's exception type, whole
    assert not (analysis.out_dir / "unbacked.py").exists()
    document = pipeline.verify(analysis.out_dir, artifacts=("warmup", "unbacked"), bundle=False)
    statuses = {r["name"]: r["status"] for r in document["artifacts"]}
    assert statuses == {"warmup": "passed", "unbacked": "infeasible"} and document["passed"]
