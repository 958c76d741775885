"""Drift (issue 52): every torch name guardscope/torch_compat reads is listed here, and each is
checked on the installed torch, so a release that moves one fails a test naming it instead of
giving a wrong answer. No compile: what only a compiled object carries (cache entries, a compiled
wrapper's attributes) is checked in tests/integration/test_torch_internals.py.

``INTERNALS`` maps each dotted name to the torch_compat module that reads it. A name that only some
supported releases have is *gated*: the gate named beside it must say whether this torch has it
(``GATES``), and the name's absence is then no failure. Everything else must resolve.
``test_every_torch_name_torch_compat_reads_is_listed`` scans torch_compat's source (imports,
attribute chains, ``getattr``/``hasattr`` with a constant name) and fails on a name not listed here,
so a new read cannot land without its drift check.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import torch

from guardscope import torch_compat
from guardscope.torch_compat.cudagraphs import _skip_logger_name
from guardscope.torch_compat.dynamo_config import DYNAMO_SETTINGS
from guardscope.torch_compat.logs import terminal_handler_types

from ..paths import REPO

TORCH_COMPAT = REPO / "guardscope" / "torch_compat"
SPEC = "torch.fx.experimental.dynamic_spec"

# dotted name -> the torch_compat module(s) reading it
INTERNALS: dict[str, str] = {
    # compile_cache
    "torch._dynamo.utils.counters": "compile_cache, measurements",
    "torch._dynamo.utils.counters.get": "cudagraphs",
    "torch._inductor.list_mode_options": "compile_cache, cudagraphs",
    "torch.compiler": "compile_cache",
    "torch.compiler.save_cache_artifacts": "compile_cache",
    "torch.compiler.load_cache_artifacts": "compile_cache",
    "torch._TorchCompileInductorWrapper": "compile_cache",
    "torch._TorchCompileWrapper": "compile_cache",
    # cudagraphs
    "torch._inductor.config.graph_partition": "cudagraphs",
    "torch._inductor.config.triton.cudagraph_skip_dynamic_graphs": "cudagraphs",
    "torch._inductor.scheduler.get_scheduler_node_symbol_uses": "cudagraphs",
    "torch._logging._internal.log_registry": "cudagraphs, logs",
    "torch._inductor.cudagraph_utils": "cudagraphs",
    "torch._inductor.cudagraph_utils.log_cudagraph_skip_and_bump_counter": "cudagraphs",
    "torch._inductor.cudagraph_utils.perf_hint_log": "cudagraphs",
    "torch._logging._internal.log_registry.get_artifact_log_qnames": "cudagraphs",
    "torch._logging._internal.log_registry.get_log_qnames": "logs",
    # dtypes
    "torch.dtype": "dtypes, guard_columns",
    # dynamo_config
    "torch._dynamo.config._config": "dynamo_config",
    "torch._dynamo.config.recompile_limit": "dynamo_config",
    "torch._dynamo.config.accumulated_recompile_limit": "dynamo_config",
    "torch._dynamo.config.fail_on_recompile_limit_hit": "dynamo_config",
    "torch._dynamo.guards.profile_guard_manager": "dynamo_config",
    "torch._dynamo.reset": "dynamo_config",
    "torch.fx.experimental._config.use_duck_shape": "dynamo_config",
    # export
    "torch.Tensor": "export, guard_columns",
    "torch._dynamo.exc.UserError": "export",
    "torch._inductor.aoti_compile_and_package": "export",
    "torch._inductor.aoti_load_package": "export",
    "torch.export._tree_utils.reorder_kwargs": "export",
    "torch.export.graph_signature.InputKind.USER_INPUT": "export",
    "torch.utils._pytree.keystr": "export",
    "torch.utils._pytree.tree_flatten_with_path": "export",
    # compile_events
    "torch._dynamo.utils.get_compilation_metrics": "compile_events",
    "torch._dynamo.callback.callback_handler.register_end_callback": "compile_events",
    "torch._dynamo.callback.callback_handler.remove_start_callback": "compile_events, frames",
    "torch._dynamo.callback.callback_handler.remove_end_callback": "compile_events",
    "torch._dynamo.callback.CallbackTrigger.LAZY_BACKWARD": "compile_events",
    # frames
    "torch._C._dynamo.eval_frame.set_code_exec_strategy": "frames",
    "torch._dynamo.callback.callback_handler.register_start_callback": "frames",
    "torch._dynamo.callback.callback_handler.start_callbacks": "frames",
    "torch._dynamo.eval_frame._debug_get_cache_entry_list": "frames, guard_columns, guards",
    "torch._dynamo.types.FrameAction.SKIP": "frames",
    "torch._dynamo.types.FrameExecStrategy": "frames",
    "torch._dynamo.utils.orig_code_map": "frames",
    "torch._dynamo.utils.orig_code_map.refs": "frames",
    "torch._dynamo.utils.orig_code_map.values": "frames",
    # grad_modes
    "torch.autograd.grad": "grad_modes",
    "torch.enable_grad": "grad_modes",
    "torch.inference_mode": "grad_modes, guard_columns",
    "torch.is_grad_enabled": "grad_modes",
    "torch.is_inference_mode_enabled": "grad_modes",
    "torch.no_grad": "grad_modes",
    "torch.ones_like": "grad_modes",
    # guard_columns
    "torch._C._dispatch_keys": "guard_columns",
    "torch._C._dispatch_tls_local_exclude_set": "guard_columns",
    "torch._C._dispatch_tls_local_include_set": "guard_columns",
    "torch.device": "guard_columns, compile_cache, measurements",
    "torch.empty": "guard_columns",
    # guards
    "torch._dynamo.eval_frame.OptimizedModule": "guards",
    "torch.nn.Module": "guards",
    # export
    "torch.nn.modules.module._global_buffer_registration_hooks": "export",
    # logs
    "torch.__file__": "logs",
    "torch._logging._internal.TorchLogsFormatter": "logs",
    "torch._logging._internal._StderrHandler": "logs",
    "torch._logging._internal._is_torch_handler": "logs",
    "torch._logging._internal.trace_log": "logs",
    "torch.compiler.disable": "logs",
    # measurements
    "torch.cuda.get_device_name": "measurements, compile_cache",
    "torch.cuda.synchronize": "measurements",
    # shapes_specs
    "torch.__version__": "shapes_specs, versions",
    "torch.compile": "shapes_specs, versions",
    f"{SPEC}.DictSpec": "shapes_specs",
    f"{SPEC}.ObjectSpec": "shapes_specs",
    f"{SPEC}.SeqSpec": "shapes_specs",
    f"{SPEC}.ShapeVar": "shapes_specs",
    f"{SPEC}.ShapesSpec": "shapes_specs",
    f"{SPEC}.TensorSpec": "shapes_specs",
    # stances
    "torch.compiler.set_stance": "stances, versions",
    "torch.fx._symbolic_trace": "stances",
    "torch.fx._symbolic_trace.is_fx_symbolic_tracing": "stances",
    # aot_compile (precompiled warmups; torch 2.13's experimental AOT compile of a module)
    "torch._dynamo.aot_compile.ModelInput": "aot_compile",
    "torch._dynamo.aot_compile.AOTCompiledModel": "aot_compile",
    "torch._dynamo.aot_compile.AOTCompiledFunction.disable_guard_check": "aot_compile",
    "torch._dynamo.eval_frame.OptimizedModule._aot_compile": "aot_compile",
    "torch._dynamo.eval_frame.OptimizedModule._save_aot_compiled_module": "aot_compile",
    "torch._dynamo.eval_frame.OptimizedModule._load_aot_compiled_module": "aot_compile",
    "torch._dynamo.config.enable_aot_compile": "aot_compile",
    "torch._dynamo.eval_frame.set_enable_dynamic": "aot_compile",
    "torch._dynamo.exc.RestartAnalysis": "aot_compile",
    "torch._dynamo.config.patch": "aot_compile",
    "torch._inductor.config.force_disable_caches": "aot_compile",
    "torch._inductor.runtime.cache_dir_utils.cache_dir": "aot_compile",
    # versions
    "torch._dynamo.variables.builder._parse_source_entry": "versions",
    "torch.compiler.config": "versions",
    "torch.compiler.config.unbacked_sources": "versions",
}


def _spec_module() -> bool:
    return "has no torch.fx.experimental.dynamic_spec" not in (torch_compat.spec_support().reason or "")


# name -> what torch_compat's gate says of this torch: True where it uses the name. Versions read:
# the docstrings of the gates. The gate must be True exactly where the name is there, except for
# the names in PARTIAL_GATES, which the gate needs with another (2.9.1 to 2.12.1 declare
# unbacked_sources but have no _parse_source_entry): there a True gate needs the name, no more.
GATES = {
    **{f"{SPEC}.{name}": _spec_module for name in ("DictSpec", "ObjectSpec", "SeqSpec", "ShapeVar", "ShapesSpec",
                                                   "TensorSpec")},
    "torch.compiler.config.unbacked_sources": torch_compat.supports_unbacked_sources,
    "torch._dynamo.variables.builder._parse_source_entry": torch_compat.supports_unbacked_sources,
    "torch._logging._internal._StderrHandler": lambda: len(terminal_handler_types()) > 1,
    "torch.compiler.set_stance": torch_compat.supports_eager_on_recompile,
    **{name: lambda: torch_compat.aot_compile_missing() is None for name in (
        "torch._dynamo.aot_compile.ModelInput", "torch._dynamo.aot_compile.AOTCompiledModel",
        "torch._dynamo.aot_compile.AOTCompiledFunction.disable_guard_check",
        "torch._dynamo.eval_frame.OptimizedModule._aot_compile",
        "torch._dynamo.eval_frame.OptimizedModule._save_aot_compiled_module",
        "torch._dynamo.eval_frame.OptimizedModule._load_aot_compiled_module",
        "torch._dynamo.config.enable_aot_compile")},
    # where "skipping cudagraphs" is logged: perf_hint_log in 2.9.1 and 2.10.0 (cudagraphs_log after)
    "torch._inductor.cudagraph_utils.perf_hint_log": lambda: _skip_logger_name() is not None,
}
PARTIAL_GATES = {"torch.compiler.config.unbacked_sources", "torch._inductor.cudagraph_utils.perf_hint_log"}
# Gated by a fallback beside the read, not a supports_* function: absent, guardscope says so or
# takes the other path (each in its module's docstring). Present in 2.13.0 and 2.14.1;
# 2.9.1 has no module-level get_scheduler_node_symbol_uses.
FALLBACK = {
    "torch._inductor.scheduler.get_scheduler_node_symbol_uses",  # cudagraphs: partitions_dynamic_shapes (2.10+)
    "torch._inductor.config.graph_partition",  # cudagraphs: off where absent
    "torch.compiler.save_cache_artifacts", "torch.compiler.load_cache_artifacts",  # compile_cache: bundles refused
    "torch._TorchCompileInductorWrapper", "torch._TorchCompileWrapper",  # compile_cache: compiled_settings
    "torch._dynamo.guards.profile_guard_manager",  # dynamo_config: nothing to replace
    "torch.fx._symbolic_trace.is_fx_symbolic_tracing",  # stances: _is_fx_tracing_flag read instead
    "torch._dynamo.callback.callback_handler.start_callbacks",  # frames: registered again
    "torch.nn.modules.module._global_buffer_registration_hooks",  # export: nothing to remove
}


def resolve(name: str) -> tuple[bool, str]:
    """Import the longest importable prefix of ``name``, then read the rest as attributes;
    (found, where it stopped)."""
    parts = name.split(".")
    value, position = None, 0
    for end in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        position = end
        break
    for index in range(position, len(parts)):
        if not hasattr(value, parts[index]):
            return False, ".".join(parts[:index + 1])
        value = getattr(value, parts[index])
    return True, name


def torch_reads(path: Path) -> set[str]:
    """The torch names a module reads: imports from torch, attribute chains rooted at an import,
    ``getattr``/``hasattr`` with a constant name on one (the longest chains only)."""
    tree = ast.parse(path.read_text())
    aliases: dict[str, str] = {}
    reads: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "torch":
                    aliases[alias.asname or "torch"] = alias.name if alias.asname else "torch"
                    reads.add(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "torch":
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                reads.add(f"{node.module}.{alias.name}")

    def chain(node: ast.AST) -> str | None:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in aliases:
            return ".".join([aliases[node.id], *reversed(parts)])
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and (found := chain(node)):
            reads.add(found)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
            base = chain(node.args[0])
            if base:
                reads.add(f"{base}.{node.args[1].value}")
    return {r for r in reads if not any(other.startswith(r + ".") for other in reads)}


def test_every_torch_name_torch_compat_reads_is_listed():
    unlisted = sorted(f"{name} (guardscope/torch_compat/{path.name})" for path in sorted(TORCH_COMPAT.glob("*.py"))
                      for name in torch_reads(path) if name not in INTERNALS)
    assert not unlisted, ("torch_compat reads torch names with no drift check: add each to INTERNALS in "
                          f"tests/unit/test_torch_internals.py: {unlisted}")


@pytest.mark.parametrize("name", sorted(INTERNALS))
def test_each_internal_is_where_torch_compat_reads_it(name):
    found, stopped = resolve(name)
    readers = INTERNALS[name]
    if name in GATES:
        gate = GATES[name]()
        assert found == gate or (name in PARTIAL_GATES and found and not gate), (
            f"torch {torch.__version__}: {name} is {'present' if found else f'gone (no {stopped})'}, but the gate "
            f"guardscope.torch_compat ({readers}) uses for it says {'present' if gate else 'absent'}")
        return
    if name in FALLBACK and not found:
        pytest.skip(f"torch {torch.__version__} has no {stopped}: torch_compat.{readers} takes its fallback")
    assert found, (f"torch {torch.__version__} moved a name guardscope reads: {name} (no {stopped}), read by "
                   f"guardscope.torch_compat.{readers}")


def test_the_dynamo_settings_guardscope_records_are_torchs():
    """dynamo_config records and applies these by name (ConfigModule._config entries); torch 2.13.0
    and 2.14.1 have every one."""
    entries = torch._dynamo.config._config
    missing = [name for name in DYNAMO_SETTINGS if name not in entries]
    assert not missing, (f"torch {torch.__version__}'s torch._dynamo.config has no {missing}: "
                         "guardscope.torch_compat.dynamo_config.DYNAMO_SETTINGS names settings it no longer declares")
    assert all(hasattr(entries[name], "default") for name in DYNAMO_SETTINGS), \
        "torch._dynamo.config._config's entries have no .default (read by torch_compat.dynamo_config.dynamo_defaults)"


@pytest.mark.parametrize("dynamic", [True, False])
def test_a_compiled_callables_per_call_settings_are_torchs(dynamic):
    """held_call_settings holds what torch.compile(dynamic=...) sets around each call
    (torch._dynamo.eval_frame.make_set_enable_dynamic; the same in 2.11.0, 2.13.0 and 2.14.1)."""
    from torch._dynamo import eval_frame

    config = torch._dynamo.config
    names = ("assume_static_by_default", "automatic_dynamic_shapes")
    revert = eval_frame.make_set_enable_dynamic(dynamic)()
    try:
        made = {name: getattr(config, name) for name in names}
    finally:
        revert()
    expected = torch_compat.dynamic_call_settings(dynamic)
    assert {name: made[name] for name in expected} == expected, (
        f"torch {torch.__version__}: torch.compile(dynamic={dynamic}) sets {made} around each call, not "
        f"torch_compat.dynamic_call_settings' {expected} (guardscope.torch_compat.dynamo_config)")


def test_calls_of_a_dynamic_module_on_two_threads_leave_the_settings_as_they_were():
    """Two threads' calls of a torch.compile(dynamic=True) callable, in the order that leaked on
    torch 2.11.0 (A in, B in, A out, B out: torch's per-call save and restore, one value for the
    process there), each call inside held_call_settings as the served model makes it: the setting
    before is the setting after. Per-thread settings (2.13 on) cannot leak this way; the gate says
    which this torch is."""
    import contextvars
    import threading

    from torch._dynamo import eval_frame

    entry = torch._dynamo.config._config["assume_static_by_default"]
    assert torch_compat.supports_per_thread_config() == isinstance(entry.user_override, contextvars.ContextVar)
    before = torch._dynamo.config.assume_static_by_default
    steps = [threading.Event() for _ in range(4)]

    def call(first: bool) -> None:
        wait_in, done_in, wait_out, done_out = (steps[0], steps[1], steps[2], steps[3]) if not first else (
            None, steps[0], steps[1], steps[2])
        with torch_compat.held_call_settings(True):
            if wait_in:
                wait_in.wait(10)
            revert = eval_frame.make_set_enable_dynamic(True)()  # the call's entry
            done_in.set()
            wait_out.wait(10)
            revert()  # the call's exit
            done_out.set()

    threads = [threading.Thread(target=call, args=(first,)) for first in (True, False)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert all(step.is_set() for step in steps)
    assert torch._dynamo.config.assume_static_by_default == before
