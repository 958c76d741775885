"""A background compile that steps aside for served calls (``serve(..., background_yield=True)``).

Why. CPython runs one thread's Python at a time. While a compile runs on a thread of the serving
process (the whole compile with ``background_compile="thread"``; Dynamo's trace and the cache loads
with ``"process"``), the serving thread and the compile take turns: each time the serving thread
drops the GIL (every switch interval, every blocking call) it waits for the compile's turn to end.
A lower switch interval (:func:`~.background.switch_interval`) shortens each turn but not the share:
a served call takes about twice as long for as long as the compile runs (on the H200, 125 of the
process strategy's served calls took over 15 ms, all within the serving process's last second of
each compile).

How. While a background compile runs, its thread has a profile function (``sys.setprofile``: that
thread only) that, at each Python function call, looks whether served calls are in flight (the
count :class:`~.background.StanceGate` keeps) and, if so, waits without the GIL until none is. The
compile then runs between served calls, and a served call finds the GIL free. Bounds keep the
compile going: a wait lasts at most ``patience`` seconds (a served call longer than that, or calls
that never stop overlapping), after which the compile runs ``quantum`` seconds without looking;
and once it has waited ``STALLED`` patiences in all without a single served call ending, it stops
waiting until one ends (those calls may be waiting for something the compile holds: Dynamo's
compile lock for a served call that compiles, an import's lock, a logging handler's).

What it cannot do: cut short a C call that holds the GIL (a cache file unpickled, a module
loaded); one that starts just before a served call still delays it. And it slows the compile:
the profile function runs at every call and return of the thread (about twice the CPU time of an
eager-backend trace), and a process serving short calls back to back leaves it only the gaps
between them (on the 2-core CPU, a tiny model's compile took 2.4-3.9 s instead of 0.05-0.12 s).
A thread that already has a profile function (a profiler) keeps it: nothing is installed.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# A served call of the seed GNN takes 5-8 ms on the H200: waits end at the call's end, long before
# this. A longer call (a prefill of an LLM) then shares the interpreter for QUANTUM every PATIENCE.
PATIENCE = 0.02
QUANTUM = 0.002
STALLED = 3  # patiences waited in all, with no served call ending, before the compile stops waiting


@dataclass
class Yielded:
    """What a compile gave up: how many times it waited for served calls and for how long."""

    waits: int = 0
    seconds: float = 0.0
    timeouts: int = 0  # waits that ran out of patience (the compile then ran a quantum regardless)
    gave_up: int = 0  # times it stopped waiting: STALLED patiences with no served call ending

    def to_json(self) -> dict[str, Any]:
        return {"waits": self.waits, "seconds": round(self.seconds, 6), "timeouts": self.timeouts,
                "gave_up": self.gave_up}


class _Courtesy:
    def __init__(self, gate: Any, patience: float, quantum: float) -> None:
        self.gate = gate
        self.patience = patience
        self.quantum = quantum
        self.yielded = Yielded()
        self._free_until = 0.0
        self._left_seen = gate.left  # served calls ended, when the compile last looked
        self._stalled = 0.0  # seconds waited since then with no served call ending

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        # Called at every call, return and C call of this thread: the common case (no served call
        # in flight) is one comparison and two attribute reads.
        if event != "call" or not self.gate.in_flight:
            return
        begun = time.perf_counter()
        if begun < self._free_until:
            return
        gate = self.gate
        if gate.left != self._left_seen:
            self._left_seen, self._stalled = gate.left, 0.0
        elif self._stalled >= STALLED * self.patience:
            return  # no served call has ended in all that waiting: they may be waiting for us
        idle = gate.wait_idle(self.patience)
        ended = time.perf_counter()
        self.yielded.waits += 1
        self.yielded.seconds += ended - begun
        if gate.left != self._left_seen:
            self._left_seen, self._stalled = gate.left, 0.0
        else:
            self._stalled += ended - begun
            if self._stalled >= STALLED * self.patience:
                self.yielded.gave_up += 1
        if not idle:
            self.yielded.timeouts += 1
            self._free_until = ended + self.quantum


@contextlib.contextmanager
def yielding_to(gate: Any, *, patience: float = PATIENCE, quantum: float = QUANTUM,
                enabled: bool = True) -> Iterator[Yielded]:
    """Within the block, this thread waits for ``gate``'s served calls (``gate.in_flight``,
    ``gate.left``, ``gate.wait_idle(timeout)``) at each Python call, as the module docstring says;
    yields the :class:`Yielded` figures, complete once the block has ended. ``enabled=False``, or
    a thread that has a profile function already: nothing is installed (the figures stay zero)."""
    courtesy = _Courtesy(gate, patience, quantum)
    if not enabled or sys.getprofile() is not None:  # off, or the thread is being profiled: leave it
        yield courtesy.yielded
        return
    sys.setprofile(courtesy.profile)
    try:
        yield courtesy.yielded
    finally:
        sys.setprofile(None)


__all__ = ["PATIENCE", "QUANTUM", "STALLED", "Yielded", "yielding_to"]
