"""Issue 22: recorded generation calls by signature, analysed, against plain-tensor calls.

    python -m bench.bench_generation                          # 100,000 calls each
    python -m bench.bench_generation --calls 10000 --json /tmp/gen.json
    python -m bench.bench_generation --fullgraph --json /tmp/gen.json   # guard-only replay: the objects' own cost

Two corpora of a tiny GPT-2 (2 layers, hidden 32), both ``CorpusWriter(keep="signatures",
full_per_signature=0)``, so that neither holds tensor data:

* ``generation``: the forward calls ``generate()`` makes — for each request (batch 1, 2, 4 or 8,
  a long-tailed prompt of 1..512 tokens, 1..64 new tokens) the prefill (``input_ids``, an empty
  ``DynamicCache``, ``attention_mask``, ``use_cache``, ``return_dict``, as transformers 5 passes
  them) and one call per further token (one new token, the cache holding every earlier one), until
  ``--calls`` calls; the model spec is the bound ``forward``;
* ``tensors``: GPT-2 called directly, ``forward(input_ids=..., attention_mask=...)``, with exactly as many
  distinct signatures (batch 1..8 and length 1..128 pairs, longer when more are needed, short so that the forwards cost about
  what generation's mostly one-token decode calls cost), repeated in a fixed order to the same
  number of calls.

Each corpus is analysed by ``guardscope analyze`` in a fresh process (its defaults:
``dynamic=None``, eager backend). The target: the generation corpus analysed in at most 2x the
plain one's time. The calls are written, not generated: a request's calls are what ``generate()``
would pass (checked against a real ``generate()`` of three requests first).
"""

from __future__ import annotations

import argparse
import pathlib
import random
import sys
import time

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench import common

TARGET_RATIO = 2.0
VOCAB = 100


def gpt2():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=1024, bos_token_id=0,
                        eos_token_id=1, pad_token_id=0)
    return GPT2LMHeadModel(config).eval()


def gpt2_forward():
    return gpt2().forward


def requests(seed: int = 0):
    """Endless (batch, prompt length, new tokens) requests."""
    rng = random.Random(seed)
    while True:
        length = 1 if rng.random() < 0.06 else min(512, max(2, int(rng.paretovariate(1.2) * 12)))
        yield rng.choice([1, 2, 4, 8]), length, rng.randint(1, 64)


def generation_calls(config, count: int, plan=None):
    """``count`` forward calls as generate() makes them for the requests of ``plan`` (default
    :func:`requests`): the keyword arguments of each."""
    import torch
    from transformers import DynamicCache

    heads, size = config.n_head, config.n_embd // config.n_head
    made = 0
    for batch, length, new in requests() if plan is None else plan:
        for step in range(new):
            if made == count:
                return
            cache = DynamicCache(config=config)
            if step:
                for layer in range(config.n_layer):
                    zeros = torch.zeros(batch, heads, length + step - 1, size)
                    cache.update(zeros, zeros.clone(), layer)
            tokens = length if step == 0 else 1
            yield {"input_ids": torch.zeros(batch, tokens, dtype=torch.long), "cache": cache,
                   "attention_mask": torch.ones(batch, length + step, dtype=torch.long),
                   "use_cache": True, "return_dict": True}
            made += 1


def check_calls_match_generate() -> None:
    """The calls written here have the signatures of a real generate()'s (three requests)."""
    import torch

    from guardscope.corpus.signatures.signature import signature

    model = gpt2()
    real = []
    forward = model.forward

    def recording(*args, **kwargs):
        real.append(signature(args, kwargs, inference=False))
        return forward(*args, **kwargs)

    model.forward = recording
    wanted = [(2, 5, 3), (1, 1, 2), (4, 9, 1)]
    with torch.no_grad():
        for batch, length, new in wanted:
            ids = torch.ones(batch, length, dtype=torch.long)
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                           do_sample=False)
    written = [signature((), call, inference=False)
               for call in generation_calls(model.config, len(real), wanted)]
    if real != written:
        raise SystemExit("the written calls differ from generate()'s: update generation_calls")


def write_corpora(work: pathlib.Path, calls: int, fullgraph: bool = False) -> dict[str, object]:
    import guardscope

    compile_options = {"dynamic": None, **({"fullgraph": True} if fullgraph else {})}
    config = gpt2().config
    spec = f"{pathlib.Path(__file__).resolve()}"
    started = time.perf_counter()
    with guardscope.CorpusWriter(work / "generation", model=f"{spec}:gpt2_forward", keep="signatures",
                                 full_per_signature=0, overwrite=True, compile=compile_options) as writer:
        for call in generation_calls(config, calls):
            writer.add(**call)
        distinct = len(writer._signatures)
    generation_seconds = time.perf_counter() - started
    # As many distinct (batch, length) signatures of the directly called model, repeated.
    shapes = []
    rng = random.Random(1)
    seen = set()
    longest = max(128, 2 * -(-distinct // 8))  # room for that many pairs, short when it can be
    while len(shapes) < distinct:
        shape = (rng.randint(1, 8), rng.randint(1, longest))
        if shape not in seen:
            seen.add(shape)
            shapes.append(shape)
    import torch

    started = time.perf_counter()
    with guardscope.CorpusWriter(work / "tensors", model=f"{spec}:gpt2", keep="signatures", full_per_signature=0,
                                 overwrite=True, compile=compile_options) as writer:
        for position in range(calls):
            batch, length = shapes[position % distinct]
            writer.add(input_ids=torch.zeros(batch, length, dtype=torch.long),
                       attention_mask=torch.ones(batch, length, dtype=torch.long))
    return {"calls": calls, "distinct_signatures": distinct, "compile": compile_options, "write_seconds": {
        "generation": round(generation_seconds, 1), "tensors": round(time.perf_counter() - started, 1)}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_generation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100_000, help="forward calls in each corpus")
    parser.add_argument("--work", default="/tmp/guardscope-bench/generation", help="corpora and analyses go here")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--fullgraph", action="store_true",
                        help="record both corpora as compiled with fullgraph=True: the analysis then replays "
                        "guard-only (--replay auto), checking each signature once, and times the objects' own cost")
    options = parser.parse_args(argv)
    work = pathlib.Path(options.work)
    work.mkdir(parents=True, exist_ok=True)
    check_calls_match_generate()
    written = write_corpora(work, options.calls, options.fullgraph)
    print(f"corpora     {written['calls']:,} calls each, {written['distinct_signatures']:,} distinct signatures; "
          f"written in {written['write_seconds']}")
    results: dict[str, object] = {"machine": common.machine(), **written}
    for name in ("tensors", "generation"):
        run = common.run_analyze(work / name, work / f"analysis-{name}").check()
        catalog = common.read_json(work / f"analysis-{name}" / "catalog.json")
        results[name] = {"analyze_seconds": round(run.wall_seconds, 1), "peak_rss_mib": round(run.max_rss_bytes / 2**20),
                         "compiles": catalog["summary"]["compiles"], "topologies": catalog["summary"]["topologies"],
                         "not_analysed": len(catalog["not_analysed"])}
        print(f"{name:<11} analyze {run.wall_seconds:.1f} s, peak RSS {run.max_rss_bytes / 2**20:,.0f} MiB, "
              f"{catalog['summary']['compiles']} compiles, {catalog['summary']['topologies']} topologies "
              f"({common.load_text(run)})")
    ratio = results["generation"]["analyze_seconds"] / results["tensors"]["analyze_seconds"]  # type: ignore[index]
    results["ratio"] = round(ratio, 2)
    results["target"] = {"ratio": TARGET_RATIO, "met": ratio <= TARGET_RATIO}
    print(f"ratio       {ratio:.2f} (target <= {TARGET_RATIO}: {'MET' if ratio <= TARGET_RATIO else 'MISSED'})")
    common.write_results(options.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
