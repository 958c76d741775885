"""torch's ahead-of-time compile of a module: one fullgraph graph per input, saved with its
guards and loaded in a fresh process without Dynamo tracing anything.

Read in torch 2.13.0's source (experimental and private there; check again for each release):

* ``OptimizedModule._aot_compile(list[ModelInput])`` (``torch/_dynamo/eval_frame.py``): one
  ``aot_compile_fullgraph`` per ``torch._dynamo.aot_compile.ModelInput(args, kwargs, contexts)``,
  each traced inside its contexts; ``compiled.forward`` becomes an ``AOTCompiledModel`` whose
  ``compiled_results`` are ``AOTCompiledFunction`` s. It needs ``fullgraph=True`` and
  ``torch._dynamo.config.enable_aot_compile`` (True by default in 2.13; torch 2.11 has the same
  methods with the switch off: guardscope turns it on around its own calls).
* ``_save_aot_compiled_module()`` returns the pickled graphs (guards included);
  ``_load_aot_compiled_module(data)`` on a fresh ``torch.compile(module)`` restores them.
* Three behaviours guardscope owns rather than passes on:
  - ``AOTCompiledModel.__call__`` runs the first graph when no graph's guards accept a call,
    which raises the guard failure: there is no fallback to compiling. guardscope dispatches
    itself (:func:`graph_accepts`, :func:`run_graph`), each graph's own check switched off
    (``AOTCompiledFunction.disable_guard_check``).
  - ``aot_compile_fullgraph`` is called without the compile's ``dynamic=``: the graphs are
    static unless the trace runs inside ``torch._dynamo.eval_frame.set_enable_dynamic`` (measured
    on the seed GNN: static graphs served 5 of the first 60 calls, dynamic ones all of them).
  - Built inside ``torch.inference_mode()``, the saved tensor guards still expect a normal
    tensor's autograd dispatch keys, which a check made inside inference mode never sees (its
    thread-local state excludes them): every call under inference mode fails. The check is made
    with inference mode off and grad off (:func:`graph_accepts`), where those keys are the
    tensor's own again, and the graph (an inference graph) then runs in the caller's mode. A
    tensor created inside inference mode still fails the check: it has no autograd keys at all.

The saved graphs hold inductor's generated source, not the kernels compiled from it: a process
with empty caches compiles every CPU kernel again on load (the seed GNN's 22 C++ kernels: 24.8 s
against 2.8 s with them in the cache). :func:`pack_artifact` therefore keeps the build's kernel
cache files (inductor's and triton's folders, lock files left out) beside the graphs, and the
loader puts each one that is missing into this process's cache folders
(:func:`kernel_cache_dirs`), where
inductor's loader finds it by its source's hash (the device name in the manifest keeps a build
to machines of its kind).

Nothing here is in torch 2.11's public API; :func:`aot_compile_missing` says what the installed
torch lacks, by looking for the names (never by its version string).
"""

from __future__ import annotations

import contextlib
import io
import os
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

import torch

from .versions import torch_version

# What guardscope calls, by where it lives: the feature test reads these names.
_MODULE_METHODS = ("_aot_compile", "_save_aot_compiled_module", "_load_aot_compiled_module")
_AOT_NAMES = ("ModelInput", "AOTCompiledModel", "AOTCompiledFunction")


def aot_compile_missing() -> str | None:
    """Why this torch cannot precompile a module (the first name it lacks), or None when it can."""
    try:
        from torch._dynamo import aot_compile
        from torch._dynamo.eval_frame import OptimizedModule
    except ImportError as exc:
        return f"torch {torch_version()} has no torch._dynamo.aot_compile ({exc})"
    for name in _AOT_NAMES:
        if not hasattr(aot_compile, name):
            return f"torch {torch_version()} has no torch._dynamo.aot_compile.{name}"
    for name in _MODULE_METHODS:
        if not hasattr(OptimizedModule, name):
            return f"torch {torch_version()} has no OptimizedModule.{name} (torch's AOT compile of a module)"
    if not hasattr(aot_compile.AOTCompiledFunction, "disable_guard_check"):
        return f"torch {torch_version()} has no AOTCompiledFunction.disable_guard_check"
    if not hasattr(torch._dynamo.config, "enable_aot_compile"):
        return f"torch {torch_version()} has no torch._dynamo.config.enable_aot_compile"
    return None


def _enabled() -> Any:
    """torch's AOT compile switched on for the block: on by default in 2.13, off in 2.11 (which has
    the same methods behind it)."""
    return torch._dynamo.config.patch(enable_aot_compile=True)


def inductor_caches_off() -> str | None:
    """Why inductor's caches are off in this process (the AOT compile saves through them), or None."""
    import os

    if os.environ.get("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "") not in ("", "0"):
        return "TORCHINDUCTOR_FORCE_DISABLE_CACHES is set"
    from torch._inductor import config

    if getattr(config, "force_disable_caches", False):
        return "torch._inductor.config.force_disable_caches is on"
    return None


@contextlib.contextmanager
def dynamic_shapes(dynamic: bool | None) -> Iterator[None]:
    """The block traces as ``torch.compile(dynamic=dynamic)`` would (``None``: Dynamo's default,
    static first); torch's AOT trace does not apply the compile's own ``dynamic``."""
    if dynamic is None:
        yield
        return
    from torch._dynamo.eval_frame import set_enable_dynamic

    with set_enable_dynamic(dynamic):
        yield


def aot_compile_module(compiled: Any, inputs: list[tuple[tuple, dict, list[Any]]]) -> list[Any]:
    """One graph per ``(args, kwargs, contexts)`` of ``compiled`` (a ``torch.compile``d module,
    ``fullgraph=True``), in order, each traced inside its contexts (context managers, or
    callables making them, so a trace that restarts can enter them again); returns the graphs (torch's ``AOTCompiledFunction`` s).
    Raises what torch raises: a graph break (``Unsupported``), a backend that cannot serialize
    (``RuntimeError``)."""
    from torch._dynamo.aot_compile import ModelInput
    from torch._dynamo.exc import RestartAnalysis

    # Dynamo's own compile traces again when a trace asks for it (RestartAnalysis: e.g. a float
    # scalar it first tensorified, as ``images.float() / 255.0`` under dynamic shapes); torch's
    # AOT trace raises it instead, having recorded what the next trace must do: trace again.
    for attempt in range(_RESTARTS + 1):
        models = [ModelInput(args, kwargs, [_fresh(context) for context in contexts]) for args, kwargs, contexts in inputs]
        try:
            with _enabled():
                compiled._aot_compile(models)
            break
        except RestartAnalysis:
            if attempt == _RESTARTS:
                raise
    return list(compiled.forward.compiled_results)


_RESTARTS = 3


def _fresh(context: Any) -> Any:
    """A context manager that can be entered once more: ``torch.inference_mode()`` and the
    generator-based ones cannot be entered twice, so the caller passes factories (callables)."""
    return context() if callable(context) and not hasattr(context, "__enter__") else context


def save_aot_module(compiled: Any) -> bytes:
    """The bytes of the graphs :func:`aot_compile_module` made (guards included)."""
    with _enabled():
        return bytes(compiled._save_aot_compiled_module())


def load_aot_graphs(compiled: Any, data: bytes) -> list[Any]:
    """The graphs saved in ``data``, loaded for ``compiled`` (a ``torch.compile``d module of the
    same model), each with its own guard check off (the caller dispatches). ``compiled.forward``
    is left as it was: the caller installs its dispatch over the graphs."""
    before = compiled.__dict__.get("forward")
    with _enabled():
        compiled._load_aot_compiled_module(data)
    graphs = list(compiled.forward.compiled_results)
    if before is None:
        compiled.__dict__.pop("forward", None)
    else:
        compiled.forward = before
    for graph in graphs:
        graph.disable_guard_check()
    return graphs


@contextlib.contextmanager
def _checking_mode() -> Iterator[None]:
    """Where a graph's guards are checked: inference mode off (with grad off, as inference mode
    has it) when the caller is in inference mode; see the module docstring."""
    if torch.is_inference_mode_enabled():
        with torch.inference_mode(False), torch.no_grad():
            yield
    else:
        yield


def graph_accepts(graph: Any, model: Any, args: tuple, kwargs: dict) -> bool:
    """Whether ``graph``'s guards accept ``model.forward(*args, **kwargs)`` now."""
    with _checking_mode():
        return bool(graph.guard_check(model, *args, **kwargs))


def graph_rejection(graph: Any, model: Any, args: tuple, kwargs: dict) -> str:
    """The first guard of ``graph`` that ``model.forward(*args, **kwargs)`` fails, as torch words it."""
    manager = getattr(getattr(graph, "_artifacts", None), "guard_manager", None)
    if manager is None:
        return "its guards"
    with _checking_mode():
        found = manager.check_verbose(graph.prepare_f_locals(model, *args, **kwargs))
    parts = list(getattr(found, "verbose_code_parts", None) or [])
    return str(parts[0]) if parts else "its guards"


def run_graph(graph: Any, model: Any, args: tuple, kwargs: dict) -> Any:
    """Run a loaded graph on a call its guards accepted (no check of its own)."""
    return graph(model, *args, **kwargs)


# --- the artifact: the graphs and the kernels compiled for them -------------------------------------

GRAPHS_MEMBER = "graphs.bin"
KERNELS_PREFIX = "kernels"


def kernel_cache_dirs() -> dict[str, Path]:
    """This process's kernel cache folders by name: inductor's (``TORCHINDUCTOR_CACHE_DIR`` or
    torch's default) and triton's when ``TRITON_CACHE_DIR`` names one outside it."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    folders = {"inductor": Path(cache_dir())}
    triton = os.environ.get("TRITON_CACHE_DIR")
    if triton and not Path(triton).resolve().is_relative_to(folders["inductor"].resolve()):
        folders["triton"] = Path(triton)
    return folders


def pack_artifact(graphs: bytes, kernels: dict[str, list[tuple[str, bytes, int]]]) -> bytes:
    """One zip of the saved graphs and the kernel cache files (``{folder name: [(relative path,
    bytes, mode)]}``), in the given order with fixed times. Pure."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        archive.writestr(zipfile.ZipInfo(GRAPHS_MEMBER, date_time=(1980, 1, 1, 0, 0, 0)), graphs)
        for name, files in sorted(kernels.items()):
            for relative, data, mode in files:
                member = zipfile.ZipInfo(f"{KERNELS_PREFIX}/{name}/{relative}", date_time=(1980, 1, 1, 0, 0, 0))
                member.external_attr = (mode & 0o777) << 16
                archive.writestr(member, data)
    return buffer.getvalue()


def unpack_artifact(data: bytes) -> tuple[bytes, list[tuple[str, str, bytes, int]]]:
    """The saved graphs of a :func:`pack_artifact` zip and its kernel files as ``(folder name,
    relative path, bytes, mode)`` (a member leaving its folder is dropped). Pure."""
    kernels = []
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        graphs = archive.read(GRAPHS_MEMBER)
        for member in archive.infolist():
            parts = PurePosixPath(member.filename).parts
            if len(parts) < 3 or parts[0] != KERNELS_PREFIX or ".." in parts:
                continue
            kernels.append((parts[1], "/".join(parts[2:]), archive.read(member), (member.external_attr >> 16) & 0o777))
    return graphs, kernels
