"""A background compile's thread steps aside for served calls (guardscope.runtime.yielding): at
each Python call it waits while the gate counts served calls in flight, within its patience."""

from __future__ import annotations

import sys
import threading
import time

from guardscope.runtime.background import StanceGate
from guardscope.runtime.yielding import yielding_to


def _step() -> None:
    """One Python call: where the profile function looks at the gate."""


def _worker(gate, progress, stop, **options):
    """A stand-in for a compile: Python calls in a loop, each noted with its time."""
    figures = {}

    def run():
        with yielding_to(gate, **options) as yielded:
            while not stop.is_set():
                _step()
                progress.append(time.perf_counter())
        figures.update(yielded.to_json())
        figures["profile_after"] = sys.getprofile()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, figures


def _serve_for(gate, seconds):
    """A served call in flight for ``seconds``; returns when it began and ended."""
    with gate.serving():
        begun = time.perf_counter()
        time.sleep(seconds)
        return begun, time.perf_counter()


def test_the_compile_waits_while_a_served_call_is_in_flight():
    gate, progress, stop = StanceGate(), [], threading.Event()
    thread, figures = _worker(gate, progress, stop, patience=5.0)
    time.sleep(0.05)
    begun, ended = _serve_for(gate, 0.3)
    time.sleep(0.05)
    stop.set()
    thread.join(10)
    # At most the step it was in when the served call began (were it descheduled there); nothing
    # else until the served call ended.
    inside = [t for t in progress if begun < t < ended]
    assert len(inside) <= 1, f"{len(inside)} calls while the served call was in flight"
    assert any(t > ended for t in progress)  # and it went on afterwards
    assert figures["waits"] >= 1 and figures["seconds"] >= 0.1 and figures["timeouts"] == 0
    assert figures["profile_after"] is None


def test_past_its_patience_the_compile_runs_a_quantum_regardless():
    gate, progress, stop = StanceGate(), [], threading.Event()
    thread, figures = _worker(gate, progress, stop, patience=0.02, quantum=0.005)
    time.sleep(0.05)
    begun, ended = _serve_for(gate, 0.4)
    stop.set()
    thread.join(10)
    inside = [t for t in progress if begun < t < ended]
    assert inside, "a served call that never ends must not stop the compile"
    assert figures["timeouts"] >= 2


def test_turned_off_it_never_waits():
    gate, progress, stop = StanceGate(), [], threading.Event()
    thread, figures = _worker(gate, progress, stop, enabled=False)
    time.sleep(0.02)
    begun, ended = _serve_for(gate, 0.2)
    stop.set()
    thread.join(10)
    assert [t for t in progress if begun < t < ended]
    assert figures == {"waits": 0, "seconds": 0.0, "timeouts": 0, "gave_up": 0, "profile_after": None}


def test_a_thread_being_profiled_keeps_its_profiler_and_no_hook_is_installed():
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()  # a C-level profile function: sys.getprofile() returns the profiler itself
    try:
        with yielding_to(StanceGate()) as yielded:
            assert sys.getprofile() is profiler
        assert sys.getprofile() is profiler
    finally:
        profiler.disable()
    assert yielded.to_json() == {"waits": 0, "seconds": 0.0, "timeouts": 0, "gave_up": 0}


def test_the_hook_goes_when_the_compile_raises():
    try:
        with yielding_to(StanceGate()):
            raise ValueError("the compile failed")
    except ValueError:
        pass
    assert sys.getprofile() is None


def test_a_served_call_waiting_for_something_the_compile_holds_costs_a_few_patiences_not_more():
    # The served call needs a lock the compile holds (Dynamo's compile lock for a served call that
    # compiles, an import's): it stays in flight, so a compile waiting for it would only crawl on
    # by quanta. After STALLED patiences with no served call ending, the compile stops waiting.
    gate, held, started = StanceGate(), threading.Lock(), threading.Event()
    steps = 200_000  # Python calls the compile makes while it holds the lock (tens of ms)
    times = {}

    def compile_():
        with yielding_to(gate, patience=0.02, quantum=0.002) as yielded, held:
            started.set()
            time.sleep(0.05)  # the served call is in flight, waiting for the lock, by now
            begun = time.perf_counter()
            for _ in range(steps):
                _step()
            times["steps"] = time.perf_counter() - begun
        times["yielded"] = yielded.to_json()

    thread = threading.Thread(target=compile_, daemon=True)
    unhindered = time.perf_counter()
    for _ in range(steps):
        _step()
    unhindered = time.perf_counter() - unhindered
    thread.start()
    assert started.wait(10)
    with gate.serving():
        begun = time.perf_counter()
        with held:
            waited = time.perf_counter() - begun
    thread.join(30)
    assert times["yielded"]["gave_up"] >= 1, times
    # Without giving up: 20 ms waits for every 2 ms of steps, over 10x the steps' own time (the
    # profile function itself makes them 2-3x slower).
    assert times["steps"] < 10 * unhindered + 0.3, (times, unhindered)
    assert waited < 0.05 + times["steps"] + 0.1, (waited, times)


def test_calls_served_without_the_stance_are_counted_but_never_held_by_a_worker_entering():
    gate = StanceGate(serving_wait=5.0)
    with gate.entering(timeout=1) as release:  # a worker entering: stance-holding calls would wait
        begun = time.perf_counter()
        with gate.counted():
            assert gate.in_flight == 1
        assert time.perf_counter() - begun < 1
        release()
    assert gate.in_flight == 0 and gate.left == 1
    with gate.counted(), gate.entering(timeout=1) as release:  # a worker entering does not wait for them
        release()


def test_the_guard_latency_stub_leaves_a_replacement_made_meanwhile():
    from torch._dynamo import guards

    from guardscope import torch_compat

    def theirs(*args):
        return 1.0

    original = guards.profile_guard_manager
    try:
        with torch_compat.without_guard_latency_profile():
            assert guards.profile_guard_manager is not original
            assert guards.profile_guard_manager(None, {}, 1) == 0.0
            guards.profile_guard_manager = theirs  # someone else's patch, made meanwhile
        assert guards.profile_guard_manager is theirs  # not overwritten by the block's end
        guards.profile_guard_manager = original
        with torch_compat.without_guard_latency_profile():
            pass
        assert guards.profile_guard_manager is original  # and torch's own is put back
    finally:
        guards.profile_guard_manager = original
