"""Every touch of torch internals, in one place, each gated on what the installed torch has.

guardscope supports torch 2.11 to 2.14 (docs/compat.md). Nothing else in guardscope reaches into torch's private
names; callers import from this package, whose modules hold one concern each (each module's
docstring names the private APIs it uses, and why):

* ``versions``: which torch this is, and which features it has (the tested range, ``supports_*``);
* ``dtypes``: a dtype's one spelling in guardscope's files;
* ``dynamo_config``: Dynamo's settings for a block: recompile limits, patched config (duck
  sizing), the guard-latency profile, a compiled callable's per-call settings held across threads; a reset;
* ``grad_modes``: autograd's mode around a call: the one a thread is in, a block in a given one;
* ``logs``: what torch logs: the structured trace, torch's own log lines and warnings;
* ``guards``: a code object's cache entries, their guards, Dynamo's lookup order, and what a
  compiled wrapper wraps;
* ``frames``: compile callbacks, Dynamo's code map, the recorder of every frame's graphs;
* ``stances``: ``fail_on_recompile``, ``eager_on_recompile`` for serving, the FX-tracing refusal;
* ``cudagraphs``: CUDA Graph Trees' loggers, skip count and settings;
* ``export``: whether an exported program accepts a call, constraint violations, AOTInductor;
* ``compile_cache``: compile-cache artifacts saved and loaded, cache counters, compiled settings;
* ``measurements``: device synchronisation, graphs compiled, the device's name (bench);
* ``aot_compile``: torch 2.13's ahead-of-time compile of a module (precompiled warmups): the
  feature test, building, saving and loading the graphs, and the guard check guardscope's own
  dispatch makes;
* ``shapes_specs``: torch's declarative spec (``ShapesSpec``) built from argument paths, under the
  ``torch.compile`` keyword detected (``shapes_spec=`` in 2.13, ``dynamic_shapes=`` in 2.14);
* ``compile_events``: every compile of a serving process, timed through torch's compile callbacks
  and named from Dynamo's compilation metrics (the traffic recorder's record of production's stalls);
* ``guard_columns``: a cache entry's guards as a predicate over columns of recorded calls
  (sizes, strides, offsets, ints), Dynamo's own check where a guard cannot be translated.
"""

from .versions import (check_supported_version, supports_eager_on_recompile, supports_per_call_recompile_limit,
                       supports_per_thread_config, supports_unbacked_sources, torch_version)
from .dtypes import DTYPES, dtype_name
from .dynamo_config import (DUCK_SHAPE_SETTING, DYNAMO_SETTINGS, LIMIT_SETTINGS, allow_graphs, applied_settings,
                            dynamic_call_settings, dynamo_defaults, held_call_settings,
                            dynamo_settings, is_recompile_limit_error, patched_config, raised_recompile_limit,
                            recompile_limits, reset_dynamo, warn_once, without_guard_latency_profile)
from .grad_modes import backpropagate, current_grad_mode, grad_context
from .logs import torch_logs_captured, trace_formatter, trace_logger
from .guards import (LookupOrder, cache_entries, code_of, compiled_function_original, compiled_module_original,
                     entries_by_age, first_accepting, forward_owner)
from .frames import FrameRecorder, cache_entry_total, compile_start_callback
from .compile_events import CompileObserver
from .stances import eager_on_recompile, fail_on_recompile, fx_symbolic_tracing, refused_for_fx_trace
from .cudagraphs import cudagraph_config, cudagraph_loggers, cudagraph_skip_count, mode_uses_cudagraphs
from .export import aoti_compile_and_load, export_input_checker, is_constraint_violation, no_leaked_export_hooks
from .compile_cache import (cache_device_name, compile_cache_counters, compiled_settings, load_compile_cache,
                            save_compile_cache)
from .measurements import device_name, graphs_compiled, synchronize
from .aot_compile import (aot_compile_missing, aot_compile_module, dynamic_shapes, graph_accepts, graph_rejection,
                          inductor_caches_off, kernel_cache_dirs, load_aot_graphs, pack_artifact, run_graph,
                          save_aot_module, unpack_artifact)
from .shapes_specs import (KEYWORD_DYNAMIC_SHAPES, KEYWORD_SHAPES_SPEC, SpecSupport, shapes_spec_of, spec_compile_kwargs, spec_keyword,
                           spec_support, supports_shapes_spec)
from .guard_columns import ColumnGuards, ScalarColumn, TensorColumn, column_guards

__all__ = [
    "check_supported_version", "supports_eager_on_recompile", "supports_per_call_recompile_limit",
    "supports_per_thread_config", "supports_unbacked_sources", "torch_version",
    "DTYPES", "dtype_name",
    "DUCK_SHAPE_SETTING", "DYNAMO_SETTINGS", "LIMIT_SETTINGS", "allow_graphs", "applied_settings",
    "dynamic_call_settings", "dynamo_defaults", "held_call_settings",
    "dynamo_settings", "is_recompile_limit_error", "patched_config", "raised_recompile_limit", "recompile_limits",
    "reset_dynamo",
    "warn_once", "without_guard_latency_profile",
    "backpropagate", "current_grad_mode", "grad_context",
    "torch_logs_captured", "trace_formatter", "trace_logger",
    "LookupOrder", "cache_entries", "code_of", "compiled_function_original", "compiled_module_original",
    "entries_by_age", "first_accepting", "forward_owner",
    "FrameRecorder", "cache_entry_total", "compile_start_callback",
    "CompileObserver",
    "eager_on_recompile", "fail_on_recompile", "fx_symbolic_tracing", "refused_for_fx_trace",
    "cudagraph_config", "cudagraph_loggers", "cudagraph_skip_count", "mode_uses_cudagraphs",
    "aoti_compile_and_load", "export_input_checker", "is_constraint_violation", "no_leaked_export_hooks",
    "cache_device_name", "compile_cache_counters", "compiled_settings", "load_compile_cache", "save_compile_cache",
    "device_name", "graphs_compiled", "synchronize",
    "aot_compile_missing", "aot_compile_module", "dynamic_shapes", "graph_accepts", "graph_rejection",
    "inductor_caches_off", "kernel_cache_dirs", "load_aot_graphs", "pack_artifact", "run_graph", "save_aot_module",
    "unpack_artifact",
    "KEYWORD_DYNAMIC_SHAPES", "KEYWORD_SHAPES_SPEC", "SpecSupport", "shapes_spec_of", "spec_compile_kwargs", "spec_keyword", "spec_support", "supports_shapes_spec",
    "ColumnGuards", "ScalarColumn", "TensorColumn", "column_guards",
]
