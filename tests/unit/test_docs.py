"""The README is a front page and every documentation page is reachable from it: each relative
link in README.md and docs/*.md names a file that exists, and following them from the README
reaches every page of docs/."""

from __future__ import annotations

import re
from pathlib import Path

from ..paths import REPO

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")
PAGES = sorted((REPO / "docs").glob("*.md"))


def links(page: Path) -> list[Path]:
    found = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if "://" not in target and not target.startswith("mailto:"):
            found.append((page.parent / target).resolve())
    return found


def test_every_relative_link_names_a_file_that_exists():
    broken = [f"{page.relative_to(REPO)} -> {target}" for page in [REPO / "README.md", *PAGES]
              for target in links(page) if not target.exists()]
    assert broken == []


def test_every_docs_page_is_reachable_from_the_readme():
    seen, todo = set(), [REPO / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".md":
            continue
        seen.add(page)
        todo.extend(links(page))
    assert [str(p.relative_to(REPO)) for p in PAGES if p.resolve() not in seen] == []


def test_the_readme_is_a_front_page():
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_the_readme_screenshot_shows_todays_report_templates():
    """docs/report.png records the templates' digest it was rendered with (docs/make_screenshot.py):
    a change to the report's templates must come with a new picture."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_screenshot", REPO / "docs" / "make_screenshot.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert (REPO / "docs" / "report.png").is_file()
    assert script.recorded_digest() == script.templates_digest(), (
        "docs/report.png is older than the report's templates: run `python docs/make_screenshot.py` and commit "
        "docs/report.png and docs/report.png.json")
