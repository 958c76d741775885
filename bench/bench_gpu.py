"""GPU benchmark (H200, torch 2.11): guardscope's analyses against the plain inductor replay on
the full-size seed corpus, each in a fresh process, with a catalog check across all runs.

    PYTHONPATH=. python bench/bench_gpu.py --json OUT/bench_gpu.json      # on the GPU machine
    python -m bench.bench_gpu --device cpu --backend eager --corpus samples/gnn/corpus --json /tmp/g.json

Runs (``--backend`` is inductor unless given; ``--device`` is cuda unless given):

  a  guardscope          guardscope analyze --backend inductor --device cuda      (guard-only replay)
  b  plain inductor      guardscope analyze --backend inductor --device cuda --replay full
  c  guardscope eager    guardscope analyze --backend eager --device cuda         (the default analysis)
  d  plain eager         guardscope analyze --backend eager --device cuda --replay full

First a start-up floor is timed (a fresh process that imports torch and guardscope, builds the
model on the device and loads the corpus: what any analysis pays before replaying). Each run gets
empty inductor and triton cache folders (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR),
so no run reuses another's compiled kernels. Prints wall seconds (process start to exit), replay
and compile seconds (``timings.json``), the ratios, and whether compiles (samples and compile
ids), failure kinds (with the graph each failed against), topologies and failed samples are
identical across the runs; the ``compile`` block (backend, device) and ``replay_mode`` are left
out of the comparison. Issue 5's target: guardscope's default analysis (c) <= 10% of the plain
inductor replay (b). With ``--backend inductor`` guardscope still compiles every graph with
inductor, and those compiles are most of (b)'s time, so (a)/(b) shows what skipping forwards
alone saves. Expected on an H200: b about 85 s (first compile 14 s, recompiles about 7 s each),
whole benchmark well under 8 minutes. Needs only the working tree (PYTHONPATH=.).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench import common

TARGET_FRACTION = 0.10
# The fixed cost any fresh analysis process pays before replaying: interpreter and torch import,
# device initialisation, building the model on the device, loading the corpus.
FLOOR = (
    "import sys, torch, guardscope.cli\n"
    "from guardscope.corpus import load_corpus\n"
    "from guardscope.corpus.spec import load_model\n"
    "corpus = load_corpus(sys.argv[1])\n"
    "model = load_model(corpus.manifest.model, base_dir=corpus.path).to(sys.argv[2]).eval()\n"
    "count = sum(1 for _ in corpus)\n"
    "if sys.argv[2].startswith('cuda'):\n"
    "    torch.cuda.synchronize()\n"
    "print(count, 'samples loaded, model on', sys.argv[2])"
)


def runs_for(backend: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Run key -> (label, analyze options besides --device)."""
    return {
        "a": (f"guardscope {backend}", ("--backend", backend)),
        "b": (f"plain {backend}", ("--backend", backend, "--replay", "full")),
        "c": ("guardscope eager", ("--backend", "eager")),
        "d": ("plain eager", ("--backend", "eager", "--replay", "full")),
    }


def comparable(catalog: dict) -> dict[str, object]:
    """What must agree across backends and replay modes."""
    return {
        "compiles": [(c["sample"], c["compile_id"]) for c in catalog["compiles"]],
        "failure kinds": [
            (c["sample"], [(f["kind"], f["against"]) for f in c["failures"]]) for c in catalog["compiles"]
        ],
        "topologies": catalog["topologies"],
        "failed samples": catalog["failed_samples"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/bench_gpu.py",
        description="guardscope analyze (inductor and eager, guard-only replay) vs the plain "
        "inductor replay on the full-size seed corpus, on a GPU; writes a JSON of results.",
    )
    common.add_gpu_run_options(parser, work="gpu", work_help="folder for the analyses, logs and compile caches",
                               json_required=True)
    parser.add_argument("--backend", default="inductor",
                        help="backend of runs a and b (default %(default)s; eager to test on a CPU)")
    parser.add_argument("--timeout", type=float, default=360.0,
                        help="seconds allowed per run before it is killed (default %(default)s)")
    options = parser.parse_args(argv)

    started = time.perf_counter()
    if not (options.corpus / "corpus.json").is_file():
        from bench.bench_seed import ensure_full_corpus

        ensure_full_corpus(options.corpus, regenerate=False)
    spec = common.ensure_model_resolves(options.corpus)
    size = common.preread(options.corpus)
    print(f"corpus      {options.corpus} (model {spec}; {size / 1e6:.0f} MB)")
    print(f"running     floor: start, import torch and guardscope, build the model on {options.device}, "
          "load the corpus ...", flush=True)
    floor = common.run_child(
        [sys.executable, "-c", FLOOR, str(options.corpus.resolve()), options.device],
        (options.work / "floor.log").resolve(), shown="python -c <start-up floor>", timeout=options.timeout,
    ).check()
    print(f"  floor {floor.wall_seconds:7.1f} s wall  {common.load_text(floor)}", flush=True)
    results: dict[str, dict] = {}
    catalogs: dict[str, dict] = {}
    for key, (label, flags) in runs_for(options.backend).items():
        out = options.work / key
        caches = options.work / f"{key}-caches"
        env = common.child_env({
            "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
            "TRITON_CACHE_DIR": str(caches / "triton"),
        })
        print(f"running     {key}  {label}: {' '.join(flags)} --device {options.device} ...", flush=True)
        run = common.run_analyze(options.corpus, out, *flags, "--device", options.device,
                                 env=env, timeout=options.timeout)
        row = {"label": label, **run.to_json()}
        if run.returncode == 0:
            catalogs[key] = common.read_json(out / "catalog.json")
            timings = common.read_json(out / "timings.json")["compiles"]
            row.update(
                replay_mode=catalogs[key]["replay_mode"],
                replay_seconds=common.replay_seconds(out),
                compile_seconds=round(common.compile_seconds(out), 3),
                first_compile_seconds=timings[0]["seconds"] if timings else None,
                compile_samples=catalogs[key]["summary"]["compile_samples"],
            )
            print(f"  {key}  {run.wall_seconds:7.1f} s wall  replay {row['replay_seconds']:7.1f} s "
                  f"(compile {row['compile_seconds']:.1f} s, first {row['first_compile_seconds'] or 0:.1f} s, "
                  f"mode {row['replay_mode']})  {common.load_text(run)}", flush=True)
        else:
            print(f"  {key}  FAILED (exit {run.returncode}) after {run.wall_seconds:.1f} s; see {run.log}:\n"
                  + run.log.read_text(errors="replace")[-2000:], flush=True)
        results[key] = row

    def ratio(top: str, bottom: str, field: str = "wall_seconds") -> float | None:
        if top in catalogs and bottom in catalogs:
            return round(results[top][field] / results[bottom][field], 4)
        return None

    ratios = {
        "a/b wall": ratio("a", "b"), "a/b replay": ratio("a", "b", "replay_seconds"),
        "c/b wall": ratio("c", "b"), "c/b replay": ratio("c", "b", "replay_seconds"),
        "c/d wall": ratio("c", "d"), "b/d wall": ratio("b", "d"),
        "floor/b wall": round(floor.wall_seconds / results["b"]["wall_seconds"], 4) if "b" in catalogs else None,
    }
    for name, value in ratios.items():
        print(f"ratio       {name:<12} {'n/a' if value is None else f'{value:.3f} ({value:.1%})'}")
    if "c" in catalogs:
        print(f"floor       {floor.wall_seconds:.1f} s of (c)'s {results['c']['wall_seconds']:.1f} s wall are the "
              f"start-up floor; guardscope's own work in (c): {results['c']['wall_seconds'] - floor.wall_seconds:.1f} s")
    target = ratios["c/b wall"]
    target_met = target is not None and target <= TARGET_FRACTION
    print(f"target      guardscope default (c) <= {TARGET_FRACTION:.0%} of plain {options.backend} (b): "
          f"{'n/a' if target is None else 'MET' if target_met else 'MISSED'}")

    checks: dict[str, dict] = {}
    reference = "c" if "c" in catalogs else next(iter(catalogs), None)
    if reference is not None:
        expected = comparable(catalogs[reference])
        for name in expected:
            differing = sorted(k for k in catalogs if comparable(catalogs[k])[name] != expected[name])
            checks[name] = {"identical": not differing and len(catalogs) == len(results),
                            "differing_runs": differing, "reference": reference}
        for key in catalogs:
            checks.setdefault("other catalog fields", {"differing": {}})["differing"][key] = (
                common.differing_fields(catalogs[key], catalogs[reference], ignore=("compile", "replay_mode")))
    all_identical = bool(checks) and all(v.get("identical", True) for v in checks.values())
    for name, check in checks.items():
        if "identical" in check:
            state = "IDENTICAL" if check["identical"] else f"DIFFERENT ({', '.join(check['differing_runs']) or 'a run failed'})"
            print(f"check       {name:<15} {state} across {', '.join(sorted(catalogs))}")
        else:
            other = {k: v for k, v in check["differing"].items() if v}
            print(f"check       other fields    {other or 'none differ'} (compile, replay_mode excluded)")
    if reference is not None:
        print(f"compiles    at samples {catalogs[reference]['summary']['compile_samples']}, "
              f"{catalogs[reference]['summary']['topologies']} topologies")
    total = time.perf_counter() - started
    print(f"total       {total:.0f} s")
    common.write_results(options.json, {
        "benchmark": "bench_gpu",
        "machine": common.machine(),
        "corpus": str(options.corpus),
        "device": options.device,
        "backend": options.backend,
        "floor": floor.to_json(),
        "runs": results,
        "ratios": ratios,
        "target": {"fraction": TARGET_FRACTION, "measured": "c/b wall", "met": target_met},
        "checks": checks,
        "identical": all_identical,
        "total_seconds": round(total, 1),
    })
    return 0 if all_identical and len(catalogs) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
