"""The HTML guard report: structure of the seed report, escaping, size at 10,000 samples, the
recommendation box's rule in each state, a real headless Chromium, and the ``guardscope report``
command.

Pages are checked through a parsed element tree (html.parser), never by matching whole pages.

This file holds the tests that compile in this process; the others are in tests/unit/test_report.py,
tests/subprocess/test_report.py.
"""

from __future__ import annotations

import copy
import json
import re

import pytest
from click.testing import CliRunner

from guardscope import cli, store
from guardscope.report.page import read_inputs, render_report
from guardscope.text import format_duration

from ..builders import FIXES, VERIFICATION
from ..pages import EVIL, Node, parse, words

SECTIONS = ("recommendation", "summary", "timeline", "failures", "topologies", "dimensions", "risk", "fixes", "trace")

def stats(page: Node) -> dict[str, str]:
    return {
        words(s.find(class_="stat-label")): words(s.find(class_="stat-value"))
        for s in page.find("section", id="summary").find_all(class_="stat")
    }


# --- inputs ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seed_inputs(seed_report):
    return read_inputs(seed_report)


# --- the seed report -------------------------------------------------------------------------

def test_the_headline_says_what_production_lives_through(seed_report, seed_inputs):
    page = parse((seed_report / "report.html").read_text())
    headline = page.find(id="production")
    assert words(headline).startswith("In production, recompile_limit 8 (torch default): forward")
    assert "reaches the limit at sample 112" in words(headline.find("strong"))
    assert "3 samples (1.0% of traffic) would FAIL with FailOnRecompileLimitHit" in words(headline)
    within = copy.deepcopy(seed_inputs["catalog"])
    within["production"].update(failed_samples=[], recompile_limit=16)
    within["production"]["frames"][0].update(limit=16, reached_at=None, margin=5, failed=0, share=0.0)
    calm = parse(render_report(within, **{k: v for k, v in seed_inputs.items() if k != "catalog"})).find(id="production")
    assert words(calm) == ("In production, recompile_limit 16 (torch default): forward (gnn/model.py:50) needs 11 "
                           "graphs, 5 under the limit.") and calm.find_all("strong") == []
    assert parse(render_report(within, **{k: v for k, v in seed_inputs.items() if k != "catalog"})).find_all(
        id="raise-limit") == []  # nothing reaches the limit: no reason to raise it
    del within["production"]  # a catalog from before guardscope modelled the limits
    assert parse(render_report(within, **{k: v for k, v in seed_inputs.items() if k != "catalog"})).find_all(
        id="production") == []


def test_raising_the_limit_is_an_option_with_its_cost_where_production_reaches_it(seed_report, seed_inputs):
    """Issue 35: beside the plans, the fix that needs none, with what it costs: the graphs the
    traffic needs, compiled while serving, and the compile seconds the analysis measured."""
    option = words(parse((seed_report / "report.html").read_text()).find(id="raise-limit"))
    seconds = sum(c["seconds"] for c in seed_inputs["timings"]["compiles"] if c["seconds"] is not None)
    assert option.startswith("The fix that needs no plan: raise the limit to 11 (")
    per_call = tuple(int(x) for x in seed_inputs["catalog"]["torch_version"].split(".")[:2]) >= (2, 13)
    assert ("torch.compile(..., recompile_limit=11)" in option) == per_call
    # torch 2.13 keeps a Dynamo setting made in code per thread; before, it is the process's
    assert ("torch._dynamo.config.recompile_limit = 11 on each thread that compiles: torch 2.13 keeps a setting made "
            "in code per thread" if per_call else "torch._dynamo.config.recompile_limit = 11, a global setting of the "
            "process") in option
    assert "each of the 11 graphs compiles while serving" in option
    assert (f"{format_duration(seconds)} of compiling in all, as the analysis measured them with its eager backend, "
            "not production's stall") in option


def test_seed_report_has_every_section_count_topology_and_kind(seed_report, seed_inputs):
    catalog = seed_inputs["catalog"]
    summary = catalog["summary"]
    page = parse((seed_report / "report.html").read_text())

    assert [s.attrs["id"] for s in page.find_all("section")] == list(SECTIONS)
    assert page.find_all("script") == [] and page.find_all("link") == [] and page.find_all("img") == []

    shown = stats(page)
    assert shown["samples replayed"] == str(catalog["corpus"]["samples"]) == "300"
    assert shown["compiles"] == str(summary["compiles"]) == "11"
    assert shown["recompiles"] == str(summary["recompiles"]) == "10"
    assert shown["topologies"] == str(summary["topologies"]) == "11"
    worst = max(seed_inputs["timings"]["compiles"], key=lambda c: c["seconds"])
    slowest = page.find("section", id="summary").find_all(class_="stat")[5]
    assert f"compile {worst['compile_id']}, sample {worst['sample']}" in words(slowest)
    recompiles = words(page.find("section", id="summary").find(class_="samples"))
    assert recompiles == ", ".join(map(str, summary["recompile_samples"]))

    topologies = page.find("section", id="topologies")
    for topology in catalog["topologies"]:
        card = topologies.find("article", id=f"topology-{topology['id']}")
        assert words(card.find("h3")) == f"T{topology['id']}"
        assert words(card.find(class_="card-meta")).startswith(f"{topology['count']} sample")
        assert [words(li) for li in card.find("ul", class_="facts").find_all("li")] == topology["facts"]
        assert card.find("details", class_="members").find("summary")
    assert len(topologies.find_all("article")) == 11

    failures = page.find("section", id="failures")
    bars = {a.attrs["href"][len("#kind-"):]: words(a.find(class_="kind-count"))
            for a in failures.find_all("a", class_="kind-bar")}
    assert bars == {kind: str(count) for kind, count in summary["failures_by_kind"].items()}
    for kind in summary["failures_by_kind"]:
        card = failures.find("article", id=f"kind-{kind}")
        guards = card.find("details").find_all("li")
        assert sum(int(re.search(r"×(\d+)", words(g)).group(1)) for g in guards) == summary["failures_by_kind"][kind]
    # The user's source line of a 0/1 guard is shown, as torch reported it.
    sources = [words(p) for p in failures.find_all("p", class_="source")]
    assert any("gnn/model.py:70 in forward" in s for s in sources)

    rows = page.find("section", id="timeline").find("tbody").find_all("tr")
    assert [words(r.find_all("td")[1]) for r in rows] == [str(s) for s in summary["compile_samples"]]
    labels = [words(t) for t in page.find("section", id="timeline").find("g", class_="labels").find_all("text")]
    assert "T7 #84" in labels and len(labels) == 11

    dims = page.find("section", id="dimensions").find("tbody").find_all("tr")
    assert [words(r.find("td")) for r in dims] == [d["dim"] for d in catalog["dimensions"]]

    fixes = page.find("section", id="fixes")
    assert "guardscope emit-warmup DIR" in words(fixes) and "guardscope verify DIR" in words(fixes)
    box = page.find("section", id="recommendation")
    assert "recommendation-none" in box.attrs["class"] and words(box.find("h2")) == "No fix yet"
    assert [words(c) for c in box.find_all("code")] == ["guardscope emit-warmup DIR", "guardscope verify DIR"]

    trace = page.find("section", id="trace")
    hrefs = [a.attrs["href"] for a in trace.find_all("a")]
    assert "trace/" in hrefs and "trace/torch_trace.log" in hrefs
    assert "tlparse trace/torch_trace.log" in trace.find("pre").text()


def test_report_is_self_contained_and_deterministic(seed_report, seed_inputs):
    html = (seed_report / "report.html").read_text()
    assert render_report(**seed_inputs) == html
    assert str(seed_report) not in html  # paths appear only as the catalog spells them (relative)
    for node in parse(html).iter():
        for attr in ("href", "src", "action", "srcset", "xlink:href"):
            value = node.attrs.get(attr)
            if value is not None:
                assert not re.match(r"^[a-z][a-z0-9+.-]*:|^//", value, re.I), f"{node.tag} {attr}={value}"
    assert not re.search(r"https?://", html)
    assert "@import" not in html and "url(" not in html


def test_fixes_and_verification_render_with_status(seed_inputs):
    inputs = dict(seed_inputs, fixes=FIXES, verification=VERIFICATION)
    page = parse(render_report(**inputs))
    fixes = page.find("section", id="fixes")
    for artifact in FIXES["artifacts"]:
        card = fixes.find("article", id=f"fix-{artifact['name']}")
        assert card.find("pre").find("code").text() == artifact["code"]
        assert words(card.find("a", class_="file")) == artifact["file"]
    warmup, unbacked, export = (fixes.find("article", id=f"fix-{n}") for n in ("warmup", "unbacked", "export"))
    assert words(warmup.find(class_="badge")) == "passed" and "fix-passed" in warmup.attrs["class"]
    assert words(unbacked.find(class_="badge")) == "failed" and "fix-failed" in unbacked.attrs["class"]
    assert "2 samples still recompiled" in words(unbacked.find(class_="result"))
    assert "2 at samples 1, 4" in words(unbacked.find("dl"))
    assert words(export.find(class_="badge")) == "crashed"
    assert [words(td) for td in export.find("tbody").find_all("tr")[1].find_all("td")] == \
        ["T1", "failed", "Constraints violated"]
    verdict = page.find("section", id="summary").find(class_="verdict")
    assert "verdict-failed" in verdict.attrs["class"]
    assert words(verdict.find(class_="stat-note")) == "1 passed, 1 failed, 1 crashed"


def test_guard_text_with_markup_renders_as_text(seed_inputs):
    catalog = copy.deepcopy(seed_inputs["catalog"])
    failure = catalog["compiles"][1]["failures"][0]
    failure.update(raw=f"0/0: {EVIL}", guard=EVIL, user_source=EVIL, hint=EVIL)
    catalog["topologies"][0]["facts"].append(EVIL)
    catalog["model"] = EVIL
    fixes = {"schema": 1, "artifacts": [dict(FIXES["artifacts"][0], code=EVIL, summary=EVIL)]}
    html = render_report(catalog, timings=seed_inputs["timings"], fixes=fixes, verification=None)
    page = parse(html)
    assert page.find_all("script") == []
    texts = [c for node in page.iter() for c in node.children if isinstance(c, str)]
    assert sum(EVIL in t for t in texts) >= 6
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in html


def test_report_without_timings_still_renders(seed_inputs):
    page = parse(render_report(seed_inputs["catalog"], timings=None, fixes=None, verification=None))
    assert stats(page)["the analysis's compile time"] == "n/a"
    svg = page.find("section", id="timeline").find("svg")
    assert len(svg.find("g", class_="markers").find_all("circle")) == 11


# --- the command line ------------------------------------------------------------------------

def test_report_command_rerenders_from_json(seed_report, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for name in (store.CATALOG, store.TIMINGS):
        (out / name).write_text((seed_report / name).read_text())
    (out / "fixes.json").write_text(json.dumps(FIXES))
    (out / "verification.json").write_text(json.dumps(VERIFICATION))
    result = CliRunner().invoke(cli.main, ["report", str(out)])
    assert result.exit_code == 0, result.output
    page = parse((out / "report.html").read_text())
    assert page.find("article", id="fix-unbacked")
    assert words(page.find("section", id="summary").find(class_="verdict").find(class_="stat-value")) == "failed"

    missing = CliRunner().invoke(cli.main, ["report", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "guardscope analyze" in missing.output
