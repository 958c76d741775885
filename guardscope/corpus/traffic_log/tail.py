"""A traffic log's files written off the thread that adds calls (format 5,
:mod:`guardscope.corpus.traffic_log.files`): :class:`FileTail` runs each flush's file work — the window's
data shard (``torch.save`` of the calls kept in full), its Parquet file, a fold when due, the
manifest — on one background thread, in the order the flushes came.

A window whose calls are mostly new layouts holds thousands of calls kept in full, and encoding
them into a data shard takes seconds; done where the calls are added, the traffic recorder's queue
fills meanwhile and calls are dropped (issue 53). Here the thread that adds calls gives each flush
its sample indices and hands the rest over; it waits only when ``depth`` flushes are already
outstanding. Files are written as before (each atomically and synced, the manifest after the files
it lists), so a killed process keeps every window the manifest lists and loses the calls after it:
the windows handed over and not yet written (``TAIL_DEPTH`` at most) and the one being filled.
:meth:`FileTail.wait` (a writer's ``flush()`` and ``close()``) returns once every flush handed over
is on disk.

A job that raises stops the tail: every later :meth:`~FileTail.submit` and :meth:`~FileTail.wait`
raises that error (the windows after it would not continue the log's sample indices).
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

# Flushes handed over and not yet written, at most. A fold of a file's windows (ROLL_ROWS rows) takes
# seconds here, in which the recorder flushes another window or two: more than two waiting for the
# writer thread dropped calls (bench_recorded_log at 1M: 3,911 dropped with 2).
TAIL_DEPTH = 4


class FileTail:
    """Jobs run in order on one daemon thread (started at the first), at most ``depth`` of them
    outstanding: :meth:`submit` waits for a place, :meth:`wait` for all of them."""

    def __init__(self, name: str, depth: int = TAIL_DEPTH) -> None:
        self.name, self.depth = name, depth
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._done = threading.Condition()
        self._outstanding = 0
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def submit(self, job: Callable[..., Any], *args: Any) -> None:
        """Run ``job(*args)`` after the jobs submitted before it; raises the error of a job that
        failed."""
        with self._done:
            while self._outstanding >= self.depth and self._error is None:
                self._done.wait()
            self._raise()
            self._outstanding += 1
        self._put(job, args, False)

    def then(self, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` on the thread once every job submitted before has run, failed or
        not (a waiter's signal: it takes no place among the ``depth``)."""
        with self._done:
            self._outstanding += 1
        self._put(callback, (), True)

    def _put(self, job: Callable[..., Any], args: tuple, always: bool) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        self._jobs.put((job, args, always))

    def wait(self) -> None:
        """Return once every job submitted has run; raises the error of one that failed."""
        with self._done:
            while self._outstanding and self._error is None:
                self._done.wait()
            self._raise()

    def close(self) -> None:
        """Stop the thread once the jobs submitted have run; raises the error of one that failed."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, args, always = item
            error = None
            if always or self._error is None:  # after a failure the log cannot continue: the rest are skipped
                try:
                    job(*args)
                except BaseException as exc:  # handed to the thread that submits
                    error = exc
            with self._done:
                if error is not None and self._error is None:
                    self._error = error
                self._outstanding -= 1
                self._done.notify_all()
