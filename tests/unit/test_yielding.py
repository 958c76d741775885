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
    assert figures == {"waits": 0, "seconds": 0.0, "timeouts": 0, "profile_after": None}


def test_the_threads_own_profile_function_is_put_back():
    def mine(frame, event, arg):
        return None

    sys.setprofile(mine)
    try:
        with yielding_to(StanceGate()):
            assert sys.getprofile() is not mine
        assert sys.getprofile() is mine
    finally:
        sys.setprofile(None)
