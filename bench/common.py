"""What the benchmarks share: fresh-subprocess runs of ``guardscope analyze`` with wall time and
peak RSS, catalog comparisons, machine and load notes."""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The CLI through the interpreter running the benchmark, so only the working tree is needed
# (PYTHONPATH=.): guardscope has no __main__ module, and the console script may not be installed.
CLI = "import sys; from guardscope.cli import main; sys.exit(main())"
_REPLAY_MODE = re.compile(rb'"replay_mode": "[a-z]+"')


@dataclass(frozen=True)
class ChildRun:
    """One finished child process: exit status, wall seconds, peak RSS, load averages."""

    command: str
    returncode: int
    wall_seconds: float
    max_rss_bytes: int
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    log: Path

    def check(self) -> ChildRun:
        if self.returncode != 0:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise SystemExit(f"command failed (exit {self.returncode}): {self.command}\n{tail}")
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "returncode": self.returncode,
            "wall_seconds": round(self.wall_seconds, 3),
            "max_rss_bytes": self.max_rss_bytes,
            "load_before": self.load_before,
            "load_after": self.load_after,
            "log": str(self.log),
        }


def add_gpu_run_options(parser: Any, *, work: str, work_help: str, json_required: bool = False) -> None:
    """The options the GPU benchmarks share: --json, --corpus (the full-size seed corpus),
    --work (under /tmp/guardscope-bench/) and --device."""
    parser.add_argument("--json", required=json_required, help="write the results to this JSON file")
    parser.add_argument("--corpus", type=Path, default=Path("/tmp/gnn-full"),
                        help="corpus (the full-size seed corpus is generated there when missing; default %(default)s)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/guardscope-bench") / work,
                        help=f"{work_help} (default %(default)s)")
    parser.add_argument("--device", default="cuda", help="device of every run (default %(default)s)")


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment with the working tree first on PYTHONPATH (and ``extra`` set)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM it when the benchmark process dies, so a killed
    benchmark leaves no analysis running on a shared machine."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_child(
    argv: list[str],
    log: Path,
    *,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    shown: str | None = None,
) -> ChildRun:
    """Run ``argv`` in a fresh process from the repository root; stdout+stderr go to ``log``.

    The peak RSS is the child's own (``os.wait4``), not the maximum over every child this
    process ever waited for. ``timeout`` kills the child (exit status -9).
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    with open(log, "wb") as out:
        started = time.perf_counter()
        process = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env or child_env(),
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        timer = threading.Timer(timeout, process.kill) if timeout else None
        if timer:
            timer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            if timer:
                timer.cancel()
        wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    return ChildRun(
        command=shown or shlex.join(argv),
        returncode=process.returncode,
        wall_seconds=wall,
        max_rss_bytes=usage.ru_maxrss * 1024,  # Linux reports kilobytes
        load_before=load_before,
        load_after=os.getloadavg(),
        log=log,
    )


def run_analyze(
    corpus: Path, out: Path, *options: str, env: dict[str, str] | None = None, timeout: float | None = None
) -> ChildRun:
    """``guardscope analyze CORPUS --out OUT --force -q OPTIONS`` in a fresh process (started in
    the repository root, so both paths are made absolute first)."""
    corpus, out = corpus.resolve(), out.resolve()
    arguments = ["analyze", str(corpus), "--out", str(out), "--force", "-q", *options]
    return run_child(
        [sys.executable, "-c", CLI, *arguments],
        out.with_name(out.name + ".log"),
        env=env,
        timeout=timeout,
        shown="guardscope " + shlex.join(arguments),
    )


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def compile_seconds(out: Path) -> float:
    """Sum of the measured compile seconds in ``OUT/timings.json``."""
    return sum(entry["seconds"] or 0.0 for entry in read_json(out / "timings.json")["compiles"])


def replay_seconds(out: Path) -> float:
    return float(read_json(out / "timings.json")["replay_seconds"])


def catalogs_identical_except_replay_mode(first: Path, second: Path) -> bool:
    """Byte-for-byte equality of two ``catalog.json`` files once ``replay_mode`` is blanked."""
    texts = [_REPLAY_MODE.sub(b'"replay_mode": ""', path.read_bytes()) for path in (first, second)]
    return texts[0] == texts[1]


def differing_fields(first: dict[str, Any], second: dict[str, Any], ignore: tuple[str, ...]) -> list[str]:
    """Top-level catalog fields that differ, ``ignore`` left out."""
    return sorted(k for k in (set(first) | set(second)) - set(ignore) if first.get(k) != second.get(k))


def preread(corpus: Path) -> int:
    """Read every file of the corpus once so each timed run finds it in the page cache."""
    return sum(len(path.read_bytes()) for path in sorted(corpus.iterdir()) if path.is_file())


def ensure_model_resolves(corpus: Path) -> str:
    """The manifest's model spec, after checking that a file spec names an existing file the way
    guardscope resolves it (corpus directory first, then the repository root as working dir)."""
    spec = read_json(corpus / "corpus.json")["model"]
    target = spec.rpartition(":")[0]
    if target.endswith(".py") or "/" in target:
        candidates = [Path(target)] if Path(target).is_absolute() else [corpus / target, REPO / target]
        if not any(candidate.is_file() for candidate in candidates):
            raise SystemExit(
                f"{corpus}/corpus.json names model {spec!r}, which resolves to no file "
                f"(tried {', '.join(map(str, candidates))}); regenerate the corpus (--regenerate)"
            )
    return spec


def machine() -> dict[str, Any]:
    import torch

    memory = next(
        (int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
         if line.startswith("MemTotal:")),
        None,
    ) if Path("/proc/meminfo").exists() else None
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "memory_bytes": memory,
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "platform": platform.platform(),
    }
    if torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    info["tree"] = tree()
    return info


def tree() -> str:
    """The guardscope code measured: git HEAD, and whether guardscope/ has uncommitted edits."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                              text=True, check=True).stdout.strip()
        edits = subprocess.run(["git", "status", "--porcelain", "--", "guardscope"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git checkout)"
    return f"{head}{' + uncommitted guardscope/ edits' if edits else ''}"


def describe_machine(info: dict[str, Any]) -> str:
    memory = f", {info['memory_bytes'] / 2**30:.0f} GiB" if info.get("memory_bytes") else ""
    gpu = f", {info['cuda_device']} (CUDA {info['cuda']})" if info.get("cuda_device") else ""
    return (f"{info['cpus']} CPUs{memory}{gpu}; torch {info['torch']}, Python {info['python']}; "
            f"guardscope {info['tree']}")


def load_text(run: ChildRun) -> str:
    return f"load {run.load_before[0]:.2f} -> {run.load_after[0]:.2f}"


def write_results(path: str | None, results: dict[str, Any]) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        print(f"results     {path}")
