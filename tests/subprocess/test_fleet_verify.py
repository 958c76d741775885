"""Issue 38: ``verify`` on a fleet's analysis says each replica's verdict. The shipped fleet
(samples/fleet: the seed dealt to four replicas) analysed as one, its plans emitted once for
every replica; verified, every replica replays its calls with 0 recompiles; with a warmup sample
dropped, the replica whose call needs it is named, with the fleet's sample number, and only it."""

from __future__ import annotations

import pytest

from guardscope import pipeline

from ..sessions import copy_analysis, made_once
from .test_emit_verify import without_third_warmup_sample


@pytest.fixture(scope="module")
def fleet_fixes(tmp_path_factory, shipped_fleet):
    def make(root):
        out = copy_analysis(shipped_fleet[1], root / "out")  # the session's merge and analysis
        pipeline.emit_warmup(out, only=("warmup", "unbacked"))  # the plans verified here
        return out

    return made_once(tmp_path_factory, "fleet-fixes", make)


def test_every_replica_replays_its_calls_with_0_recompiles(fleet_fixes, tmp_path):
    document = pipeline.verify(copy_analysis(fleet_fixes, tmp_path / "out"), artifacts=("warmup", "unbacked"),
                               backend="eager")
    assert document["passed"]
    for result in document["artifacts"]:
        replicas = result["replicas"]
        assert sorted(replicas) == [f"web-{k}" for k in range(4)]
        assert sum(r["samples"] for r in replicas.values()) == result["samples_replayed"] == 300
        assert all(r["status"] == "passed" and r["recompiles"] == 0 and r["from"] == "fleet" for r in replicas.values())


def test_a_replica_whose_call_the_plan_misses_is_named_alone(fleet_fixes, tmp_path):
    out = without_third_warmup_sample(fleet_fixes, tmp_path / "broken")
    document = pipeline.verify(out, artifacts=("warmup",), backend="eager")
    (result,) = document["artifacts"]
    assert result["status"] == "failed" and result["recompile_samples"] == [12]
    replicas = result["replicas"]
    failing = {name: r for name, r in replicas.items() if r["status"] != "passed"}
    assert len(failing) == 1 and all(r["from"] == "replayed" for r in replicas.values())
    ((name, alone),) = failing.items()
    assert alone["recompile_samples"] == [12] and alone["recompiles"] == 1
    assert sum(r["samples"] for r in replicas.values()) == 300
    catalog = pipeline.store.read_catalog(out)
    assert [t for t in catalog["topologies"] if 12 in t["samples"]][0]["replicas"] == {name: 1}
