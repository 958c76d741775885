"""guardscope bench: serving latency per strategy, each in a fresh process, with the recommendation.

The statistics, targets, recommendation, table and report section are checked on hand-made
results; the processes on the CPU with tiny models: a crash and a timeout each become a failed
row, and one real run of all five strategies with inductor (slow: every strategy compiles from
empty caches, AOTInductor included).

This file holds the tests that compile in this process; the others are in tests/unit/test_bench.py,
tests/subprocess/test_bench.py.
"""

from __future__ import annotations

import torch


def test_export_input_checker_uses_the_exported_programs_own_bounds():
    from torch.export import Dim

    from guardscope import torch_compat

    class Add(torch.nn.Module):
        def forward(self, x, y):
            return x.sum(0) + y.sum(0)

    rows = Dim("rows", min=1, max=6)
    program = torch.export.export(Add(), (torch.ones(3, 8),), {"y": torch.ones(3, 8)},
                                  dynamic_shapes={"x": {0: rows}, "y": {0: rows}})
    check = torch_compat.export_input_checker(program)
    assert check((torch.ones(5, 8),), {"y": torch.ones(5, 8)}) is None
    assert "<= 6" in check((torch.ones(9, 8),), {"y": torch.ones(9, 8)})          # beyond the Dim
    assert check((torch.ones(4, 8),), {"y": torch.ones(5, 8)}) is not None         # one Dim, two sizes
    assert check((torch.ones(4, 7),), {"y": torch.ones(4, 7)}) is not None         # a static size
    assert "float64" in check((torch.ones(4, 8, dtype=torch.float64),), {"y": torch.ones(4, 8)})
    assert check((torch.ones(4, 8),), {}) is not None                              # y missing
