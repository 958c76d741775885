"""Drift (issue 52), the half that needs a compile: what guardscope/torch_compat reads off the
objects a compile makes (cache entries and their guard tree, a compiled wrapper, Dynamo's code map
and callbacks). Each assertion names the internal, so the release that moves one fails here with
its name instead of guardscope quietly getting None (tests/unit/test_torch_internals.py checks the
module-level names)."""

from __future__ import annotations

import torch

from guardscope import torch_compat


def double(x):
    return x * 2


class Doubler(torch.nn.Module):
    def forward(self, x):
        return x * 2


def test_a_cache_entry_carries_what_guards_frames_and_guard_columns_read():
    torch_compat.reset_dynamo()
    compiled = torch.compile(double, backend="eager", dynamic=False)
    compiled(torch.ones(3))
    getter = torch._dynamo.eval_frame._debug_get_cache_entry_list
    (entry,) = getter(double.__code__)
    version = torch.__version__
    assert hasattr(entry, "compile_id"), f"torch {version}: a cache entry has no compile_id (torch_compat.guards)"
    assert hasattr(entry, "code"), f"torch {version}: a cache entry has no code (torch_compat.frames)"
    manager = getattr(entry, "guard_manager", None)
    assert callable(getattr(manager, "check", None)), \
        f"torch {version}: a cache entry has no guard_manager.check (torch_compat.guards.cache_entries)"
    assert manager.check({"x": torch.ones(3)}) is True and manager.check({"x": torch.ones(4)}) is False, \
        f"torch {version}: guard_manager.check(f_locals) no longer answers whether the entry accepts them"
    root = getattr(manager, "root", None)
    missing = [name for name in ("get_leaf_guards", "get_child_managers", "get_epilogue_lambda_guards",
                                 "clone_manager") if not hasattr(root, name)]
    assert not missing, f"torch {version}: guard_manager.root has no {missing} (torch_compat.guard_columns)"
    (child,) = [m for m in root.get_child_managers() if "L['x']" in m.get_source()] or [None]
    assert child is not None, f"torch {version}: no child manager's get_source() names L['x'] (guard_columns)"
    texts = [t for g in child.get_leaf_guards() for t in g.verbose_code_parts()]
    assert any("check_tensor" in t for t in texts), \
        f"torch {version}: no leaf guard's verbose_code_parts() is the check_tensor text guard_columns parses: {texts}"
    entries = torch_compat.cache_entries(double.__code__)
    assert entries is not None and [cid for cid, _ in entries] == [str(entry.compile_id)], \
        "torch_compat.cache_entries read no entries off _debug_get_cache_entry_list"


def test_a_compiled_wrapper_says_what_it_wraps_and_how():
    torch_compat.reset_dynamo()
    module = Doubler()
    compiled_module = torch.compile(module, backend="eager", dynamic=True)
    assert isinstance(compiled_module, torch._dynamo.eval_frame.OptimizedModule)
    assert torch_compat.compiled_module_original(compiled_module) is module, \
        "OptimizedModule._modules['_orig_mod'] is not the compiled module (torch_compat.guards)"
    compiled_function = torch.compile(double, backend="eager")
    assert torch_compat.compiled_function_original(compiled_function) is double, \
        "a compiled function's _torchdynamo_orig_callable is not the function (torch_compat.guards)"
    settings = torch_compat.compiled_settings(compiled_module)
    assert settings is not None and settings["backend"] == "eager" and settings["dynamic"] is True, (
        f"torch_compat.compiled_settings read {settings} off OptimizedModule.dynamo_ctx.callback "
        "(compiler_name, dynamic): one of them moved")
    settings = torch_compat.compiled_settings(compiled_function)
    assert settings is not None and settings["backend"] == "eager", (
        f"torch_compat.compiled_settings read {settings} off a compiled function's closure (dynamo_ctx, "
        "callback, compiler_name): one of them moved")


def test_dynamos_code_map_and_compile_callbacks_are_where_frames_reads_them():
    torch_compat.reset_dynamo()
    started = []
    with torch_compat.compile_start_callback(lambda *args: started.append(args)):
        torch.compile(double, backend="eager")(torch.ones(2))
    assert started, "torch._dynamo.callback.callback_handler.register_start_callback's callbacks never ran"
    mapping = torch._dynamo.utils.orig_code_map
    assert isinstance(getattr(mapping, "refs", None), dict) and isinstance(getattr(mapping, "values", None), dict), \
        "torch._dynamo.utils.orig_code_map has no refs/values dicts (torch_compat.frames._code_map)"
    assert double.__code__ in [values for values in mapping.values.values()], \
        "torch._dynamo.utils.orig_code_map does not map the transformed code to the compiled function's"


class AssignsABufferThenBranchesOnData(torch.nn.Module):
    """torch.export refuses it (a branch on a tensor's value) after its trace assigned a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls = self.calls + 1
        return x * 2 if x.sum() > 0 else x


def test_a_failed_export_leaves_no_buffer_registration_hook():
    """torch 2.10 to 2.12's non-strict export removed its global buffer-registration hook only on
    success; left behind, it broke the graph of every later buffer assignment under torch.compile
    (torch_compat.no_leaked_export_hooks)."""
    from torch.nn.modules import module

    before = dict(module._global_buffer_registration_hooks)
    with torch_compat.no_leaked_export_hooks():
        try:
            torch.export.export(AssignsABufferThenBranchesOnData(), (torch.ones(3),), strict=False)
        except Exception:  # noqa: BLE001 - refused, as it must be
            pass
        else:
            raise AssertionError(f"torch {torch.__version__} exported a branch on data")
    assert dict(module._global_buffer_registration_hooks) == before
