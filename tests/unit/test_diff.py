"""``guardscope diff``: the pure comparison on constructed edits of the golden seed catalog, a
real pair of analyses (the seed corpus with and without duck sizing), the HTML page and partial,
and the command line.

This file holds the pure tests (no torch.compile, no child process); the others are in
tests/integration/test_diff.py, tests/subprocess/test_diff.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from guardscope import cli, store
from guardscope.catalog.diff import DIFFERENT, WORDING, diff_catalogs
from guardscope.catalog.diff.changes import NOT_IN_CORPUS, SampleMove
from guardscope.catalog.diff.words import failure_words
from guardscope.model import GUARD_TEXT
from guardscope.proving.fidelity import compare
from guardscope.report.diff_page import diff_context, render_diff
from guardscope.report.environment import ENVIRONMENT

from ..pages import EVIL, parse, words

GOLDEN = Path(__file__).parents[1] / "golden" / "seed_catalog.json"


@pytest.fixture
def golden() -> dict:
    return json.loads(GOLDEN.read_text())


def topology(catalog: dict, topology_id: int) -> dict:
    return next(t for t in catalog["topologies"] if t["id"] == topology_id)


def compile_at(catalog: dict, sample: int) -> dict:
    return next(c for c in catalog["compiles"] if c["sample"] == sample)


def set_members(t: dict, samples) -> None:
    t["samples"] = sorted(samples)
    t["count"] = len(t["samples"])
    t["first_sample"] = t["samples"][0]


def with_new_topology(catalog: dict, facts_extra: str = "x dim 0 is 7") -> dict:
    """Sample 236 (one of T0's equal-edge samples) split off into a topology of its own."""
    new = copy.deepcopy(catalog)
    set_members(topology(new, 0), set(topology(new, 0)["samples"]) - {236})
    new["topologies"].append({"id": 11, "compile_id": "0/11", "first_sample": 236, "count": 1, "samples": [236],
                              "facts": topology(new, 0)["facts"] + [facts_extra]})
    new["compiles"].append({
        "sample": 236, "compile_id": "0/11", "co_name": "forward", "seconds": None, "fail_type": None,
        "failures": [{
            "kind": "size_mismatch", "causes": ["size_mismatch"], "against": "0/0", "inputs": ["x"],
            "dims": ["x.size()[0]"], "guard": "tensor 'x' size mismatch at index 0. expected 12, actual 7",
            "expected": 12, "actual": 7, "user_source": None, "hint": None,
            "raw": "0/0: tensor 'x' size mismatch at index 0. expected 12, actual 7",
        }],
    })
    new["summary"]["compiles"] += 1
    new["summary"]["recompiles"] += 1
    new["summary"]["failures_by_kind"]["size_mismatch"] += 1
    new["summary"]["topologies"] += 1
    return new


def inductor_guards(catalog: dict) -> dict:
    """The guard text inductor prints for a 0/1 bound: with the int64 upper limit."""
    new = copy.deepcopy(catalog)
    for c in new["compiles"]:
        for f in c["failures"]:
            if f["kind"] == "zero_one_specialization":
                f["raw"] = f["raw"].replace(f["guard"], f["guard"] + " <= 2147483647")
                f["guard"] += " <= 2147483647"
    return new


# The guard inductor adds on the H200 to the PyG GCN's later frame (issue 23): a float bound of its
# own heuristic, in the facts of the topologies whose graph it guards; eager has no such guard.
INDUCTOR_GUARD = ("in forward after line 117: guard: ((96*___stack1.size()[0]) / (96 + 35*___stack1.size()[0]))"
                  " > 0.0034722222222222222")


def inductor_adds_a_guard(catalog: dict, topologies=(0, 1, 5)) -> dict:
    """The catalog an inductor re-analysis writes: the same compiles, failures and members, its
    0/1 guards printed with the int64 bound, and a guard of its own in some topologies' facts."""
    new = inductor_guards(catalog)
    new["compile"].update(backend="inductor", device="cuda")
    for topology_id in topologies:
        topology(new, topology_id)["facts"].append(INDUCTOR_GUARD)
    return new


# --- constructed edits -------------------------------------------------------------------------

def test_golden_catalog_against_itself_is_identical(golden):
    result = diff_catalogs(golden, copy.deepcopy(golden), labels=("A", "B"))
    assert result.identical
    assert result.context == () and result.warnings == () and result.compiles == () and result.moves == ()
    assert [t.status for t in result.topologies] == ["unchanged"] * 11
    data = result.to_json()
    assert data["identical"] is True and data["old"]["label"] == "A" and data["new"]["counts"]["topologies"] == 11
    lines = result.summary_lines()
    assert "result      identical: same compiles, failures and topologies" in lines
    assert "topologies  11: 11 unchanged" in lines


def test_renumbering_and_order_are_not_changes(golden):
    """Topology ids, compile ids and list order are numbering: a permutation of them is identical."""
    new = copy.deepcopy(golden)
    renumber = {c["compile_id"]: f"0/{(7 * k + 3) % 11}" for k, c in enumerate(new["compiles"])}
    for c in new["compiles"]:
        c["compile_id"] = renumber[c["compile_id"]]
        for f in c["failures"]:
            f["raw"] = f["raw"].replace(f"{f['against']}: ", f"{renumber[f['against']]}: ", 1)
            f["against"] = renumber[f["against"]]
    for t in new["topologies"]:
        t["id"] = 10 - t["id"]
        t["compile_id"] = renumber[t["compile_id"]]
    new["topologies"].reverse()
    result = diff_catalogs(golden, new)
    assert result.identical, result.summary_lines()
    # Renamed, not changed: T0 is now T10.
    pairs = {(t.old.id, t.new.id) for t in result.topologies}
    assert pairs == {(i, 10 - i) for i in range(11)}


def test_new_topology_and_vanished_topology(golden):
    new = with_new_topology(golden)
    result = diff_catalogs(golden, new)
    assert not result.identical
    [added] = result.compiles
    assert (added.status, added.sample, added.new_compile_id, added.new_kinds) == ("added", 236, "0/11", {"size_mismatch": 1})
    assert ("size_mismatch", 13, 14) in result.failures_by_kind
    [fresh] = result.topologies_with("new")
    assert fresh.new.id == 11 and fresh.facts[-1] == "x dim 0 is 7" and fresh.gained == (236,)
    [shrunk] = result.topologies_with("changed")
    assert (shrunk.old.id, shrunk.new.id, shrunk.lost, shrunk.gained) == (0, 0, (236,), ())
    assert len(result.topologies_with("unchanged")) == 10
    assert result.moves == (SampleMove(old="T0", new="T11", old_note="", new_note="new", samples=(236,)),)
    lines = result.summary_lines()
    assert "  + sample 236 (0/11): new compile: size_mismatch ×1" in lines
    assert "      + size_mismatch against T0 (graph 0/0): tensor 'x' size mismatch at index 0. expected 12, actual 7" in lines
    assert "  T0 → T11 (new): 1 sample 236" in lines

    back = diff_catalogs(new, golden)
    [removed] = back.compiles
    assert (removed.status, removed.sample, removed.old_kinds) == ("removed", 236, {"size_mismatch": 1})
    [gone] = back.topologies_with("vanished")
    assert gone.old.id == 11 and gone.lost == (236,)
    assert back.moves == (SampleMove(old="T11", new="T0", old_note="vanished", new_note="", samples=(236,)),)


def test_samples_moved_between_topologies(golden):
    new = copy.deepcopy(golden)
    set_members(topology(new, 0), set(topology(new, 0)["samples"]) - {61, 85})
    set_members(topology(new, 1), set(topology(new, 1)["samples"]) | {61, 85})
    result = diff_catalogs(golden, new)
    assert not result.identical
    assert result.compiles == () and all(o == n for _, o, n in result.failures_by_kind)
    changed = {t.old.id: (t.lost, t.gained) for t in result.topologies_with("changed")}
    assert changed == {0: ((61, 85), ()), 1: ((), (61, 85))}
    assert result.moves == (SampleMove(old="T0", new="T1", old_note="", new_note="", samples=(61, 85)),)
    assert result.headline() == "different: topologies 2 changed; 2 samples moved"


def test_failure_kind_changed_in_one_compile(golden):
    new = copy.deepcopy(golden)
    failure = compile_at(new, 12)["failures"][0]
    assert failure["kind"] == "duck_sizing" and failure["against"] == "0/0"
    failure.update(kind="shape_relation", causes=["shape_relation"])
    kinds = new["summary"]["failures_by_kind"]
    kinds["duck_sizing"] -= 1
    kinds["shape_relation"] = 1
    result = diff_catalogs(golden, new)
    [change] = result.compiles
    assert (change.status, change.sample, change.old_compile_id, change.new_compile_id) == ("changed", 12, "0/3", "0/3")
    assert change.old_kinds == {"duck_sizing": 1, "size_mismatch": 1, "zero_one_specialization": 1}
    assert change.new_kinds == {"shape_relation": 1, "size_mismatch": 1, "zero_one_specialization": 1}
    assert [(f["kind"], f["against_topology"], f["against_sample"]) for f in change.removed_failures] == [("duck_sizing", 0, 0)]
    assert [f["kind"] for f in change.added_failures] == ["shape_relation"]
    assert [(k, o, n) for k, o, n in result.failures_by_kind if o != n] == [("duck_sizing", 6, 5), ("shape_relation", 0, 1)]
    assert all(t.status == "unchanged" for t in result.topologies) and result.moves == ()
    # the same compile against the same graph, for the same samples: the kind is guardscope's word
    assert change.wording_only and result.verdict == WORDING and not result.production_different
    lines = result.summary_lines()
    assert "  ≈ sample 12 (0/3): duck_sizing 1 → 0, shape_relation 0 → 1" in lines
    assert ("      - duck_sizing against T0 (graph 0/0): cross_edge_index.size()[1] == local_edge_index.size()[1]"
            in lines)


def test_torch_version_and_backend_only_are_identical_with_a_context_note(golden):
    new = copy.deepcopy(golden)
    new["torch_version"] = "2.14.0"
    new["compile"]["backend"] = "inductor"
    new["replay_mode"] = "full"
    result = diff_catalogs(golden, new)
    assert result.identical
    assert [(c.field, c.old, c.new) for c in result.context] == [
        ("torch_version", "2.13.0", "2.14.0"), ("compile.backend", "eager", "inductor"), ("replay_mode", "guards", "full")]
    lines = result.summary_lines()
    assert "context     torch_version: 2.13.0 → 2.14.0" in lines
    assert "result      identical: same compiles, failures and topologies (context differs)" in lines
    assert result.to_json()["identical"] is True


def test_guard_text_printed_by_inductor_differs_unless_ignored(golden):
    new = inductor_guards(golden)
    strict = diff_catalogs(golden, new)
    assert not strict.identical
    changed = [c for c in strict.compiles if c.status == "changed"]
    assert {c.sample for c in changed} == {4, 12, 24, 40, 60, 84, 112, 144, 180}
    assert all(c.old_kinds == c.new_kinds for c in changed)
    assert all(o == n for _, o, n in strict.failures_by_kind)
    assert "same failure kinds, other guards or graphs" in "\n".join(strict.summary_lines())

    lenient = diff_catalogs(golden, new, ignore=GUARD_TEXT)
    assert lenient.identical and lenient.ignore == ("guard", "raw")
    assert "ignoring    failure fields guard, raw" in lenient.summary_lines()
    with pytest.raises(ValueError, match="cannot ignore"):
        diff_catalogs(golden, new, ignore=("kind",))


def test_a_guard_only_inductor_adds_is_wording_not_a_production_difference(golden):
    """Issue 23: the same compiles, failures and members in every topology, one guard more in
    three topologies' facts (and one fact fewer in another, as GPT-2's topologies showed): no
    topology vanished or new, no sample moved, and the verdict is "same in production"."""
    new = inductor_adds_a_guard(golden)
    dropped = topology(new, 2)["facts"].pop()
    result = diff_catalogs(golden, new, ignore=GUARD_TEXT, labels=("eager", "inductor"))
    assert result.verdict == WORDING and not result.production_different
    assert not result.identical and not result.differs
    assert result.compiles == () and result.moves == ()
    assert not any(result.topologies_with(status) for status in ("vanished", "new", "changed"))
    reworded = result.topologies_with("reworded")
    assert [(t.old.id, t.new.id, t.old_only, t.new_only) for t in reworded] == [
        (0, 0, (), (INDUCTOR_GUARD,)), (1, 1, (), (INDUCTOR_GUARD,)), (2, 2, (dropped,), ()),
        (5, 5, (), (INDUCTOR_GUARD,))]
    assert result.wording_only() == [
        {"only": "new", "label": "inductor", "text": INDUCTOR_GUARD, "where": ["T0", "T1", "T5"]},
        {"only": "old", "label": "eager", "text": dropped, "where": ["T2"]},
    ]
    lines = result.summary_lines()
    assert ("result      same in production: same compiles, failures and topology members; "
            "wording differs: facts of 4 topologies") in lines
    assert "topologies  11: 4 reworded, 7 unchanged" in lines
    assert "  ≈ T1  284 samples, the same members and graphs; facts differ in wording only" in lines
    assert f"      + {INDUCTOR_GUARD}" in lines and f"      - {dropped}" in lines
    assert not any(line.startswith("moves") for line in lines)
    data = result.to_json()
    assert data["verdict"] == "wording" and data["identical"] is False
    assert [t["status"] for t in data["topologies"]].count("reworded") == 4

    # Without ignoring the guard text, the compiles' inductor-printed bounds are wording too.
    strict = diff_catalogs(golden, new)
    assert strict.verdict == WORDING and strict.differs
    assert {c.sample for c in strict.reworded_compiles()} == {4, 12, 24, 40, 60, 84, 112, 144, 180}
    assert all(c.status == "changed" for c in strict.compiles)
    assert "  ≈ sample 4 (0/2): same failure kinds, other guards or graphs" in strict.summary_lines()


def test_a_topology_with_the_same_members_is_never_vanished_and_new(golden):
    """Every fact reworded, the topologies renumbered: still the same classes of inputs."""
    new = copy.deepcopy(golden)
    for t in new["topologies"]:
        t["facts"] = [f"reworded {fact}" for fact in t["facts"]]
        t["id"] = 10 - t["id"]
    result = diff_catalogs(golden, new)
    assert result.verdict == WORDING and result.moves == ()
    assert {(t.status, t.old.id, t.new.id) for t in result.topologies} == {("reworded", i, 10 - i) for i in range(11)}
    assert "vanished" not in result.headline() and "new" not in result.headline()


def test_a_compile_at_another_sample_is_still_different(golden):
    """What production feels: inductor compiling sample 236 too (a topology of its own) is
    different, whatever wording differs besides; so is a graph compiled at another sample for
    the same members."""
    new = with_new_topology(inductor_adds_a_guard(golden, topologies=(1, 5)))
    result = diff_catalogs(golden, new, ignore=GUARD_TEXT)
    assert result.verdict == DIFFERENT and result.differs and result.production_different
    assert [(c.status, c.sample) for c in result.compiles] == [("added", 236)]
    assert result.headline() == ("different: compiles 1 added; failure counts of 1 kind changed; "
                                 "topologies 1 new, 1 changed; 1 sample moved; wording differs: facts of 2 topologies")

    moved = inductor_adds_a_guard(golden, topologies=(1,))
    compile_at(moved, 1)["sample"] = 3           # T1's graph compiled at another of its members
    result = diff_catalogs(golden, moved, ignore=GUARD_TEXT)
    assert result.verdict == DIFFERENT and result.moves == ()
    [changed] = result.topologies_with("changed")
    assert (changed.old.id, changed.new.id, changed.new_only) == (1, 1, (INDUCTOR_GUARD,))
    assert "graph compiled at sample 1 → 3" in "\n".join(result.summary_lines())
    assert [(c.status, c.sample) for c in result.compiles] == [("removed", 1), ("added", 3)]


def test_a_later_frame_graph_compiled_elsewhere_is_different(golden):
    """A topology's graphs in later frames count too: the same members running a later graph
    compiled at another sample is a change, not wording."""
    old, new = copy.deepcopy(golden), copy.deepcopy(golden)
    for catalog, sample in ((old, 60), (new, 84)):
        catalog["compiles"].append({"sample": sample, "compile_id": "1/0", "frame": 1, "co_name": "helper",
                                    "seconds": None, "fail_type": None, "failures": []})
        topology(catalog, 1)["graphs"] = ["0/1", "1/0"]
    result = diff_catalogs(old, new)
    assert result.verdict == DIFFERENT
    [changed] = result.topologies_with("changed")
    assert changed.old.id == 1 and changed.gained == changed.lost == ()
    assert "graphs compiled at samples 1, 60 in helper → 1, 84 in helper" in "\n".join(result.summary_lines())


def test_fidelity_document_separates_wording_from_production(golden):
    document = compare(golden, inductor_adds_a_guard(golden), backend="inductor", device="cuda", mode=None)
    assert document["verdict"] == "wording" and document["same_in_production"] is True
    assert document["identical"] is False and document["ignore"] == ["guard", "raw"]
    assert document["wording_only"] == [{"only": "new", "label": "inductor on cuda", "text": INDUCTOR_GUARD,
                                         "where": ["T0", "T1", "T5"]}]
    assert not any("vanished" in line or line.startswith("moves") for line in document["summary"])
    different = compare(golden, with_new_topology(inductor_adds_a_guard(golden)), backend="inductor",
                        device="cuda", mode=None)
    assert different["verdict"] == "different" and different["same_in_production"] is False
    same = compare(golden, inductor_guards(golden), backend="inductor", device="cuda", mode=None)
    assert same["verdict"] == "identical" and same["identical"] is True and same["wording_only"] == []


def test_wording_only_page(golden):
    result = diff_catalogs(golden, inductor_adds_a_guard(golden), ignore=GUARD_TEXT, labels=("eager", "inductor"))
    page = parse(render_diff(result))
    verdict = page.find("p", class_="diff-verdict")
    assert words(verdict.find("strong")) == "Same in production (wording differs)"
    assert "diff-same" in verdict.attrs["class"]
    rows = page.find("table", class_="diff-wording").find("tbody").find_all("tr")
    assert [[words(td) for td in row.find_all("td")] for row in rows] == [["inductor", INDUCTOR_GUARD, "T0, T1, T5"]]
    card = page.find("article", id="diff-reworded-1")
    assert words(card.find("li", class_="diff-added")) == f"+ only inductor: {INDUCTOR_GUARD}"
    assert page.find_all("table", class_="diff-moves") == []


def test_cli_diff_exit_code_on_wording_only(golden, tmp_path):
    (tmp_path / "eager.json").write_text(json.dumps(golden))
    (tmp_path / "inductor.json").write_text(json.dumps(inductor_adds_a_guard(golden)))
    (tmp_path / "other.json").write_text(json.dumps(with_new_topology(inductor_adds_a_guard(golden))))
    args = ["diff", str(tmp_path / "eager.json"), str(tmp_path / "inductor.json"), "--exit-code"]
    assert CliRunner().invoke(cli.main, args).exit_code == 1          # wording counts unless guard text is ignored
    lenient = CliRunner().invoke(cli.main, args + ["--ignore", "guard-text"])
    assert lenient.exit_code == 0, lenient.output
    assert "topologies  11: 3 reworded, 8 unchanged" in lenient.output and "vanished" not in lenient.output
    args[2] = str(tmp_path / "other.json")
    assert CliRunner().invoke(cli.main, args + ["--ignore", "guard-text"]).exit_code == 1


@pytest.mark.parametrize("field, kind, value, text", [
    # the model's file in another folder: a relocated copy of the same model
    ("user_source", "zero_one_specialization", ("gnn/model.py:69", "gnncopy/model.py:69"), None),
    ("hint", "zero_one_specialization", ("mark_unbacked(tensor, dim)", "mark_unbacked(t, d)"), None),
    ("expected", "size_mismatch", ("0", "5"), ("expected 0", "expected 5")),
    ("actual", "size_mismatch", ("23", "24"), ("actual 23", "actual 24")),
])
def test_an_ignored_field_is_ignored_in_the_guard_and_reason_too(golden, field, kind, value, text):
    """Classify read these fields out of the guard or the reason torch printed: a failure that
    differs only in one of them differs there too, and ignoring the field must ignore that."""
    edited = copy.deepcopy(golden)
    failure = next(f for f in compile_at(edited, 12)["failures"] if f["kind"] == kind)
    failure[field] = failure[field].replace(*value)
    for name in ("guard", "raw"):
        failure[name] = failure[name].replace(*(text or value))
    [change] = diff_catalogs(golden, edited).compiles
    [removed], [added] = change.removed_failures, change.added_failures
    assert removed[field] != added[field]
    # a field the line does not show: the same line removed and added
    assert (failure_words(removed) == failure_words(added)) == (text is None)
    assert diff_catalogs(golden, edited, ignore=(field,)).identical


def _reasons(golden: dict, raw: str, **fields) -> tuple[dict, dict]:
    """Two copies of the golden catalog whose first failure of sample 180 has ``raw`` and
    ``fields`` formatted with ``where`` "models" and line 1811, and "mymodels" and line 1850."""
    old, new = copy.deepcopy(golden), copy.deepcopy(golden)
    for catalog, where, line in ((old, "models", 1811), (new, "mymodels", 1850)):
        failure = compile_at(catalog, 180)["failures"][0]
        failure["raw"] = "0/0: 2 <= x.size()[0]" + raw.format(where=where, line=line)
        failure.update({name: value.format(where=where, line=line) for name, value in fields.items()})
    return old, new


def test_an_ignored_operator_is_ignored_in_the_reason_too(golden):
    old, new = _reasons(golden, "  # y = conv(x)  # model.py:3 in forward (_subclasses/fake_impls.py:{line} in conv)",
                        operator="conv (_subclasses/fake_impls.py:{line})")
    assert not diff_catalogs(old, new).identical
    assert diff_catalogs(old, new, ignore=("operator",)).identical
    assert not diff_catalogs(old, new, ignore=("user_source",)).identical


def test_an_ignored_user_source_is_ignored_in_the_user_stack_too(golden):
    stack = '\nUser stack trace:\n  File "{where}/m.py", line 220, in forward\n    for extra in extras:'
    old, new = _reasons(golden, "  # for extra in extras:  # {where}/m.py:220 in forward" + stack,
                        user_source="{where}/m.py:220 in forward: for extra in extras:")
    assert not diff_catalogs(old, new).identical
    assert diff_catalogs(old, new, ignore=("user_source",)).identical


def test_dimension_change_warns_of_another_corpus(golden):
    new = copy.deepcopy(golden)
    dim = next(d for d in new["dimensions"] if d["dim"] == "x.size()[0]")
    dim["max"] += 1
    dim["equal_to"] = ["context.size()[0]"]
    result = diff_catalogs(golden, new)
    assert not result.identical
    [change] = result.dimensions
    assert change.status == "changed" and change.fields == (
        ("max", dim["max"] - 1, dim["max"]), ("equal_to", [], ["context.size()[0]"]))
    assert any("different input dimensions" in w for w in result.warnings)


def test_a_shorter_corpus_is_diffed_with_a_warning(golden):
    new = copy.deepcopy(golden)
    new["corpus"]["samples"] = 150
    new["topologies"] = [t for t in new["topologies"] if t["first_sample"] < 150]
    for t in new["topologies"]:
        set_members(t, [s for s in t["samples"] if s < 150])
    new["compiles"] = [c for c in new["compiles"] if c["sample"] < 150]
    result = diff_catalogs(golden, new)
    assert not result.identical
    assert any(w.startswith("different corpora (300 vs 150 samples)") for w in result.warnings)
    assert ("corpus.samples", 300, 150) in [(c.field, c.old, c.new) for c in result.context]
    gone = {m.new for m in result.moves}
    assert gone == {NOT_IN_CORPUS}
    assert sorted(s for m in result.moves for s in m.samples) == list(range(150, 300))
    assert [t.old.id for t in result.topologies_with("vanished")] == [10]
    assert [c.sample for c in result.compiles] == [180]


def test_json_is_deterministic_and_independent_of_input_order(golden):
    new = with_new_topology(golden)
    shuffled = copy.deepcopy(new)
    shuffled["topologies"].reverse()
    shuffled["dimensions"].reverse()
    first = diff_catalogs(golden, new).to_json()
    assert diff_catalogs(golden, shuffled).to_json() == first
    assert store.dumps(first) == store.dumps(diff_catalogs(golden, new).to_json())


def test_markup_in_facts_guards_and_labels_renders_as_text(golden):
    new = with_new_topology(golden, facts_extra=EVIL)
    failure = compile_at(new, 236)["failures"][0]
    failure.update(guard=EVIL, raw=f"0/0: {EVIL} <raw>")
    new["compile"]["backend"] = EVIL
    html = render_diff(diff_catalogs(golden, new, labels=(EVIL, "new")))
    page = parse(html)
    assert page.find_all("script") == []
    texts = [c for node in page.iter() for c in node.children if isinstance(c, str)]
    assert sum(EVIL in t for t in texts) >= 7
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in html
    card = page.find("article", id="diff-new-11")
    assert EVIL in [words(li) for li in card.find("ul", class_="facts").find_all("li")]


def test_partial_renders_inside_another_page(golden):
    """The contract a fidelity check relies on: ``_diff.html`` needs only ``diff``."""
    result = diff_catalogs(golden, inductor_guards(golden), ignore=GUARD_TEXT, labels=("eager", "inductor"))
    html = ENVIRONMENT.get_template("_diff.html").render(diff=diff_context(result, title="Backend fidelity"))
    section = parse(html).find("section", id="diff")
    assert words(section.find("h2")) == "Backend fidelity"
    assert words(section.find("p", class_="diff-verdict").find("strong")) == "Identical"
    assert "guard, raw" in words(section.find("p", class_="note"))


def test_cli_ignore_guard_text(golden, tmp_path):
    (tmp_path / "eager.json").write_text(json.dumps(golden))
    (tmp_path / "inductor.json").write_text(json.dumps(inductor_guards(golden)))
    args = ["diff", str(tmp_path / "eager.json"), str(tmp_path / "inductor.json"), "--exit-code"]
    assert CliRunner().invoke(cli.main, args).exit_code == 1
    result = CliRunner().invoke(cli.main, args + ["--ignore", "guard-text"])
    assert result.exit_code == 0, result.output
    assert "ignoring    failure fields guard, raw" in result.output


def test_cli_bad_inputs(golden, tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(golden))
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "timings.json").write_text(json.dumps({"replay_seconds": 1.0, "compiles": []}))
    (tmp_path / "verification.json").write_text(json.dumps({"schema": 1, "passed": True, "artifacts": []}))
    (tmp_path / "future.json").write_text(json.dumps(dict(golden, schema=2)))
    (tmp_path / "empty").mkdir()
    cases = {
        "nowhere": "not found: pass an analysis folder",
        "empty": "catalog.json not found",
        "broken.json": "is not readable JSON",
        "timings.json": "is not a guardscope catalog",
        "verification.json": "is not a guardscope catalog (it lacks torch_version",
        "future.json": "has schema 2",
    }
    for name, message in cases.items():
        result = CliRunner().invoke(cli.main, ["diff", str(good), str(tmp_path / name)])
        assert result.exit_code == 2, (name, result.output)
        assert message in result.output, (name, result.output)
    bad_option = CliRunner().invoke(cli.main, ["diff", str(good), str(good), "--ignore", "kind"])
    assert bad_option.exit_code == 2 and "--ignore" in bad_option.output
    help_text = CliRunner().invoke(cli.main, ["diff", "--help"]).output
    assert "guardscope diff before/ after/" in help_text and "--exit-code" in help_text
