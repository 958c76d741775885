"""Proof on the real thing: ``model.generate()`` itself, run with a plan applied, on prompts the
corpus never held, counting every compile in any frame.

``verify`` replays the recorded forward calls. What a user runs is ``generate()``, which makes
those calls itself (a prefill, then one decode step per token, its KV cache growing), so this check
drives it: the analysed forward is compiled with the production options, the plan's set-up runs
(``warmup.py``'s warmup, or ``unbacked.py``'s configure, marks and residual warmup), the compiled
forward is put in place of ``model.forward``, and every ``generate()`` request then runs under
Dynamo's compile-start callback. A compile there is a recompile production would pay.

Example::

    from guardscope.proving.generation import check_generate

    result = check_generate("out/", [(input_ids, {"max_new_tokens": 16}), ...])
    result.compiles            # [] when the plan covers those prompts
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from .. import plans, store
from ..errors import GuardscopeError
from ..model import NO_GRAD
from ..options import production_backend, production_options

# The plans a server applies (warmup, unbacked): those this check can apply.
PLANS = plans.SERVED


@dataclasses.dataclass(frozen=True)
class GenerateCheck:
    """What :func:`check_generate` saw: ``requests`` run, ``calls`` (forward calls generate()
    made), ``compiles`` (``{"request", "call", "frame"}`` for each compile after set-up, ``call``
    counting the request's forward calls from 0: 0 is its prefill), set-up graphs and seconds."""

    plan: str
    requests: int
    calls: int
    compiles: tuple[dict[str, Any], ...]
    setup_graphs: int
    setup_seconds: float
    backend: str = "inductor"  # the backend the forward was compiled with: the check holds for it
    # Calls that needed a graph past Dynamo's recompile limit (``{"request", "call"}``): production
    # runs them eagerly (or fails them under fullgraph), and no compile starts, so they are counted
    # apart. Empty when none did.
    limit_hits: tuple[dict[str, Any], ...] = ()

    @property
    def passed(self) -> bool:
        return not self.compiles and not self.limit_hits

    def to_json(self) -> dict[str, Any]:
        return {"plan": self.plan, "requests": self.requests, "calls": self.calls, "compiles": list(self.compiles),
                "limit_hits": list(self.limit_hits), "setup_graphs": self.setup_graphs,
                "setup_seconds": self.setup_seconds, "passed": self.passed, "backend": self.backend}


def check_generate(out_dir: str | Path, requests: list[tuple[Any, dict[str, Any]]], *, plan: str = plans.SERVED[0],
                   model: Any = None, corpus: str | Path | None = None, backend: str | None = None) -> GenerateCheck:
    """Apply ``plan`` from the analysis folder ``out_dir`` and run ``generate(input_ids, **kwargs)``
    for each ``(input_ids, kwargs)`` request, counting compiles.

    ``model``: the analysed callable (the bound ``forward`` the corpus's model spec gives); by
    default the spec is loaded. The forward is compiled with ``backend``, by default production's
    (``catalog.json``'s ``production.backend``: recorded, else inductor): the KV cache each decode
    step receives is the compiled prefill's output, its strides that backend's, so a check under
    another backend does not speak for production's. Its module's ``generate`` is what runs. ``GuardscopeError`` when the
    analysed model is not a bound forward of a module with ``generate``, or the plan was not
    emitted (run ``guardscope emit-warmup`` first)."""
    from .setup import set_up_plan

    out = Path(out_dir)
    if plan not in PLANS:
        raise GuardscopeError(f"plan {plan!r}: check_generate applies {' or '.join(PLANS)}")
    if not (out / plans.MODULES[plan]).is_file():
        raise GuardscopeError(f"{out / plans.MODULES[plan]} does not exist: run 'guardscope emit-warmup {out}' first")
    catalog = store.read_catalog(out)
    model, owner = _generating_model(out, catalog, model, corpus)
    # generate() runs the forward under torch.no_grad(), not inference mode: the set-up must too,
    # or graphs compiled for inference tensors (other dispatch keys) would not serve its calls.
    options = production_options(catalog, grad_mode=NO_GRAD, backend=backend or production_backend(catalog)[0])
    module, runner, seconds, _ = set_up_plan(plan, out, model, options, use_bundle=False)
    forward = _plan_forward(module, runner.compiled)
    setup_graphs = runner.graphs()
    calls, compiles, limit_hits = _run_generate(owner, forward, runner.compiled, requests)
    return GenerateCheck(plan, len(requests), calls, compiles, setup_graphs, seconds, options.backend,
                         limit_hits=limit_hits)


def _generating_model(out: Path, catalog: dict[str, Any], model: Any, corpus: str | Path | None) -> tuple[Any, Any]:
    """The analysed forward (the corpus's model spec loaded, or the method of the module given)
    and the module it is bound to, whose ``generate`` runs; :class:`GuardscopeError` when it is
    not a module's bound forward or the module has no ``generate``."""
    from .. import torch_compat
    from ..corpus import load_model
    from ..corpus.spec import bound_method

    if model is None:
        model = load_model(catalog["model"], base_dir=store.corpus_dir_of(out, catalog, corpus),
                           method=catalog.get("method"))
    elif catalog.get("method") is not None:  # the module given, its method compiled
        model = bound_method(model, catalog["method"], catalog["model"])
    owner = torch_compat.forward_owner(model)
    if owner is None or owner is model or not callable(getattr(owner, "generate", None)):
        raise GuardscopeError(
            "check_generate needs the analysed model to be a module's bound forward (a corpus recorded "
            "with TrafficRecorder.wrap(torch.compile(model.forward)), or with method='forward', or a model "
            "spec returning model.forward) whose module has generate()"
        )
    return model, owner


def _plan_forward(module: Any, compiled: Any) -> Any:
    """The compiled forward as the plan serves it: each call marked first where the plan marks
    (the unbacked plan marks every call's dims)."""
    if not callable(getattr(module, "mark", None)):
        return compiled

    @functools.wraps(compiled)
    def marked(*args: Any, **kwargs: Any) -> Any:
        module.mark(*args, **kwargs)
        return compiled(*args, **kwargs)

    return marked


def _run_generate(owner: Any, forward: Any, compiled: Any, requests: list[tuple[Any, dict[str, Any]]]
                  ) -> tuple[int, tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
    """Each request's ``generate()`` run with ``forward`` in place of the module's, under Dynamo's
    compile-start callback: the forward calls made, each compile that started and each call past
    the recompile limit (``{"request", "call"}``)."""
    import torch

    from .. import torch_compat
    from ..catalog.frames import hit_recompile_limit
    from ..replay.capture import TraceCapture
    from ..replay.events import events_from_records

    seen: list[dict[str, Any]] = []
    position = {"request": 0, "call": 0, "calls": 0}
    calls: list[dict[str, Any]] = []  # (request, call) of each forward call, by its number

    # generate() reads model.forward's signature to choose what it passes (an attention mask,
    # position ids...): the wrappers keep forward's, as torch.compile's does.
    @functools.wraps(compiled)
    def counted(*args: Any, **kwargs: Any) -> Any:
        capture.set_sample(len(calls))
        calls.append({"request": position["request"], "call": position["call"]})
        result = forward(*args, **kwargs)
        position["call"] += 1
        position["calls"] += 1
        return result

    def started(_: Any) -> None:
        seen.append({"request": position["request"], "call": position["call"]})

    owner.forward = counted
    try:
        with TraceCapture() as capture, torch_compat.compile_start_callback(started), torch.no_grad():
            for index, (input_ids, kwargs) in enumerate(requests):
                position["request"], position["call"] = index, 0
                owner.generate(input_ids, **kwargs)
    finally:
        del owner.forward  # the module's own forward again
    # A call past the recompile limit starts no compile: the structured trace records it failed.
    limited = sorted({event.sample for event in events_from_records(capture.records).events
                      if event.sample is not None and hit_recompile_limit(event)})
    return position["calls"], tuple(seen), tuple(calls[number] for number in limited)
