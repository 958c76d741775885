"""emit-warmup and verify on the seed corpus: fixes generated from the catalog, proven on it.

This file holds the pure tests (no torch.compile, no child process); the others are in
tests/integration/test_emit_verify.py, tests/subprocess/test_emit_verify.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from guardscope.fixes.plan import choose_cover, choose_export_dims


def test_choose_cover_prefers_general_graphs():
    # 1 serves 0 (equal counts are a special case of unequal ones); the rest serve themselves.
    covers = {0: {0}, 1: {0, 1}, 2: {2}, 3: {3}}
    assert choose_cover([0, 1, 2, 3], covers) == [1, 2, 3]
    # a cycle (two graphs that accept each other) needs one of them
    assert choose_cover([0, 1], {0: {0, 1}, 1: {0, 1}}) == [0]


def test_export_margin():
    catalog = json.loads((Path(__file__).parents[1] / "golden" / "seed_catalog.json").read_text())
    plan = choose_export_dims(catalog, margin=0.5)
    assert {d.name: d.max for d in plan.dims}["x_0"] == 90
