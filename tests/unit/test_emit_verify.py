"""emit-warmup and verify on the seed corpus: fixes generated from the catalog, proven on it.

This file holds the pure tests (no torch.compile, no child process); the others are in
tests/integration/test_emit_verify.py, tests/subprocess/test_emit_verify.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from guardscope import checkpoint, cli, store
from guardscope.catalog.builder import CatalogBuilder
from guardscope.catalog.caveats import caveats, small_corpus_warning
from guardscope.fixes.plan import choose_export_dims
from guardscope.fixes.warmup_plan import choose_cover
from guardscope.model import Catalog, CompileEvent, SampleMeta, TensorMeta
from guardscope.proving import verify
from guardscope.proving.verify_export import export_result
from guardscope.report.page import write_report

from ..builders import FIXES, write_sized_corpus
from ..pages import parse, words
from ..paths import model_spec

GOLDEN = json.loads((Path(__file__).parents[1] / "golden" / "seed_catalog.json").read_text())


def test_choose_cover_prefers_general_graphs():
    # 1 serves 0 (equal counts are a special case of unequal ones); the rest serve themselves.
    covers = {0: {0}, 1: {0, 1}, 2: {2}, 3: {3}}
    assert choose_cover([0, 1, 2, 3], covers) == [1, 2, 3]
    # a cycle (two graphs that accept each other) needs one of them
    assert choose_cover([0, 1], {0: {0, 1}, 1: {0, 1}}) == [0]


def test_export_margin():
    plan = choose_export_dims(GOLDEN, margin=0.5)
    assert {d.name: d.max for d in plan.dims}["x_0"] == 90


# --- what a pass proves: partial exports, corpora too small to speak for production ---------------


def export_topologies(ran: int, outside: int) -> list[dict]:
    return ([{"id": t, "status": "passed", "passed": True, "error": None} for t in range(ran)]
            + [{"id": t, "status": "outside", "passed": False, "error": "outside the Dims: z is None"}
               for t in range(ran, ran + outside)])


def test_an_export_that_leaves_topologies_outside_its_dims_is_partial_with_the_share_it_serves():
    counts = {t: 30 if t < 4 else 22 for t in range(12)}  # 120 of 296 samples in the 4 it runs
    result = export_result(export_topologies(4, 8), counts=counts, setup_seconds=1.0)
    assert result["status"] == "partial"
    assert (result["served_samples"], result["topology_samples"]) == (120, 296)
    assert result["reason"].startswith("serves 4 of 12 topologies, 120 of their 296 samples (41%): T4, T5")
    assert export_result(export_topologies(12, 0), counts=counts, setup_seconds=1.0)["status"] == "passed"


@pytest.mark.parametrize(("statuses", "expected"), [
    (("passed", "passed", "passed"), "passed"),
    (("passed", "infeasible", "skipped"), "passed"),
    (("passed", "passed", "partial"), "partial"),
    (("infeasible", "infeasible", "partial"), "partial"),
    (("passed", "crashed", "partial"), "failed"),
    (("skipped", "infeasible"), "failed"),  # nothing proven
])
def test_the_verdict_is_a_full_pass_only_when_no_fix_is_partial(statuses, expected):
    assert verify.verdict([{"status": status} for status in statuses]) == expected


def test_a_corpus_too_small_for_its_risk_estimate_is_said_so_in_one_line():
    assert small_corpus_warning(GOLDEN["risk"]) is None  # 9 singletons in 300 samples: 3%
    one = small_corpus_warning({"samples": 1, "singleton_topologies": 1, "unseen_topology_probability": 1.0})
    assert one.startswith("the corpus is too small to speak for production: 1 of 1 sample had a topology seen only "
                          "once, so the chance the next request needs a graph the corpus never compiled is about "
                          "100% (Good-Turing)") and "\n" not in one
    ten = small_corpus_warning({"samples": 10, "singleton_topologies": 0, "unseen_topology_probability": 0.0})
    assert "10 samples cannot show that the chance" in ten and "below 30% (the rule of three)" in ten
    # analyze prints it among its warnings
    assert one in caveats(one_request_catalog(), recompile_limit=4096, frames_followed=True, torch_version="2.13.0",
                          out=Path("out"))


def one_request_catalog() -> Catalog:
    """The catalog of a corpus of one request (Elementwise, one graph), built from the replay's
    description of that request: nothing compiles."""
    builder = CatalogBuilder()
    builder.add_sample(SampleMeta(index=0, tensors=(("x", TensorMeta((5,), (1,), "float32", "cpu", False)),),
                                  lengths=(), scalars=(), serving="0/0"))
    return builder.build(events=[CompileEvent("0/0", 0, 0, 0, "forward", None)], torch_version="2.13.0",
                         corpus_path="../corpus", model=model_spec("Elementwise"),
                         compile_options={"backend": "eager", "device": "cpu", "dynamic": True, "fullgraph": True})


def one_request_analysis(tmp_path) -> Path:
    """An analysis folder of :func:`one_request_catalog` and its corpus."""
    corpus = write_sized_corpus(tmp_path / "corpus", [5])
    out = store.prepare_output_dir(tmp_path / "out")
    checkpoint.write_analysis(out, one_request_catalog().to_json(), corpus=corpus,
                         timings={"replay_seconds": 0.1, "compiles": []})
    return out


def verified_as(monkeypatch, **results: dict) -> None:
    """verify's children replaced by these results (no process starts)."""
    monkeypatch.setattr(verify, "run_artifact", lambda out, name, **_: results[name])


def test_verify_of_a_one_request_corpus_warns_that_its_passes_prove_little(tmp_path, monkeypatch):
    out = one_request_analysis(tmp_path)
    verified_as(monkeypatch, warmup=verify._result("warmup", "passed", setup_graphs=1, setup_seconds=0.1,
                                                   replay_recompiles=0, samples_replayed=1),
                unbacked=verify._result("unbacked", "passed", setup_graphs=1, setup_seconds=0.1,
                                        replay_recompiles=0, samples_replayed=1),
                export=export_result(export_topologies(1, 0), counts={0: 1}, setup_seconds=0.1))
    result = CliRunner().invoke(cli.main, ["verify", str(out)])
    assert result.exit_code == 0, result.output
    # one_request_catalog() has no production section: the proof is under torch.compile's default backend
    assert (f"verdict     PASSED under inductor (torch.compile's default): warmup passed, unbacked passed, "
            f"export passed ({out / 'verification.json'})") in result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "too small to speak for production" in warnings[0] and "100%" in warnings[0]
    assert json.loads((out / "verification.json").read_text())["warnings"] == [warnings[0][len("warning: "):]]


def test_verify_says_partial_when_the_export_serves_a_third_of_the_topologies(tmp_path, monkeypatch):
    out = one_request_analysis(tmp_path)
    export = export_result(export_topologies(4, 8), counts={t: 25 for t in range(12)}, setup_seconds=1.0)
    verified_as(monkeypatch, warmup=verify._result("warmup", "failed", "2 compile(s) during the replay"),
                unbacked=verify._result("unbacked", "infeasible", "no dimension to mark"), export=export)
    result = CliRunner().invoke(cli.main, ["verify", str(out)])
    assert result.exit_code == 1, result.output  # the warmup failed
    verified_as(monkeypatch, warmup=verify._result("warmup", "passed", setup_graphs=1, setup_seconds=0.1,
                                                   replay_recompiles=0, samples_replayed=1),
                unbacked=verify._result("unbacked", "infeasible", "no dimension to mark"), export=export)
    result = CliRunner().invoke(cli.main, ["verify", str(out)])
    assert result.exit_code == 0, result.output  # nothing failed
    lines = result.output.splitlines()
    assert "export    PARTIAL  set-up 1 graphs in 1.0 s; 4/12 topologies run, 100/300 samples served (33%)" in lines
    assert "          serves 4 of 12 topologies, 100 of their 300 samples (33%): T4, T5, T6, T7, T8, T9, T10, T11 " \
           "are outside the Dims, as planned" in lines
    assert any(line.startswith("verdict     PARTIAL under inductor (torch.compile's default): warmup passed, "
                               "unbacked infeasible, export partial") for line in lines)
    document = json.loads((out / "verification.json").read_text())
    assert (document["verdict"], document["passed"]) == ("partial", False)

    store.write_document(out, store.FIXES, FIXES)
    page = parse(write_report(out).read_text())
    verdict = page.find("section", id="summary").find(class_="verdict")
    assert "verdict-partial" in verdict.attrs["class"] and words(verdict.find(class_="stat-value")) == "partial"
    box = page.find("section", id="recommendation")
    assert words(box.find("h2")).startswith("Recommended fix: Warmup set")  # never the partial export
    export_line = next(words(li) for li in box.find_all("li") if words(li).startswith("export"))
    assert export_line.startswith("export partial: serves 4 of 12 topologies")
    assert "(torch.export is recommended only when" not in export_line
    assert words(page.find("article", id="fix-export").find("p", class_="result")).startswith("Partial: serves 4 of 12")


def test_verify_proves_what_would_be_deployed_and_the_rest_on_request(tmp_path, monkeypatch):
    """Issue 51, item 6: by default verify proves the warmup and its peers, the plans that compile
    no more graphs at set-up; the shapes_spec form of 140 graphs beside a warmup of 4 is reported
    skipped, saying why and how to prove it, and proven with --all or --artifact."""
    out = one_request_analysis(tmp_path)
    spec = {"status": "ok", "reason": None, "dims": ["x:0"], "residual_samples": [0], "graphs": 140}
    fixes = {"schema": 1, "artifacts": [
        {**FIXES["artifacts"][0], "status": "ok", "details": {"samples": [0], "graphs": 4}},
        {**FIXES["artifacts"][1], "status": "ok", "details": {"graphs": 3, "shapes_spec": spec}},
        {**FIXES["artifacts"][2], "status": "ok"}]}
    store.write_document(out, store.FIXES, fixes)
    proven = []

    def run_artifact(out_dir, name, **_):
        proven.append(name)
        return verify._result(name, "passed", setup_graphs=1, setup_seconds=0.1, replay_recompiles=0,
                              samples_replayed=1)

    monkeypatch.setattr(verify, "run_artifact", run_artifact)
    result = CliRunner().invoke(cli.main, ["verify", str(out)])
    assert result.exit_code == 0, result.output
    assert proven == ["warmup", "unbacked", "export"]
    lines = result.output.splitlines()
    skipped = lines.index("shapes_spec SKIPPED ")
    assert lines[skipped + 1] == (f"          not proven by default: it compiles 140 graphs at set-up, more than the "
                                  f"warmup's 4 (the plan to deploy); 'guardscope verify {out} --all' or "
                                  "'--artifact shapes_spec' proves it")
    statuses = {r["name"]: r["status"] for r in json.loads((out / "verification.json").read_text())["artifacts"]}
    assert statuses == {"warmup": "passed", "unbacked": "passed", "export": "passed", "shapes_spec": "skipped"}

    proven.clear()
    assert CliRunner().invoke(cli.main, ["verify", str(out), "--all"]).exit_code == 0
    assert proven == ["warmup", "unbacked", "export", "shapes_spec"]
    proven.clear()
    assert CliRunner().invoke(cli.main, ["verify", str(out), "--artifact", "shapes_spec"]).exit_code == 0
    assert proven == ["shapes_spec"]
    # An unbacked plan of more graphs than the warmup is left out too.
    fixes["artifacts"][1]["details"]["graphs"] = 6
    store.write_document(out, store.FIXES, fixes)
    chosen, left_out = verify.deployed_artifacts(out)
    assert chosen == ("warmup", "export") and sorted(left_out) == ["shapes_spec", "unbacked"]
