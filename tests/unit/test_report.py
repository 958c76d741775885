"""The HTML guard report: structure of the seed report, escaping, size at 10,000 samples, the
recommendation box's rule in each state, a real headless Chromium, and the ``guardscope report``
command.

Pages are checked through a parsed element tree (html.parser), never by matching whole pages.

This file holds the pure tests (no torch.compile, no child process); the others are in
tests/integration/test_report.py, tests/subprocess/test_report.py.
"""

from __future__ import annotations

import copy
import json
import random
import re

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from guardscope import cli, store
from guardscope.errors import CatalogError
from guardscope.report.page import read_inputs, render_report
from guardscope.report.recommendation import choose_fix, usage_code

from ..builders import FIXES, VERIFICATION
from ..pages import EVIL, Node, parse, words

# --- inputs ----------------------------------------------------------------------------------


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
    (tmp_path / store.CATALOG).write_text("{not json")
    with pytest.raises(CatalogError, match="catalog.json"):
        read_inputs(tmp_path)
    (tmp_path / store.CATALOG).write_text(json.dumps({"schema": 2}))
    with pytest.raises(CatalogError, match="schema 2"):
        read_inputs(tmp_path)


# --- the recommendation box ------------------------------------------------------------------

def _module(usage: str, rest: str = "") -> str:
    """A generated module's text: a docstring with an indented usage block, then code."""
    block = "\n".join("    " + line if line else "" for line in usage.splitlines())
    return f'"""A plan, generated by guardscope.\n\nUse it so:\n\n{block}\n\nThen more words.\n"""\n\n{rest}'


# 10 graphs, more than torch's default limit of 8: torch 2.13's per-call limit in the usage line.
WARMUP_USAGE = ("import torch, warmup\n"
                "compiled = torch.compile(model, dynamic=True, fullgraph=True, recompile_limit=10)\n"
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
    # torch 2.13 (the golden catalog's) keeps a setting made in code per thread
    assert ("turns duck sizing off on the thread that calls it (torch 2.13 keeps settings made in code per thread"
            in facts["what it costs"])
    assert "unbacked.mark(*args, **kwargs) before the call" in facts["what it costs"]
    assert ("The warmup set compiles 10 graphs, more than production's recompile limit of 8: it needs "
            "torch.compile(..., recompile_limit=10), else its warmup() raises the recompile limit") in facts["what it costs"]
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
    assert facts[2] == ("Its set-up compiles 10 graphs, more than production's recompile limit of 8: the code below "
                        "compiles with recompile_limit=10, a limit of that compiled model alone; it changes no global "
                        "setting and needs nothing per request.")
    assert not box.find_all("p", class_="warn")  # the per-call limit is not a stale compile option
    # A module emitted where torch has no per-call limit: its warmup() raises the global one, and says so.
    older = copy.deepcopy(SEED_FIXES)
    older["artifacts"][0]["code"] = _module(WARMUP_USAGE.replace(", recompile_limit=10", ""), "STEPS = ()\n")
    facts = [words(dd) for dd in _box(older, verification).find_all("dd")]
    assert facts[2].startswith("Its set-up compiles 10 graphs, more than production's recompile limit of 8: its "
                               "warmup() raises torch._dynamo.config.recompile_limit to 10, a global setting")
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
    assert words(box.find("p")).startswith("Every fix guardscope made failed verification, serves only part of "
                                           "the corpus, or is not possible")
    assert box.find_all("pre") == [] and box.find_all("dl") == []
    assert _others(box) == {"warmup": "warmup failed: warmup failed here",
                            "unbacked": "unbacked infeasible: no dimension to mark",
                            "export": "export crashed: export crashed here"}
    # an export that serves only part of the corpus is no full pass: it is not recommended either
    partial = _verification(warmup="failed", unbacked="infeasible", export="partial")
    assert choose_fix(fixes, partial, None)["name"] is None
    assert _others(_box(fixes, partial))["export"] == "export partial: export partial here"


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


def test_every_command_has_help():
    runner = CliRunner()
    assert cli.main.commands
    for name, command in cli.main.commands.items():
        assert command.help and command.help.strip(), name
        result = runner.invoke(cli.main, [name, "--help"])
        assert result.exit_code == 0 and "Usage:" in result.output, name




# --- fixes at the input (whatif.json) ------------------------------------------------------------


def _whatif_row(transforms: list[str], graphs: int, padding: float, equal: bool | None, diff: float | None) -> dict:
    return {"label": " + ".join(transforms) or "as recorded", "transforms": transforms, "graphs": graphs,
            "frames": 1, "compile_seconds": graphs * 0.5, "padding_percent": padding, "warmup_samples": graphs,
            "warmup_graphs": graphs, "warmup_setup_seconds": graphs * 0.75, "raised": 0, "notes": [],
            "outputs_equal": equal, "max_diff": diff, "changes_results": equal is False, "topologies": []}


WHATIF = {"schema": 1, "transforms": ["cast:images:float32:scale", "pad:images:2,3:multiple=32"], "samples": 12,
          "suggested": False, "rows": [
              _whatif_row([], 8, 0.0, None, None),
              _whatif_row(["cast:images:float32:scale"], 4, 0.0, True, 0.0),
              _whatif_row(["pad:images:2,3:multiple=32"], 3, 0.6, False, 0.00234),
              _whatif_row(["cast:images:float32:scale", "pad:images:2,3:multiple=32"], 1, 0.6, False, 0.00234)],
          "advice": [{"subject": "images", "spec": "cast:images:float32:scale", "applies": True, "text": "cast it"},
                     {"subject": "edge_index dim 1", "spec": None, "applies": False,
                      "text": "edges cannot be padded without a mask: a padded edge would connect real nodes"}]}


def test_fixes_at_the_input_leads_with_the_cheapest_chain_that_keeps_the_outputs_equal():
    catalog, _ = synthetic_catalog(samples=30, topologies=2, extra_compiles=2)
    page = parse(render_report(catalog, timings=None, fixes=SEED_FIXES, verification=SEED_VERIFICATION,
                               whatif=WHATIF))
    section = page.find("section", id="input-fixes")
    # fewer graphs than the cast, but changing the results: never the first line
    assert words(section.find(id="input-fixes-best")) == (
        "Cheapest chain that keeps the outputs equal: cast:images:float32:scale: 4 graphs against 8 as "
        "recorded, warmup set-up 3.00 s against 6.00 s, padding 0.0 % of the input elements, largest output "
        "difference 0.")
    assert words(section.find(id="input-fixes-plans")) == (
        "Compared with the plans of guardscope emit-warmup DIR: this chain compiles 4 graphs in 2.00 s, set-up "
        "3.00 s (a warmup of 4 samples) (measured by the what-if replay); the warmup plan 10 graphs, set-up "
        "1.40 s; the unbacked plan 1 graph, set-up 1.40 s.")
    # each row's warmup: its samples and its set-up
    table = section.find("table")
    assert [words(th) for th in table.find("thead").find_all("th")] == [
        "transform", "graphs", "frames", "compile", "warmup", "set-up", "padding", "outputs"]
    rows = table.find("tbody").find_all("tr")
    assert [[words(td) for td in r.find_all("td")[1:6]] for r in rows][:2] == [
        ["8", "1", "4.00 s", "8", "6.00 s"], ["4", "1", "2.00 s", "4", "3.00 s"]]
    assert [words(r.find_all("td")[0]) for r in rows] == [
        "as recorded", "cast:images:float32:scale", "pad:images:2,3:multiple=32",
        "chain: cast:images:float32:scale + pad:images:2,3:multiple=32"]
    assert [words(r.find_all("td")[-1]) for r in rows][2] == "differ (max diff 0.00234) changes the results"
    assert [r.attrs.get("class") for r in rows] == [None, None, "changes-results", "changes-results"]
    advice = [words(li) for li in section.find("ul", class_="input-advice").find_all("li")]
    assert advice[1] == ("does not apply edge_index dim 1: edges cannot be padded without a mask: a padded edge "
                         "would connect real nodes")
    assert page.find("a", href="#input-fixes") is not None
    # without whatif.json there is no section, and when no chain keeps the answers none is named
    assert not parse(render_report(catalog, timings=None, fixes=None, verification=None)).find_all(id="input-fixes")
    changing = {**WHATIF, "rows": [r for r in WHATIF["rows"] if r["outputs_equal"] is not True]}
    page = parse(render_report(catalog, timings=None, fixes=None, verification=None, whatif=changing))
    assert words(page.find(id="input-fixes-best")).startswith("No transform chain kept the outputs equal")
    assert not page.find_all(id="input-fixes-plans")


def test_a_guard_expression_torch_prints_reads_in_words():
    """Issue 36 item 9: the guard a diffusers UNet's operator left, as torch printed it, and the
    usual forms; a compound condition gets no reading rather than a wrong one."""
    from guardscope.text import guard_reading

    unet = "((1 + (((-1) + sample.size()[2]) // 2)) % (2*(1 + (((-1) + sample.size()[3]) // 2)))) != 0"
    assert guard_reading(unet) == "ceil(sample dim 2 / 2) is not a multiple of 2*ceil(sample dim 3 / 2)"
    assert guard_reading("((1 + (((-1) + L['sample'].size()[2]) // 2)) % 4) == 0") == \
        "ceil(sample dim 2 / 2) is a multiple of 4"
    assert guard_reading("0 <= num_nodes <= 1") == "num_nodes is between 0 and 1"
    assert guard_reading("2 <= L['x'].size()[0]") == "x dim 0 is at least 2"
    assert guard_reading("L['x'].size()[0] == L['y'].size()[1]") == "x dim 0 equals y dim 1"
    assert guard_reading("x.size()[0] == 1 and y.size()[0] == 1") is None
    assert guard_reading("___check_type_id(L['x'], 94)") is None


def test_every_failure_kind_and_only_those_have_an_explanation():
    from guardscope.model import FailureKind
    from guardscope.report.common import KIND_EXPLANATIONS

    assert set(KIND_EXPLANATIONS) == {kind.value for kind in FailureKind}
    assert all(title and text for title, text in KIND_EXPLANATIONS.values())
