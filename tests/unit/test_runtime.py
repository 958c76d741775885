"""guardscope.runtime: a plan applied in serving, new topologies run eagerly and are recorded.

This file holds the pure tests (no torch.compile, no child process); the others are in
tests/integration/test_runtime.py.
"""

from __future__ import annotations

import pytest
import torch

from guardscope import runtime
from guardscope.errors import ServeError


def test_input_signature_keeps_what_guards_look_at():
    sig = runtime.input_signature
    a = sig({"x": torch.randn(5, 7), "n": 3})
    assert a == sig({"x": torch.randn(9, 4), "n": 8})  # sizes and ints of the same classes
    assert a != sig({"x": torch.randn(5, 5), "n": 3})  # equal sizes (duck sizing)
    assert a != sig({"x": torch.randn(1, 7), "n": 3})  # a size of 1
    assert a != sig({"x": torch.randn(5, 7), "n": 1})  # an int of 1
    assert a != sig({"x": torch.randn(7, 5).t(), "n": 3})  # strides
    assert a != sig({"x": torch.randn(5, 7, dtype=torch.float64), "n": 3})
    assert sig({"f": 0.5}) != sig({"f": 0.25})  # floats are specialized by value
    empty = torch.empty_strided((2, 0), (0, 1))
    assert sig({"e": empty}) != sig({"e": torch.empty(2, 0)})  # the seed corpus's zero stride


def test_choose_plan():
    fixes = {"artifacts": [{"name": "warmup"}, {"name": "unbacked"}, {"name": "export"}]}

    def verified(**statuses):
        return {"artifacts": [{"name": name, "status": status} for name, status in statuses.items()]}

    assert runtime.choose_plan("auto", fixes, verified(warmup="passed", unbacked="passed")) == ("warmup", None)
    assert runtime.choose_plan("auto", fixes, verified(warmup="failed", unbacked="passed")) == ("unbacked", None)
    plan, warning = runtime.choose_plan("auto", fixes, None)
    assert plan == "warmup" and "not verified" in warning
    with pytest.raises(ServeError, match="no plan passed"):
        runtime.choose_plan("auto", fixes, verified(warmup="failed", unbacked="crashed"))
    plan, warning = runtime.choose_plan("unbacked", fixes, verified(unbacked="failed"))
    assert plan == "unbacked" and "did not pass" in warning
    with pytest.raises(ServeError, match="emit-warmup"):
        runtime.choose_plan("auto", None, None)
    with pytest.raises(ServeError, match="not one of"):
        runtime.choose_plan("export", fixes, None)
