"""Issue 23 items 8 and 9, on the user's text classifier (tests.models.TextClassifier: an
embedding, a 2-layer nn.TransformerEncoder with a key padding mask, mean pool, a linear head,
forward(token_ids, padding_mask, temperature=None); dynamic=None, fullgraph=False)."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

import guardscope
from guardscope import cli, store
from guardscope.corpus.writer import CorpusWriter

from ..paths import model_spec
from ..sessions import copy_analysis
from ..unit.test_torch_logs import terminal_streams

# (batch, length, temperature): 0.5 first, so the graph specialises to it; a second value makes
# it any float; then None, the same sizes; then batches and lengths of 1, whose dims emit-warmup's
# unbacked plan marks.
CALLS = [(2, 8, 0.5), (2, 8, 0.7), (2, 8, None), (1, 8, 0.5), (3, 9, 0.5), (1, 5, 0.5), (4, 1, 0.5)]


@pytest.fixture(scope="module")
def classifier_analysis(tmp_path_factory):
    root = tmp_path_factory.mktemp("classifier")
    torch.manual_seed(0)
    with CorpusWriter(root / "corpus", model=model_spec("TextClassifier"), compile={"dynamic": None}) as writer:
        for batch, length, temperature in CALLS:
            writer.add(torch.randint(0, 100, (batch, length)), torch.zeros(batch, length, dtype=torch.bool),
                       temperature=temperature)
    guardscope.analyze(root / "corpus", root / "out")
    return root / "out"


def test_facts_name_the_temperature_a_graph_was_specialised_to(classifier_analysis):
    catalog = json.loads((classifier_analysis / store.CATALOG).read_text())
    facts = {t["first_sample"]: t["facts"] for t in catalog["topologies"]}
    assert "temperature is 0.5" in facts[0]
    assert "temperature is any float but NaN" in facts[1]
    assert facts[2][0] == "without temperature" and not any(f.startswith("temperature") for f in facts[2])


def test_none_for_a_compiled_float_is_an_optional_argument(classifier_analysis):
    catalog = json.loads((classifier_analysis / store.CATALOG).read_text())
    (last,) = [c for c in catalog["compiles"] if c["sample"] == 2]
    on_temperature = [f for f in last["failures"] if f["inputs"] == ["temperature"]]
    # against the graphs for 0.5 (temperature == 0.5) and for any float (___check_type_id)
    assert {f["guard"].split("(")[0].split(" ")[0] for f in on_temperature} == {"temperature", "___check_type_id"}
    assert {(f["kind"], f["actual"]) for f in on_temperature} == {("optional_argument", "None")}
    assert "type_mismatch" not in catalog["summary"]["failures_by_kind"]


def test_emit_warmup_keeps_torchs_tracebacks_in_a_file(classifier_analysis, monkeypatch):
    terminal = terminal_streams(monkeypatch)
    result = CliRunner().invoke(cli.main, ["emit-warmup", str(classifier_analysis)])
    assert result.exit_code == 0, result.output
    assert terminal.getvalue() == ""  # torch printed nothing to the terminal
    log = classifier_analysis / store.EMIT_LOG
    if not log.exists():  # torch 2.14.1 logs nothing while the plans are tried here (2.13.0: a traceback each)
        assert not any(line.startswith("torch ") for line in result.output.splitlines()), result.output
        pytest.skip(f"torch {torch.__version__} logged nothing while emit-warmup tried this model's plans")
    assert "GuardOnDataDependentSymNode" in log.read_text() and "Traceback" in log.read_text()
    torch_lines = [line for line in result.output.splitlines() if line.startswith("torch ")]
    assert torch_lines and len(torch_lines) == len(set(torch_lines))
    assert any("GuardOnDataDependentSymNode" in line and f"(full log: {log})" in line for line in torch_lines)
    assert not any(line.startswith(("E1", "W1", "Traceback")) for line in result.output.splitlines())
    assert store.EMIT_LOG in json.loads((classifier_analysis / store.OWNED).read_text())
    # keeping the lines changes nothing Dynamo compiles: it does not trace guardscope's handlers
    assert "Dynamo does not know how to trace" not in log.read_text()
    unbacked = next(a for a in json.loads((classifier_analysis / store.FIXES).read_text())["artifacts"]
                    if a["name"] == "unbacked")
    assert not any("marked as skipped" in added for added in unbacked["details"]["added_graph_breaks"])


def test_emit_warmup_plans_the_warmup_first_and_alone_when_asked(classifier_analysis, tmp_path, monkeypatch):
    """Issue 51 item 2: emit-warmup showed one line for minutes while it planned every plan. Now
    each plan's start and end go to stderr, the warmup first, a plan that compiles more graphs than
    the warmup says so; '--only warmup' writes warmup.py and fixes.json without planning (or
    compiling) anything else, fixes.json says what was not planned and how to plan it, and verify,
    serve and the report read it."""
    from guardscope.fixes import document, plan, warmup_plan
    from guardscope.proving.verify import deployed_artifacts, run_artifact
    from guardscope.report.recommendation import choose_fix
    from guardscope.runtime.serving import choose_plan

    out = copy_analysis(classifier_analysis, tmp_path / "out")
    result = CliRunner().invoke(cli.main, ["emit-warmup", str(out)])
    assert result.exit_code == 0, result.output
    planning = [line for line in result.stderr.splitlines() if line.startswith("planning ")]
    assert [line.split(":")[0] for line in planning] == ["planning 1 of 4", "planning 2 of 4", "planning 3 of 4",
                                                        "planning 4 of 4"]
    assert "the warmup" in planning[0] and "shapes_spec" in planning[3]
    assert sum("compiled alone serves" in line for line in result.stderr.splitlines()) == 7  # one per topology
    fixes = json.loads((out / store.FIXES).read_text())
    warmup, unbacked = fixes["artifacts"][0], fixes["artifacts"][1]
    graphs = warmup["details"]["graphs"]
    if unbacked["details"]["graphs"] > graphs:  # 8 graphs in two frames beside the warmup's 7 (torch 2.13)
        assert unbacked["costs_more"] == f"costs {unbacked['details']['graphs']} graphs, the warmup {graphs}"
        assert f"unbacked    costs {unbacked['details']['graphs']} graphs, the warmup {graphs}" in result.stdout

    def refuse(*args, **kwargs):
        raise AssertionError("--only warmup planned something else")

    for module, name in ((warmup_plan, "coverage_after_warmup"), (plan, "residual_samples"), (document, "plan_export"),
                         (document, "plan_spec")):
        monkeypatch.setattr(module, name, refuse)
    result = CliRunner().invoke(cli.main, ["emit-warmup", str(out), "--only", "warmup"])
    assert result.exit_code == 0, result.output
    assert "planning 1 of 1: the warmup from the analysis's compiles" in result.stderr
    assert (out / "warmup.py").is_file() and not (out / "unbacked.py").exists()
    assert not (out / "export_dims.py").exists()
    fixes = json.loads((out / store.FIXES).read_text())
    by_name = {a["name"]: a for a in fixes["artifacts"]}
    assert by_name["warmup"]["status"] == "ok" and by_name["warmup"]["details"]["cover_measured"] is False
    assert by_name["warmup"]["details"]["graphs"] == graphs  # the analysis's: one graph per topology here
    for name in ("unbacked", "export"):
        assert by_name[name]["status"] == "not planned" and f"--only {name}" in by_name[name]["reason"]
        assert f"{name:<11} not planned" in result.stdout
    chosen, left_out = deployed_artifacts(out)
    assert chosen == ("warmup",) and set(left_out) == {"unbacked", "export", "shapes_spec"}
    skipped = run_artifact(out, "unbacked", holdout=None, timeout=60)
    assert skipped["status"] == "skipped" and "--only unbacked" in skipped["reason"]
    assert choose_plan("auto", fixes, None)[0] == "warmup"
    states = {s["name"]: s["state"] for s in choose_fix(fixes, None, None)["fixes"]}
    assert states == {"warmup": "unverified", "unbacked": "not planned", "export": "not planned"}
    assert "not planned: emit-warmup was asked (--only) for warmup;" in (out / store.REPORT).read_text()


def test_an_export_that_serves_no_sample_is_not_possible_with_the_reason(tmp_path):
    """Issue 36 item 6: every call has its own temperature (a Python float: Dynamo makes it any
    float after the second value, torch.export fixes it to the example's). The program then takes
    none of the samples, its own topology's included: that is no fix (before: "export 0 Dims: ;"
    and verify's PARTIAL, "0 of their 8 samples (0%) ... as planned")."""
    torch.manual_seed(0)
    with CorpusWriter(tmp_path / "corpus", model=model_spec("TextClassifier"), compile={"dynamic": None}) as writer:
        for temperature in (0.5, 0.7, 0.9, 1.1, 1.3, 0.6, 0.8, 1.0):
            writer.add(torch.randint(0, 100, (2, 8)), torch.zeros(2, 8, dtype=torch.bool), temperature=temperature)
    out = tmp_path / "out"
    guardscope.analyze(tmp_path / "corpus", out)
    result = CliRunner().invoke(cli.main, ["emit-warmup", str(out)])
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("export")]
    assert line.startswith("export      NOT POSSIBLE on this model, export_dims.py not written: the program exported "
                           "from sample 1 takes none of the 8 samples, not even all of its own topology T1")
    assert "pass temperature as a 0-d tensor" in line and "torch's whole message" not in line
    assert not (out / "export_dims.py").exists()
    export = next(a for a in json.loads((out / store.FIXES).read_text())["artifacts"] if a["name"] == "export")
    assert export["status"] == "infeasible"
    assert {o["topology"] for o in export["details"]["outside"]} == {0, 1}  # each with its own reason, kept
