"""Issue 22 on the GPU: ``model.generate()`` of a random-init decoder served eager, with plain
``torch.compile`` of its forward, and with guardscope's warmup — time to first token, time per
output token, recompiles and what they cost, the worst request.

    PYTHONPATH=. python bench/bench_generation_gpu.py --json /tmp/gen-gpu.json             # H200, ~0.5B, bf16
    python -m bench.bench_generation_gpu --device cpu --size tiny --json /tmp/g.json     # logic check on a CPU

Steps, each strategy in a fresh process with empty compile caches:

1. **record**: ``--train`` requests (batch 1..4, prompts 16..512 tokens, 8..32 new tokens) through
   ``generate()`` with the eager forward wrapped by ``TrafficRecorder.wrap`` (by signature, the
   first of each in full): every prefill and decode call;
2. **analyse** (``guardscope analyze``, eager backend, on the device) and ``emit-warmup``;
3. **serve** ``--test`` other requests of the same distribution per strategy: ``eager``;
   ``compile`` (``model.forward = torch.compile(model.forward)``, inductor); ``warmup``
   (the same, after ``warmup.py``'s set-up: its graphs compiled before the first request).

For each: set-up seconds, compiles while serving and the seconds of the calls that compiled, time
to first token (the prefill call, mean and max), time per output token (decode calls, mean), and the
worst request's wall time. The cache is transformers' default ``DynamicCache``; ``--cache static``
serves with ``cache_implementation="static"`` (and ``--mode reduce-overhead`` for CUDA graphs).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

SIZES = {
    # A Qwen2-0.5B-like Llama: 24 layers, hidden 896, 14 heads (2 key/value heads), 151,936 tokens.
    "0.5b": dict(num_hidden_layers=24, hidden_size=896, intermediate_size=4864, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936, max_position_embeddings=4096),
    "tiny": dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                 num_key_value_heads=1, vocab_size=100, max_position_embeddings=1024),
}


def build(size: str | None = None, device: str | None = None):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    size = size or os.environ.get("GUARDSCOPE_BENCH_SIZE", "tiny")
    device = device or os.environ.get("GUARDSCOPE_BENCH_DEVICE", "cpu")
    torch.manual_seed(0)
    config = LlamaConfig(**SIZES[size], bos_token_id=0, eos_token_id=1, pad_token_id=0)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype).eval()
    return model


def build_forward():
    """The model spec of the recorded corpus: the bound forward production compiles."""
    return build().forward


def requests(count: int, seed: int, vocab: int) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    made = []
    for _ in range(count):
        batch = rng.choice([1, 1, 2, 4])
        length = min(512, max(16, int(rng.paretovariate(1.1) * 24)))
        made.append(((batch, length, rng.randrange(1 << 30)), rng.randint(8, 32)))
    return made


def _ids(shape, device, vocab):
    import torch

    batch, length, seed = shape
    return torch.randint(2, vocab, (batch, length), generator=torch.Generator().manual_seed(seed)).to(device)


def _generate_kwargs(options, new: int) -> dict:
    extra = {"cache_implementation": "static"} if options.cache == "static" else {}
    return {"max_new_tokens": new, "min_new_tokens": new, "do_sample": False, **extra}


# --- children ----------------------------------------------------------------------------------------


def record(options) -> None:
    import torch

    import guardscope.runtime

    model = build(options.size, options.device)
    traffic = guardscope.runtime.TrafficRecorder(options.work / "corpus", model=f"{pathlib.Path(__file__).resolve()}:build_forward",
                                                 compile={"dynamic": None}, overwrite=True)
    model.forward = traffic.wrap(model.forward)
    with torch.no_grad():
        for shape, new in requests(options.train, 0, model.config.vocab_size):
            ids = _ids(shape, options.device, model.config.vocab_size)
            model.generate(ids, attention_mask=torch.ones_like(ids), **_generate_kwargs(options, new))
    traffic.close()
    print(json.dumps(traffic.counts()))


def serve(options) -> dict:
    import torch

    from guardscope import torch_compat

    model = build(options.size, options.device)
    vocab = model.config.vocab_size
    device = torch.device(options.device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    with torch.no_grad():  # warm the device: one eager forward, untimed
        model(torch.ones(1, 4, dtype=torch.long, device=device))
    sync()
    started = time.perf_counter()
    forward = model.forward
    compile_options = {"backend": options.backend, "dynamic": None}
    if options.mode:
        compile_options["mode"] = options.mode
    if options.strategy == "compile":
        forward = torch.compile(model.forward, **compile_options)
    elif options.strategy == "warmup":
        from guardscope import store
        from guardscope.options import production_options
        from guardscope.proving.setup import set_up_plan

        out = options.work / "analysis"
        plan_options = production_options(store.read_catalog(out), backend=options.backend, device=options.device,
                                          inference_mode=False, mode=options.mode)
        _, runner, _, _ = set_up_plan("warmup", out, model.forward, plan_options, use_bundle=False)
        forward = runner.compiled
    sync()
    setup = time.perf_counter() - started
    calls: list[tuple[int, int, float, bool]] = []  # (request, call, seconds, compiled)
    compiles = [0]
    position = {"request": 0, "call": 0}

    @functools.wraps(model.forward)  # generate() reads forward's signature to choose what it passes
    def timed(*args, **kwargs):
        before = compiles[0]
        sync()
        begun = time.perf_counter()
        result = forward(*args, **kwargs)
        sync()
        calls.append((position["request"], position["call"], time.perf_counter() - begun, compiles[0] != before))
        position["call"] += 1
        return result

    model.forward = timed
    walls = []
    with torch_compat.raised_recompile_limit(4096), torch_compat.compile_start_callback(
            lambda _: compiles.__setitem__(0, compiles[0] + 1)), torch.no_grad():
        for index, (shape, new) in enumerate(requests(options.test, 1, vocab)):
            position["request"], position["call"] = index, 0
            ids = _ids(shape, device, vocab)
            begun = time.perf_counter()
            model.generate(ids, attention_mask=torch.ones_like(ids), **_generate_kwargs(options, new))
            walls.append(time.perf_counter() - begun)
    first = [seconds for _, call, seconds, compiled in calls if call == 0 and not compiled]
    later = [seconds for _, call, seconds, compiled in calls if call > 0 and not compiled]
    compiling = [seconds for *_, seconds, compiled in calls if compiled]
    worst = max(range(len(walls)), key=walls.__getitem__)
    return {
        "strategy": options.strategy, "setup_seconds": round(setup, 2), "requests": len(walls), "calls": len(calls),
        "compiles": compiles[0], "calls_that_compiled": len(compiling),
        "compile_call_seconds": {"total": round(sum(compiling), 2), "max": round(max(compiling, default=0.0), 2)},
        "ttft_ms": {"mean": round(1e3 * statistics.mean(first), 2) if first else None,
                    "max": round(1e3 * max(first), 2) if first else None},
        "tpot_ms": round(1e3 * statistics.mean(later), 3) if later else None,
        "worst_request": {"index": worst, "seconds": round(walls[worst], 3)},
        "requests_seconds": round(sum(walls), 2),
    }


# --- the driver ------------------------------------------------------------------------------------


def _child(options, *arguments: str, env: dict | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, str(pathlib.Path(__file__).resolve()), *arguments, "--work", str(options.work),
               "--size", options.size, "--device", options.device, "--backend", options.backend,
               "--cache", options.cache, "--train", str(options.train), "--test", str(options.test)]
    if options.mode:
        command += ["--mode", options.mode]
    environment = {**os.environ, "GUARDSCOPE_BENCH_SIZE": options.size, "GUARDSCOPE_BENCH_DEVICE": options.device,
                   "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[1]), **(env or {})}
    print("running    ", " ".join(arguments), flush=True)
    done = subprocess.run(command, env=environment, capture_output=True, text=True)
    if done.returncode:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-8000:])
        raise SystemExit(f"{arguments[0]} failed with status {done.returncode}")
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_generation_gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("role", nargs="?", default="all", choices=["all", "record", "serve"])
    parser.add_argument("--strategy", default="eager", choices=["eager", "compile", "warmup"])
    parser.add_argument("--size", default="0.5b", choices=sorted(SIZES))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--mode", default=None)
    parser.add_argument("--cache", default="dynamic", choices=["dynamic", "static"])
    parser.add_argument("--train", type=int, default=24, help="requests recorded for the analysis")
    parser.add_argument("--test", type=int, default=12, help="other requests served per strategy")
    parser.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/guardscope-bench/generation-gpu"))
    parser.add_argument("--strategies", default="eager,compile,warmup", help="served, comma-separated")
    parser.add_argument("--reuse", action="store_true", help="keep the corpus and analysis already in --work")
    parser.add_argument("--json", default=None)
    options = parser.parse_args(argv)
    if options.role == "record":
        record(options)
        return 0
    if options.role == "serve":
        print("RESULT " + json.dumps(serve(options)))
        return 0
    import tempfile

    options.work.mkdir(parents=True, exist_ok=True)
    results: dict = {"size": options.size, "device": options.device, "backend": options.backend, "mode": options.mode,
                     "cache": options.cache, "train": options.train, "test": options.test}
    if not (options.reuse and (options.work / "analysis" / "warmup.py").is_file()):
        begun = time.perf_counter()
        _child(options, "record")
        results["record_seconds"] = round(time.perf_counter() - begun, 1)
        cli = [sys.executable, "-m", "guardscope.cli"]
        env = {**os.environ, "GUARDSCOPE_BENCH_SIZE": options.size, "GUARDSCOPE_BENCH_DEVICE": options.device,
               "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[1])}
        for step in (["analyze", str(options.work / "corpus"), "--out", str(options.work / "analysis"), "--force", "-q",
                      "--device", options.device], ["emit-warmup", str(options.work / "analysis")]):
            begun = time.perf_counter()
            done = subprocess.run(cli + step, env=env, capture_output=True, text=True)
            print(done.stdout[-1500:], flush=True)
            if done.returncode not in (0,):
                sys.stderr.write(done.stderr[-6000:])
                raise SystemExit(f"{step[0]} failed with status {done.returncode}")
            results[f"{step[0]}_seconds"] = round(time.perf_counter() - begun, 1)
            _save(options, results)
    catalog = json.loads((options.work / "analysis" / "catalog.json").read_text())
    results["analysis"] = {"samples": catalog["corpus"]["samples"], "compiles": catalog["summary"]["compiles"],
                           "topologies": catalog["summary"]["topologies"]}
    previous = json.loads(pathlib.Path(options.json).read_text()) if options.json and options.reuse and \
        pathlib.Path(options.json).is_file() else {}
    results.update({key: value for key, value in previous.items() if key not in results})
    for strategy in options.strategies.split(","):
        with tempfile.TemporaryDirectory(prefix="guardscope-caches-") as caches:
            done = _child(options, "serve", "--strategy", strategy,
                          env={"TORCHINDUCTOR_CACHE_DIR": caches + "/inductor", "TRITON_CACHE_DIR": caches + "/triton"})
        line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
        results[strategy] = json.loads(line[len("RESULT "):])
        row = results[strategy]
        print(f"{strategy:<8} set-up {row['setup_seconds']:.1f} s; {row['compiles']} compiles while serving "
              f"({row['compile_call_seconds']['total']:.1f} s in those calls); TTFT {row['ttft_ms']['mean']} ms "
              f"(max {row['ttft_ms']['max']}); TPOT {row['tpot_ms']} ms; worst request {row['worst_request']['seconds']} s",
              flush=True)
        _save(options, results)
    if options.json:
        print(f"results     {options.json}")
    return 0


def _save(options, results: dict) -> None:
    """Results so far (a run cut short by a time limit keeps what it measured)."""
    if options.json:
        pathlib.Path(options.json).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    sys.exit(main())
