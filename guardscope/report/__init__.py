"""Review: the HTML guard report and the diff page, rendered from the analysis folder's
documents (read through :mod:`guardscope.store`). Nothing below the facade imports it.

Stage order: ``common`` (size limits, failure-kind explanations, formatters), ``charts`` (SVG
geometry: timeline, CUDA-graph strip), ``environment`` (the one autoescaping jinja Environment),
``diff_page`` (two analyses compared), ``sections`` (one context per report section),
``recommendation`` (the box at the top), ``page`` (read, build, render, write).
"""

from .diff_page import write_diff_html
from .page import render_report, write_report

__all__ = ["render_report", "write_diff_html", "write_report"]
