"""The HTML guard report: structure of the seed report, escaping, size at 10,000 samples, the
recommendation box's rule in each state, a real headless Chromium, and the ``guardscope report``
command.

Pages are checked through a parsed element tree (html.parser), never by matching whole pages.
"""

from __future__ import annotations

import copy
import json
import random
import re
import shutil
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import guardscope
from guardscope import cli, output, pipeline
from guardscope.errors import CatalogError
from guardscope.report import choose_fix, read_inputs, render_report, usage_code, write_report

from .conftest import SEED_CORPUS
from .headless_chromium import _Pipe, chromium_binary, open_page

SECTIONS = ("recommendation", "summary", "timeline", "failures", "topologies", "dimensions", "risk", "fixes", "trace")
EVIL = "<script>alert(1)</script> & more"


# --- a small element tree over html.parser ---------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self):
        yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.iter()

    def find_all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        def matches(node: Node) -> bool:
            if tag and node.tag != tag:
                return False
            for key, value in attrs.items():
                key = key.rstrip("_")
                if key == "class":
                    if value not in (node.attrs.get("class") or "").split():
                        return False
                elif node.attrs.get(key) != value:
                    return False
            return True

        return [n for n in self.iter() if matches(n)]

    def find(self, tag: str | None = None, **attrs: str) -> Node:
        found = self.find_all(tag, **attrs)
        assert found, f"no <{tag or '*'} {attrs}> in <{self.tag} id={self.attrs.get('id')}>"
        return found[0]


class TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.current = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.current)
        self.current.children.append(node)
        if tag not in VOID:
            self.current = node

    def handle_endtag(self, tag):
        node = self.current
        while node is not self.root and node.tag != tag:
            node = node.parent
        assert node is not self.root, f"stray </{tag}>"
        self.current = node.parent

    def handle_data(self, data):
        self.current.children.append(data)


def parse(html: str) -> Node:
    builder = TreeBuilder()
    builder.feed(html)
    builder.close()
    assert builder.current is builder.root, f"unclosed <{builder.current.tag}>"
    return builder.root


def words(node: Node) -> str:
    return " ".join(node.text().split())


def stats(page: Node) -> dict[str, str]:
    return {
        words(s.find(class_="stat-label")): words(s.find(class_="stat-value"))
        for s in page.find("section", id="summary").find_all(class_="stat")
    }


# --- inputs ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    """The seed corpus analysed once for the module (real torch.compile, about 20 s)."""
    out = tmp_path_factory.mktemp("seed-report")
    guardscope.analyze(SEED_CORPUS, out, strict=True, force=True)
    write_report(out)
    return out


@pytest.fixture(scope="module")
def seed_inputs(seed):
    return read_inputs(seed)


FIXES = {"schema": 1, "artifacts": [
    {"name": "warmup", "file": "warmup.py", "title": "Warmup set",
     "summary": "10 samples compile 10 graphs (one per topology would be 11)",
     "code": 'def warmup(model):\n    """Run the warmup samples."""\n    for sample in SAMPLES:\n        model(*sample)\n',
     "details": {"samples": 10, "graphs": 10}},
    {"name": "unbacked", "file": "unbacked.py", "title": "mark_unbacked configuration",
     "summary": "duck sizing off; 4 dimensions unbacked",
     "code": "def configure():\n    pass\n", "details": {}},
    {"name": "export", "file": "export_dims.py", "title": "torch.export dims",
     "summary": "5 Dims", "code": "DYNAMIC_SHAPES = {}\n", "details": {"dims": 5}},
]}

VERIFICATION = {"schema": 1, "artifacts": [
    {"name": "warmup", "status": "passed", "reason": None, "setup_graphs": 10, "setup_seconds": 5.8,
     "replay_recompiles": 0, "recompile_samples": [], "failures": [], "samples_replayed": 300, "topologies": []},
    {"name": "unbacked", "status": "failed", "reason": "2 samples still recompiled", "setup_graphs": 1,
     "setup_seconds": 0.9, "replay_recompiles": 2, "recompile_samples": [1, 4],
     "failures": [{"sample": 1, "reasons": ["0/0: tensor 'x' stride mismatch at index 0"]},
                  {"sample": 4, "reasons": ["0/0: tensor 'x' stride mismatch at index 0"]}],
     "samples_replayed": 300, "topologies": []},
    {"name": "export", "status": "crashed", "reason": "Segmentation fault", "setup_graphs": None,
     "setup_seconds": None, "replay_recompiles": None, "recompile_samples": [], "failures": [],
     "samples_replayed": None, "topologies": [{"id": 0, "passed": True, "error": None},
                                              {"id": 1, "passed": False, "error": "Constraints violated"}]},
]}


def synthetic_catalog(samples: int = 10_000, topologies: int = 50, extra_compiles: int = 350,
                      failures_per_compile: int = 8) -> tuple[dict, dict]:
    """A catalog (and timings) of corpus scale: every compile fails against earlier graphs with
    sample-specific guard texts, and topology 0 owns every third sample (thousands of runs)."""
    kinds = ["zero_one_specialization", "size_mismatch", "stride_mismatch", "duck_sizing",
             "shape_relation", "dtype_mismatch", "list_length", "other"]
    compiles, timing_compiles = [], []
    compile_samples = sorted({0, *range(1, samples, samples // (topologies + extra_compiles))})
    compile_samples = compile_samples[: topologies + extra_compiles]
    for n, sample in enumerate(compile_samples):
        compile_id = f"0/{n}" if n < topologies else f"1/{n - topologies}"
        failures = [{
            "kind": kinds[(n + k) % len(kinds)],
            "causes": [kinds[(n + k) % len(kinds)]] + (["zero_one_specialization"] if k == 0 and n % 5 == 0 else []),
            "against": f"0/{k}", "inputs": ["x"], "dims": ["x.size()[0]"],
            "guard": f"x.size()[0] == {sample}", "expected": None, "actual": None,
            "user_source": "model.py:12 in forward: y = x.view(-1)", "hint": None,
            "raw": f"0/{k}: tensor 'x' size mismatch at index 0. expected {k}, actual {sample}",
        } for k in range(min(n, failures_per_compile))]
        compiles.append({"sample": sample, "compile_id": compile_id, "co_name": "forward", "seconds": None,
                         "fail_type": None, "failures": failures})
        timing_compiles.append({"compile_id": compile_id, "sample": sample, "seconds": 0.5 + (n % 7) / 3})
    members: dict[int, list[int]] = {t: [] for t in range(topologies)}
    for s in range(samples):
        members[0 if s % 3 == 0 else 1 + s % (topologies - 1)].append(s)
    topology_list = [{"id": t, "compile_id": f"0/{t}", "first_sample": members[t][0], "count": len(members[t]),
                      "samples": members[t], "facts": [f"x dim 0 is {t}", "y dim 1 is at least 2"]}
                     for t in range(topologies)]
    by_kind: dict[str, int] = {}
    for c in compiles:
        for f in c["failures"]:
            for cause in f["causes"]:
                by_kind[cause] = by_kind.get(cause, 0) + 1
    catalog = {
        "schema": 1, "torch_version": "2.13.0", "model": "model.py:build", "replay_mode": "full",
        "corpus": {"path": "../corpus", "samples": samples},
        "compile": {"backend": "eager", "device": "cpu", "dynamic": True, "fullgraph": True, "mode": None},
        "summary": {"compiles": len(compiles), "recompiles": len(compiles) - 1,
                    "compile_samples": compile_samples, "recompile_samples": compile_samples[1:],
                    "failures_by_kind": dict(sorted(by_kind.items())), "topologies": topologies,
                    "failed_samples": 1, "unparsed": {}},
        "compiles": compiles,
        "topologies": topology_list,
        "dimensions": [{"dim": "x.size()[0]", "input": "x", "axis": 0, "min": 0, "max": samples, "dynamic": True,
                        "ever_zero": True, "ever_one": True, "equal_to": ["y.size()[0]"]}],
        "failed_samples": [{"sample": 7, "error": "RuntimeError: shape '[-1, 3]' is invalid"}],
    }
    timings = {"replay_seconds": 812.5, "compiles": timing_compiles,
               "samples": [{"sample": s, "seconds": 0.004 + (s % 11) / 1000} for s in range(samples)]}
    for c in timing_compiles:
        timings["samples"][c["sample"]]["seconds"] += c["seconds"]
    return catalog, timings


# --- the seed report -------------------------------------------------------------------------

def test_seed_report_has_every_section_count_topology_and_kind(seed, seed_inputs):
    catalog = seed_inputs["catalog"]
    summary = catalog["summary"]
    page = parse((seed / "report.html").read_text())

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


def test_report_is_self_contained_and_deterministic(seed, seed_inputs):
    html = (seed / "report.html").read_text()
    assert render_report(**seed_inputs) == html
    assert str(seed) not in html  # paths appear only as the catalog spells them (relative)
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


def test_ten_thousand_samples_stay_small_and_aggregated():
    catalog, timings = synthetic_catalog()
    html = render_report(catalog, timings=timings, fixes=FIXES, verification=VERIFICATION)
    assert len(html.encode()) < 2_000_000
    page = parse(html)
    svg = page.find("section", id="timeline").find("svg")
    assert len(list(svg.iter())) < 1500
    path = svg.find("path", class_="series").attrs["d"]
    assert 100 < len(re.findall(r"[ML]", path)) <= 600
    assert len(svg.find("g", class_="markers").find_all("circle")) <= 400
    assert len(svg.find("g", class_="labels").find_all("text")) <= 24
    assert len(page.find("section", id="timeline").find("tbody").find_all("tr")) == 200

    topologies = page.find("section", id="topologies")
    assert len(topologies.find_all("article")) == 50
    members = topologies.find("article", id="topology-0").find("details", class_="members")
    listed = words(members.find(class_="samples"))
    assert listed.startswith("0, 3, 6") and listed.endswith(f"and {3334 - 200:,} more")

    for card in page.find("section", id="failures").find_all("article"):
        assert len(card.find("details").find_all("li")) <= 50
    assert "7" in words(page.find("details", class_="problem").find("tbody"))


def test_catalog_without_compiles_or_topologies_renders():
    catalog, _ = synthetic_catalog(samples=20, topologies=2, extra_compiles=0)
    catalog.update(compiles=[], topologies=[], dimensions=[], failed_samples=[])
    catalog["summary"].update(compiles=0, recompiles=0, compile_samples=[], recompile_samples=[],
                              failures_by_kind={}, topologies=0, failed_samples=0)
    page = parse(render_report(catalog, timings=None, fixes=None, verification=None))
    assert "No compile was recorded." in words(page.find("section", id="timeline"))
    assert "No guard failures" in words(page.find("section", id="failures"))


@settings(max_examples=40, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("<>&\"'/=;#x a\\"), min_size=1, max_size=40))
def test_any_guard_text_survives_as_text(text):
    catalog, timings = synthetic_catalog(samples=30, topologies=2, extra_compiles=2)
    failure = catalog["compiles"][1]["failures"][0]
    failure.update(raw=f"{failure['against']}: {text}", guard=text, hint=None)
    page = parse(render_report(catalog, timings=timings, fixes=None, verification=None))
    assert page.find_all("script") == []
    raws = page.find("article", id=f"kind-{failure['causes'][0]}").find_all("pre")
    assert text in [pre.text() for pre in raws]


def test_read_inputs_explains_missing_or_bad_catalog(tmp_path):
    with pytest.raises(CatalogError, match="guardscope analyze"):
        read_inputs(tmp_path)
    (tmp_path / output.CATALOG).write_text("{not json")
    with pytest.raises(CatalogError, match="catalog.json"):
        read_inputs(tmp_path)
    (tmp_path / output.CATALOG).write_text(json.dumps({"schema": 2}))
    with pytest.raises(CatalogError, match="schema 2"):
        read_inputs(tmp_path)


def test_report_without_timings_still_renders(seed_inputs):
    page = parse(render_report(seed_inputs["catalog"], timings=None, fixes=None, verification=None))
    assert stats(page)["compile time in all"] == "n/a"
    svg = page.find("section", id="timeline").find("svg")
    assert len(svg.find("g", class_="markers").find_all("circle")) == 11


# --- the recommendation box ------------------------------------------------------------------

def _module(usage: str, rest: str = "") -> str:
    """A generated module's text: a docstring with an indented usage block, then code."""
    block = "\n".join("    " + line if line else "" for line in usage.splitlines())
    return f'"""A plan, generated by guardscope.\n\nUse it so:\n\n{block}\n\nThen more words.\n"""\n\n{rest}'


WARMUP_USAGE = ("import torch, warmup\n"
                "compiled = torch.compile(model, dynamic=True, fullgraph=True)\n"
                "warmup.warmup(compiled)")
UNBACKED_USAGE = ("import torch, unbacked\n"
                  "unbacked.configure()                      # global settings, once, before compiling\n"
                  "compiled = torch.compile(model, dynamic=True, fullgraph=True)\n"
                  "unbacked.warmup(compiled)\n"
                  "...\n"
                  "unbacked.mark(*args, **kwargs)            # on every request\n"
                  "compiled(*args, **kwargs)")
EXPORT_USAGE = ("import export_dims\n"
                "program = export_dims.export(model, *example_args, **example_kwargs)\n"
                "program.module()(*args, **kwargs)")

# The seed corpus's fixes and their verification, as emit-warmup and verify write them.
SEED_FIXES = {"schema": 1, "artifacts": [
    {"name": "warmup", "file": "warmup.py", "title": "Warmup set", "status": "ok", "reason": None,
     "summary": "10 samples compile 10 graphs", "code": _module(WARMUP_USAGE, "STEPS = ()\n"),
     "details": {"samples": [1, 4, 12], "graphs": 10}},
    {"name": "unbacked", "file": "unbacked.py", "title": "mark_unbacked configuration", "status": "ok",
     "reason": None, "summary": "6 dims unbacked, duck sizing off", "code": _module(UNBACKED_USAGE),
     "details": {"dims": ["x:0"], "duck_shape": False, "graphs": 1}},
    {"name": "export", "file": "export_dims.py", "title": "torch.export Dim bounds", "summary": "4 Dims",
     "code": _module(EXPORT_USAGE), "details": {"dims": {"x_0": [0, 60]}}},
]}


def _check(name: str, status: str, setup_graphs: int | None, reason: str | None = None) -> dict:
    export = name == "export"
    return {"name": name, "status": status, "reason": reason, "setup_graphs": setup_graphs, "setup_seconds": 1.4,
            "replay_recompiles": None if export else (0 if status == "passed" else 2),
            "recompile_samples": [] if status == "passed" or export else [1, 4], "failures": [],
            "samples_replayed": 11 if export else 300,
            "topologies": [{"id": t, "passed": True, "error": None} for t in range(11)] if export else []}


SEED_VERIFICATION = {"schema": 1, "artifacts": [
    _check("warmup", "passed", 10), _check("unbacked", "passed", 1), _check("export", "passed", 1)]}


def _verification(**statuses: str) -> dict:
    """SEED_VERIFICATION with some statuses changed (name=status), each with a reason."""
    document = copy.deepcopy(SEED_VERIFICATION)
    for check in document["artifacts"]:
        if check["name"] in statuses:
            check.update(_check(check["name"], statuses[check["name"]], check["setup_graphs"],
                                reason=f"{check['name']} {statuses[check['name']]} here"))
    return document


def _bench(recommended: str | None) -> dict:
    """A bench.json measuring the warmup and the mark_unbacked plan, recommending ``recommended``."""
    def row(name: str, setup: float, graphs: int, speedup: float) -> dict:
        return {"name": name, "title": name, "status": "ok", "setup_seconds": setup, "setup_graphs": graphs,
                "replay_compiles": 0, "recompiles": 0, "speedup": speedup, "targets": None}

    return {"device_name": "Test GPU", "torch_version": "2.13.0", "compile": {"backend": "inductor"},
            "corpus": {"path": "../corpus", "samples": 300}, "repeat": 1, "criteria": {
                "max_recompiles": 0, "min_speedup": 1.25, "max_setup_seconds": 70.0, "max_worst_ratio": 3.0},
            "strategies": [row("warmup", 58.0, 10, 1.31), row("unbacked", 14.0, 1, 1.12)], "notes": [],
            "recommendation": {"strategy": recommended, "meets_targets": recommended is not None,
                               "reason": "it meets every target"}}


def _box(fixes: dict | None, verification: dict | None, bench: dict | None = None, catalog: dict | None = None) -> Node:
    if catalog is None:
        catalog, _ = synthetic_catalog(samples=30, topologies=2, extra_compiles=2)
    page = parse(render_report(catalog, timings=None, fixes=fixes, verification=verification, bench=bench))
    box = page.find("section", id="recommendation")
    assert [n for n in page.find("main").children if isinstance(n, Node)][0] is box  # before the primer
    return box


def _others(box: Node) -> dict[str, str]:
    """The box's list of the other fixes: name -> its line."""
    return {words(li.find("a")): words(li) for li in box.find("ul", class_="other-fixes").find_all("li")}


def test_the_fix_verify_passed_with_fewest_graphs_is_recommended_with_its_code_and_cost():
    choice = choose_fix(SEED_FIXES, SEED_VERIFICATION, None)
    assert (choice["name"], choice["proven"]) == ("unbacked", True)
    box = _box(SEED_FIXES, SEED_VERIFICATION)
    assert "recommendation-proven" in box.attrs["class"]
    heading = box.find("h2")
    assert words(heading) == "Recommended fix: mark_unbacked configuration unbacked.py passed"
    assert heading.find("a").attrs["href"] == "#fix-unbacked"
    facts = dict(zip((words(dt) for dt in box.find_all("dt")), (words(dd) for dd in box.find_all("dd"))))
    assert facts["proof"] == ("guardscope verify passed it: set-up compiled 1 graph in 1.40 s; "
                              "replaying its 300 samples compiled nothing.")
    assert facts["why this one"] == "It compiles the fewest graphs at set-up: 1, against 10 for warmup."
    assert "turns duck sizing off for the whole process" in facts["what it costs"]
    assert "unbacked.mark(*args, **kwargs) before the call" in facts["what it costs"]
    assert "The warmup set changes no global setting but compiles 10 graphs" in facts["what it costs"]
    assert 'plan="unbacked"' in facts["what it costs"]
    assert "latency" not in facts  # no bench.json
    assert box.find("pre").text() == UNBACKED_USAGE
    assert "fix-unbacked" in [a.attrs["href"][1:] for a in box.find_all("a")]
    assert box.find_all(class_="warn") == []  # the code compiles with the catalog's options
    others = _others(box)
    assert others["warmup"] == "warmup passed 10 graphs at set-up"
    assert others["export"].startswith("export passed 1 graph at set-up (torch.export is recommended only when")
    assert "A fix guardscope verify passed beats one it did not pass" in words(box.find(class_="rule"))


def test_usage_code_is_the_docstrings_indented_block():
    assert usage_code(SEED_FIXES["artifacts"][0]["code"]) == WARMUP_USAGE
    assert usage_code("def configure():\n    pass\n") == ""  # no module docstring
    assert usage_code(None) == ""


def test_without_verification_the_choice_is_provisional_and_never_export():
    choice = choose_fix(SEED_FIXES, None, None)
    assert (choice["name"], choice["proven"]) == ("unbacked", False)
    box = _box(SEED_FIXES, None)
    assert "recommendation-provisional" in box.attrs["class"]
    assert words(box.find("h2")).startswith("Recommended fix, not proven yet: mark_unbacked configuration")
    assert words(box.find("dd")) == "Not proven: run guardscope verify DIR."
    assert box.find("pre").text() == UNBACKED_USAGE
    assert _others(box)["warmup"] == "warmup unverified"

    only_export = copy.deepcopy(SEED_FIXES)
    for artifact in only_export["artifacts"][:2]:
        artifact.update(status="infeasible", reason=f"{artifact['name']} cannot work here", code=None)
    assert choose_fix(only_export, None, None)["name"] is None
    box = _box(only_export, None)
    assert "recommendation-nothing" in box.attrs["class"]
    assert "No fix has passed verification yet: run guardscope verify DIR" in words(box)
    assert box.find_all("pre") == []
    assert _others(box)["export"] == "export unverified (torch.export is recommended only when it passed and nothing else did)"
    # ...and once verify passes it (and nothing else), export is the one.
    choice = choose_fix(only_export, _verification(warmup="infeasible", unbacked="infeasible"), None)
    assert (choice["name"], choice["proven"], choice["why"]) == ("export", True, "The only fix verify passed")


def test_a_failed_fix_is_named_and_never_recommended():
    verification = _verification(unbacked="failed")
    assert choose_fix(SEED_FIXES, verification, None)["name"] == "warmup"
    box = _box(SEED_FIXES, verification)
    assert words(box.find("h2")) == "Recommended fix: Warmup set warmup.py passed"
    assert box.find("pre").text() == WARMUP_USAGE
    facts = [words(dd) for dd in box.find_all("dd")]
    assert facts[1] == "The only fix verify passed."
    assert facts[2] == "Its set-up compiles 10 graphs; it changes no global setting and needs nothing per request."
    assert _others(box)["unbacked"] == "unbacked failed: unbacked failed here"

    # a crash counts as a failure: with both plans out, export (passed) is the one
    assert choose_fix(SEED_FIXES, _verification(warmup="crashed", unbacked="failed"), None)["name"] == "export"
    # a fix verify passed beats one not verified; a fix not verified beats one that failed
    partial = _verification(warmup="failed")
    partial["artifacts"] = [a for a in partial["artifacts"] if a["name"] != "unbacked"]
    assert [choose_fix(SEED_FIXES, partial, None)[key] for key in ("name", "proven")] == ["export", True]
    partial["artifacts"] = [a for a in partial["artifacts"] if a["name"] != "export"]
    assert [choose_fix(SEED_FIXES, partial, None)[key] for key in ("name", "proven")] == ["unbacked", False]


def test_infeasible_fixes_are_never_recommended_and_say_why():
    fixes = copy.deepcopy(SEED_FIXES)
    fixes["artifacts"][1].update(status="infeasible", reason="a graph break inside a marked region", code=None)
    verification = _verification(unbacked="infeasible")
    verification["artifacts"][1]["reason"] = "a graph break inside a marked region"
    assert choose_fix(fixes, verification, None)["name"] == "warmup"
    assert _others(_box(fixes, verification))["unbacked"] == "unbacked infeasible: a graph break inside a marked region"
    assert choose_fix(fixes, None, None)["name"] == "warmup"  # fixes.json alone rules it out
    # verify's own 'infeasible' rules it out too, whatever fixes.json says
    assert choose_fix(SEED_FIXES, _verification(unbacked="infeasible"), None)["name"] == "warmup"


def test_when_every_fix_failed_or_is_infeasible_the_box_says_so():
    fixes = copy.deepcopy(SEED_FIXES)
    fixes["artifacts"][1].update(status="infeasible", reason="no dimension to mark", code=None)
    verification = _verification(warmup="failed", unbacked="infeasible", export="crashed")
    assert choose_fix(fixes, verification, None)["name"] is None
    box = _box(fixes, verification)
    assert "recommendation-nothing" in box.attrs["class"] and words(box.find("h2")) == "No fix to recommend"
    assert words(box.find("p")).startswith("Every fix guardscope made failed verification or is not possible")
    assert box.find_all("pre") == [] and box.find_all("dl") == []
    assert _others(box) == {"warmup": "warmup failed: warmup failed here",
                            "unbacked": "unbacked infeasible: no dimension to mark",
                            "export": "export crashed: export crashed here"}


def test_no_fixes_yet_names_the_two_commands():
    for fixes in (None, {"schema": 1, "artifacts": []}):
        assert choose_fix(fixes, None, None)["name"] is None
        box = _box(fixes, None)
        assert "recommendation-none" in box.attrs["class"]
        assert [words(c) for c in box.find_all("code")] == ["guardscope emit-warmup DIR", "guardscope verify DIR"]


def test_the_benchs_recommendation_wins_among_the_fixes_verify_passed():
    choice = choose_fix(SEED_FIXES, SEED_VERIFICATION, _bench("warmup"))
    assert (choice["name"], choice["why"]) == ("warmup", "Recommended by guardscope bench")
    box = _box(SEED_FIXES, SEED_VERIFICATION, _bench("warmup"))
    facts = dict(zip((words(dt) for dt in box.find_all("dt")), (words(dd) for dd in box.find_all("dd"))))
    assert facts["latency"] == "on Test GPU: speedup 1.31×, 0 recompiles, set-up 58.00 s; meets every target."
    # the bench's pick must have passed verify; otherwise the fewest graphs decide
    assert choose_fix(SEED_FIXES, _verification(warmup="failed"), _bench("warmup"))["name"] == "unbacked"
    # a bench that names no plan leaves the fewest graphs to decide; its row is still shown
    box = _box(SEED_FIXES, SEED_VERIFICATION, _bench(None))
    latency = [words(dd) for dt, dd in zip(box.find_all("dt"), box.find_all("dd")) if words(dt) == "latency"]
    assert latency == ["on Test GPU: speedup 1.12×, 0 recompiles, set-up 14.00 s; meets every target."]
    # a bench recommending export does not make export win over a plan verify passed
    assert choose_fix(SEED_FIXES, SEED_VERIFICATION, _bench("export"))["name"] == "unbacked"


def test_the_box_is_deterministic_and_its_choice_ignores_the_order_of_the_files():
    catalog, _ = synthetic_catalog(samples=30, topologies=2, extra_compiles=2)
    first = render_report(catalog, timings=None, fixes=SEED_FIXES, verification=SEED_VERIFICATION, bench=_bench(None))
    again = render_report(copy.deepcopy(catalog), timings=None, fixes=copy.deepcopy(SEED_FIXES),
                          verification=copy.deepcopy(SEED_VERIFICATION), bench=_bench(None))
    assert first == again
    shuffle = random.Random(15)
    for _ in range(6):
        fixes, verification = copy.deepcopy(SEED_FIXES), copy.deepcopy(SEED_VERIFICATION)
        shuffle.shuffle(fixes["artifacts"])
        shuffle.shuffle(verification["artifacts"])
        assert choose_fix(fixes, verification, None)["name"] == "unbacked"
        assert choose_fix(fixes, None, None)["name"] == "unbacked"
    # equal graphs: the tie goes to the warmup (FIX_ORDER), wherever it sits in the files
    tied = copy.deepcopy(SEED_VERIFICATION)
    tied["artifacts"][0]["setup_graphs"] = 1
    tied["artifacts"].reverse()
    assert choose_fix(SEED_FIXES, tied, None)["name"] == "warmup"


def test_the_box_escapes_and_warns_when_the_code_compiles_with_other_options():
    catalog, _ = synthetic_catalog(samples=30, topologies=2, extra_compiles=2)
    catalog["compile"]["mode"] = "max-autotune"
    fixes = copy.deepcopy(SEED_FIXES)
    fixes["artifacts"][1]["code"] = _module(UNBACKED_USAGE + f"\n# {EVIL}")
    fixes["artifacts"][1]["title"] = EVIL
    box = _box(fixes, SEED_VERIFICATION, catalog=catalog)
    assert box.find_all("script") == []
    assert box.find("pre").text().endswith(f"# {EVIL}") and EVIL in words(box.find("h2"))
    warning = words(box.find("p", class_="warn"))
    assert "torch.compile(model, dynamic=True, fullgraph=True, mode='max-autotune')" in warning
    assert "guardscope emit-warmup DIR" in warning


# --- the command line ------------------------------------------------------------------------

def test_report_command_rerenders_from_json(seed, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for name in (output.CATALOG, output.TIMINGS):
        (out / name).write_text((seed / name).read_text())
    (out / "fixes.json").write_text(json.dumps(FIXES))
    (out / "verification.json").write_text(json.dumps(VERIFICATION))
    result = CliRunner().invoke(cli.main, ["report", str(out)])
    assert result.exit_code == 0, result.output
    page = parse((out / "report.html").read_text())
    assert page.find("article", id="fix-unbacked")
    assert words(page.find("section", id="summary").find(class_="verdict").find(class_="stat-value")) == "failed"

    missing = CliRunner().invoke(cli.main, ["report", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "guardscope analyze" in missing.output


def test_every_command_has_help():
    runner = CliRunner()
    assert cli.main.commands
    for name, command in cli.main.commands.items():
        assert command.help and command.help.strip(), name
        result = runner.invoke(cli.main, [name, "--help"])
        assert result.exit_code == 0 and "Usage:" in result.output, name


# --- a real browser --------------------------------------------------------------------------

@pytest.mark.skipif(chromium_binary() is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_seed_report_in_headless_chromium(seed, tmp_path):
    screenshot = tmp_path / "report.png"
    visit = open_page(seed / "report.html", screenshot)
    assert visit.errors == []
    assert visit.requests == [visit.url] and visit.failed_requests == []
    width, height = visit.size
    assert width == 1280 and height > 2000
    png = screenshot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (width, height)


def _boxes_in_first_screen(page, selectors: tuple[str, ...], width: int = 1280, height: int = 900) -> dict[str, dict]:
    """Load ``page`` in headless Chromium with a ``width`` x ``height`` viewport and return each
    selector's border box in CSS pixels (``top``, ``bottom``), read through the DevTools DOM
    domain: the page runs no script of ours."""
    with tempfile.TemporaryDirectory(prefix="guardscope-chromium-") as profile:
        pipe = _Pipe(chromium_binary(), profile, width, height)
        try:
            target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            pipe.call("Page.enable", session=session)
            pipe.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                             "deviceScaleFactor": 1, "mobile": False}, session=session)
            pipe.call("Page.navigate", {"url": Path(page).resolve().as_uri()}, session=session)
            pipe.wait_for("Page.loadEventFired")
            root = pipe.call("DOM.getDocument", session=session)["root"]["nodeId"]
            boxes = {}
            for selector in selectors:
                node = pipe.call("DOM.querySelector", {"nodeId": root, "selector": selector}, session=session)["nodeId"]
                assert node, f"no {selector} on the page"
                quad = pipe.call("DOM.getBoxModel", {"nodeId": node}, session=session)["model"]["border"]
                boxes[selector] = {"top": min(quad[1::2]), "bottom": max(quad[1::2])}
            return boxes
        finally:
            pipe.close()


@pytest.mark.slow
@pytest.mark.skipif(chromium_binary() is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_seed_recommendation_after_verify_is_in_the_first_screen(seed, tmp_path_factory):
    """After emit-warmup and verify (real torch.compile, about 30 s), the seed report opens with
    the mark_unbacked plan, proven, its code in the first 1280x900 screen."""
    out = tmp_path_factory.mktemp("seed-verified")  # a sibling of the seed: its relative corpus path holds
    shutil.copytree(seed, out, dirs_exist_ok=True)
    pipeline.emit_warmup(out)
    verification = pipeline.verify(out)
    assert [a["status"] for a in verification["artifacts"]] == ["passed", "passed", "passed"]
    page = parse((out / "report.html").read_text())
    box = page.find("section", id="recommendation")
    assert "recommendation-proven" in box.attrs["class"]
    assert words(box.find("h2")) == "Recommended fix: mark_unbacked configuration unbacked.py passed"
    assert "It compiles the fewest graphs at set-up: 1, against 10 for warmup." in words(box)
    code = box.find("pre").text().splitlines()
    assert code[:3] == ["import torch, unbacked",
                        "unbacked.configure()                      # global settings, once, before compiling",
                        "compiled = torch.compile(model, dynamic=True, fullgraph=True)"]
    assert any(line.startswith("unbacked.mark(*args, **kwargs)") for line in code)
    assert box.find("pre").text() in read_inputs(out)["fixes"]["artifacts"][1]["code"].replace("\n    ", "\n")
    assert page.find("article", id="fix-unbacked") and box.find("a").attrs["href"] == "#fix-unbacked"

    boxes = _boxes_in_first_screen(out / "report.html", ("#recommendation", "#recommendation pre"))
    assert boxes["#recommendation"]["top"] < 900
    assert boxes["#recommendation pre"]["bottom"] < 900  # the code that applies it, too
