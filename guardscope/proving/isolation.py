"""Run one measurement in a fresh Python process, so that a crash costs one result, not the run.

Every child guardscope starts goes through here. ``verify``, ``bench`` and ``bundle`` each start
``python -m guardscope.proving.<module> ...`` per artifact or strategy (:func:`run_module`);
``fidelity`` runs a whole analysis (:func:`run_child`); ``analyze`` on inductor runs itself in a child
that shares the terminal (:func:`run_foreground`). The child writes its result as JSON to a file the parent names; anything else — a
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
import stat
import subprocess
import sys
import threading
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


# The environment variable that gives a child run_child started the pipe its parent holds open:
# the child reads it on a thread of its own, and the read ends when the parent is gone.
PARENT_PIPE = "GUARDSCOPE_PARENT_PIPE"


def watch_parent() -> None:
    """In a child :func:`run_child` started: end this child's whole process group (its own
    children, inductor's compile workers, included) as soon as its parent is gone, however the
    parent ended (SIGKILL too: the kernel closes the parent's end of the pipe, and the read here
    returns). Call it first thing in the child's entry point; elsewhere it does nothing. The
    thread sleeps in a blocking read: nothing is polled, so measurements are undisturbed."""
    value = os.environ.pop(PARENT_PIPE, None)  # popped: this child's own children get no stale fd
    if value is None or not value.isdigit():
        return
    fd = int(value)
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):  # not the pipe run_child made (a copied environment)
            return
    except OSError:
        return

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(fd, 1):  # the parent never writes: this returns b"" once its end is closed
                pass
        if os.getpgrp() == os.getpid():  # the leader of its group (start_new_session): the whole group
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="guardscope-parent-watch", daemon=True).start()


def kill_group(pid: int) -> None:
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


_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("The above exception was the direct cause of the following exception:",
            "During handling of the above exception, another exception occurred:")
_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$')


@dataclass(frozen=True)
class PythonError:
    """The uncaught exception a Python child printed as it died, read back from its output."""

    error: str  # the exception that ended it: "guardscope.errors.ModelSpecError: model spec ..."
    root: str  # the first exception of its chain, the root cause: "ModuleNotFoundError: No module named 'x'"
    where: str | None  # the root's innermost frame: "/app/model.py, line 3, in <module>"
    source: str | None  # that frame's source line, as Python printed it

    def describe(self) -> str:
        """The root cause first, then where it was raised and, when another exception came of
        it, the one that ended the process; one item a line."""
        text = self.root
        if self.where is not None:
            text += f"\n  raised at {self.where}" + (f": {self.source}" if self.source else "")
        if self.error != self.root:
            text += f"\n  which ended the process as {self.error}"
        return text


def _block(lines: list[str], header: int) -> tuple[str, str | None, str | None] | None:
    """(exception line, innermost frame, its source line) of the traceback printed from ``header`` on."""
    where = source = None
    for index in range(header + 1, len(lines)):
        line = lines[index]
        frame = _FRAME.match(line)
        if frame is not None:
            where = f"{frame['file']}, line {frame['line']}, in {frame['function']}"
            following = lines[index + 1] if index + 1 < len(lines) else ""
            source = following.strip() if following.startswith("    ") and following.strip("^~ ") else None
        elif line and not line.startswith(" "):
            return line, where, source
    return None


def python_error(text: str) -> PythonError | None:
    """The last uncaught exception printed in ``text`` (a child's stderr) with its root cause: the
    first exception of its chain (Python prints a chain from its cause on, each later one after
    "The above exception was the direct cause..." or "During handling of the above exception...").
    None when ``text`` holds no traceback. Pure."""
    lines = text.splitlines()
    headers = [index for index, line in enumerate(lines) if line == _TRACEBACK]
    if not headers:
        return None
    chain = [headers[-1]]
    for header in reversed(headers[:-1]):
        before = [line for line in lines[header:chain[0]] if line.strip()]
        if len(before) < 2 or before[-1] not in _CHAINED:
            break
        chain.insert(0, header)
    last, first = _block(lines, chain[-1]), _block(lines, chain[0])
    if last is None or first is None:
        return None
    return PythonError(error=last[0], root=first[0], where=first[1], source=first[2])


@dataclass(frozen=True)
class Completed:
    """A finished (or timed-out) child: its exit status (None when it timed out), its output
    and its wall seconds."""

    returncode: int | None
    stdout: str
    stderr: str
    seconds: float

    def failure(self, what: str, lines: int = 5) -> str:
        """``the verification process died of SIGSEGV: <last lines of its output>``; a Python
        exception that ended it as its root cause, where that was raised and what ended the
        process, one a line (:class:`PythonError`)."""
        if self.returncode is not None and self.returncode < 0:
            cause = f"{what} died of {signal_name(self.returncode)}"
        else:
            cause = f"{what} exited with status {self.returncode}"
        error = python_error(self.stderr or self.stdout or "")
        if error is not None:
            return f"{cause}: {error.describe()}"
        tail = output_tail(self.stderr or self.stdout or "", lines)
        return cause + (": " + " | ".join(tail) if tail else "")


def run_child(command: list[str], *, timeout: float | None, environment: dict[str, str] | None = None,
              cwd: str | Path | None = None) -> Completed:
    """Run ``command`` with its output captured, in a session of its own: on a timeout, and on
    Ctrl-C or any error here, its whole process group is killed (inductor's compile workers
    included), so no leftover process keeps running or holds the output pipes open. When this
    process dies without that (SIGTERM, SIGKILL), the child ends its group itself: it holds the
    read end of a pipe whose write end only this process holds (:func:`watch_parent`)."""
    started = time.perf_counter()
    read_end, write_end = os.pipe()  # not inheritable: only this child gets the read end (pass_fds)
    try:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env={**(environment or child_environment()), PARENT_PIPE: str(read_end)},
                                 cwd=cwd, start_new_session=True, pass_fds=(read_end,))
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    try:
        return _wait(child, started, timeout)
    finally:
        os.close(write_end)


def _wait(child: subprocess.Popen, started: float, timeout: float | None) -> Completed:
    """The child's output once it ends; its whole group killed on a timeout or an error here."""
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(child.pid)
        stdout, stderr = child.communicate()
        return Completed(None, stdout or "", stderr or "", time.perf_counter() - started)
    except BaseException:  # Ctrl-C: take the child's group down with us
        kill_group(child.pid)
        child.wait()
        raise
    return Completed(child.returncode, stdout or "", stderr or "", time.perf_counter() - started)


def run_foreground(command: list[str]) -> int:
    """Run ``command`` on this terminal, in this process group, and return its exit status
    (negative: the signal that killed it). For a child the user watches and may interrupt: Ctrl-C
    reaches it as it reaches us, so it can save its progress (``guardscope analyze``'s checkpoint)
    before it ends. No timeout: it runs as long as the command it stands for."""
    return subprocess.run(command).returncode


def run_module(
    module: str,
    arguments: list[str],
    result_path: Path,
    *,
    timeout: float,
    what: str,
    environment: dict[str, str] | None = None,
) -> ChildOutcome:
    """``python -m MODULE ARGUMENTS...`` (through :func:`run_child`); the child writes its JSON
    result to ``result_path``.

    ``what`` names the child in failure reasons ("the verification process died of SIGSEGV").
    The result file is removed afterwards, whatever happened.
    """
    if result_path.exists():
        result_path.unlink()
    try:
        completed = run_child([sys.executable, "-m", module, *arguments], timeout=timeout, environment=environment)
        if completed.returncode is None:
            return ChildOutcome(None, f"timed out after {timeout:.0f} s", completed.seconds, True)
        if completed.returncode == 0 and result_path.is_file():
            return ChildOutcome(json.loads(result_path.read_text()), None, completed.seconds)
        return ChildOutcome(None, completed.failure(what), completed.seconds)
    finally:
        if result_path.exists():
            result_path.unlink()


def import_file(path: Path) -> Any:
    """Import a generated module (``warmup.py``, ``unbacked.py``...) from its path."""
    spec = importlib.util.spec_from_file_location(f"guardscope_artifact_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module
