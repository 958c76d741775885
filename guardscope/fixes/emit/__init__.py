"""Pure: plans -> the text of generated Python modules, rendered from ``templates/code/``.

Generated code never embeds a corpus-controlled string unsafely: names are checked as
identifiers by :mod:`guardscope.fixes.plan`, every literal goes through the ``py`` filter (``repr``),
and comment and docstring text through ``comment`` (one line, no control characters, quotes
and backslashes escaped).
"""

from __future__ import annotations

from typing import Any

import jinja2

from ...resources import templates_dir
from ...text import first_line

TEMPLATES = templates_dir() / "code"


def _comment(text: Any) -> str:
    """Make ``text`` safe inside a ``#`` comment or a docstring: one line, printable, with
    backslashes and double quotes escaped (a model spec such as ``m.py:x\"\"\"`` must not end
    the module's docstring)."""
    flat = " ".join(str(text).split())
    printable = "".join(ch if ch.isprintable() else "?" for ch in flat)
    return printable.replace("\\", "\\\\").replace('"', '\\"')


def _environment() -> jinja2.Environment:
    # Python source, not HTML: autoescape would corrupt it; safety comes from the filters.
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["py"] = repr
    env.filters["comment"] = _comment
    env.filters["first_line"] = first_line
    return env


_ENV = _environment()


def render(template: str, **context: Any) -> str:
    text = _ENV.get_template(template).render(**context)
    compile(text, template, "exec")  # a syntax error here is a guardscope bug: fail loudly
    return text
