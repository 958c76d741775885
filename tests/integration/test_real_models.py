"""Real third-party models (tests/real_models.py): a Hugging Face decoder and encoder called
directly, a PyTorch Geometric model with graph breaks, a CNN with mixed layouts and dtypes, and a
model with an ``.item()`` branch and optional arguments — analysed with torch's default
``dynamic=None`` and with ``dynamic=True``.

The analysis must agree with a plain ``torch.compile`` replay that uses no guardscope code: the
same compiles (compile id and sample) in every frame. Every analysed sample belongs to a topology,
and at most 5% of guard failures are unclassified.

This file holds the tests that compile in this process; the others are in
tests/subprocess/test_real_models.py.
"""

from __future__ import annotations

import json

import pytest
import torch

import guardscope
from guardscope.corpus.reader import load_corpus
from guardscope.corpus.writer import CorpusWriter

from .. import real_models
from ..sessions import REAL_SAMPLES

pytestmark = pytest.mark.slow

MODELS = sorted(real_models.MODELS)
SAMPLES = REAL_SAMPLES  # the corpora the shared analyses replay


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


@pytest.mark.parametrize("name", MODELS)
def test_the_same_requests_recorded_by_signature_give_the_same_catalog(analyses, name, tmp_path):
    """Recorded without any tensor data (corpus format 3), a one-frame model's requests give the
    catalog of the full recording; a model that breaks into frames says its later frames are
    approximate (they see values computed from the data)."""
    corpus, _, expected = analyses(name, None)
    recorded = load_corpus(corpus)
    with CorpusWriter(tmp_path / "sig", model=recorded.manifest.model, compile=recorded.manifest.compile,
                      keep="signatures", full_per_signature=0) as writer:
        for sample in recorded:
            writer.add(*sample.args, **sample.kwargs)
    analysis = guardscope.analyze(tmp_path / "sig", tmp_path / "out")
    got = json.loads(analysis.catalog_path.read_text())
    assert got["corpus"]["signatures"]["samples"] == SAMPLES
    if len(expected["frames"]) > 1:
        assert got["corpus"]["signatures"]["later_frames_exact"] is False
        assert any("later frames see values computed from tensor data" in w for w in analysis.warnings)
        return

    def shape(catalog):
        return (catalog["summary"]["compile_samples"],
                [(t["compile_id"], t["samples"]) for t in catalog["topologies"]])

    assert shape(got) == shape(expected)


def test_fidelity_calls_a_failure_kind_read_another_way_wording_not_different(analyses):
    """Issue 36 item 8: PyG on the H200 printed a guard as ``0<=num_nodes<=1`` (an operator guard)
    where the CPU analysis read ``num_nodes==1`` (a 0/1 specialization): the same compile, against
    the same graph, the same members everywhere. That is wording, not a difference production
    would feel (before: DIFFERENT)."""
    import copy

    from guardscope.proving.fidelity import compare

    _, _, catalog = analyses("gcn", None)
    checked = copy.deepcopy(catalog)
    failure = next(f for c in checked["compiles"] for f in c["failures"] if f["kind"] == "operator_guard")
    failure.update(kind="zero_one_specialization", causes=["zero_one_specialization"],
                   guard=failure["guard"].replace("<=", "=="))
    kinds = checked["summary"]["failures_by_kind"]
    kinds["operator_guard"] -= 1
    kinds["zero_one_specialization"] = kinds.get("zero_one_specialization", 0) + 1
    document = compare(catalog, checked, backend="inductor", device="cuda", mode=None)
    assert (document["verdict"], document["same_in_production"]) == ("wording", True), document["summary"]
    assert any(line.startswith("  ≈ sample") and "operator_guard 1 → 0" in line for line in document["summary"])
    # a failure against another graph is still a difference
    failure["against"] = next(c["compile_id"] for c in checked["compiles"] if c["compile_id"] != failure["against"])
    assert compare(catalog, checked, backend="inductor", device="cuda", mode=None)["verdict"] == "different"


def test_an_operator_guard_is_read_in_words_with_its_operator_and_model_line(analyses):
    """Issue 36 item 9: an operator's own guard is an expression torch derived inside the operator
    (PyG's scatter: ``1 <= ___stack0`` from ``is_contiguous``, called from ``src.view(size)``). The
    report reads it in words and names the operator and the model line, not the expression alone."""
    from guardscope.report.sections import failures_context

    corpus, _, catalog = analyses("gcn", None)
    (kind,) = [k for k in failures_context(catalog) if k["kind"] == "operator_guard"]
    (guard,) = kind["guards"]
    assert guard["reading"] == "___stack0 is at least 1"
    assert guard["operator"].startswith("is_contiguous (") and "in broadcast" in guard["user_source"]
    page = (corpus.parent / "out" / "report.html").read_text()
    assert "reads: ___stack0 is at least 1" in page and "derived inside torch's <code>is_contiguous" in page
