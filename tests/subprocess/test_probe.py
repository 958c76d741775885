"""probe: synthetic inputs at the sizes Dynamo specialises on, checked against real graphs; the
risk estimates in the catalog; emit-warmup --include-probed and verify over the probed set.

This file holds the tests that start child processes, compile with inductor or drive the browser;
the others are in tests/unit/test_probe.py, tests/integration/test_probe.py.
"""

from __future__ import annotations

import pytest

from guardscope import pipeline

from ..sessions import copy_analysis

# x's rows and mask's rows are equal in every sample that passes a mask; extras[0] and
# extras[1] too where passed. Sample 7 passes x and mask, sample 8 x alone.


@pytest.mark.slow
def test_include_probed_warmup_verifies_on_the_probed_set(probed, tmp_path):
    out, result = copy_analysis(probed[0], tmp_path / "out"), probed[1]
    found = result.document["new_topologies"]
    fixes = pipeline.emit_warmup(out, include_probed=True, only=("warmup", "export"))  # the plans verified
    assert fixes.warmup.topologies == 11 + len(found)
    assert "probed P0" in (out / "warmup.py").read_text()
    document = pipeline.verify(out, artifacts=("warmup", "export"), backend="eager")
    assert document["passed"], document
    warmup = next(r for r in document["artifacts"] if r["name"] == "warmup")
    assert warmup["replay_recompiles"] == 0 and warmup["probed_replayed"] == len(found)
    assert warmup["samples_replayed"] == 300 + len(found)
    export = next(r for r in document["artifacts"] if r["name"] == "export")
    assert len(export["topologies"]) == 11 + len(found) and all(t["passed"] for t in export["topologies"])
