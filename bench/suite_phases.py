"""Where the test suite's time goes, by pipeline step: a pytest plugin (docs/benchmarks.md §19).

    python -m pytest -n 2 --dist worksteal -p bench.suite_phases

times every call a test makes to guardscope's pipeline steps (``analyze``, ``emit_warmup``,
``verify``, ``whatif``, ``probe``, ``bench``, ``bundle``, ``precompile``, ``fidelity`` and
``check_generate``), in every pytest-xdist worker, and prints at the end of the run the seconds
each step took in all and the tests that spent the most in it. A step called inside another (the
analysis ``bench`` runs) is counted in the outermost only; a child process's time is in the step
of the parent that waited for it, and a session fixture's steps in the test that asked for it
first. Nothing is changed in what the tests do.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable

STEPS = ("analyze", "emit_warmup", "verify", "whatif", "probe", "bench", "bundle", "precompile", "fidelity")
FOLDER = "GUARDSCOPE_SUITE_PHASES"  # the folder every process of the run writes its records into
_depth = threading.local()


def summarise(records: Iterable[dict[str, Any]], test_seconds: float, top: int = 5) -> list[str]:
    """The report's lines: each step's calls and seconds (largest first) with its share of the
    tests' time, then the ``top`` tests by seconds in each step. Pure."""
    steps: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    by_test: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for record in records:
        steps[record["step"]] += record["seconds"]
        calls[record["step"]] += 1
        by_test[record["step"]][record["test"]] += record["seconds"]
    total = sum(steps.values())
    share = f" ({100 * total / test_seconds:.0f}% of {test_seconds:,.0f} s of test time)" if test_seconds else ""
    lines = [f"pipeline steps: {total:,.1f} s in all{share}"]
    for step in sorted(steps, key=lambda s: (-steps[s], s)):
        lines.append(f"  {step:<15} {steps[step]:9,.1f} s  {calls[step]:5d} calls")
    for step in sorted(steps, key=lambda s: (-steps[s], s)):
        lines.append(f"{step}, the most:")
        for test, seconds in sorted(by_test[step].items(), key=lambda item: (-item[1], item[0]))[:top]:
            lines.append(f"  {seconds:7.1f} s  {test}")
    return lines


def _timed(step: str, function: Callable[..., Any], sink: Path) -> Callable[..., Any]:
    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(_depth, "value", 0)
        _depth.value = depth + 1
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _depth.value = depth
            if depth == 0:
                test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
                record = {"step": step, "test": test, "seconds": round(time.perf_counter() - started, 3)}
                with sink.open("a") as file:
                    file.write(json.dumps(record) + "\n")

    return timed


def pytest_configure(config: Any) -> None:
    if FOLDER not in os.environ:  # the first process of the run (the xdist controller): workers inherit it
        os.environ[FOLDER] = tempfile.mkdtemp(prefix="guardscope-suite-phases-")
    sink = Path(os.environ[FOLDER]) / f"{os.getpid()}.jsonl"
    import guardscope
    from guardscope import pipeline
    from guardscope.proving import generation

    for step in STEPS:
        setattr(pipeline, step, _timed(step, getattr(pipeline, step), sink))
    guardscope.analyze = pipeline.analyze
    generation.check_generate = _timed("check_generate", generation.check_generate, sink)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    if hasattr(config, "workerinput"):
        return
    folder = Path(os.environ[FOLDER])
    records = [json.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.read_text().splitlines()]
    test_seconds = sum(report.duration for reports in terminalreporter.stats.values() for report in reports
                       if getattr(report, "when", None) in ("setup", "call", "teardown"))
    terminalreporter.section("where the time went, by pipeline step (bench/suite_phases.py)")
    for line in summarise(records, test_seconds):
        terminalreporter.write_line(line)
    shutil.rmtree(folder, ignore_errors=True)
