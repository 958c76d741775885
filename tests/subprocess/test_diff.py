"""``guardscope diff``: the pure comparison on constructed edits of the golden seed catalog, a
real pair of analyses (the seed corpus with and without duck sizing), the HTML page and partial,
and the command line.

This file holds the tests that start child processes, compile with inductor or drive the browser;
the others are in tests/unit/test_diff.py, tests/integration/test_diff.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from guardscope import cli

from ..headless_chromium import chromium_binary, open_page

GOLDEN = Path(__file__).parents[1] / "golden" / "seed_catalog.json"


@pytest.fixture
def golden() -> dict:
    return json.loads(GOLDEN.read_text())


@pytest.mark.skipif(chromium_binary() is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_diff_page_in_headless_chromium(pair, tmp_path):
    page = tmp_path / "diff.html"
    result = CliRunner().invoke(cli.main, ["diff", str(pair[0]), str(pair[1]), "--html", str(page)])
    assert result.exit_code == 0, result.output
    visit = open_page(page, tmp_path / "diff.png")
    assert visit.errors == []
    assert visit.requests == [visit.url] and visit.failed_requests == []
    assert visit.size[0] == 1280 and visit.size[1] > 1200
