"""guardscope.runtime.background: the queue, bounds, failures and close of BackgroundCompiler, and
the stance gate and private copies, with a stand-in compile function (no torch.compile here; the
real compiles are in tests/integration/test_background.py)."""

from __future__ import annotations

import gc
import logging
import sys
import threading
import time

import pytest
import torch

from guardscope.errors import ServeError
from guardscope.runtime.background import (
    DEFAULT_SWITCH_INTERVAL,
    BackgroundCompile,
    BackgroundCompiler,
    StanceGate,
    background_strategy,
    private_copy,
    switch_interval,
)


class Compiles:
    """A stand-in ``compile``: records the first argument of each call; the first call waits for
    ``release`` (so later offers queue behind it); raises for names in ``fails``."""

    def __init__(self, fails=()):
        self.order: list[str] = []
        self.running = threading.Event()
        self.release = threading.Event()
        self.fails = set(fails)
        self.intervals: list[float] = []

    def __call__(self, args, kwargs):
        self.order.append(args[0])
        self.intervals.append(sys.getswitchinterval())
        self.running.set()
        if len(self.order) == 1:
            assert self.release.wait(30)
        if args[0] in self.fails:
            raise RuntimeError(f"cannot compile {args[0]}\nmore detail")
        return True


def test_most_frequent_pending_signature_compiles_first_within_the_bounds():
    compile = Compiles()
    before = sys.getswitchinterval()
    compiler = BackgroundCompiler(compile, max_compiles=4, max_pending=8)
    compiler.offer(("first",), ("first",), {})
    assert compile.running.wait(30)
    for name, calls in (("once", 1), ("thrice", 3), ("twice", 2), ("over", 1)):
        for _ in range(calls):
            compiler.offer((name,), (name,), {})
    assert compiler.counts()["pending"] == 4  # the running one and three queued: the bound is 4
    compile.release.set()
    assert compiler.wait(30)
    counts = compiler.counts()
    assert compile.order == ["first", "thrice", "twice", "once"]  # queued as once, thrice, twice
    assert (counts["done"], counts["failed"], counts["pending"]) == (4, 0, 0)
    assert [c.eager_calls for c in counts["compiles"]] == [1, 3, 2, 1]
    assert dict(counts["dropped_by_reason"]) == {"max_compiles": 1}  # "over"
    assert compile.intervals == [pytest.approx(DEFAULT_SWITCH_INTERVAL)] * 4 and sys.getswitchinterval() == before
    assert compiler.close(timeout=30)


def test_a_failed_compile_is_counted_logged_once_and_never_retried(caplog):
    compile = Compiles(fails={"bad"})
    compile.release.set()
    compiler = BackgroundCompiler(compile)
    with caplog.at_level(logging.WARNING, logger="guardscope.runtime"):
        compiler.offer(("bad",), ("bad",), {})
        assert compiler.wait(30)
        for _ in range(5):
            compiler.offer(("bad",), ("bad",), {})  # its calls keep running eagerly: no new compile
        compiler.offer(("good",), ("good",), {})
        assert compiler.wait(30)
    counts = compiler.counts()
    assert compile.order == ["bad", "good"]
    assert (counts["done"], counts["failed"]) == (1, 1)
    assert counts["compiles"][0].error == "RuntimeError: cannot compile bad"
    warnings = [r for r in caplog.records if "background compile failed" in r.getMessage()]
    assert len(warnings) == 1
    compiler.close()


def test_close_waits_for_a_running_compile_or_abandons_it():
    compile = Compiles()
    compiler = BackgroundCompiler(compile)
    compiler.offer(("slow",), ("slow",), {})
    compiler.offer(("queued",), ("queued",), {})
    assert compile.running.wait(30)
    started = time.monotonic()
    assert compiler.close(timeout=0.2) is False  # abandoned to its daemon thread, promptly
    assert time.monotonic() - started < 5
    assert compiler._thread.daemon and compiler._thread.is_alive()
    compile.release.set()
    assert compiler.close(timeout=30) is True  # again: now it has ended
    counts = compiler.counts()
    assert compile.order == ["slow"] and counts["pending"] == 0
    assert dict(counts["dropped_by_reason"]) == {"closed": 1}
    compiler.offer(("late",), ("late",), {})  # after close: counted, nothing runs
    assert dict(compiler.counts()["dropped_by_reason"]) == {"closed": 2}


def test_bad_options_are_refused():
    with pytest.raises(ServeError, match="max_compiles"):
        BackgroundCompiler(Compiles(), max_compiles=-1)
    with pytest.raises(ServeError, match="switch interval"):
        BackgroundCompiler(Compiles(), switch_interval=5)


def test_background_compile_choices_name_a_strategy():
    assert background_strategy(False, "inductor") is None and background_strategy(None, "eager") is None
    # guardscope's choice: a child process when the backend has caches to hand back.
    assert background_strategy(True, "inductor") == background_strategy("auto", "inductor") == "process"
    assert background_strategy(True, "eager") == background_strategy(True, "aot_eager") == "thread"
    assert background_strategy("process", "eager") == "process" and background_strategy("thread", "inductor") == "thread"
    for bad in ("threads", 1, "PROCESS"):
        with pytest.raises(ServeError, match="background_compile must be"):
            background_strategy(bad, "inductor")


def test_a_compile_that_returns_details_keeps_them():
    def compile(args, kwargs):
        return {"strategy": "process", "child_seconds": 1.5} if args[0] == "a" else True

    compiler = BackgroundCompiler(compile)
    try:
        compiler.offer(("a",), ("a",), {})
        assert compiler.wait(10)
        compiler.offer(("b",), ("b",), {})
        assert compiler.wait(10)
        first, second = compiler.counts()["compiles"]
    finally:
        compiler.close()
    assert first.to_json()["strategy"] == "process" and first.to_json()["child_seconds"] == 1.5
    # A compile that returned True has only what every compile has: what it yielded to served calls.
    assert set(second.to_json()) == {"status", "seconds", "eager_calls", "error", "yielded"}
    assert second.to_json()["yielded"] == {"waits": 0, "seconds": 0.0, "timeouts": 0, "gave_up": 0}
    assert BackgroundCompile("done", 1.0, 1, details=(("cache", {"fxgraph_hits": 1}),)).to_json()["cache"] == {
        "fxgraph_hits": 1}


@pytest.mark.parametrize("freeze", [True, False])
def test_each_compile_starts_with_the_objects_so_far_frozen_unless_turned_off(freeze):
    frozen_at_compile = []
    gc.unfreeze()
    try:
        compiler = BackgroundCompiler(lambda args, kwargs: frozen_at_compile.append(gc.get_freeze_count()) or True,
                                      gc_freeze=freeze)
        compiler.offer(("a",), ("a",), {})
        assert compiler.wait(10)
        compiler.close()
        # Frozen: the compile's garbage collections skip them (no full walk with the GIL held).
        assert (frozen_at_compile[0] > 1000) is freeze
    finally:
        gc.unfreeze()
    with pytest.raises(ServeError, match="gc_freeze"):
        BackgroundCompiler(lambda args, kwargs: True, gc_freeze="yes")
    with pytest.raises(ServeError, match="yield_to_serving"):
        BackgroundCompiler(lambda args, kwargs: True, yield_to_serving=1)


def test_switch_interval_is_restored_after_nested_blocks():
    before = sys.getswitchinterval()
    with switch_interval(1e-4):
        with switch_interval(1e-3):
            assert sys.getswitchinterval() == pytest.approx(1e-4)
        assert sys.getswitchinterval() == pytest.approx(1e-4)
    assert sys.getswitchinterval() == before
    with switch_interval(None):
        assert sys.getswitchinterval() == before


def test_the_gate_holds_new_served_calls_only_until_the_worker_has_entered():
    gate = StanceGate(serving_wait=30)
    events: list[str] = []
    in_call = threading.Event()
    leave = threading.Event()

    def served_call():
        with gate.serving():
            events.append("call in flight")
            in_call.set()
            leave.wait(30)

    first = threading.Thread(target=served_call)
    first.start()
    assert in_call.wait(30)

    def worker():
        with gate.entering() as release:
            events.append("worker entered")
            time.sleep(0.2)
            events.append("compile started")
            release()
            time.sleep(0.2)
            events.append("compile ended")

    compiling = threading.Thread(target=worker)
    compiling.start()
    time.sleep(0.1)
    assert events == ["call in flight"]  # the worker waits for the call in flight
    leave.set()
    first.join(30)
    time.sleep(0.05)
    with gate.serving():  # a new served call waits for the worker's entry, not its compile
        events.append("next call")
    compiling.join(30)
    assert events == ["call in flight", "worker entered", "compile started", "next call", "compile ended"]


def test_private_copy_keeps_aliasing_strides_and_inference_tensors():
    base = torch.arange(12.0)
    view = base[2:10].view(2, 4).t()
    with torch.inference_mode():
        frozen = torch.ones(3)
    with torch.inference_mode():  # copied under inference mode, as the serving thread does
        args, kwargs = private_copy((view, [base]), {"f": frozen, "n": 3})
    copied_view, (copied_base,) = args
    assert copied_view.stride() == view.stride() and copied_view.storage_offset() == 2
    assert copied_view.untyped_storage().data_ptr() == copied_base.untyped_storage().data_ptr()
    assert copied_base.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    assert not copied_view.is_inference() and kwargs["f"].is_inference() and kwargs["n"] == 3
    assert torch.equal(copied_view, view)
