"""Run one measurement in a fresh Python process, so that a crash costs one result, not the run.

``verify`` and ``bench`` each start ``python -m guardscope.<module> ...`` per artifact or
strategy. The child writes its result as JSON to a file the parent names; anything else — a
non-zero exit, a segfault (AOTInductor has segfaulted on the seed model), a timeout — becomes a
one-line reason. The child imports this same guardscope, wherever it is installed from.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ChildOutcome:
    """What a child left behind: its result, or why there is none; and its wall seconds."""

    result: dict[str, Any] | None
    failure: str | None
    seconds: float
    timed_out: bool = False


def signal_name(code: int) -> str:
    """``SIGSEGV`` for a return code of -11."""
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def child_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment, with this guardscope first on PYTHONPATH and ``extra`` set."""
    environment = dict(os.environ)
    package_root = str(Path(__file__).resolve().parent.parent)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, environment.get("PYTHONPATH")]))
    environment.update(extra or {})
    return environment


def _kill_group(pid: int) -> None:
    """SIGKILL the process group a child started with ``start_new_session`` leads."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


_WARNING = re.compile(r"^\S.*:\d+: \w*Warning: ")


def output_tail(text: str, lines: int = 5) -> list[str]:
    """The last ``lines`` lines of a dead child's output that say something: Python warnings
    (``file.py:99: FutureWarning: ...`` and the source line printed under each) are left out, so a
    crash report ends with the crash, not with the deprecation notices printed before it. Pure."""
    kept: list[str] = []
    after_warning = False
    for line in text.strip().splitlines():
        if _WARNING.match(line):
            after_warning = True
            continue
        if after_warning and line.startswith((" ", "\t")):
            after_warning = False
            continue  # the one source line printed under a warning
        after_warning = False
        if line.strip():
            kept.append(line)
    return kept[-lines:]


def run_module(
    module: str,
    arguments: list[str],
    result_path: Path,
    *,
    timeout: float,
    what: str,
    environment: dict[str, str] | None = None,
) -> ChildOutcome:
    """``python -m MODULE ARGUMENTS...``; the child writes its JSON result to ``result_path``.

    ``what`` names the child in failure reasons ("the verification process died of SIGSEGV").
    The result file is removed afterwards, whatever happened.
    """
    if result_path.exists():
        result_path.unlink()
    command = [sys.executable, "-m", module, *arguments]
    started = time.perf_counter()
    try:
        # A session of its own: on a timeout the whole group goes (inductor's compile workers
        # included), and no leftover process keeps the output pipes open.
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=environment or child_environment(), start_new_session=True)
        try:
            stdout, stderr = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(child.pid)
            child.communicate()
            return ChildOutcome(None, f"timed out after {timeout:.0f} s", time.perf_counter() - started, True)
        except BaseException:  # Ctrl-C: take the child's group down with us
            _kill_group(child.pid)
            child.wait()
            raise
        seconds = time.perf_counter() - started
        if child.returncode == 0 and result_path.is_file():
            return ChildOutcome(json.loads(result_path.read_text()), None, seconds)
        tail = output_tail(stderr or stdout or "")
        if child.returncode < 0:
            cause = f"{what} died of {signal_name(child.returncode)}"
        else:
            cause = f"{what} exited with status {child.returncode}"
        return ChildOutcome(None, cause + (": " + " | ".join(tail) if tail else ""), seconds)
    finally:
        if result_path.exists():
            result_path.unlink()


def import_file(path: Path) -> Any:
    """Import a generated module (``warmup.py``, ``unbacked.py``...) from its path."""
    spec = importlib.util.spec_from_file_location(f"guardscope_artifact_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module
