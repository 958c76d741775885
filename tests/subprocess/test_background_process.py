"""serve(..., background_compile="process"): a child process compiles a fallback topology with the
production backend and hands back its compile-cache artifacts; the serving process's own compile of
it then hits inductor's caches (real child processes, inductor on the CPU). A child that is killed
fails that compile only: the topology stays eager, the failure is counted and logged once, serving
goes on; close() while a child runs kills it.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time

import pytest
import torch

from guardscope import runtime
from guardscope.runtime.child_compile import CHILD_NICENESS

from ..background_helpers import CompileThreads, eager, serve_after_a_failed_compile
from ..models import Elementwise


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """Empty inductor caches shared by this process and its compile children (the environment
    variable is read by both), and a fresh Dynamo."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    gc.unfreeze()  # background compiles froze the objects of this process (background_gc_freeze)


def wait_for_child(served, seconds: float = 60.0) -> int:
    deadline = time.monotonic() + seconds
    while served.child.pid is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert served.child.pid is not None
    return served.child.pid


def test_a_child_compiles_and_the_serving_process_compiles_from_its_caches(tiny_plan, fresh):
    model = Elementwise()
    with runtime.serve(model, tiny_plan, plan="warmup", backend="inductor", background_compile=True) as served, \
            CompileThreads() as compiles:
        assert served.background_strategy == "process"  # guardscope's choice with inductor
        serving = threading.get_ident()
        for x in (torch.randn(2, 3), torch.randn(3, dtype=torch.float64)):  # two topologies the plan lacks
            assert torch.allclose(served(x), eager(model, x))
        assert served.wait_background(timeout=600)
        stats = served.stats
        assert (stats.background_done, stats.background_failed) == (2, 0), stats.background_compiles
        # One compile process for both: set up at the first, the second only compiled its call.
        assert [c.to_json()["child_started"] for c in stats.background_compiles] == [True, False]
        for record in stats.background_compiles:
            details = record.to_json()
            assert details["strategy"] == "process" and details["child_seconds"] > 0
            assert details["artifacts"] and details["artifacts"].get("inductor", 0) >= 1
            # This process's compile generated nothing: inductor's graph came from the caches.
            assert details["cache"]["fxgraph_misses"] == 0 and details["cache"]["fxgraph_hits"] >= 1, details
            assert details["compile_seconds"] < record.seconds
        # The compile process kept the first topology's graph: same Dynamo state as here, same
        # second graph (the hits above say so); both are now served compiled.
        fell_back = stats.fallbacks
        for x in (torch.randn(4, 5), torch.randn(7, dtype=torch.float64), torch.randn(6)):
            assert torch.allclose(served(x), eager(model, x))
        assert served.stats.fallbacks == fell_back == 2
    assert compiles.threads and serving not in compiles.threads


def test_a_killed_compile_process_fails_that_compile_and_serving_goes_on(tiny_plan, fresh, caplog):
    model = Elementwise()
    with caplog.at_level(logging.WARNING, logger="guardscope.runtime"), \
            runtime.serve(model, tiny_plan, plan="warmup", backend="eager", background_compile="process") as served:
        x = torch.randn(2, 3)
        assert torch.equal(served(x), eager(model, x))
        os.kill(wait_for_child(served), signal.SIGKILL)
        assert served.wait_background(timeout=120)
        serve_after_a_failed_compile(served, model, rounds=3)
        assert served.wait_background(timeout=5)
        # The next topology starts a new compile process, and is compiled.
        z = torch.randn(3, dtype=torch.float64)
        assert torch.equal(served(z), eager(model, z))
        assert served.wait_background(timeout=300)
        stats = served.stats
    assert (stats.background_done, stats.background_failed, stats.fallbacks, stats.compiled) == (1, 1, 5, 3)
    assert "SIGKILL" in stats.background_compiles[0].error
    assert stats.background_compiles[1].to_json()["child_started"] is True
    assert len([r for r in caplog.records if "background compile failed" in r.getMessage()]) == 1


def test_close_while_a_compile_process_runs_kills_it(tiny_plan, fresh, caplog):
    model = Elementwise()
    served = runtime.serve(model, tiny_plan, plan="warmup", backend="eager", background_compile="process")
    served(torch.randn(2, 3))
    pid = wait_for_child(served)
    # It runs at the lowest CPU priority (set as it starts), so serving takes a core first.
    deadline = time.monotonic() + 60
    while os.getpriority(os.PRIO_PROCESS, pid) != CHILD_NICENESS and time.monotonic() < deadline:
        time.sleep(0.01)
    assert os.getpriority(os.PRIO_PROCESS, pid) == CHILD_NICENESS
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="guardscope.runtime"):
        served.close(timeout=60)
    assert time.monotonic() - started < 30
    assert not served.background._thread.is_alive()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # gone, and reaped
    assert served.stats.background_failed == 1 and "closed" in served.stats.background_compiles[0].error
    assert not [r for r in caplog.records if "background compile failed" in r.getMessage()]
    assert not served.child._root.exists()  # the job folders went with it
    x = torch.randn(2, 3)
    assert torch.equal(served(x), eager(model, x))  # still served after close()
