"""The per-test budget's reason (tests/conftest.py, docs/development.md): a docstring sentence
starting "Slow:"."""

from __future__ import annotations

from ..conftest import slow_reason


def test_a_slow_sentence_is_found_across_lines():
    def slow():
        """Checks things. Slow: it compiles
        with inductor in a child. More words."""

    assert slow_reason(slow) == "Slow: it compiles with inductor in a child."


def test_no_docstring_or_no_sentence_is_no_reason():
    def bare():
        pass

    def plain():
        """Checks things slowly."""

    assert slow_reason(bare) is None and slow_reason(plain) is None and slow_reason(None) is None
