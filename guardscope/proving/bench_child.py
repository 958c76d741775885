"""One strategy of ``guardscope bench`` set up and measured in its own fresh process:
``python -m guardscope.proving.bench_child STRATEGY DIR RESULT``, started by
:func:`guardscope.proving.bench.run_strategy`; what it measured is written to ``RESULT`` (and
turned into a row by :func:`guardscope.proving.bench_results.summarize`).

What a strategy's process does:

1. builds the model on the device and runs one eager forward of the corpus's first sample,
   untimed: CUDA context, cuBLAS handles and the caching allocator are what any server pays at
   start, whatever it serves with;
2. **set-up**, timed: nothing (eager, plain compile: torch.compile is lazy); ``warmup()``
   (warmup); ``configure()`` + ``warmup()`` (unbacked); ``torch.export`` with the emitted Dims,
   AOTInductor compile and load, one call of the export example (export);
3. **replay**: the corpus in recorded order (``repeat`` times), request by request. A request's
   arguments are moved to the device first (untimed); then the device is synchronized, the clock
   read, the call made under the analysis's grad mode (``mark()`` first for the unbacked plan; the
   bounds check, then the AOTInductor model or the eager fallback, for export), the device
   synchronized and the clock read again. Whether a request compiled is read from Dynamo's own
   graph counter before and after it (the structured trace is left off: its payloads would add to
   the compile times measured). The plain compile runs under production's recompile limits (the
   catalog's ``production``): a request past them raises ``FailOnRecompileLimitHit`` (fullgraph)
   or runs without a compiled graph (no graph accepted it before the call, and it compiled none),
   and both are listed. A decode step of ``generate()`` traffic runs on the KV cache its
   request's previous step extended through the strategy's own forward, as in production
   (:class:`guardscope.corpus.chains.CarriedState`), not on the recorded one;
4. **paired** (every strategy but eager, ``paired`` passes, 1 by default): the corpus once more,
   each request run eagerly and with the strategy back to back, alternating which goes first.
   Fresh eager processes on one H200 measured steady means from 5.70 to 6.44 ms, and eager
   drifted by as much within one process, so a ratio of two processes' means carries that noise;
   the paired ratio compares both on the same requests, clocks and allocator, and is what the
   speedup target is judged on when it was measured.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from .. import plans, store, torch_compat
from ..catalog.limits import production_limits
from ..corpus.chains import CarriedState
from ..options import production_options
from .isolation import watch_parent
from ..errors import PrecompileError
from ..text import exception_line
from .isolation import import_file
from .setup import precompiled_off



def plain_compile_limits(catalog: dict) -> dict[str, Any]:
    """The recompile limits the plain compile runs under: production's (the catalog's
    ``production``, recorded or torch's defaults), torch's defaults for a catalog without one."""
    section = catalog.get("production")
    if section is None:
        limits = production_limits(None, {}, torch_compat.dynamo_defaults())
        section = {"recompile_limit": limits.recompile_limit, "source": limits.source,
                   "accumulated_recompile_limit": limits.accumulated_recompile_limit,
                   "fail_on_recompile_limit_hit": limits.fail_on_limit}
    return {key: section[key] for key in ("recompile_limit", "accumulated_recompile_limit",
                                          "fail_on_recompile_limit_hit", "source")}


def _set_up(strategy: str, module: Any, runner: Any, out_dir: Path, catalog: dict, corpus: Any,
            work: Path) -> tuple[Callable[[tuple, dict], str | None], int, dict | None]:
    """Prepare ``strategy``; return its request call (returning None, or why it fell back to
    eager), the graphs compiled outside Dynamo (the AOTInductor model) and, for a plan, what its
    compile-cache bundle load did (the generated warmup loads one when it is present, as in
    production)."""

    options = runner.options

    def eager(args: tuple, kwargs: dict) -> None:
        runner.model(*args, **kwargs)

    def compiled(args: tuple, kwargs: dict) -> None:
        runner.compiled(*args, **kwargs)

    def marked(args: tuple, kwargs: dict) -> None:
        module.mark(*args, **kwargs)
        runner.compiled(*args, **kwargs)

    if strategy == "eager":
        return eager, 0, None
    if strategy == "compile":
        return compiled, 0, None
    if strategy == plans.PRECOMPILED:  # the warmup's graphs loaded, nothing traced or compiled
        load = module.load_precompiled(runner.compiled, options.device, options.grad_mode)
        if load.status != "loaded":
            raise PrecompileError(f"the precompiled warmup was {load.status}: {load.reason}")
        # its samples through the loaded graphs, as warmup() runs them: each graph's kernels load
        module.warmup(runner.compiled, device=options.device, grad_mode=options.grad_mode, bundle=False,
                      **precompiled_off(module))
        return compiled, load.graphs, load.to_json()
    if strategy in plans.BUNDLED:  # the plans with a warmup (and a bundle to load)
        load = module.load_bundle(runner.compiled, options.device).to_json()
        module.warmup(runner.compiled, device=options.device, grad_mode=options.grad_mode, bundle=False,
                      **precompiled_off(module))
        return (compiled if strategy == "warmup" else marked), 0, load
    # export: torch.export with the emitted Dims, AOTInductor, one call of the example.
    from .verify_export import module_example

    args, kwargs, *_ = runner.prepare(corpus.sample(module_example(out_dir, catalog)), mark=False)
    with torch_compat.no_leaked_export_hooks():
        program = module.export(runner.model, *args, **kwargs)
    aoti = torch_compat.aoti_compile_and_load(program, str(work / "model.pt2"))
    accepts = torch_compat.export_input_checker(program)
    with runner.grad_context():
        aoti(*args, **kwargs)

    def served(args: tuple, kwargs: dict) -> str | None:
        reason = accepts(args, kwargs)
        if reason is None:
            aoti(*args, **kwargs)
        else:
            runner.model(*args, **kwargs)
        return reason

    return served, 1, None


def _measure(strategy: str, out_dir: Path, catalog: dict, corpus: Any, model: Any, *, device: str,
             backend: str, repeat: int, work: Path, paired: int = 1) -> dict[str, Any]:
    """Set up ``strategy`` and replay the corpus request by request (see the module docstring)."""
    from ..replay.runner import Runner

    options = production_options(catalog, backend=backend, device=device)
    module = import_file(out_dir / plans.STRATEGY_MODULES[strategy]) if strategy in plans.STRATEGY_MODULES else None
    if strategy == "unbacked":
        module.configure()  # global settings, before anything compiles
    # The plain compile runs as production does: under its recompile limits, so a request past
    # them fails (fullgraph) or runs without a compiled graph, and the row says which.
    limits = plain_compile_limits(catalog) if strategy == "compile" else None
    limit = (torch_compat.recompile_limits(limits["recompile_limit"], limits["accumulated_recompile_limit"],
                                           limits["fail_on_recompile_limit_hit"])
             if limits is not None else contextlib.nullcontext())
    with limit, torch_compat.applied_settings(dict(options.dynamo_config)):
        runner = Runner(model, options)

        def sync() -> None:
            torch_compat.synchronize(runner.device)

        runner.warm_device(corpus.sample(0))  # the device's own warm-up, untimed
        graphs = torch_compat.graphs_compiled()
        started = time.perf_counter()
        call, aot_graphs, load = _set_up(strategy, module, runner, out_dir, catalog, corpus, work)
        sync()
        setup_seconds = time.perf_counter() - started
        # torch.export may trace with Dynamo (strict mode): the export row counts its one model.
        setup_graphs = aot_graphs or torch_compat.graphs_compiled() - graphs
        replay = _TimedReplay(runner, call, sync, limited=limits is not None)
        replay.replay(corpus, repeat)
        paired_requests = [] if strategy == "eager" else paired_pass(
            ((sample.index, lambda sample=sample: runner.prepare(sample, mark=False)[:2])  # a fresh copy each time
             for _ in range(paired) for sample in corpus),
            lambda args, kwargs: runner.model(*args, **kwargs), call, sync=sync, grad=runner.grad_context)
    torch_compat.reset_dynamo()
    return {
        "strategy": strategy,
        "torch_version": torch_compat.torch_version(),
        "device_name": torch_compat.device_name(runner.device),
        "setup_seconds": setup_seconds,
        "setup_graphs": setup_graphs,
        "requests": replay.requests,
        "fallbacks": replay.fallbacks,
        "errors": replay.errors,
        "paired": paired_requests,
        "bundle_load": load if strategy != plans.PRECOMPILED else None,
        "precompiled_load": load if strategy == plans.PRECOMPILED else None,
        "limits": limits,
        "limit_failed": replay.limit_failed,
        "uncompiled": replay.uncompiled,
    }


@dataclass
class _TimedReplay:
    """The replay of the corpus, each request timed alone (step 3 of the module docstring), and
    what it recorded: each request's ``[sample, seconds, graphs compiled]``, the requests served
    by a fallback (and why), those that raised, those that raised at the recompile limit and,
    under the plain compile's production limits (``limited``), those that ran without a
    compiled graph."""
    runner: Any
    call: Callable[[tuple, dict], str | None]
    sync: Callable[[], None]
    limited: bool
    requests: list[list] = field(default_factory=list)
    fallbacks: list[list] = field(default_factory=list)
    errors: list[list] = field(default_factory=list)
    limit_failed: list[int] = field(default_factory=list)  # requests that raised at the recompile limit
    uncompiled: list[int] = field(default_factory=list)  # ran without a compiled graph (the limit reached)

    def replay(self, corpus: Any, repeat: int) -> None:
        """The corpus in recorded order, ``repeat`` times."""
        for _ in range(repeat):
            # A decode step gets the KV cache its request's previous step extended, as generate()
            # hands it on: laid out by the strategy's own compiled forward (corpus.chains).
            carried = CarriedState.for_requests(corpus.requests)
            for sample in corpus:
                self.request(sample, carried)

    def request(self, sample: Any, carried: CarriedState) -> None:
        """One request: moved to the device (untimed), then called between two synchronized
        clock readings."""
        runner, sync, request = self.runner, self.sync, len(self.requests)
        # Moved to the device outside inference mode, as a request's tensors arrive.
        args, kwargs, *_ = runner.prepare(sample, mark=False)
        args, kwargs = carried.carry(sample.index, args, kwargs)
        accepted = None
        if self.limited:  # untimed: did a graph accept it before the call?
            runner.forget_entries()
            accepted = runner.serving_arguments(args, kwargs)
        graphs = torch_compat.graphs_compiled()
        failed = False
        with runner.grad_context():
            sync()
            started = time.perf_counter()
            try:
                fallback = self.call(args, kwargs)
                sync()
            except Exception as exc:  # a failing request is reported, the replay goes on
                fallback = None
                failed = True
                self.errors.append([request, exception_line(exc, 400)])
                if torch_compat.is_recompile_limit_error(exc):
                    self.limit_failed.append(request)
            seconds = time.perf_counter() - started
        if self.limited and not failed and accepted is None and torch_compat.graphs_compiled() == graphs:
            self.uncompiled.append(request)
        if fallback is not None:
            self.fallbacks.append([request, fallback])
        self.requests.append([sample.index, seconds, torch_compat.graphs_compiled() - graphs])


def paired_pass(requests: Iterable[tuple[int, Callable[[], tuple[tuple, dict]]]],
                eager: Callable[[tuple, dict], Any], served: Callable[[tuple, dict], Any], *,
                sync: Callable[[], None], grad: Callable[[], Any]) -> list[list]:
    """Run every request (``(sample, arguments)``, where ``arguments()`` gives its ``(args,
    kwargs)`` on the device) both eagerly and served, back to back, the order alternating from
    request to request: ``[sample, eager seconds, served seconds]`` per request. Both halves of a
    pair see the same process, device clocks and allocator, so their ratio is free of the drift
    between processes (and within one) that separate eager and strategy processes measure.

    Each half gets its own ``arguments()``, taken before its clock starts: a forward may change what
    it receives (a ``DynamicCache`` grows by the step, a ``StaticCache`` is written in place and
    counts its length), and the second half must see the request as it came, not as the first left
    it. Requests that compiled or raised are left out (the replay reports them)."""

    pairs: list[list] = []
    for position, (sample, arguments) in enumerate(requests):
        graphs = torch_compat.graphs_compiled()
        timed: dict[str, float] = {}
        with grad():
            try:
                for side, call in ((("eager", eager), ("served", served)) if position % 2 == 0
                                   else (("served", served), ("eager", eager))):
                    args, kwargs = arguments()
                    sync()
                    started = time.perf_counter()
                    call(args, kwargs)
                    sync()
                    timed[side] = time.perf_counter() - started
            except Exception:
                continue
        if torch_compat.graphs_compiled() == graphs:
            pairs.append([sample, timed["eager"], timed["served"]])
    return pairs


def child_main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m guardscope.proving.bench_child")
    parser.add_argument("strategy", choices=plans.STRATEGIES)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("result", type=Path)
    parser.add_argument("--device", required=True)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--paired", type=int, default=1)
    parser.add_argument("--corpus", type=Path, default=None)
    parser.add_argument("--work", type=Path, required=True)
    arguments = parser.parse_args(argv)
    out, catalog, corpus, model = store.load_inputs(arguments.out_dir, arguments.corpus)
    result = _measure(arguments.strategy, out, catalog, corpus, model, device=arguments.device,
                      backend=arguments.backend, repeat=arguments.repeat, work=arguments.work,
                      paired=arguments.paired)
    store.write_json(arguments.result, result)
    return 0


if __name__ == "__main__":
    watch_parent()  # the parent gone (killed), this process and its own children end too
    sys.exit(child_main(sys.argv[1:]))
