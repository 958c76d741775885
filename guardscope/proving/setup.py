"""Applying a plan in this process, and the fresh compile caches a measured set-up starts from:
shared by ``verify``, ``bundling`` and ``bench``, so set-up is timed the same way everywhere.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

from .. import plans
from ..errors import GuardscopeError
from .isolation import import_file

CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


# --- fresh compile caches ---------------------------------------------------------------------------


@contextlib.contextmanager
def isolated_caches() -> Iterator[dict[str, str]]:
    """Environment variables pointing torch's compile caches at new, empty folders (removed on
    exit): a child started with them compiles as a fresh machine would."""
    root = Path(tempfile.mkdtemp(prefix="guardscope-caches-"))
    try:
        env = {}
        for variable in CACHE_VARIABLES:
            folder = root / variable.split("_")[0].lower()
            folder.mkdir()
            env[variable] = str(folder)
        yield env
    finally:
        shutil.rmtree(root, ignore_errors=True)


def cache_dirs_empty() -> bool:
    """True when every cache folder variable is set and names an empty (or missing) folder."""
    for variable in CACHE_VARIABLES:
        value = os.environ.get(variable)
        if not value:
            return False
        folder = Path(value)
        if folder.exists() and any(folder.iterdir()):
            return False
    return True


def set_up_plan(name: str, out_dir: Path, model: Any, options: Any, *, use_bundle: bool,
                warm_sample: Any = None, use_precompiled: bool = False) -> tuple[Any, Any, float, dict | None]:
    """Apply a plan as its module's docstring says, in this process: configure (unbacked), compile,
    load the compile-cache bundle (``use_bundle``) or the precompiled graphs (``use_precompiled``,
    the warmup plan: when they load, the warmup's samples run through them), run the warmup. Returns (module, runner,
    set-up seconds, what the bundle or precompiled load did).

    Set-up is timed the same way everywhere guardscope reports it (verify, bundle, bench): from a
    warm device — ``warm_sample``, when given, runs once eagerly first, untimed (see
    :meth:`guardscope.replay.runner.Runner.warm_device`) — to the end of the warmup with the device
    synchronised: the bundle load, every compile (inductor's own imports included) and the warmup
    forwards."""
    from .. import torch_compat
    from ..replay.runner import Runner

    spec = name == plans.SHAPES_SPEC  # unbacked.py's dims through torch.compile(SPEC_KEYWORD=...)
    module = import_file(out_dir / plans.MODULES[plans.SOURCE_PLAN[name]])
    if name in (plans.UNBACKED, plans.SHAPES_SPEC):
        module.configure()
    if spec:
        # the keyword its usage line names must be the one this torch takes (compile_model uses that)
        written, taken = getattr(module, "SPEC_KEYWORD", None) or "shapes_spec", torch_compat.spec_support()
        if written != taken.keyword:
            raise GuardscopeError(f"{plans.MODULES[plans.UNBACKED]} compiles with torch.compile({written}=...), but "
                                  + (f"this torch takes {taken.keyword}=" if taken.keyword else str(taken.reason)))
        options = replace(options, shapes_spec=tuple(tuple(d) for d in module.SPEC_DIMS), dynamic=None)
        check_spec(module.shapes_spec(), options.shapes_spec)
    runner = Runner(model, options)
    if warm_sample is not None:
        runner.warm_device(warm_sample)
    started = time.perf_counter()
    load = None
    if use_precompiled:
        load = module.load_precompiled(runner.compiled, options.device, options.grad_mode).to_json()
    elif use_bundle:
        load = module.load_bundle(runner.compiled, options.device).to_json()
    # Loaded precompiled graphs then serve the warmup's samples: their kernels load there.
    module.warmup(runner.compiled, device=options.device, grad_mode=options.grad_mode, bundle=False,
                  **({"spec": True} if spec else {}), **precompiled_off(module))
    torch_compat.synchronize(runner.device)
    return module, runner, time.perf_counter() - started, load


def precompiled_off(module: Any) -> dict[str, bool]:
    """The keyword that keeps a warmup module from loading its precompiled graphs (the plan itself
    is what is set up); nothing for a module generated before they existed."""
    return {"precompiled": False} if hasattr(module, "load_precompiled") else {}


def check_spec(made: Any, dims: tuple[tuple[str, int, int], ...]) -> None:
    """The module's own shapes_spec() must be the spec guardscope replays with (the proof
    compiles with the latter): the same tree, the same unbacked dims (each ShapeVar's id aside)."""
    from .. import torch_compat

    def text(spec: Any) -> str:
        return re.sub(r"#\d+", "", repr(spec))

    if text(made) != text(torch_compat.shapes_spec_of(dims)):
        raise GuardscopeError(f"unbacked.py's shapes_spec() differs from its SPEC_DIMS:\n{text(made)}")
