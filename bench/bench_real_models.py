"""Issues 14 and 15 on the CPU: what real models cost to analyse, what following every frame costs,
and how fast the command line starts.

1. CLI start-up: ``guardscope --help`` and ``guardscope analyze --help`` in fresh processes
   (median of ``--runs``), against ``python -c "import torch"`` in the same run.
2. Per model of ``tests/real_models.py`` (``--models``; corpora of ``--count`` requests written to
   ``--work``): ``guardscope analyze`` wall time and peak RSS, compiles, frames, topologies, and a
   plain ``torch.compile`` (eager backend) replay of the same requests in a fresh process as the
   baseline: the ratio is what guardscope's frame tracking, guard checks and catalog add.
3. The frame recorder alone (``torch_compat.FrameRecorder``): per-call time of the compiled GCN
   with and without it, in one process, once every graph is compiled.

    PYTHONPATH=. python bench/bench_real_models.py --json /tmp/real.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import CLI, REPO, describe_machine, load_text, machine, read_json, run_child, write_results  # noqa: E402

PLAIN = """
import sys, time, torch
sys.path.insert(0, {repo!r})
from tests import real_models
from guardscope import load_corpus
factory, _ = real_models.MODELS[{name!r}]
model = factory()
torch._dynamo.config.recompile_limit = 4096
compiled = torch.compile(model, backend="eager", dynamic=None)
samples = list(load_corpus({corpus!r}))
with torch.inference_mode():
    for sample in samples:
        compiled(*sample.args, **sample.kwargs)
"""

RECORDER = """
import sys, time, torch
sys.path.insert(0, {repo!r})
from tests import real_models
from guardscope import torch_compat
model = real_models.gcn()
calls = real_models.gcn_requests({count}, seed=1)
torch._dynamo.config.recompile_limit = 4096
compiled = torch.compile(model, backend="eager")
with torch.inference_mode():
    for args, kwargs in calls:  # compile every graph first
        compiled(*args, **kwargs)
    def timed(record):
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            with torch_compat.FrameRecorder() as recorder:
                for args, kwargs in calls:
                    if record:
                        with recorder.recording():
                            compiled(*args, **kwargs)
                    else:
                        compiled(*args, **kwargs)
            best = min(best, (time.perf_counter() - started) / len(calls))
        return best
    print("plain", timed(False)); print("recorded", timed(True))
"""


def median_wall(argv: list[str], log: Path, runs: int) -> float:
    return statistics.median(run_child(argv, log).check().wall_seconds for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="/tmp/guardscope-bench-real")
    parser.add_argument("--models", nargs="*", default=["gpt2", "bert", "gcn", "cnn", "gated"])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", default=None)
    options = parser.parse_args()
    work = Path(options.work)
    info = machine()
    print(f"machine     {describe_machine(info)}")
    results: dict = {"machine": info, "count": options.count}

    python = sys.executable
    startup = {
        "import torch": median_wall([python, "-c", "import torch"], work / "import-torch.log", options.runs),
        "guardscope --help": median_wall([python, "-c", CLI, "--help"], work / "help.log", options.runs),
        "guardscope analyze --help": median_wall([python, "-c", CLI, "analyze", "--help"], work / "help-analyze.log",
                                                 options.runs),
    }
    for what, seconds in startup.items():
        print(f"start-up    {what:<28} {seconds:.3f} s (median of {options.runs})")
    results["startup_seconds"] = startup

    from tests import real_models

    results["models"] = {}
    for name in options.models:
        corpus = work / f"corpus-{name}"
        real_models.write_corpus(name, str(corpus), options.count)
        out = work / f"out-{name}"
        analysed = run_child([python, "-c", CLI, "analyze", str(corpus), "--out", str(out), "--force", "-q",
                              "--accept-errors"], work / f"analyze-{name}.log").check()
        plain = run_child([python, "-c", PLAIN.format(repo=str(REPO), name=name, corpus=str(corpus))],
                          work / f"plain-{name}.log").check()
        catalog = read_json(out / "catalog.json")
        row = {
            "analyze_seconds": round(analysed.wall_seconds, 2),
            "analyze_max_rss_bytes": analysed.max_rss_bytes,
            "plain_replay_seconds": round(plain.wall_seconds, 2),
            "ratio": round(analysed.wall_seconds / plain.wall_seconds, 2),
            "compiles": catalog["summary"]["compiles"],
            "frames": catalog["summary"]["frames"],
            "topologies": catalog["summary"]["topologies"],
        }
        results["models"][name] = row
        print(f"{name:<11} analyze {row['analyze_seconds']:.1f} s ({analysed.max_rss_bytes / 2**20:.0f} MiB) vs plain "
              f"replay {row['plain_replay_seconds']:.1f} s: {row['ratio']:.2f}x; {row['compiles']} compiles in "
              f"{row['frames']} frames, {row['topologies']} topologies ({load_text(analysed)})")

    recorder = run_child([python, "-c", RECORDER.format(repo=str(REPO), count=40)], work / "recorder.log").check()
    figures = dict(line.split() for line in recorder.log.read_text().splitlines() if line.startswith(("plain", "recorded")))
    per_call = {key: float(value) * 1000 for key, value in figures.items()}
    results["frame_recorder_ms_per_call"] = per_call
    print(f"recorder    GCN call {per_call['plain']:.2f} ms plain, {per_call['recorded']:.2f} ms recorded "
          f"(+{per_call['recorded'] - per_call['plain']:.2f} ms; best of 5 passes over 40 requests)")
    write_results(options.json, results)


if __name__ == "__main__":
    main()
