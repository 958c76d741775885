"""tests/subprocess: tests that start child processes (verify, bench, bundle, the CLI's exit
statuses and Ctrl-C, fidelity), compile with inductor, or drive the headless browser. They carry
the ``slow`` mark, so ``-m "not slow"`` leaves them out."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.slow)
