"""The HTML guard report: structure of the seed report, escaping, size at 10,000 samples, a real
headless Chromium, and the ``guardscope report`` command.

Pages are checked through a parsed element tree (html.parser), never by matching whole pages.
"""

from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import guardscope
from guardscope import cli, output
from guardscope.errors import CatalogError
from guardscope.report import read_inputs, render_report, write_report

from .conftest import SEED_CORPUS
from .headless_chromium import chromium_binary, open_page

SECTIONS = ("summary", "timeline", "failures", "topologies", "dimensions", "risk", "fixes", "trace")
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
