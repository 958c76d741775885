"""serve(..., background_compile=True): a topology that fell back is compiled on the background
worker (real torch.compile, eager backend, CPU), then served compiled; no compile ever runs on the
serving thread; a failing compile leaves it eager; close() during a compile ends cleanly.

The queue's order and bounds with a stand-in compile are in tests/unit/test_background.py.
"""

from __future__ import annotations

import gc
import logging
import threading
import time

import pytest
import torch
from torch._dynamo.callback import callback_handler

from guardscope import load_corpus, runtime, torch_compat

from ..background_helpers import CompileThreads, eager, serve_after_a_failed_compile
from ..models import Elementwise


class BreaksOnMatrices(torch.nn.Module):
    """Elementwise's forward, with a graph break (fullgraph=True cannot compile it) on 2-D input."""

    def forward(self, x):
        if x.dim() == 2:
            torch._dynamo.graph_break()
        return x.sin() * 2


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()  # the graphs of earlier tests' instances share the code object's cache
    yield
    torch._dynamo.reset()
    gc.unfreeze()  # background compiles froze the objects of this process (background_gc_freeze)


@pytest.fixture
def hold_compiles():
    """An Event that compiles on other threads wait for at their end (Dynamo's compile-end callback),
    so a test can act while a background compile is running."""
    hold = threading.Event()
    serving = threading.get_ident()

    def wait(_):
        if threading.get_ident() != serving:
            hold.wait(60)

    callback_handler.register_end_callback(wait)
    yield hold
    hold.set()
    if wait in callback_handler.end_callbacks:
        callback_handler.remove_end_callback(wait)


def test_a_fallback_topology_is_served_compiled_after_its_background_compile(tiny_plan, tmp_path, hold_compiles):
    model = Elementwise()
    fallbacks = tmp_path / "fb"
    with runtime.serve(model, tiny_plan, plan="warmup", backend="eager", fallback_dir=fallbacks,
                       background_compile=True) as served, CompileThreads() as compiles:
        serving = threading.get_ident()
        assert served.graphs == 1
        # Three 2-D calls (one topology) and one float64 call fall back while the first compile,
        # of a 0-size vector, is held running: the 2-D topology is compiled next, being the more
        # frequent, and accepted 1-D calls are served compiled meanwhile.
        first = torch.randn(0)
        assert torch.equal(served(first), eager(model, first))
        deadline = time.monotonic() + 60
        while not served.background.running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert served.background.running
        inputs = [torch.randn(2, 3), torch.randn(3, dtype=torch.float64), torch.randn(4, 5), torch.randn(3, 2),
                  torch.randn(6)]
        for x in inputs:
            assert torch.equal(served(x), eager(model, x))
        assert served.stats.background_pending == 3 and served.stats.compiled == 1
        hold_compiles.set()
        assert served.wait_background(timeout=120)

        stats = served.stats
        assert (stats.background_done, stats.background_failed, stats.background_pending) == (3, 0, 0)
        assert [c.eager_calls for c in stats.background_compiles] == [1, 3, 1]
        assert all(c.status == "done" and c.seconds > 0 for c in stats.background_compiles)
        # From now on those topologies are served compiled, with the eager model's outputs.
        fell_back = stats.fallbacks
        for x in [torch.randn(5, 7), torch.randn(2, 2), torch.randn(8, dtype=torch.float64), torch.randn(0), torch.randn(7)]:
            assert torch.allclose(served(x), eager(model, x))
        assert served.stats.fallbacks == fell_back == 5
        assert served.stats.compiled == 1 + 5
    assert len(compiles.threads) == 3 and serving not in compiles.threads  # all on the worker
    assert len(set(compiles.threads)) == 1
    json = served.stats.to_json()["background"]
    assert (json["done"], json["failed"], json["pending"]) == (3, 0, 0)
    # What was compiled in the background was recorded for the next analysis all the same.
    recorded = sorted(tuple(s.args[0].shape) + (s.args[0].dtype,) for s in load_corpus(fallbacks))
    assert recorded == sorted([(0, torch.float32), (2, 3, torch.float32), (3, torch.float64)])


def test_without_background_compile_fallbacks_stay_eager(tiny_plan):
    model = Elementwise()
    with runtime.serve(model, tiny_plan, plan="warmup", backend="eager") as served, CompileThreads() as compiles:
        assert served.background is None and served.wait_background(0)
        for _ in range(3):
            served(torch.randn(2, 3))
    assert served.stats.fallbacks == 3 and compiles.threads == []
    assert served.stats.to_json()["background"] == {"done": 0, "failed": 0, "pending": 0, "dropped": 0,
                                                     "eager_while_tracing": 0, "compiles": []}


def test_a_failing_background_compile_leaves_the_topology_eager(tiny_plan, caplog):
    model = BreaksOnMatrices()
    with caplog.at_level(logging.WARNING, logger="guardscope.runtime"), \
            runtime.serve(model, tiny_plan, plan="warmup", backend="eager", background_compile=True) as served, \
            CompileThreads() as compiles:
        x = torch.randn(2, 3)
        assert torch.equal(served(x), eager(model, x))
        assert served.wait_background(timeout=120)
        serve_after_a_failed_compile(served, model, rounds=4)
        assert served.wait_background(timeout=120)
        stats = served.stats
    assert (stats.background_done, stats.background_failed, stats.fallbacks, stats.compiled) == (0, 1, 5, 4)
    assert stats.background_compiles[0].eager_calls == 1 and "Unsupported" in stats.background_compiles[0].error
    assert len(compiles.threads) == 1  # one attempt, on the worker
    assert compiles.threads[0] != threading.get_ident()
    failures = [r for r in caplog.records if "background compile failed" in r.getMessage()]
    assert len(failures) == 1


def test_close_while_a_background_compile_runs_ends_cleanly(tiny_plan, hold_compiles):
    model = Elementwise()
    served = runtime.serve(model, tiny_plan, plan="warmup", backend="eager", background_compile=True)
    served(torch.randn(2, 3))
    served(torch.randn(0))  # queued behind it: dropped by close()
    deadline = time.monotonic() + 60
    while not served.background.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert served.background.running
    threading.Timer(0.5, hold_compiles.set).start()
    started = time.monotonic()
    served.close(timeout=60)  # waits for the running compile, which ends at the timer
    assert 0.3 < time.monotonic() - started < 30
    assert not served.background._thread.is_alive()
    stats = served.stats
    assert (stats.background_done, stats.background_pending, dict(served.background.counts()["dropped_by_reason"])) \
        == (1, 0, {"closed": 1})
    x = torch.randn(2, 3)
    assert torch.equal(served(x), eager(model, x))  # served after close(), compiled now
    assert served.stats.compiled == 1

    # A compile that outlasts close()'s timeout is left to its daemon thread: close() returns.
    served = runtime.serve(BreaksOnMatrices(), tiny_plan, plan="warmup", backend="eager", background_compile=True)
    hold_compiles.clear()
    served(torch.randn(0))
    deadline = time.monotonic() + 60
    while not served.background.running and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    served.close(timeout=0.2)
    assert time.monotonic() - started < 10 and served.background._thread.daemon
    hold_compiles.set()
    served.background._thread.join(60)
    assert not served.background._thread.is_alive()


def test_the_unbacked_plans_settings_reach_the_background_worker(tiny_plan, tmp_path):
    """torch 2.13 keeps settings made in code per thread: the plan's configure() (duck sizing)
    made on the serving thread is made again on the worker before it compiles."""
    import shutil

    import torch.fx.experimental._config as fx_config

    plan = tmp_path / "plan"
    shutil.copytree(tiny_plan, plan)
    module = plan / "unbacked.py"
    text = module.read_text()
    assert "\nDUCK_SHAPE = True\n" in text
    module.write_text(text.replace("\nDUCK_SHAPE = True\n", "\nDUCK_SHAPE = False\n"))  # a plan that turns it off
    seen: list[tuple[int, bool]] = []
    model = Elementwise()
    try:
        with runtime.serve(model, plan, plan="unbacked", backend="eager", background_compile=True) as served, \
                torch_compat.compile_start_callback(
                    lambda _: seen.append((threading.get_ident(), fx_config.use_duck_shape))):
            x = torch.randn(4, dtype=torch.float64)  # another dtype: no planned graph accepts it
            assert torch.equal(served(x), eager(model, x))
            assert served.wait_background(timeout=120)
            assert served.stats.background_done == 1
    finally:
        fx_config.use_duck_shape = True
    workers = [duck for thread, duck in seen if thread != threading.get_ident()]
    assert workers == [False], seen


def test_a_background_compile_steps_aside_while_served_calls_run(tiny_plan):
    model = Elementwise()
    with runtime.serve(model, tiny_plan, plan="warmup", backend="eager", background_compile="thread") as served:
        x = torch.randn(2, 3)  # a topology the plan lacks: compiled on the worker
        assert torch.equal(served(x), eager(model, x))
        accepted, calls = torch.randn(6), 0
        deadline = time.monotonic() + 120
        while served.stats.background_pending and time.monotonic() < deadline:
            served(accepted)  # served calls back to back, the whole time the compile runs
            calls += 1
        assert served.wait_background(timeout=5)
        record = served.stats.background_compiles[0].to_json()
    assert record["status"] == "done", record
    # The worker met served calls in flight and waited for them; it still finished.
    assert record["yielded"]["waits"] > 0 and record["yielded"]["seconds"] > 0, (record, calls)
    assert served.stats.compiled >= calls


def test_a_background_compile_skips_dynamos_guard_latency_measurement(monkeypatch):
    # Dynamo times each new compile's guards after flushing the CPU caches (20-35 ms holding the
    # GIL); within the block that function is not called, and it is put back after.
    from torch._dynamo import guards

    measured = []
    original = guards.profile_guard_manager

    def counting(*args):
        measured.append(1)
        return original(*args)

    monkeypatch.setattr(guards, "profile_guard_manager", counting)
    compiled = torch.compile(Elementwise(), backend="eager", dynamic=False)
    with torch_compat.without_guard_latency_profile():
        with torch_compat.without_guard_latency_profile():  # nested: the outer one restores
            compiled(torch.randn(3))
        compiled(torch.randn(4))
        assert guards.profile_guard_manager is not counting
    assert guards.profile_guard_manager is counting and measured == []
    compiled(torch.randn(2, 2))  # outside: measured as torch does
    assert measured == [1]


@pytest.mark.parametrize("options, message", [
    ({"background_compile": "threads"}, "background_compile must be"),
    ({"background_compile": "process", "background_timeout": 0}, "background_timeout must be"),
    ({"background_compile": True, "background_gc_freeze": "yes"}, "gc_freeze must be"),
    ({"background_compile": "thread", "background_yield": None}, "yield_to_serving must be"),
    ({"background_compile": "thread", "max_background_compiles": -1}, "max_compiles must be"),
])
def test_bad_background_options_are_refused_before_anything_compiles(tiny_plan, options, message):
    from guardscope.errors import ServeError

    with CompileThreads() as compiles, pytest.raises(ServeError, match=message):
        runtime.serve(Elementwise(), tiny_plan, plan="warmup", backend="eager", **options)
    assert compiles.threads == []
