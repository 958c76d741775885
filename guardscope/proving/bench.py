"""``guardscope bench``: what each way of serving the model costs, in the seed article's terms.

For each strategy — eager; plain ``torch.compile``; guardscope's warmup; guardscope's
``mark_unbacked`` plan; ``torch.export`` + AOTInductor with an eager fallback for calls outside the
exported bounds — one fresh process (``python -m guardscope.proving.bench_child STRATEGY DIR
RESULT``), with empty inductor and triton cache folders of its own (``TORCHINDUCTOR_CACHE_DIR``,
``TRITON_CACHE_DIR``) so that its set-up compiles everything it needs. A crash, a segfault or a
timeout becomes a ``failed`` row for that strategy, never the end of the others.

This module is the parent: it checks the options, starts each strategy's process
(:mod:`guardscope.proving.bench_child`: set-up, replay and paired pass, timed) and writes
``bench.json`` from what they report (:mod:`guardscope.proving.bench_results`: rows, targets,
the recommendation).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from .. import plans, store, torch_compat
from ..corpus import load_corpus
from ..errors import CompileOptionsError
from ..options import production_options
from .bench_results import Criteria, build_document, bytecode_note, empty_row, summarize
from .isolation import child_environment, run_module
from .setup import isolated_caches


def run_strategy(
    out_dir: Path,
    name: str,
    *,
    device: str,
    backend: str,
    corpus_dir: Path | None,
    repeat: int,
    timeout: float,
    paired: int = 1,
    tags: Callable[[int], tuple | None] | None = None,
    per_pass: int = 0,
) -> dict[str, Any]:
    """Measure one strategy in a fresh process with empty compile caches; always a row (with
    generation figures when ``tags`` says each sample's request and step)."""
    from .verify import planned_status

    infeasible = planned_status(out_dir, name) if name in plans.MODULES else None
    if infeasible is not None:
        return empty_row(name, "skipped", f"emit-warmup found this fix infeasible on this model: {infeasible}")
    if name in plans.MODULES and not (out_dir / plans.MODULES[name]).is_file():
        return empty_row(name, "skipped", f"{plans.MODULES[name]} not found: run 'guardscope emit-warmup {out_dir}'")
    if name == plans.PRECOMPILED and store.read_precompiled_manifest(out_dir, plans.WARMUP) is None:
        return empty_row(name, "skipped", f"no precompiled warmup: run 'guardscope precompile {out_dir}'")

    work = Path(tempfile.mkdtemp(prefix=f"guardscope-bench-{name}-"))
    try:
        result = work / "result.json"
        arguments = [name, str(out_dir), str(result), "--device", device, "--backend", backend,
                     "--repeat", str(repeat), "--paired", str(paired), "--work", str(work)]
        if corpus_dir is not None:
            arguments += ["--corpus", str(corpus_dir)]
        with isolated_caches() as caches:
            outcome = run_module("guardscope.proving.bench_child", arguments, result, timeout=timeout,
                                 what="the benchmark process", environment=child_environment(caches))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if outcome.result is None:
        return empty_row(name, "failed", outcome.failure, outcome.seconds)
    return summarize(name, outcome.result, outcome.seconds, tags=tags, per_pass=per_pass)


def run_bench(
    out: Path,
    catalog: dict[str, Any],
    *,
    corpus: str | Path | None = None,
    device: str = "cuda",
    strategies: tuple[str, ...] | None = None,
    backend: str = "inductor",
    repeat: int = 1,
    paired: int = 1,
    timeout: float = 1200.0,
    criteria: Any = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure serving latency under each strategy, each in a fresh process; write ``bench.json``.

    Strategies: ``eager``, ``compile`` (plain torch.compile) and each of guardscope's plans
    (:data:`guardscope.plans.NAMES`: the warmup, the mark_unbacked plan, torch.export +
    AOTInductor with an eager fallback outside the bounds), which need ``emit-warmup``. ``device``
    defaults to CUDA: on a machine without one this raises unless ``device="cpu"`` is asked for
    explicitly. ``corpus`` overrides the analysed corpus (the same requests elsewhere, e.g. on the
    GPU machine) and is passed to each strategy's process. Options are checked before the corpus
    is looked for.
    """
    chosen = _checked_request(strategies, repeat, paired, timeout, device)
    corpus_dir = store.corpus_dir_of(out, catalog, corpus)
    loaded = load_corpus(corpus_dir)  # a clear error before any subprocess starts
    samples = len(loaded)
    runs = loaded.requests  # generate() calls tagged with request and step: TTFT, TPOT per request
    options = production_options(catalog, backend=backend, device=device)
    options.validate()
    rows = []
    for name in plans.STRATEGIES:
        if name not in chosen:
            continue
        if progress is not None:
            progress(name)
        rows.append(run_strategy(
            out, name, device=device, backend=backend,
            corpus_dir=corpus_dir.resolve() if corpus is not None else None,
            repeat=repeat, paired=paired, timeout=timeout,
            tags=None if runs is None else runs.of, per_pass=samples,
        ))
    compile_options = options.compile_json()
    bytecode = _bytecode_note()
    document = build_document(
        rows,
        criteria=criteria or Criteria(),
        torch_version=torch_compat.torch_version(),
        device=device,
        options={key: compile_options[key] for key in ("backend", "dynamic", "fullgraph", "mode", "grad_mode", "inference_mode")},
        corpus_path=Path(os.path.relpath(corpus_dir.resolve(), out.resolve())).as_posix(),
        samples=samples,
        repeat=repeat,
        paired=paired,
        notes=(bytecode,) if bytecode else (),
    )
    store.write_document(out, store.BENCH, document)
    return document


def _checked_request(strategies: tuple[str, ...] | None, repeat: int, paired: int, timeout: float,
                     device: str) -> tuple[str, ...]:
    """The strategies to measure (all by default), the options checked (:class:`CompileOptionsError`),
    CUDA refused where torch has none."""
    import torch

    chosen = tuple(strategies or plans.STRATEGIES)
    unknown = sorted(set(chosen) - set(plans.STRATEGIES))
    if unknown:
        raise CompileOptionsError(f"unknown strategies {unknown}; choose from {', '.join(plans.STRATEGIES)}")
    if repeat < 1:
        raise CompileOptionsError(f"--repeat {repeat} must be at least 1")
    if paired < 0:
        raise CompileOptionsError(f"--paired {paired} must be 0 (off) or more")
    if timeout <= 0:
        raise CompileOptionsError(f"--timeout {timeout} must be positive")
    try:
        parsed = torch.device(device)
    except RuntimeError as exc:
        raise CompileOptionsError(f"device {device!r} is not a torch device: {exc}") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise CompileOptionsError(
            f"guardscope bench measures serving latency on a GPU (device {device!r}), but "
            f"torch.cuda.is_available() is False here (torch {torch.__version__}). Run it on a CUDA "
            "machine, or pass --device cpu to measure CPU serving (slow: every strategy compiles "
            "with inductor for the CPU; meant for testing)"
        )
    return chosen


def _bytecode_note() -> str | None:
    """bench.json's note when the strategy processes compile torch's source to bytecode at every
    start (:func:`guardscope.proving.bench_results.bytecode_note`), else None."""
    import importlib.util

    import torch

    return bytecode_note(bool(sys.flags.dont_write_bytecode),
                         Path(importlib.util.cache_from_source(torch.__file__)).is_file())
