"""``guardscope diff``: the pure comparison on constructed edits of the golden seed catalog, a
real pair of analyses (the seed corpus with and without duck sizing), the HTML page and partial,
and the command line.

This file holds the tests that compile in this process; the others are in tests/unit/test_diff.py,
tests/subprocess/test_diff.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from guardscope import cli, store, torch_compat
from guardscope.catalog.diff import diff_catalogs
from guardscope.catalog.diff.changes import SampleMove
from guardscope.report.diff_page import render_diff

from ..pages import parse, words

GOLDEN = Path(__file__).parents[1] / "golden" / "seed_catalog.json"
EQUAL_EDGES = "cross_edge_index dim 1 equals local_edge_index dim 1"


@pytest.fixture
def golden() -> dict:
    return json.loads(GOLDEN.read_text())


def topology(catalog: dict, topology_id: int) -> dict:
    return next(t for t in catalog["topologies"] if t["id"] == topology_id)


# --- a real pair of analyses: the seed corpus with and without duck sizing -----------------------


def test_duck_sizing_off_removes_the_duck_sizing_recompile(pair):
    old_dir, new_dir = pair
    old, new = store.read_catalog(old_dir), store.read_catalog(new_dir)
    result = diff_catalogs(old, new)
    assert not result.identical
    assert [(c.field, c.old, c.new) for c in result.context] == [("compile.duck_shape", True, False)]
    assert result.warnings == ()

    # Sample 1 compiled only because duck sizing had tied the two edge counts at sample 0.
    assert [(c.status, c.sample) for c in result.compiles if c.status != "changed"] == [("removed", 1)]
    changed = [c for c in result.compiles if c.status == "changed"]
    assert [c.sample for c in changed] == [4, 12, 24, 40, 60, 84, 112, 144, 180]
    # Each later recompile lost exactly its failure against the equal-edges graph (old T0), and
    # fails the general graph the same way although it was compiled at sample 1, now at sample 0.
    for c in changed:
        [lost] = c.removed_failures
        assert c.added_failures == () and lost["against_topology"] == 0 and lost["against_sample"] == 0
    by_kind = {k: (o, n) for k, o, n in result.failures_by_kind}
    assert by_kind["duck_sizing"] == (6, 0) and by_kind["size_mismatch"] == (13, 13)
    assert by_kind["zero_one_specialization"] == (36, 32)

    [vanished] = result.topologies_with("vanished")
    assert EQUAL_EDGES in vanished.facts and vanished.old.id == 0
    equal_edges = tuple(topology(old, 0)["samples"])
    [general] = result.topologies_with("changed")
    assert (general.old.id, general.new.id) == (1, 0)
    assert (general.old.compile_sample, general.new.compile_sample) == (1, 0)
    assert general.gained == equal_edges and general.lost == ()
    assert general.new.count == 291 == general.old.count + len(equal_edges)
    assert len(result.topologies_with("unchanged")) == 9 and not result.topologies_with("new")
    assert result.moves == (SampleMove(old="T0", new="T0", old_note="vanished", new_note="was T1",
                                       samples=equal_edges),)
    assert result.dimensions == () and result.errors == ()

    lines = result.summary_lines()
    assert "compiles    11 → 10, recompiles 10 → 9" in lines
    assert "  - sample 1 (0/1): no longer compiles: duck_sizing ×1" in lines
    assert f"  T0 (vanished) → T0 (was T1): 7 samples {', '.join(map(str, equal_edges))}" in lines


def test_fresh_analysis_matches_the_golden_catalog(pair, golden):
    if golden["torch_version"] != torch_compat.torch_version():
        pytest.skip(f"the golden catalog was recorded with torch {golden['torch_version']}")
    result = diff_catalogs(golden, store.read_catalog(pair[0]))
    assert result.identical, "\n".join(result.summary_lines())
    assert [c.field for c in result.context] == ["corpus.path"]


# --- HTML ----------------------------------------------------------------------------------------

def test_real_diff_page(pair):
    old_dir, new_dir = pair
    result = diff_catalogs(store.read_catalog(old_dir), store.read_catalog(new_dir), labels=("duck", "noduck"))
    html = render_diff(result)
    assert html == render_diff(result)
    page = parse(html)
    assert page.find_all("script") == [] and page.find_all("link") == [] and page.find_all("img") == []
    assert not re.search(r"https?://", html) and str(old_dir) not in html
    [section] = page.find_all("section")
    assert section.attrs["id"] == "diff"
    assert words(section.find("p", class_="diff-verdict").find("strong")) == "Different"
    hrefs = [a.attrs["href"] for a in page.find("nav").find_all("a")]
    for href in hrefs:
        assert page.find_all(id=href[1:]), href

    rows = page.find("table", class_="diff-compiles").find("tbody").find_all("tr")
    assert [r.attrs["class"] for r in rows] == ["diff-removed"] + ["diff-changed"] * 9
    assert words(rows[0].find_all("td")[1]) == "sample 1 (0/1)"
    assert "duck_sizing against T0 (graph 0/0)" in words(rows[1].find("li", class_="diff-removed"))

    vanished = page.find("article", id="diff-vanished-0")
    assert words(vanished.find("h3")) == "T0 (vanished)"
    assert EQUAL_EDGES in [words(li) for li in vanished.find("ul", class_="facts").find_all("li")]
    changed = page.find("article", id="diff-changed-0")
    assert words(changed.find("h3")) == "T1 → T0"
    assert "0, 61, 85, 121, 149, 151, 236" in words(changed)
    moves = page.find("table", class_="diff-moves").find("tbody").find_all("tr")
    assert [words(td) for td in moves[0].find_all("td")][:3] == ["T0 (vanished)", "T0 (was T1)", "7"]
    assert "9 unchanged topologies" in words(page.find("details", class_="diff-unchanged").find("summary"))
    kinds = {words(r.find_all("td")[0]).split()[-1]: words(r.find_all("td")[3])
             for r in page.find("table", class_="diff-kinds").find("tbody").find_all("tr")}
    assert kinds == {"duck_sizing": "-6", "size_mismatch": "—", "zero_one_specialization": "-4"}


# --- the command line ----------------------------------------------------------------------------

def test_cli_prints_writes_and_exit_code(pair, tmp_path):
    old_dir, new_dir = pair
    runner = CliRunner()
    html, data = tmp_path / "out" / "diff.html", tmp_path / "out" / "diff.json"
    result = runner.invoke(cli.main, ["diff", str(old_dir), str(new_dir / "catalog.json"),
                                      "--html", str(html), "--json", str(data)])
    assert result.exit_code == 0, result.output
    assert "context     compile.duck_shape: true → false" in result.output
    assert "topologies  11 → 10: 1 vanished, 1 changed, 9 unchanged" in result.output
    assert f"wrote       {html}, {data}" in result.output
    written = json.loads(data.read_text())
    assert written == diff_catalogs(store.read_catalog(old_dir), store.read_catalog(new_dir),
                                    labels=(str(old_dir), str(new_dir / "catalog.json"))).to_json()
    assert written["identical"] is False and written["schema"] == 1
    assert parse(html.read_text()).find("section", id="diff")

    assert runner.invoke(cli.main, ["diff", str(old_dir), str(new_dir), "--exit-code"]).exit_code == 1
    same = runner.invoke(cli.main, ["diff", str(old_dir), str(old_dir / "catalog.json"), "--exit-code"])
    assert same.exit_code == 0 and "result      identical" in same.output
    short = runner.invoke(cli.main, ["diff", str(old_dir), str(new_dir), "--limit", "2"])
    assert short.exit_code == 0 and "  … and 8 more (see --json or --html)" in short.output
