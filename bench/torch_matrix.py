"""The torch matrix (issue 52): for each torch release asked for, a fresh virtual environment, the
unit and integration suites, and the main job end to end (analyze, emit-warmup, verify) on the
seed corpus (samples/gnn/corpus) and on the text classifier the tests use (tests/models.py).

    python3 bench/torch_matrix.py                          # every supported minor, newest first
    python3 bench/torch_matrix.py --torch 2.14.1 --torch 2.13.0
    python3 bench/torch_matrix.py --table                  # the results so far, as docs/compat.md's rows

Standard library only: any Python 3.10+ starts it (the venvs are made with the same one). Each
version's venv, logs and analyses go under ``--work`` (default /tmp/guardscope-matrix), never
into the repository; its result is ``WORK/results/VERSION.json``, written as each step ends, so an
interrupted run keeps what it saw. ``pip install torch==VERSION`` takes whatever build this
machine's package index serves (CPU where one exists, as torch 2.13.0+cpu here; else the CUDA
wheel from PyPI, which runs on the CPU too); ``--find-links DIR`` adds a folder of wheels
downloaded beforehand. A failed step is recorded and the next one still runs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The newest patch of each minor the package index serves, newest first: the supported range
# (pyproject: torch>=2.11,<2.15) and the two releases below it that it left out (docs/compat.md).
VERSIONS = ("2.14.1", "2.13.0", "2.12.1", "2.11.0", "2.10.0", "2.9.1")
SEED = REPO / "samples" / "gnn" / "corpus"
# tests/subprocess/test_emit_verify.py's text-classifier corpus: (batch, length) of each call.
CLASSIFIER_CALLS = [(2, 8), (2, 8), (1, 8), (3, 9), (1, 5), (4, 1), (5, 7), (2, 3), (6, 1), (1, 1), (3, 4)]
WRITE_CLASSIFIER = """
import sys, torch
from guardscope.corpus.writer import CorpusWriter
torch.manual_seed(0)
with CorpusWriter(sys.argv[1], model={model!r}, compile={{"dynamic": None}}) as writer:
    for batch, length in {calls!r}:
        writer.add(torch.randint(0, 100, (batch, length)), torch.zeros(batch, length, dtype=torch.bool))
"""
DESCRIBE = """
import json, platform, sys, torch
import guardscope
from guardscope import torch_compat
support = torch_compat.spec_support()
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
                  "python": platform.python_version(), "guardscope": guardscope.__file__,
                  "spec_keyword": support.keyword, "spec_reason": support.reason}))
"""


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def run(command: list[str], log: Path, *, cwd: Path = REPO, timeout: float | None = None,
        env: dict[str, str] | None = None) -> tuple[int, float]:
    """Run ``command``, its output appended to ``log``; (exit status, seconds). 124 on a timeout."""
    started = time.monotonic()
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        try:
            status = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                                    env=env).returncode
        except subprocess.TimeoutExpired:
            status = 124
            out.write(f"\n[torch_matrix] timed out after {timeout} s\n")
    return status, round(time.monotonic() - started, 1)


def pytest_counts(junit: Path) -> dict[str, int]:
    """passed / failed / errors / skipped from pytest's JUnit XML (empty when it wrote none)."""
    if not junit.is_file():
        return {}
    root = ElementTree.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    counts = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
    failed = [f"{case.get('classname')}::{case.get('name')}" for s in suites for case in s.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    return {"passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
            "failed": counts["failures"], "errors": counts["errors"], "skipped": counts["skipped"],
            "failed_tests": failed}


def end_to_end(python: Path, corpus: Path, out: Path, log: Path, timeout: float) -> dict[str, object]:
    """analyze, emit-warmup and verify on ``corpus`` through the CLI, as a user runs them; what
    each printed that the table shows (the spec line, the verdict)."""
    cli = [str(python.parent / "guardscope")]
    result: dict[str, object] = {}
    for step, args in (("analyze", ["analyze", str(corpus), "--out", str(out)]),
                       ("emit-warmup", ["emit-warmup", str(out)]),
                       ("verify", ["verify", str(out)])):
        step_log = log.with_name(f"{log.stem}-{step}.log")
        status, seconds = run([*cli, *args], step_log, timeout=timeout)
        text = step_log.read_text(errors="replace")
        result[step] = {"status": status, "seconds": seconds, "log": str(step_log)}
        if step == "emit-warmup":
            spec = [line for line in text.splitlines() if line.startswith("shapes_spec")]
            result[step]["spec_line"] = spec[0] if spec else None
        if step == "verify":
            verdict = [line for line in text.splitlines() if line.startswith("verdict")]
            spec = [line for line in text.splitlines() if line.startswith("shapes_spec")]
            compiled = re.findall(r"compiled with torch\.compile\((\w+)=", text)
            result[step].update(verdict=verdict[0] if verdict else None, spec_result=spec[0] if spec else None,
                                spec_keyword=compiled[0] if compiled else None)
        if status != 0 and step != "verify":
            break
    return result


def end_to_end_rows(python: Path, work: Path, version: str, logs: Path, row: dict, save, timeout: float) -> None:
    """The seed's and the text classifier's analyze, emit-warmup and verify, into ``row``."""
    e2e = work / "e2e" / version
    shutil.rmtree(e2e, ignore_errors=True)
    e2e.mkdir(parents=True)
    row["seed"] = end_to_end(python, SEED, e2e / "seed", logs / "seed.log", timeout)
    save()
    write = WRITE_CLASSIFIER.format(model=f"{REPO / 'tests' / 'models.py'}:TextClassifier", calls=CLASSIFIER_CALLS)
    status, _ = run([str(python), "-c", write, str(e2e / "classifier-corpus")], logs / "classifier-corpus.log")
    row["classifier"] = (end_to_end(python, e2e / "classifier-corpus", e2e / "classifier", logs / "classifier.log",
                                    timeout)
                         if status == 0 else {"corpus": {"status": status, "log": str(logs / "classifier-corpus.log")}})
    save()


def matrix_row(version: str, work: Path, args: argparse.Namespace) -> dict[str, object]:
    """One version's row: a fresh venv, the suites, the end-to-end runs; written as it goes."""
    results = work / "results"
    results.mkdir(parents=True, exist_ok=True)
    row_file = results / f"{version}.json"
    logs = work / "logs" / version
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    row: dict[str, object] = {"requested": version, "started": now(), "commit": git_commit(), "logs": str(logs)}

    def save() -> None:
        row_file.write_text(json.dumps(row, indent=1) + "\n")

    venv = work / f"venv-{version}"
    shutil.rmtree(venv, ignore_errors=True)
    python = venv / "bin" / "python"
    links = [*os.environ.get("PIP_FIND_LINKS", "").split(), *map(str, args.find_links)]
    pip = [str(python), "-m", "pip", "install", "-q", *(f"--find-links={d}" for d in links)]
    install = logs / "install.log"
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [*pip, f"torch=={version}"],
             # torch named again: a release outside pyproject's range fails to install rather
             # than pip replacing it with one inside
             [*pip, "-e", f"{REPO}[test]", f"torch=={version}"]]
    for command in steps:
        status, seconds = run(command, install, timeout=args.install_timeout)
        if status != 0:
            row.update(install={"status": status, "log": str(install)}, finished=now())
            save()
            return row
    row["install"] = {"status": 0, "log": str(install)}
    described = subprocess.run([str(python), "-c", DESCRIBE], cwd=REPO, capture_output=True, text=True)
    row["environment"] = (json.loads(described.stdout.strip().splitlines()[-1]) if described.returncode == 0
                          else {"error": described.stderr[-2000:]})
    save()

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    # the unit suite (seconds), then the user's job, then the integration suite (the longest)
    plan = [s for s in ("unit",) if s in args.suites] + list(args.runs) + [s for s in args.suites if s != "unit"]
    for step in plan:
        if step == "e2e":
            end_to_end_rows(python, work, version, logs, row, save, args.e2e_timeout)
            continue
        junit = logs / f"{step}.xml"
        status, seconds = run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(args.workers),
                               "--dist", "worksteal", f"--junitxml={junit}", f"tests/{step}"],
                              logs / f"{step}.log", timeout=args.suite_timeout, env=env)
        row[step] = {"status": status, "seconds": seconds, **pytest_counts(junit), "log": str(logs / f"{step}.log")}
        save()
    row["finished"] = now()
    save()
    if not args.keep_venv:
        shutil.rmtree(venv, ignore_errors=True)
    return row


def git_commit() -> str | None:
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return (done.stdout.strip() + ("+changes" if dirty else "")) if done.returncode == 0 else None


def suite_cell(entry: dict | None) -> str:
    if not entry:
        return "not run"
    if "passed" not in entry:
        return f"no result (exit {entry.get('status')})"
    cell = f"{entry['passed']} passed"
    for key in ("failed", "errors", "skipped"):
        if entry.get(key):
            cell += f", {entry[key]} {key}"
    return cell + (" **FAIL**" if entry.get("failed") or entry.get("errors") or entry.get("status") not in (0, None)
                   else "")


def e2e_cell(entry: dict | None) -> str:
    if not entry:
        return "not run"
    steps = []
    for step in ("analyze", "emit-warmup", "verify"):
        if step not in entry:
            steps.append(f"{step} not run")
            continue
        done = entry[step]
        if step == "verify":
            verdict = " ".join(str(done.get("verdict") or f"exit {done['status']}").split("(")[0].split()[1:2])
            spec = (done.get("spec_result") or "").split()
            steps.append(f"verify {verdict or 'exit ' + str(done['status'])}"
                         + (f" (spec form {spec[1]} as {done['spec_keyword']}=)" if done.get("spec_keyword") and spec
                            else ""))
        elif done["status"] != 0:
            steps.append(f"{step} exit {done['status']}")
        elif step == "emit-warmup" and str(done.get("spec_line") or "").startswith("shapes_spec not written"):
            steps.append("no spec form (" + done["spec_line"].split(": ", 1)[-1].split(" (")[0] + ")")
    return "; ".join(steps) or "ok"


def table(work: Path) -> str:
    """docs/compat.md's rows from every result under WORK/results."""
    lines = ["| torch (build) | date | commit | unit | integration | seed: analyze, emit-warmup, verify | "
             "text classifier: analyze, emit-warmup, verify |", "|---|---|---|---|---|---|---|"]
    for path in sorted((work / "results").glob("*.json"), key=lambda p: [int(x) for x in p.stem.split(".")],
                       reverse=True):
        row = json.loads(path.read_text())
        env = row.get("environment") or {}
        build = env.get("torch") or row["requested"]
        if env.get("cuda") and not env.get("cuda_available"):
            build += f" (CUDA {env['cuda']} wheel, on the CPU)"
        if (row.get("install") or {}).get("status"):
            lines.append(f"| {build} | {row['started']} | {row.get('commit')} | install failed (exit "
                         f"{row['install']['status']}) | | | |")
            continue
        lines.append(f"| {build} | {row['started']} | {row.get('commit')} | {suite_cell(row.get('unit'))} | "
                     f"{suite_cell(row.get('integration'))} | {e2e_cell(row.get('seed'))} | "
                     f"{e2e_cell(row.get('classifier'))} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torch", action="append", dest="versions",
                        help=f"a torch release (repeatable); default {', '.join(VERSIONS)}")
    parser.add_argument("--work", type=Path, default=Path("/tmp/guardscope-matrix"),
                        help="venvs, logs, analyses and results/VERSION.json (outside the repository)")
    parser.add_argument("--find-links", type=Path, action="append", default=[],
                        help="a folder of wheels downloaded beforehand (pip download torch==X -d DIR)")
    parser.add_argument("--suite", action="append", dest="suites", choices=["unit", "integration"],
                        help="the pytest folders to run (repeatable); default unit and integration")
    parser.add_argument("--no-e2e", dest="runs", action="store_const", const=(), default=("e2e",),
                        help="skip analyze / emit-warmup / verify on the seed and the text classifier")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (default 2, as CI)")
    parser.add_argument("--install-timeout", type=float, default=3600)
    parser.add_argument("--suite-timeout", type=float, default=7200)
    parser.add_argument("--e2e-timeout", type=float, default=3600, help="seconds per CLI step")
    parser.add_argument("--keep-venv", action="store_true", help="keep WORK/venv-VERSION afterwards")
    parser.add_argument("--table", action="store_true", help="print the table of the results in WORK and exit")
    args = parser.parse_args(argv)
    args.suites = args.suites or ["unit", "integration"]
    if args.table:
        print(table(args.work))
        return 0
    failed = False
    for version in args.versions or VERSIONS:
        print(f"[torch_matrix] torch {version}: started {now()}", flush=True)
        row = matrix_row(version, args.work, args)
        print(f"[torch_matrix] torch {version}: finished {row.get('finished', now())}", flush=True)
        failed |= any(cell.endswith("**FAIL**") for cell in (suite_cell(row.get(s)) for s in args.suites))
    print(table(args.work))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
