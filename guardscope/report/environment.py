"""The one jinja Environment of the HTML pages (autoescape, strict undefined), with the filters the
templates use."""

from __future__ import annotations

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from ..resources import templates_dir
from ..text import format_samples, format_seconds
from .common import number_text

TEMPLATES = templates_dir()


# --- rendering -------------------------------------------------------------------------------

ENVIRONMENT = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
ENVIRONMENT.filters.update(seconds=format_seconds, number=number_text, samples=format_samples)
