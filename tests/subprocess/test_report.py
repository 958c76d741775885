"""The HTML guard report: structure of the seed report, escaping, size at 10,000 samples, the
recommendation box's rule in each state, a real headless Chromium, and the ``guardscope report``
command.

Pages are checked through a parsed element tree (html.parser), never by matching whole pages.

This file holds the tests that start child processes, compile with inductor or drive the browser;
the others are in tests/unit/test_report.py, tests/integration/test_report.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from guardscope import torch_compat
from guardscope.report.page import read_inputs

from ..headless_chromium import _Pipe, chromium_binary, open_page
from ..pages import parse, words

# --- a real browser --------------------------------------------------------------------------

@pytest.mark.skipif(chromium_binary() is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_seed_report_in_headless_chromium(seed_report, tmp_path):
    screenshot = tmp_path / "report.png"
    visit = open_page(seed_report / "report.html", screenshot)
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
def test_seed_recommendation_after_verify_is_in_the_first_screen(seed_verified):
    """After emit-warmup and verify (the session's, real torch.compile), the seed report opens with
    the mark_unbacked plan, proven, its code in the first 1280x900 screen."""
    out, verification = seed_verified
    # the three plans, and unbacked.py's shapes_spec form where torch has one (2.13)
    assert [a["status"] for a in verification["artifacts"]] == ["passed"] * (
        3 + torch_compat.supports_shapes_spec()), \
        [(a["name"], a["reason"]) for a in verification["artifacts"]]
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
