"""Compile-cache bundles: a tiny model's plan compiled with inductor on the CPU, bundled, and
warm-started in fresh processes with empty cache folders; mismatches fall back with a warning.

This file holds the pure tests (no torch.compile, no child process); the others are in
tests/subprocess/test_bundle.py.
"""

from __future__ import annotations

import copy

import pytest

from guardscope.bundle import check_manifest, plan_hash
from guardscope.proving.verify_bundle import bundle_status
from guardscope.report.sections import bundle_context

from ..builders import write_sized_corpus

# --- pure parts --------------------------------------------------------------------------------

FACTS = {
    "torch_version": "2.11.0+cu128",
    "device_name": "NVIDIA H200",
    "compiled": {"backend": "inductor", "dynamic": True, "options": {}},
    "plan_hash": "a" * 64,
}
MANIFEST = {"format": 1, "torch_version": "2.11.0+cu128", "device_name": "NVIDIA H200",
            "compiled": {"backend": "inductor", "dynamic": True, "options": {}}, "plan_hash": "a" * 64}


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("format", 2, "format 2"),
    ("torch_version", "2.13.0+cpu", "made with torch 2.13.0+cpu, this is torch 2.11.0+cu128"),
    ("device_name", "NVIDIA A100", "made on NVIDIA A100, this runs on NVIDIA H200"),
    ("compiled", {"backend": "aot_eager", "dynamic": True, "options": {}}, "backend 'aot_eager'"),
    ("compiled", {"backend": "inductor", "dynamic": None, "options": {}}, "dynamic=None"),
    ("compiled", {"backend": "inductor", "dynamic": True, "options": {"max_autotune": True}}, "max_autotune"),
    ("plan_hash", "b" * 64, "another plan"),
])
def test_check_manifest_names_the_mismatch(field, value, reason):
    assert check_manifest(MANIFEST, FACTS) is None
    manifest = {**MANIFEST, field: value}
    assert reason in check_manifest(manifest, FACTS)


def test_check_manifest_skips_settings_torch_does_not_describe():
    # a compiled function (not an nn.Module) has no readable backend: the rest is still checked
    facts = {**FACTS, "compiled": None}
    assert check_manifest(MANIFEST, facts) is None
    assert "another plan" in check_manifest({**MANIFEST, "plan_hash": "c" * 64}, facts)
    assert "format None" in check_manifest(["not", "a", "manifest"], facts)


def test_plan_hash_follows_samples_marks_and_options(tmp_path):
    first = write_sized_corpus(tmp_path / "a", (5, 1))
    same = write_sized_corpus(tmp_path / "b", (5, 1))
    other = write_sized_corpus(tmp_path / "c", (5, 1), seed=1)
    plan = {"artifact": "unbacked", "compile": {"dynamic": True, "fullgraph": True, "mode": None},
            "dims": (("x", 0),), "duck_shape": True}
    assert plan_hash(plan, first) == plan_hash(copy.deepcopy(plan), same)  # same content, same hash
    assert plan_hash(plan, other) != plan_hash(plan, first)  # other warmup samples
    changed = [
        {**plan, "dims": (("x", 0), ("y", 1))},
        {**plan, "duck_shape": False},
        {**plan, "compile": {**plan["compile"], "mode": "max-autotune"}},
    ]
    assert len({plan_hash(p, first) for p in [plan, *changed]}) == 4
    # Request tags decide which decode steps run on a carried KV cache: other tags, another plan.
    untagged = plan_hash(plan, first)
    (first / "requests.json").write_text('{"format": "guardscope-requests", "runs": [["r", 0, 0, 2]]}\n')
    tagged = plan_hash(plan, first)
    (first / "requests.json").write_text('{"format": "guardscope-requests", "runs": [["r", 0, 0, 1], ["s", 1, 0, 1]]}\n')
    assert len({untagged, tagged, plan_hash(plan, first)}) == 3


def test_bundle_context_rows():
    measured = {
        "status": "used", "reason": None, "file": "warmup.compile-cache.bin", "bytes": 12_700_000,
        "backend": "inductor", "device": "cuda", "device_name": "NVIDIA H200", "torch_version": "2.11.0",
        "without": {"setup_seconds": 58.4, "cache": {"fxgraph_hits": 0, "fxgraph_misses": 10},
                    "cache_dirs_empty": True, "replay_recompiles": 0},
        "with": {"setup_seconds": 13.1, "cache": {"fxgraph_hits": 10, "fxgraph_misses": 0},
                 "cache_dirs_empty": True, "replay_recompiles": 0,
                 "bundle_load": {"status": "loaded", "seconds": 0.33}},
    }
    context = bundle_context(None, measured)
    rows = {label: (without, with_) for label, without, with_ in context["rows"]}
    assert rows["set-up (load + warmup)"] == ("58.40 s", "13.10 s")
    assert rows["graphs from the cache"] == ("0", "10") and rows["bundle load"] == ("—", "330 ms")
    assert context["size"] == "12.7 MB" and context["badge"] == "passed"
    assert bundle_context(None, None) is None
    made_only = bundle_context({"file": "x.compile-cache.bin", "bytes": 10, "compile": {"backend": "inductor"}}, None)
    assert made_only["rows"] == [] and made_only["status"] is None and made_only["backend"] == "inductor"


def test_bundle_status_from_the_two_set_ups():
    loaded = {"status": "loaded", "reason": None}
    ok = {"status": "passed", "reason": None, "cache": {"fxgraph_hits": 3, "fxgraph_misses": 0}, "bundle_load": loaded}
    plain = {"status": "passed", "reason": None, "cache": {"fxgraph_hits": 0, "fxgraph_misses": 3}, "bundle_load": None}
    assert bundle_status(plain, ok, "inductor on cuda") == ("used", None)
    partial = {**ok, "cache": {"fxgraph_hits": 2, "fxgraph_misses": 1}}
    assert bundle_status(plain, partial, "inductor on cuda") == (
        "partial", "1 graph(s) compiled from scratch despite the bundle (2 from the cache)")
    refused = {**ok, "bundle_load": {"status": "incompatible", "reason": "it was made on NVIDIA A100, ..."}}
    assert bundle_status(plain, refused, "x") == ("not used", "it was made on NVIDIA A100, ...")
    skipped = {"status": "skipped", "reason": "device 'cuda' was asked for but ..."}
    assert bundle_status(skipped, skipped, "x") == ("not measured", "device 'cuda' was asked for but ...")
    died = {"status": "crashed", "reason": "the verification process died of SIGSEGV"}
    assert bundle_status(plain, died, "inductor on cuda") == (
        "crashed", "set-up with inductor on cuda with the bundle crashed: the verification process died of SIGSEGV")
