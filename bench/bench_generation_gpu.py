"""Issue 22 on the GPU: ``model.generate()`` of a random-init decoder served eager, with plain
``torch.compile`` of its forward, and with guardscope's warmup (with or without its compile-cache
bundle) — time to first token, time per output token, recompiles and what they cost, the worst
request.

    PYTHONPATH=. python bench/bench_generation_gpu.py --json /tmp/gen-gpu.json             # H200, ~0.5B, bf16
    python -m bench.bench_generation_gpu --device cpu --size tiny --json /tmp/g.json     # logic check on a CPU
    ... --strategies eager,bundle --reuse     # serve again from the corpus, analysis and bundle in --work
    ... --cache static --strategies eager,compile [--mode reduce-overhead]   # no analysis needed
    ... --size small --train 16 --record-compiled --serve-recorded --strategies compile,warmup
        # production records itself through inductor under torch's limit (docs/benchmarks.md, section 12)

Steps, each strategy in a fresh process with empty compile caches:

1. **record**: ``--train`` requests (batch 1..4, prompts 16..512 tokens, 8..32 new tokens) through
   ``generate()`` with the eager forward wrapped by ``TrafficRecorder.wrap`` (by signature, the
   first of each in full): every prefill and decode call;
2. **analyse** (``guardscope analyze``, eager backend, on the device) and ``emit-warmup``;
3. **serve** ``--test`` other requests of the same distribution per strategy: ``eager``;
   ``compile`` (``model.forward = torch.compile(model.forward)``, inductor); ``warmup``
   (the same, after ``warmup.py``'s set-up: its graphs compiled before the first request);
   ``bundle`` (the same set-up loading the warmup's compile-cache bundle first: the driver makes it
   after ``emit-warmup``, timed as "bundle making", in a fresh process with empty caches).

The corpus, analysis and bundle live in ``--work`` (default ``.bench-work/generation-gpu`` in the
repository, git-ignored): a warm device machine keeps it between calls, ``carry`` can take a small
one to a fresh machine (the 0.5B model's is over the 64 MiB a call carries: its bundle alone is
50 MB), and the next run passes ``--reuse``. Only ``warmup`` and ``bundle`` need them; ``eager`` and
``compile`` rows run without an analysis. ``--prepare`` makes them and serves nothing. A row cut
short (``timeout``'s SIGTERM) or crashed keeps what its child had measured (set-up, requests
done), marked ``stopped``.

Serving runs under production's recompile limit (torch's default of 8 graphs a function, or
``--recompile-limit``), as production does: a call that needs a graph past it starts no compile
and runs its frame eagerly, so those calls are counted apart (``limit_hits``, and the request of
the first). ``--serve-recorded`` serves the recorded requests themselves, to hold the ``compile``
row's first limit hit against the analysis's ``production`` section (``analysis.production_frames``:
the request and step where it says the limit is reached).

For each: set-up seconds, compiles while serving and the seconds of the calls that compiled, time
to first token (the prefill call, mean and max), time per output token (decode calls, mean), and the
worst request's wall time. The cache is transformers' default ``DynamicCache``; ``--cache static``
serves with ``cache_implementation="static"`` (and ``--mode reduce-overhead`` for CUDA graphs; the
row then lists inductor's "skipping cudagraphs" reasons; ``--prefill eager`` runs each request's
prefill uncompiled, as ``generate()``'s own compile path does). ``generate()``'s own compile of a static
cache's forward is turned off (``disable_compile``): each strategy decides what is compiled.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(ROOT))

SIZES = {
    # A Qwen2-0.5B-like Llama: 24 layers, hidden 896, 14 heads (2 key/value heads), 151,936 tokens.
    "0.5b": {"num_hidden_layers": 24, "hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
             "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 4096},
    # The same shape at 4 layers, hidden 512 (8 heads, 2 key/value heads), 32,000 tokens: minutes, not tens.
    "small": {"num_hidden_layers": 4, "hidden_size": 512, "intermediate_size": 2048, "num_attention_heads": 8,
              "num_key_value_heads": 2, "vocab_size": 32000, "max_position_embeddings": 4096},
    "tiny": {"num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2,
             "num_key_value_heads": 1, "vocab_size": 100, "max_position_embeddings": 1024},
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


def requests(count: int, seed: int, vocab: int, batches: str = "1,1,2,4") -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    made = []
    choices = [int(b) for b in batches.split(",")]
    for _ in range(count):
        batch = rng.choice(choices)
        length = min(512, max(16, int(rng.paretovariate(1.1) * 24)))
        made.append(((batch, length, rng.randrange(1 << 30)), rng.randint(8, 32)))
    return made


def _ids(shape, device, vocab):
    import torch

    batch, length, seed = shape
    return torch.randint(2, vocab, (batch, length), generator=torch.Generator().manual_seed(seed)).to(device)


def _generate_kwargs(options, new: int) -> dict:
    extra = {"cache_implementation": "static"} if options.cache == "static" else {}
    # disable_compile: on a GPU, generate() compiles the forward itself when the cache is static; each
    # strategy here decides what is compiled.
    return {"max_new_tokens": new, "min_new_tokens": new, "do_sample": False, "disable_compile": True, **extra}


# --- children ----------------------------------------------------------------------------------------


def record(options) -> None:
    import torch

    import guardscope.runtime

    from guardscope.catalog.frames import hit_recompile_limit
    from guardscope.replay.capture import TraceCapture
    from guardscope.replay.events import events_from_records

    model = build(options.size, options.device)
    traffic = guardscope.runtime.TrafficRecorder(options.work / "corpus", model=f"{pathlib.Path(__file__).resolve()}:build_forward",
                                                 compile={"dynamic": None}, overwrite=True)
    # --record-compiled: production itself, its forward compiled (torch's recompile limit): the
    # recorded caches are laid out by what served each call, compiled graph or eager fallback.
    forward = torch.compile(model.forward, backend=options.backend, dynamic=None) if options.record_compiled \
        else model.forward
    model.forward = traffic.wrap(forward)
    with TraceCapture() as capture, torch.no_grad():
        for position, (shape, new) in enumerate(requests(options.train, 0, model.config.vocab_size, options.batches)):
            capture.set_sample(position)
            ids = _ids(shape, options.device, model.config.vocab_size)
            with traffic.request(f"req-{position}"):  # guardscope bench: TTFT, TPOT per request
                model.generate(ids, attention_mask=torch.ones_like(ids), **_generate_kwargs(options, new))
    traffic.close()
    events = events_from_records(capture.records).events
    hits = sorted(e.sample for e in events if e.sample is not None and hit_recompile_limit(e))
    print("RECORDED " + json.dumps({**traffic.counts(), "compiled": options.record_compiled,
                                    "graphs": sum(1 for e in events if e.fail_type is None),
                                    "limit_hits": len(hits), "first_limit_hit_request": hits[0] if hits else None}))


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
    load = None
    if options.strategy == "compile":
        forward = torch.compile(model.forward, **compile_options)
    elif options.strategy in ("warmup", "bundle"):
        from guardscope import store
        from guardscope.options import production_options
        from guardscope.proving.setup import set_up_plan

        out = options.work / "analysis"
        plan_options = production_options(store.read_catalog(out), backend=options.backend, device=options.device,
                                          grad_mode="no_grad", mode=options.mode)
        _, runner, _, load = set_up_plan("warmup", out, model.forward, plan_options,
                                         use_bundle=options.strategy == "bundle")
        forward = runner.compiled
    sync()
    setup = time.perf_counter() - started
    cache_at_setup = torch_compat.compile_cache_counters()  # hits: graphs read from a (loaded) compile cache
    calls: list[tuple[int, int, float, bool]] = []  # (request, call, seconds, compiled)
    compiles = [0]
    position = {"request": 0, "call": 0}

    @functools.wraps(model.forward)  # generate() reads forward's signature to choose what it passes
    def timed(*args, **kwargs):
        before = compiles[0]
        sync()
        begun = time.perf_counter()
        # --prefill eager: transformers' own compile path runs each request's first call (the prefill,
        # which allocates a static cache's buffers) eagerly and compiles only the decode steps.
        eager_prefill = options.prefill == "eager" and position["call"] == 0
        result = (original if eager_prefill else forward)(*args, **kwargs)
        sync()
        calls.append((position["request"], position["call"], time.perf_counter() - begun, compiles[0] != before))
        position["call"] += 1
        return result

    original = model.forward
    model.forward = timed
    walls = []

    def progress() -> None:  # what a row cut short by a time limit or a crash still reports
        _partial(options.work, options.strategy).write_text(json.dumps({
            "strategy": options.strategy, "setup_seconds": round(setup, 2), "requests_done": len(walls),
            "compiles": compiles[0], "compile_call_seconds_total": round(sum(c[2] for c in calls if c[3]), 2),
            **({"bundle_load": {key: load[key] for key in ("status", "reason", "seconds")}} if load else {})}))

    progress()
    # Production's recompile limit (torch's default unless --recompile-limit), not a raised one: a
    # call past it starts no compile, so the structured trace is read for those (limit hits).
    from guardscope.catalog.frames import hit_recompile_limit
    from guardscope.replay.capture import TraceCapture
    from guardscope.replay.events import events_from_records

    served = requests(options.train, 0, vocab, options.batches) if options.serve_recorded else \
        requests(options.test, 1, vocab, options.batches)
    limit = contextlib.nullcontext() if options.recompile_limit is None else \
        torch_compat.recompile_limits(options.recompile_limit, 256, False)
    with limit, TraceCapture() as capture, torch_compat.compile_start_callback(
            lambda _: compiles.__setitem__(0, compiles[0] + 1)), torch.no_grad():
        for index, (shape, new) in enumerate(served):
            position["request"], position["call"] = index, 0
            capture.set_sample(index)
            ids = _ids(shape, device, vocab)
            begun = time.perf_counter()
            model.generate(ids, attention_mask=torch.ones_like(ids), **_generate_kwargs(options, new))
            walls.append(time.perf_counter() - begun)
            progress()
    hits = sorted(e.sample for e in events_from_records(capture.records).events
                  if e.sample is not None and hit_recompile_limit(e))
    first = [seconds for _, call, seconds, compiled in calls if call == 0 and not compiled]
    later = [seconds for _, call, seconds, compiled in calls if call > 0 and not compiled]
    compiling = [seconds for *_, seconds, compiled in calls if compiled]
    worst = max(range(len(walls)), key=walls.__getitem__)
    return {
        "strategy": options.strategy, "setup_seconds": round(setup, 2), "requests": len(walls), "calls": len(calls),
        **({"bundle_load": {key: load[key] for key in ("status", "reason", "seconds", "artifacts")}} if load else {}),
        "compiles": compiles[0], "calls_that_compiled": len(compiling),
        "recompile_limit": int(torch._dynamo.config.recompile_limit),
        "limit_hits": len(hits), "first_limit_hit_request": hits[0] if hits else None,
        "compile_call_seconds": {"total": round(sum(compiling), 2), "max": round(max(compiling, default=0.0), 2)},
        "ttft_ms": {"mean": round(1e3 * statistics.mean(first), 2) if first else None,
                    "max": round(1e3 * max(first), 2) if first else None},
        "tpot_ms": round(1e3 * statistics.mean(later), 3) if later else None,
        "worst_request": {"index": worst, "seconds": round(walls[worst], 3)},
        "requests_seconds": round(sum(walls), 2),
        "compile_cache": {"after_setup": cache_at_setup, "at_end": torch_compat.compile_cache_counters()},
    }


def _partial(work: pathlib.Path, strategy: str) -> pathlib.Path:
    """Where a serving child keeps its figures so far (see ``progress`` in :func:`serve`)."""
    return work / f"serve-{strategy}.partial.json"


def make_bundle(options) -> dict:
    """The warmup plan's compile-cache bundle, made as ``guardscope bundle DIR --artifact warmup``
    makes it (:func:`guardscope.proving.bundling._make_in_child`, in this fresh process with empty
    cache folders), but compiled under ``no_grad`` with normal tensors, as ``serve`` and
    ``generate()`` run it: the analysis ran under ``inference_mode``, and graphs compiled for
    inference tensors would not be the ones serving looks up."""
    from unittest import mock

    from guardscope.options import production_options
    from guardscope.proving import bundling

    served = functools.partial(production_options, grad_mode="no_grad")
    with mock.patch.object(bundling, "production_options", served):
        return bundling._make_in_child(options.work / "analysis", "warmup", options.backend, options.device)


# --- the driver ------------------------------------------------------------------------------------


def _child(options, *arguments: str, env: dict | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, str(pathlib.Path(__file__).resolve()), *arguments, "--work", str(options.work),
               "--size", options.size, "--device", options.device, "--backend", options.backend,
               "--cache", options.cache, "--train", str(options.train), "--test", str(options.test),
               "--batches", options.batches, "--prefill", options.prefill]
    if options.serve_recorded:
        command.append("--serve-recorded")
    if options.record_compiled:
        command.append("--record-compiled")
    if options.recompile_limit is not None:
        command += ["--recompile-limit", str(options.recompile_limit)]
    if options.mode:
        command += ["--mode", options.mode]
    environment = {**os.environ, "GUARDSCOPE_BENCH_SIZE": options.size, "GUARDSCOPE_BENCH_DEVICE": options.device,
                   "PYTHONPATH": str(ROOT), **(env or {})}
    print(f"running     {' '.join(arguments)}  [{time.strftime('%H:%M:%S')}]", flush=True)
    done = subprocess.run(command, check=False, env=environment, capture_output=True, text=True)
    if done.returncode:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-8000:])
        raise SystemExit(f"{arguments[0]} failed with status {done.returncode}")
    return done


PLANNED = ("warmup", "bundle")  # the strategies that serve guardscope's warmup plan: they need the analysis


def _caches() -> tuple:
    """A new, empty inductor and triton cache folder pair (the child compiles as a fresh machine would)."""
    import tempfile

    holder = tempfile.TemporaryDirectory(prefix="guardscope-caches-")
    return holder, {"TORCHINDUCTOR_CACHE_DIR": holder.name + "/inductor", "TRITON_CACHE_DIR": holder.name + "/triton"}


def _analyse(options, results: dict) -> None:
    """Record, ``guardscope analyze`` and ``emit-warmup`` into ``--work``."""
    begun = time.perf_counter()
    done = _child(options, "record")
    results["record_seconds"] = round(time.perf_counter() - begun, 1)
    results["record"] = json.loads(next(line for line in done.stdout.splitlines()
                                        if line.startswith("RECORDED "))[len("RECORDED "):])
    print(f"recorded    {results['record']}", flush=True)
    cli = [sys.executable, "-m", "guardscope.cli"]
    env = {**os.environ, "GUARDSCOPE_BENCH_SIZE": options.size, "GUARDSCOPE_BENCH_DEVICE": options.device,
           "PYTHONPATH": str(ROOT)}
    for step in (["analyze", str(options.work / "corpus"), "--out", str(options.work / "analysis"), "--force", "-q",
                  "--device", options.device], ["emit-warmup", str(options.work / "analysis")]):
        begun = time.perf_counter()
        print(f"running     {step[0]}  [{time.strftime('%H:%M:%S')}]", flush=True)
        done = subprocess.run(cli + step, check=False, env=env, capture_output=True, text=True)
        print("\n".join(line[:400] for line in done.stdout.splitlines() if not line.startswith("  T")), flush=True)
        if done.returncode not in (0,):
            sys.stderr.write(done.stderr[-6000:])
            raise SystemExit(f"{step[0]} failed with status {done.returncode}")
        results[f"{step[0]}_seconds"] = round(time.perf_counter() - begun, 1)
        _save(options, results)


def _bundle(options, results: dict) -> None:
    """The warmup plan's compile-cache bundle (:func:`make_bundle`), in a fresh process with empty caches."""
    holder, caches = _caches()
    with holder:
        begun = time.perf_counter()
        done = _child(options, "bundle", env=caches)
        seconds = time.perf_counter() - begun
    manifest = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[len("RESULT "):])
    if "error" in manifest:
        raise SystemExit(f"bundle: {manifest['error']}")
    results["bundle_making"] = {"seconds": round(seconds, 1), "compile_seconds": round(manifest["compile_seconds"], 1),
                                "graphs": manifest["graphs"], "bytes": manifest["bytes"],
                                "artifacts": manifest["artifacts"]}
    print(f"bundle      {manifest['graphs']} graphs; set-up without it {manifest['compile_seconds']:.1f} s; "
          f"{manifest['bytes'] / 1e6:.1f} MB; the whole child {seconds:.1f} s", flush=True)
    _save(options, results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_generation_gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("role", nargs="?", default="all", choices=["all", "record", "serve", "bundle"])
    parser.add_argument("--strategy", default="eager", choices=["eager", "compile", *PLANNED])
    parser.add_argument("--size", default="0.5b", choices=sorted(SIZES))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--mode", default=None)
    parser.add_argument("--cache", default="dynamic", choices=["dynamic", "static"])
    parser.add_argument("--prefill", default="compiled", choices=["compiled", "eager"],
                        help="eager: each request's prefill runs uncompiled and only the decode steps are compiled, "
                        "as generate()'s own compile path does (the remedy for a static cache's reduce-overhead crash)")
    parser.add_argument("--train", type=int, default=24, help="requests recorded for the analysis")
    parser.add_argument("--test", type=int, default=12, help="other requests served per strategy")
    parser.add_argument("--batches", default="1,1,2,4", help="batch sizes drawn from (comma-separated, repeats weigh)")
    parser.add_argument("--work", type=pathlib.Path, default=ROOT / ".bench-work" / "generation-gpu",
                        help="corpus, analysis and bundle: inside the repository (git-ignored), so that a warm "
                        "device machine keeps it between calls and `carry` can take a small one to a fresh machine")
    parser.add_argument("--strategies", default="eager,compile,warmup", help="served, comma-separated: "
                        "eager, compile, warmup, bundle (the warmup set up from its compile-cache bundle)")
    parser.add_argument("--reuse", action="store_true", help="keep the corpus, analysis and bundle already in --work")
    parser.add_argument("--prepare", action="store_true",
                        help="make what --strategies need (corpus, analysis, bundle) and serve nothing")
    parser.add_argument("--record-compiled", action="store_true",
                        help="record through the forward compiled with --backend under torch's recompile limit (production "
                        "itself), not the eager one: the recording's own limit hits are reported")
    parser.add_argument("--serve-recorded", action="store_true",
                        help="serve the recorded (--train) requests instead of --test new ones: where plain "
                        "torch.compile reaches the recompile limit, against the analysis's production section")
    parser.add_argument("--recompile-limit", type=int, default=None,
                        help="production's per-function recompile limit while serving (torch's default: 8)")
    parser.add_argument("--json", default=None)
    options = parser.parse_args(argv)
    if options.role == "record":
        record(options)
        return 0
    if options.role == "serve":
        print("RESULT " + json.dumps(serve(options)))
        return 0
    if options.role == "bundle":
        print("RESULT " + json.dumps(make_bundle(options)))
        return 0

    import signal

    # A `timeout` around the driver sends SIGTERM: exit through Python so that subprocess.run kills
    # the child it waits on (it would otherwise go on using the device) and the results so far stay.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    options.work.mkdir(parents=True, exist_ok=True)
    strategies = options.strategies.split(",")
    unknown = sorted(set(strategies) - {"eager", "compile", *PLANNED})
    if unknown:
        parser.error(f"unknown strategies {unknown}")
    results: dict = {"size": options.size, "device": options.device, "backend": options.backend, "mode": options.mode,
                     "cache": options.cache, "prefill": options.prefill, "train": options.train, "test": options.test}
    previous = json.loads(pathlib.Path(options.json).read_text()) if options.json and options.reuse and \
        pathlib.Path(options.json).is_file() else {}
    results.update({key: value for key, value in previous.items() if key not in results})
    analysis = options.work / "analysis"
    if set(strategies) & set(PLANNED):
        if not (options.reuse and (analysis / "warmup.py").is_file()):
            _analyse(options, results)
        catalog = json.loads((analysis / "catalog.json").read_text())
        results["analysis"] = {"samples": catalog["corpus"]["samples"], "compiles": catalog["summary"]["compiles"],
                               "topologies": catalog["summary"]["topologies"],
                               "production_frames": [{key: frame.get(key) for key in ("label", "graphs_needed", "limit",
                                                                                       "reached_at", "eager")}
                                                     for frame in (catalog.get("production") or {}).get("frames", [])]}
        if "bundle" in strategies and not (options.reuse and (analysis / "warmup.compile-cache.json").is_file()):
            _bundle(options, results)
    for strategy in [] if options.prepare else strategies:
        holder, caches = _caches()
        partial = _partial(options.work, strategy)
        partial.unlink(missing_ok=True)
        with holder:
            env = {**caches, "TORCH_LOGS": "perf_hints"} if options.mode == "reduce-overhead" else caches
            try:
                done = _child(options, "serve", "--strategy", strategy, env=env)
            except SystemExit as stopped:  # cut short (SIGTERM) or failed: keep what the child had measured
                results[strategy] = {**(json.loads(partial.read_text()) if partial.is_file() else {}),
                                     "stopped": str(stopped.code)}
                _save(options, results)
                raise
        partial.unlink(missing_ok=True)
        line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
        results[strategy] = row = json.loads(line[len("RESULT "):])
        if options.mode == "reduce-overhead":  # inductor's perf hints say where CUDA graphs were not used
            skipped = sorted({text.split("skipping cudagraphs", 1)[1].strip() for text in done.stderr.splitlines()
                              if "skipping cudagraphs" in text})
            row["cudagraphs_skipped"] = skipped
        print(f"{strategy:<8} set-up {row['setup_seconds']:.1f} s; {row['compiles']} compiles while serving, "
              f"{row['limit_hits']} calls past the recompile limit {row['recompile_limit']} "
              f"(first in request {row['first_limit_hit_request']}); "
              f"({row['compile_call_seconds']['total']:.1f} s in those calls); TTFT {row['ttft_ms']['mean']} ms "
              f"(max {row['ttft_ms']['max']}); TPOT {row['tpot_ms']} ms; worst request {row['worst_request']['seconds']} s"
              + (f"; bundle {row['bundle_load']['status']}" if "bundle_load" in row else ""), flush=True)
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
