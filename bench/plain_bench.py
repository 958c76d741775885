"""An independent plain-PyTorch measurement of eager and plain ``torch.compile`` serving, to check
``guardscope bench``'s table against (issue 7).

It imports nothing from guardscope: it reads the corpus files itself (``corpus.json``, then each
shard with ``torch.load(weights_only=True)`` and its format-2 index), imports the model named by the
manifest, and counts compiles with Dynamo's own counter (``counters["stats"]["unique_graphs"]``,
as the seed article does) instead of guardscope's trace capture. It measures what the bench's
``eager`` and ``compile`` rows measure, the same way: one untimed eager forward first, arguments on
the device before the clock starts, ``torch.cuda.synchronize()`` around each call, the call under
``torch.inference_mode()``, compile caches in empty folders, Dynamo's recompile limits as the
manifest recorded them (``dynamo_config``), else torch's defaults, as production runs (``--recompile-limit
64`` for the seed article's setting); a request that raises at the limit is timed and listed. It
adds the seed article's own eager baseline (grad enabled, no inference mode) for reference.

    PYTHONPATH=. python bench/plain_bench.py /tmp/gnn-full --json /tmp/plain.json          # GPU
    python bench/plain_bench.py samples/gnn/corpus --device cpu --json /tmp/plain-cpu.json
    python bench/compare_bench.py OUT/bench.json /tmp/plain.json

Run on the same machine as ``guardscope bench``, not at the same time.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import importlib.util
import io
import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

# Empty compile caches, set before torch is imported, so every compile is a real one.
_CACHES = tempfile.mkdtemp(prefix="plain-bench-")
atexit.register(shutil.rmtree, _CACHES, ignore_errors=True)
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_CACHES, "inductor")
os.environ["TRITON_CACHE_DIR"] = os.path.join(_CACHES, "triton")

import torch  # noqa: E402
import torch._dynamo.utils  # noqa: E402



# --- the corpus, read without guardscope -------------------------------------------------------


def _decode(value, storages, blob, segments, dtypes):
    """A format-2 tagged value: tensors ["T", segment, offset, shape, stride, dtype, grad, device]."""
    if not isinstance(value, list):
        return value
    tag, rest = value[0], value[1:]
    if tag == "T":
        segment, offset, shape, stride, dtype, requires_grad, _device = rest
        if segment not in storages:
            start, length = segments[segment]
            storages[segment] = torch.UntypedStorage.from_buffer(
                blob[start:start + length], byte_order="native", dtype=torch.uint8)
        tensor = torch.empty(0, dtype=dtypes[dtype]).set_(storages[segment], offset, shape, stride)
        return tensor.requires_grad_(requires_grad)
    if tag in ("t", "l"):
        items = [_decode(v, storages, blob, segments, dtypes) for v in rest]
        return tuple(items) if tag == "t" else items
    if tag == "d":
        return {key: _decode(v, storages, blob, segments, dtypes) for key, v in zip(rest[0::2], rest[1::2])}
    raise ValueError(f"value tag {tag!r} is not handled by this script")


def read_samples(corpus: pathlib.Path):
    """Yield (index, args, kwargs) of every sample, shard by shard."""
    manifest = json.loads((corpus / "corpus.json").read_text())
    dtypes = {str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    index = 0
    for shard in manifest["shards"]:
        content = torch.load(io.BytesIO((corpus / shard["file"]).read_bytes()), weights_only=True)
        if manifest["format_version"] == 1:
            entries = [(e["args"], e["kwargs"]) for e in content["samples"]]
        else:
            table = json.loads(content["index"])
            blob = memoryview(content["blob"].numpy())
            storages: dict = {}
            entries = [(_decode(a, storages, blob, table["segments"], dtypes),
                        _decode(k, storages, blob, table["segments"], dtypes)) for a, k in table["samples"]]
        for args, kwargs in entries:
            yield index, tuple(args), dict(kwargs)
            index += 1


def load_model(spec: str, corpus: pathlib.Path):
    """``path/file.py:attr`` (relative to the corpus, then the working directory) or ``pkg.mod:attr``;
    a class or a zero-argument factory."""
    target, _, attr = spec.rpartition(":")
    if target.endswith(".py"):
        path = pathlib.Path(target)
        if not path.is_absolute():
            path = corpus / target if (corpus / target).is_file() else pathlib.Path.cwd() / target
        module_spec = importlib.util.spec_from_file_location("plain_bench_model", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    return getattr(module, attr)()


# --- measuring ---------------------------------------------------------------------------------


def on(device, value):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(on(device, v) for v in value)
    if isinstance(value, dict):
        return {k: on(device, v) for k, v in value.items()}
    return value


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def unique_graphs() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def replay(fn, corpus, device, repeat, grad_enabled=False, failed=None):
    """[(sample, milliseconds, graphs compiled by the call)] for every request; the samples that
    raised at Dynamo's recompile limit are added to ``failed`` (any other error propagates)."""
    times = []
    for _ in range(repeat):
        for index, args, kwargs in read_samples(corpus):
            args, kwargs = on(device, args), on(device, kwargs)
            before = unique_graphs()
            context = torch.enable_grad() if grad_enabled else torch.inference_mode()
            with context:
                sync(device)
                start = time.perf_counter()
                try:
                    fn(*args, **kwargs)
                except Exception as exc:
                    if failed is None or type(exc).__name__ not in ("FailOnRecompileLimitHit", "RecompileLimitExceeded"):
                        raise
                    failed.append(index)
                sync(device)
                elapsed = (time.perf_counter() - start) * 1e3
            times.append((index, elapsed, unique_graphs() - before))
    return times


def stats(values):
    values = sorted(values)
    if not values:
        return None
    cuts = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else [values[0]] * 99
    return {"count": len(values), "mean_ms": statistics.fmean(values), "p50_ms": statistics.median(values),
            "p99_ms": cuts[98], "max_ms": values[-1]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/plain_bench.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=pathlib.Path, help="a guardscope corpus directory")
    parser.add_argument("--json", required=True, help="write the results here")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeat", type=int, default=1, help="replays of the corpus per measurement")
    parser.add_argument("--recompile-limit", type=int, default=None,
                        help="Dynamo's per-function recompile limit (default: the recorded one, else torch's)")
    options = parser.parse_args(argv)

    manifest = json.loads((options.corpus / "corpus.json").read_text())
    production = manifest.get("compile", {})
    device = torch.device(options.device)
    model = load_model(manifest["model"], options.corpus).to(device).eval()
    _, args, kwargs = next(read_samples(options.corpus))
    with torch.inference_mode():
        model(*on(device, args), **on(device, kwargs))  # device start-up, untimed
    sync(device)
    results = {"torch_version": torch.__version__, "device": str(device),
               "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
               "corpus": str(options.corpus), "repeat": options.repeat}

    eager = replay(model, options.corpus, device, options.repeat)
    results["eager"] = {"steady": stats(t for _, t, _ in eager), "worst_ms": max(t for _, t, _ in eager)}
    article = replay(model, options.corpus, device, options.repeat, grad_enabled=True)
    results["eager_grad_enabled"] = {"steady": stats(t for _, t, _ in article),
                                     "worst_ms": max(t for _, t, _ in article)}

    torch._dynamo.reset()
    config = torch._dynamo.config
    for name, value in manifest.get("dynamo_config", {}).items():  # production's own settings
        if hasattr(config, name):
            setattr(config, name, value)
    if options.recompile_limit is not None:
        setattr(config, "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit",
                options.recompile_limit)
    compiled_model = torch.compile(model, backend="inductor", dynamic=production.get("dynamic"),
                                   fullgraph=bool(production.get("fullgraph")),
                                   **({"mode": production["mode"]} if production.get("mode") else {}))
    failed = []
    compiled = replay(compiled_model, options.corpus, device, options.repeat, failed=failed)
    compiling = [(sample, t) for sample, t, graphs in compiled if graphs]
    recompiling = compiling[1:]
    steady = stats(t for sample, t, graphs in compiled if not graphs and sample not in failed)
    results["compile"] = {
        "compile_samples": [sample for sample, _ in compiling],
        "first_compile_s": compiling[0][1] / 1e3 if compiling else None,
        "recompile_samples": [sample for sample, _ in recompiling],
        "failed_samples": failed,
        "recompile_mean_s": statistics.fmean(t for _, t in recompiling) / 1e3 if recompiling else None,
        "recompile_max_s": max(t for _, t in recompiling) / 1e3 if recompiling else None,
        "steady": steady,
        "worst_ms": max(t for _, t, _ in compiled),
        "speedup": results["eager"]["steady"]["mean_ms"] / steady["mean_ms"] if steady else None,
    }

    for name in ("eager", "eager_grad_enabled"):
        print(f"{name:<19} mean {results[name]['steady']['mean_ms']:.2f} ms, "
              f"p50 {results[name]['steady']['p50_ms']:.2f} ms, worst {results[name]['worst_ms']:.2f} ms")
    plain = results["compile"]
    print(f"compile             actual recompilations: {len(plain['recompile_samples'])} at {plain['recompile_samples']}")
    if failed:
        print(f"                    {len(failed)} requests raised at the recompile limit: {failed}")
    if steady:
        print(f"                    steady mean {steady['mean_ms']:.2f} ms, p50 {steady['p50_ms']:.2f} ms, "
              f"speedup {plain['speedup']:.2f}x over eager (inference mode)")
    if plain["first_compile_s"] is not None:
        print(f"                    first compile {plain['first_compile_s']:.2f} s", end="")
        if recompiling:
            print(f"; recompiles mean {plain['recompile_mean_s']:.2f} s, max {plain['recompile_max_s']:.2f} s", end="")
        print()
    pathlib.Path(options.json).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(options.json).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"results             {options.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
