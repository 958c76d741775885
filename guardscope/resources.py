"""Where the jinja templates live: ``templates/`` beside the package in a checkout or editable
install, the ``guardscope.templates`` package data in a wheel."""

from __future__ import annotations

import importlib.resources
from pathlib import Path


def templates_dir() -> Path:
    checkout = Path(__file__).resolve().parent.parent / "templates"
    if checkout.is_dir():
        return checkout
    return Path(str(importlib.resources.files("guardscope.templates")))
