"""Precompiled warmups, the pure parts: what cannot be precompiled and why, which manifest fits,
and the artifact's zip of graphs and kernels. The builds and fresh processes are in
tests/subprocess/test_precompiled.py."""

from __future__ import annotations

import zipfile
import io

from guardscope.precompiled import check_precompiled
from guardscope.proving.precompiling import _step_dynamic, precompile_refusal
from guardscope.proving.verify_precompiled import precompiled_status
from guardscope.torch_compat import pack_artifact, unpack_artifact

ONE_FRAME = {"frames": [{"frame": 0, "label": "forward (m.py:3)"}], "graph_breaks": []}


def test_a_model_with_graph_breaks_is_refused_with_its_reason():
    catalog = {"frames": [{"label": "forward (m.py:3)"}, {"label": "torch_dynamo_resume_in_forward_at_9 (m.py:9)"}],
               "graph_breaks": [{"reason": "Data-dependent branching", "location": "m.py:8"}]}
    reason = precompile_refusal(catalog, None)
    assert "graph breaks (2 frames: Data-dependent branching)" in reason and "fullgraph" in reason
    assert precompile_refusal(ONE_FRAME, None) is None


def test_a_compiled_method_and_an_infeasible_warmup_are_refused():
    assert "method 'forward'" in precompile_refusal({**ONE_FRAME, "method": "forward"}, None)
    assert "infeasible (no topology)" in precompile_refusal(ONE_FRAME, {"status": "infeasible", "reason": "no topology"})


def test_dynamo_default_traces_the_first_step_static_and_the_rest_dynamic():
    assert [_step_dynamic(None, step) for step in range(3)] == [None, True, True]
    assert [_step_dynamic(True, step) for step in range(2)] == [True, True]
    assert [_step_dynamic(False, step) for step in range(2)] == [False, False]


def _facts():
    return {"torch_version": "2.13.0+cpu", "device_name": "cpu (x86_64)", "plan_hash": "a" * 64,
            "compiled": {"backend": "inductor", "dynamic": True, "options": {}}}


def _manifest(**changes):
    manifest = {"format": 1, "torch_version": "2.13.0+cpu", "device_name": "cpu (x86_64)", "plan_hash": "a" * 64,
                "compiled": {"backend": "inductor", "dynamic": True, "options": {}}, "grad_mode": "no_grad"}
    return {**manifest, **changes}


def test_a_manifest_fits_only_this_torch_device_backend_plan_and_grad_mode():
    assert check_precompiled(_manifest(), _facts(), "no_grad") is None
    assert "torch 2.11.0" in check_precompiled(_manifest(torch_version="2.11.0"), _facts(), "no_grad")
    assert "NVIDIA H100" in check_precompiled(_manifest(device_name="NVIDIA H100"), _facts(), "no_grad")
    assert "another plan" in check_precompiled(_manifest(plan_hash="b" * 64), _facts(), "no_grad")
    assert check_precompiled(_manifest(), _facts(), "inference_mode") == (
        "it was built for calls under no_grad, the warmup serves calls under inference_mode")


def test_the_artifact_carries_graphs_and_kernels_and_nothing_outside_its_folders():
    data = pack_artifact(b"graphs", {"inductor": [("ab/cabc.so", b"\x7fELF", 0o755), ("ab/cabc.cpp", b"int x;", 0o644)]})
    assert pack_artifact(b"graphs", {"inductor": [("ab/cabc.so", b"\x7fELF", 0o755), ("ab/cabc.cpp", b"int x;", 0o644)]}) == data
    graphs, kernels = unpack_artifact(data)
    assert graphs == b"graphs"
    assert kernels == [("inductor", "ab/cabc.so", b"\x7fELF", 0o755), ("inductor", "ab/cabc.cpp", b"int x;", 0o644)]
    buffer = io.BytesIO(data)
    with zipfile.ZipFile(buffer, "a") as archive:
        archive.writestr("kernels/inductor/../../escape.so", b"x")
    assert len(unpack_artifact(buffer.getvalue())[1]) == 2


def test_a_precompiled_warmup_that_compiles_or_differs_fails():
    loaded = {"status": "passed", "precompiled_load": {"status": "loaded"}, "replay_recompiles": 0,
              "recompile_samples": [], "precompiled": {"outputs": {"equal": True, "max_diff": 0.0}}}
    assert precompiled_status(loaded) == ("used", None)
    status, reason = precompiled_status({**loaded, "replay_recompiles": 2, "recompile_samples": [7, 9]})
    assert status == "failed" and "first at sample 7" in reason
    assert precompiled_status({**loaded, "precompiled": {"outputs": {"equal": False, "max_diff": 0.5}}})[0] == "failed"
    refused = {**loaded, "precompiled_load": {"status": "incompatible", "reason": "it was made with torch 2.11.0"}}
    assert precompiled_status(refused) == ("not used", "it was made with torch 2.11.0")


def test_the_report_gives_each_way_a_replica_starts_as_measured():
    from guardscope.report.recommendation import startup_costs

    verification = {"artifacts": [{
        "name": "warmup", "status": "passed", "setup_seconds": 9.2,
        "bundle": {"without": {"status": "passed", "setup_seconds": 58.4}, "with": {"status": "passed", "setup_seconds": 13.1}},
        "precompiled": {"status": "used", "run": {"setup_seconds": 0.8}}}]}
    bench = {"device_name": "NVIDIA H200", "strategies": [
        {"name": "warmup", "status": "ok", "setup_seconds": 12.0, "bundle": {"status": "loaded"}},
        {"name": "precompiled", "status": "ok", "setup_seconds": 0.9},
        {"name": "compile", "status": "ok", "setup_seconds": 0.0}]}
    assert [(c["seconds"], c["way"], c["by"]) for c in startup_costs(verification, bench)] == [
        (9.2, "compiling its graphs with this machine's caches", "verify"),
        (58.4, "compiling its graphs, empty caches", "verify"),
        (13.1, "from its compile-cache bundle, empty caches", "verify"),
        (0.8, "from its precompiled graphs, empty caches", "verify"),
        (12.0, "from its compile-cache bundle, empty caches", "guardscope bench on NVIDIA H200"),
        (0.9, "from its precompiled graphs, empty caches", "guardscope bench on NVIDIA H200"),
    ]
    failed = {"artifacts": [{"name": "warmup", "status": "failed", "setup_seconds": 3.0,
                             "precompiled": {"status": "failed", "run": {"setup_seconds": 1.0}}}]}
    assert startup_costs(failed, None) == []
