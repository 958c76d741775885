"""Issue 51 item 2: ``emit-warmup --only warmup`` (the warmup alone) against the ``emit-warmup``
of a baseline revision (every plan, as it was), on the tests' text-classifier fixture
(``tests/integration/test_text_classifier.py``: tests.models.TextClassifier, 7 calls,
``dynamic=None``, a graph break).

The baseline's code is the revision's ``guardscope/`` exported with ``git archive`` under
``--work``; the two commands run in turn (baseline, then this tree), each in a fresh process on
its own copy of one analysis, so a drift of the machine's speed reaches both; the figures are
the medians of ``--rounds`` pairs and the median of their per-pair ratios. Target: the ratio
<= 0.25. ``--corpus service``: the same model on a 150-request service corpus instead
(:func:`service_calls`).

    python -m bench.bench_emit_warmup --json /tmp/emit-warmup.json
    python -m bench.bench_emit_warmup --corpus service --rounds 2 --json /tmp/emit-warmup-service.json
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python bench/bench_emit_warmup.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import CLI, REPO, child_env, describe_machine, load_text, machine, run_child, write_results

# The fixture's calls: (batch, length, temperature), as tests/integration/test_text_classifier.py.
CALLS = [(2, 8, 0.5), (2, 8, 0.7), (2, 8, None), (1, 8, 0.5), (3, 9, 0.5), (1, 5, 0.5), (4, 1, 0.5)]
BASELINE = "bf40542"  # main before issue 51 item 2: emit-warmup plans every plan, no --only


def service_calls(requests: int = 150, seed: int = 0) -> list[tuple[int, int, float | None]]:
    """A text-classification service's requests (``--corpus service``): most single texts, some
    client-side batches of 2, 4 or 8; lengths of real tokenised text (mostly 8 to 48 tokens, a
    few one-token queries); the sampling temperature left unset by one client in ten."""
    import random

    pick = random.Random(seed)
    calls = []
    for _ in range(requests):
        batch = pick.choices((1, 2, 4, 8), weights=(60, 20, 15, 5))[0]
        length = 1 if pick.random() < 0.05 else max(2, min(64, int(pick.gauss(24, 10))))
        calls.append((batch, length, None if pick.random() < 0.1 else 0.5))
    return calls


def make_analysis(work: Path, calls: list[tuple[int, int, float | None]] = CALLS) -> Path:
    """The corpus of ``calls`` and its analysis under ``work`` (made once)."""
    import torch

    import guardscope
    from guardscope.corpus.writer import CorpusWriter

    out = work / "analysis"
    if (out / "catalog.json").is_file():
        return out
    torch.manual_seed(0)
    with CorpusWriter(work / "corpus", model=f"{REPO / 'tests' / 'models.py'}:TextClassifier",
                      compile={"dynamic": None}, overwrite=True) as writer:
        for batch, length, temperature in calls:
            writer.add(torch.randint(0, 100, (batch, length)), torch.zeros(batch, length, dtype=torch.bool),
                       temperature=temperature)
    guardscope.analyze(work / "corpus", out, force=True)
    return out


def export_baseline(revision: str, work: Path) -> Path:
    """The revision's package tree under ``work``, for the baseline's PYTHONPATH."""
    target = work / f"tree-{revision}"
    if not (target / "guardscope").is_dir():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", revision], cwd=REPO, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results to this JSON file")
    parser.add_argument("--work", type=Path, default=Path("/tmp/guardscope-bench/emit-warmup"))
    parser.add_argument("--rounds", type=int, default=3, help="pairs run (default %(default)s)")
    parser.add_argument("--baseline", default=BASELINE, help="git revision of the baseline (default %(default)s)")
    parser.add_argument("--corpus", choices=("fixture", "service"), default="fixture",
                        help="the tests' 7-call fixture, or a 150-request service corpus of the same model "
                             "(service_calls) (default %(default)s)")
    args = parser.parse_args()

    args.work = args.work / args.corpus
    analysis = make_analysis(args.work, CALLS if args.corpus == "fixture" else service_calls())
    baseline_tree = export_baseline(args.baseline, args.work)
    commands = {
        "baseline": ([], child_env({"PYTHONPATH": str(baseline_tree)})),
        "only_warmup": (["--only", "warmup"], child_env()),
    }
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    for round_number in range(args.rounds):
        for name, (options, env) in commands.items():
            copy = args.work / f"run-{name}"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(analysis, copy)
            run = run_child([sys.executable, "-c", CLI, "emit-warmup", str(copy), *options],
                            args.work / f"{name}-{round_number}.log", env=env).check()
            seconds[name].append(run.wall_seconds)
            print(f"round {round_number + 1} {name:<12} {run.wall_seconds:6.1f} s  ({load_text(run)})", flush=True)
    ratios = [new / old for new, old in zip(seconds["only_warmup"], seconds["baseline"])]
    info = machine()
    results = {
        "machine": info,
        "baseline": args.baseline,
        "corpus": args.corpus,
        "command_baseline": "guardscope emit-warmup DIR",
        "command": "guardscope emit-warmup DIR --only warmup",
        "seconds": seconds,
        "median_seconds": {name: round(statistics.median(values), 2) for name, values in seconds.items()},
        "median_ratio": round(statistics.median(ratios), 3),
        "target": "<= 0.25",
    }
    print(f"machine     {describe_machine(info)}")
    print(f"emit-warmup ({args.baseline}) median {results['median_seconds']['baseline']:.1f} s; "
          f"--only warmup median {results['median_seconds']['only_warmup']:.1f} s; ratio "
          f"{results['median_ratio']:.3f} ({'MET' if results['median_ratio'] <= 0.25 else 'MISSED'}: <= 0.25)")
    write_results(args.json, results)


if __name__ == "__main__":
    main()
