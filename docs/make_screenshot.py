"""Write docs/report.png, the README's picture of a report, from the report guardscope renders today.

    python docs/make_screenshot.py            # analyse, emit and verify the seed corpus, screenshot the report
    python docs/make_screenshot.py --check    # exit 1 when the report's templates changed since the picture

It analyses the shipped seed corpus in a temporary folder, emits and verifies its fixes (so the
report's top shows the recommendation as a user first sees it), takes the top 2400 px of the page
with headless Chromium (``tests/headless_chromium.py``), and records beside the picture, in
``docs/report.png.json``, the sha256 of the report templates it was rendered with.
``tests/unit/test_docs.py`` fails while those differ from the templates in the tree: a template
change must come with a new picture.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # run as a file: make the repository root importable
    sys.path.insert(0, str(ROOT))

PICTURE = ROOT / "docs" / "report.png"
RECORD = ROOT / "docs" / "report.png.json"
TEMPLATES = ROOT / "templates"
COMMAND = "python docs/make_screenshot.py"
HEIGHT = 2400


def templates_digest(folder: Path = TEMPLATES) -> str:
    """sha256 of the report's templates (every ``.html`` and ``.css`` file, by name and content;
    the code templates of the generated modules are not part of the page)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.iterdir() if p.suffix in (".html", ".css")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def recorded_digest() -> str | None:
    """The templates' digest the picture was taken with (None: no record)."""
    if not RECORD.is_file():
        return None
    return json.loads(RECORD.read_text(encoding="utf-8")).get("templates_sha256")


def make() -> None:
    from guardscope import analyze, pipeline
    from tests.headless_chromium import open_page

    # inside the checkout, so the report names the corpus by a path relative to it, not this machine's
    with tempfile.TemporaryDirectory(prefix=".screenshot-", dir=ROOT) as work:
        out = Path(work) / "out"
        analyze(ROOT / "samples" / "gnn" / "corpus", out, strict=True)
        pipeline.emit_warmup(out)
        pipeline.verify(out)
        result = open_page(out / "report.html", PICTURE, max_height=HEIGHT)
        if result.exceptions or result.failed_requests:
            raise SystemExit(f"the report page misbehaved: {result.exceptions or result.failed_requests}")
    RECORD.write_text(json.dumps({"templates_sha256": templates_digest(), "made_with": COMMAND,
                                  "height": HEIGHT}, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {PICTURE.relative_to(ROOT)} and {RECORD.relative_to(ROOT)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the templates changed since the picture")
    if parser.parse_args(argv).check:
        if recorded_digest() != templates_digest():
            print(f"docs/report.png is older than the report's templates: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    make()
    return 0


if __name__ == "__main__":
    sys.exit(main())
