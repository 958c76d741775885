"""The one registry of the fixes guardscope emits ("plans"): every list of plan names, module
files, warmup folders, CLI choices and bench strategies derives from :data:`PLANS`.

Adding a plan is one entry here plus its code template (``templates/code/<name>.py.j2``) and its
planning and rendering in ``guardscope.fixes``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    """One fix ``emit-warmup`` writes."""

    name: str  # the artifact's name in fixes.json, verification.json and bench.json
    module: str  # the generated module, in the analysis folder
    title: str  # how the report names it
    warmup_dir: str | None = None  # the corpus of samples its warmup() runs, beside the module
    bundleable: bool = False  # a compile-cache bundle can speed up its set-up (it compiles graphs)
    served: bool = False  # guardscope.runtime.serve can apply it
    bench_title: str = ""  # how guardscope bench names the strategy that serves with it


PLANS: tuple[Plan, ...] = (
    Plan("warmup", "warmup.py", "Warmup set", warmup_dir="warmup", bundleable=True, served=True,
         bench_title="guardscope warmup"),
    Plan("unbacked", "unbacked.py", "mark_unbacked configuration", warmup_dir="unbacked_warmup",
         bundleable=True, served=True, bench_title="guardscope mark_unbacked plan"),
    Plan("export", "export_dims.py", "torch.export Dim bounds",
         bench_title="torch.export + AOTInductor, eager fallback"),
)

# The unbacked plan's declarative form (torch 2.13's shapes_spec, inside unbacked.py): its own
# residual warmup corpus, and its own artifact in verification.json (not a plan of its own: it
# has no module, bundle or bench strategy).
SHAPES_SPEC = "shapes_spec"
SPEC_WARMUP_DIR = "unbacked_spec_warmup"

BY_NAME = {plan.name: plan for plan in PLANS}
NAMES = tuple(plan.name for plan in PLANS)  # also the order ties between fixes are broken in
WARMUP, UNBACKED, EXPORT = NAMES  # for code that handles one plan in particular
BUNDLED = tuple(plan.name for plan in PLANS if plan.bundleable)
SERVED = tuple(plan.name for plan in PLANS if plan.served)

# What emit-warmup can plan (``--only``), in the order it plans them: the warmup first (the plan to
# deploy, and the yardstick the others' graphs are compared with), the shapes_spec form last (its
# replay compiles a graph for each size of every dim it leaves static: often the most).
PLANNABLE = (*NAMES, SHAPES_SPEC)
# fixes.json's status of a plan emit-warmup was not asked to plan (``--only``): no module written.
NOT_PLANNED = "not planned"

MODULES = {plan.name: plan.module for plan in PLANS}
# The plan each verified artifact is made from (the shapes_spec form is unbacked.py's).
SOURCE_PLAN = {**{name: name for name in NAMES}, SHAPES_SPEC: UNBACKED}

# The warmup plan's graphs compiled ahead of time (guardscope precompile DIR): not a plan of its
# own (warmup.py loads them), but a way of serving bench measures beside the others.
PRECOMPILED = "precompiled"

# What guardscope bench measures: the two baselines, then every plan, then the precompiled warmup.
EAGER, COMPILE = "eager", "compile"  # plain eager, and torch.compile with nothing done before serving
BASELINES = (EAGER, COMPILE)
STRATEGIES = BASELINES + NAMES + (PRECOMPILED,)
# The generated module each strategy sets up with.
STRATEGY_MODULES = {**MODULES, PRECOMPILED: MODULES[WARMUP]}
