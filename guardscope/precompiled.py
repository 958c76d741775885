"""Precompiled warmups: the warmup plan's graphs compiled ahead of time (torch's AOT compile of a
module), saved with their guards, and loaded by a new replica instead of tracing its warmup.

Making one (``guardscope precompile DIR``, :mod:`guardscope.proving.precompiling`) compiles one
fullgraph graph per warmup step, in the plan's order, with production's backend, options and
grad mode, in a fresh process with empty compile caches, and writes
``DIR/warmup.precompiled.bin`` with its manifest ``DIR/warmup.precompiled.json``.

Loading one (:func:`load_precompiled`, called by ``warmup.py``'s ``warmup()`` before anything
else): the manifest must match this torch, device, backend and settings of the compiled model,
plan and grad mode; then the graphs are loaded into the ``torch.compile``d module and
:class:`PrecompiledForward` becomes its ``forward``. A manifest that does not fit is a
:class:`PrecompiledWarning` saying why, and the warmup runs as usual (from its compile-cache
bundle when it has one).

:class:`PrecompiledForward` is guardscope's dispatch, not torch's: each call goes to the first
graph whose guards accept it, in the plan's order (general graphs first). A call no graph accepts
goes to the ordinary ``torch.compile`` path — it compiles once, is counted and logged with the
guard it failed — where torch's own dispatch would raise.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import store
from .bundle import Refusal, check_manifest, read_fitting, runtime_facts

LOG = logging.getLogger("guardscope.precompiled")


class PrecompiledWarning(RuntimeWarning):
    """A precompiled warmup is present but not used (made for another torch, device, backend,
    compile settings, plan or grad mode, unreadable, or this torch cannot load one); the warmup
    runs without it."""


@dataclass(frozen=True)
class PrecompiledLoad:
    """What :func:`load_precompiled` did: ``loaded``, ``absent`` (no artifact: warm up as usual),
    ``incompatible`` or ``unreadable`` (with the reason; a :class:`PrecompiledWarning` was issued)."""

    status: str
    file: str
    reason: str | None = None
    seconds: float = 0.0
    graphs: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --- the dispatch --------------------------------------------------------------------------------


@dataclass
class PrecompiledStats:
    """Calls a :class:`PrecompiledForward` served: by each precompiled graph, and through the
    ordinary compile path (``misses``), with the graphs those compiled and the first guard each
    failed."""

    served: list[int]
    misses: int = 0
    compiles: int = 0
    missed_guards: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"served": list(self.served), "precompiled_calls": sum(self.served), "misses": self.misses,
                "compiles": self.compiles, "missed_guards": list(self.missed_guards)}


class PrecompiledForward:
    """The ``forward`` of a compiled module serving from precompiled graphs (see the module docstring)."""

    def __init__(self, model: Any, graphs: list[Any], fallback: Callable[..., Any], *, file: str) -> None:
        from . import torch_compat

        self._compat = torch_compat
        self.model = model
        self.graphs = graphs
        self.fallback = fallback
        self.file = file
        self._lock = threading.Lock()
        self._stats = PrecompiledStats(served=[0] * len(graphs))

    def accepting(self, args: tuple, kwargs: dict) -> int | None:
        """The index of the first graph whose guards accept this call now, or None."""
        for index, graph in enumerate(self.graphs):
            if self._compat.graph_accepts(graph, self.model, args, kwargs):
                return index
        return None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        index = self.accepting(args, kwargs)
        if index is not None:
            with self._lock:
                self._stats.served[index] += 1
            return self._compat.run_graph(self.graphs[index], self.model, args, kwargs)
        return self._miss(args, kwargs)

    def _miss(self, args: tuple, kwargs: dict) -> Any:
        """The ordinary torch.compile path; a graph it compiles is counted and logged with the
        guard the call failed (of the first precompiled graph: the most general one)."""
        before = self._compat.graphs_compiled()
        started = time.perf_counter()
        result = self.fallback(*args, **kwargs)
        compiled = self._compat.graphs_compiled() - before
        with self._lock:
            self._stats.misses += 1
            self._stats.compiles += compiled
        if compiled:
            guard = self._compat.graph_rejection(self.graphs[0], self.model, args, kwargs)
            with self._lock:
                self._stats.missed_guards.append(guard)
            LOG.warning("guardscope: a call no precompiled graph of %s accepts compiled %d graph(s) in %.2f s "
                        "(it failed graph 0's guard: %s)", self.file, compiled, time.perf_counter() - started, guard)
        return result

    @property
    def stats(self) -> PrecompiledStats:
        with self._lock:
            return PrecompiledStats(list(self._stats.served), self._stats.misses, self._stats.compiles,
                                    list(self._stats.missed_guards))


def precompiled_forward(compiled: Any) -> PrecompiledForward | None:
    """The precompiled dispatch installed on a compiled module, or None."""
    found = getattr(compiled, "__dict__", {}).get("forward")
    return found if isinstance(found, PrecompiledForward) else None


# --- loading (the generated warmup module calls this) ---------------------------------------------


def manifest_path(artifact_path: str | Path) -> Path:
    path = Path(artifact_path)
    return path.with_name(path.name[: -len(store.PRECOMPILED_SUFFIX)] + store.PRECOMPILED_MANIFEST_SUFFIX)


def check_precompiled(manifest: Any, facts: dict[str, Any], grad_mode: str) -> str | None:
    """Why a precompiled warmup with this manifest must not be used here, or None. Pure.

    As a bundle's (:func:`guardscope.bundle.check_manifest`: format, torch, device, backend,
    settings, plan), then the grad mode: Dynamo guards on it, so graphs built under another one
    would serve no call."""
    reason = check_manifest(manifest, facts)
    if reason is not None:
        return reason
    if manifest.get("grad_mode") != grad_mode:
        return f"it was built for calls under {manifest.get('grad_mode')}, the warmup serves calls under {grad_mode}"
    return None


def forward_module(module: Any) -> str | None:
    """The name of the Python module that defines ``module``'s forward (the graphs refer to its
    globals by that name)."""
    return getattr(getattr(type(module), "forward", None), "__module__", None)


def alias_model_module(built: str | None, original: Any) -> None:
    """The graphs name the model's Python module as the building process imported it; a model
    loaded from a file path (``model.py:factory``) gets a name of guardscope's making there, and
    production imports the same file under its own. Where the built name cannot be imported
    here, it is made another name of this process's module of the same forward."""
    import importlib
    import sys

    here = forward_module(original)
    if not built or built == here or built in sys.modules or here not in sys.modules:
        return
    try:
        importlib.import_module(built)
    except ImportError:
        sys.modules[built] = sys.modules[here]


def load_precompiled(artifact_path: str | Path, plan: dict[str, Any], warmup_dir: str | Path, *, model: Any,
                     device: Any, grad_mode: str) -> PrecompiledLoad:
    """Load a warmup's precompiled graphs into ``model`` (the ``torch.compile``d module) when they
    were made for this torch, device, compiled model, plan and grad mode, and install
    :class:`PrecompiledForward`; say so on stderr. One that does not fit is a
    :class:`PrecompiledWarning` with the reason, and nothing changes."""
    from . import torch_compat

    path = Path(artifact_path)
    started = time.perf_counter()
    meta_path = manifest_path(path)
    if not path.is_file() and not meta_path.is_file():
        return PrecompiledLoad("absent", path.name)

    def not_used(status: str, reason: str) -> PrecompiledLoad:
        warnings.warn(f"precompiled warmup {path.name} not used: {reason}. The warmup runs without it; make a new "
                      "one on this machine with 'guardscope precompile DIR'.", PrecompiledWarning, stacklevel=3)
        return PrecompiledLoad(status, path.name, reason, round(time.perf_counter() - started, 6))

    missing = torch_compat.aot_compile_missing()
    if missing is not None:
        return not_used("incompatible", missing)
    original = torch_compat.compiled_module_original(model) if hasattr(model, "_modules") else None
    if original is None:
        return not_used("incompatible", "precompiled graphs load into a torch.compile'd nn.Module "
                                        "(torch.compile(model)), not a compiled function or method")
    found = read_fitting(path, meta_path, lambda manifest: check_precompiled(
        manifest, runtime_facts(plan, warmup_dir, model, device), grad_mode))
    if isinstance(found, Refusal):
        return not_used(found.status, found.reason)
    manifest, data = found
    alias_model_module(manifest.get("model_module"), original)
    installed = precompiled_forward(model)
    fallback = installed.fallback if installed is not None else model.forward  # loaded twice: one dispatch
    try:
        graph_bytes, kernels = torch_compat.unpack_artifact(data)
        folders = torch_compat.kernel_cache_dirs()
        for name, relative, content, mode in kernels:
            if name in folders:
                store.place_cache_file(folders[name], relative, content, mode)
        graphs = torch_compat.load_aot_graphs(model, graph_bytes)
    except Exception as exc:  # noqa: BLE001 - torch's loader: any failure means "warm up as usual"
        return not_used("unreadable", f"torch could not load it ({type(exc).__name__}: {exc})")
    model.forward = PrecompiledForward(original, graphs, fallback, file=path.name)
    seconds = round(time.perf_counter() - started, 6)
    print(f"guardscope: loaded precompiled warmup {path.name} ({len(graphs)} graphs, {len(data) / 1e6:.1f} MB, "
          f"made with torch {manifest['torch_version']} on {manifest['device_name']}) in {seconds:.2f} s",
          file=sys.stderr)
    return PrecompiledLoad("loaded", path.name, None, seconds, len(graphs))
