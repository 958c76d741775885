"""torch.export and AOTInductor: an exported program compiled and loaded with AOTInductor, whether
it accepts a call (:func:`export_input_checker`: an AOTInductor model does not check its inputs),
and whether torch.export refused the Dims and said how to fix them."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch

from ..text import message_line


@contextlib.contextmanager
def no_leaked_export_hooks() -> Iterator[None]:
    """Around a ``torch.export`` call: the global ``nn.Module`` buffer-registration hooks it left
    registered are removed when it ends.

    torch.export's non-strict trace registers such a hook (``register_buffer_assignment_hook``)
    and, in torch 2.10.0, 2.11.0 and 2.12.1, removes it only when the trace succeeds; 2.13.0 and
    2.14.1 remove it in a ``finally`` (versions read: ``torch/export/_trace.py``). A failed export
    (a model torch.export refuses) there left it for the life of the process, and every later
    buffer assignment in a compiled forward (``self.calls = self.calls + 1``) broke the graph:
    analyses and plain ``torch.compile`` in that process compiled more graphs than production.
    """
    import torch.nn.modules.module as module

    hooks = getattr(module, "_global_buffer_registration_hooks", None)
    before = set(hooks) if hooks is not None else set()
    try:
        yield
    finally:
        for key in [key for key in (hooks or {}) if key not in before]:
            del hooks[key]


def aoti_compile_and_load(program: Any, package_path: str) -> Callable[..., Any]:
    """Compile an ``ExportedProgram`` with AOTInductor into a ``.pt2`` package and load it.

    ``torch._inductor.aoti_compile_and_package(program, package_path=...)`` and
    ``aoti_load_package(path)`` have these signatures from torch 2.6 on (2.11 and 2.13 included);
    the loaded model takes the exported call's ``(*args, **kwargs)``.
    """
    import torch._inductor

    path = torch._inductor.aoti_compile_and_package(program, package_path=package_path)
    return torch._inductor.aoti_load_package(path)


def export_input_checker(program: Any) -> Callable[[tuple, dict], str | None]:
    """``check(args, kwargs)``: None when ``program`` accepts the call, else why not.

    An AOTInductor model does not check its inputs (unless AOTI_RUNTIME_CHECK_INPUTS=1 was set
    when it was compiled): a call outside the exported bounds must be caught before it runs.
    This uses the exported program's own check (``ExportedProgram._check_input_constraints``:
    ranges of the Dims, dims that share a Dim, static sizes; torch 2.3+) after flattening the call
    as ``torch.export`` does (``reorder_kwargs`` + ``tree_flatten_with_path``), plus each
    tensor's dtype and device, which that check leaves out, and then the guards
    ``program.module()`` runs before its graph (its ``_guards_fn``, torch 2.9+): a guard torch
    keeps beside the Dims' ranges (``1 + (images.size()[3] - 1) // 32 != 1`` under a derived Dim
    whose range still says 32) refuses calls the ranges accept.
    """
    import torch.utils._pytree as pytree
    from torch.export._tree_utils import reorder_kwargs
    from torch.export.graph_signature import InputKind

    in_spec = program.call_spec.in_spec
    # Resolved now, so a torch without it fails the set-up instead of sending every call to eager.
    check_constraints = program._check_input_constraints
    guards = getattr(program.module(), "_guards_fn", None)  # called with the flattened user inputs
    placeholders = [node for node in program.graph.nodes if node.op == "placeholder"]
    examples = [
        node.meta.get("val")
        for node, spec in zip(placeholders, program.graph_signature.input_specs)
        if spec.kind == InputKind.USER_INPUT
    ]

    def check(args: tuple, kwargs: dict) -> str | None:
        try:
            flat, spec = pytree.tree_flatten_with_path((tuple(args), reorder_kwargs(kwargs, in_spec)))
        except Exception as exc:
            return message_line(exc, 300)
        if spec != in_spec:
            return "the call's arguments are structured unlike the exported example's"
        for (path, value), example in zip(flat, examples):
            if isinstance(value, torch.Tensor) and isinstance(example, torch.Tensor):
                if value.dtype != example.dtype or value.device.type != example.device.type:
                    return (f"{pytree.keystr(path)} is {value.dtype} on {value.device}, exported for "
                            f"{example.dtype} on {example.device}")
        try:
            check_constraints(flat)
            if guards is not None:
                guards(*(value for _, value in flat))
        except Exception as exc:
            return message_line(exc, 300)
        return None

    return check


def is_constraint_violation(exc: BaseException) -> bool:
    """Whether torch.export rejected the Dims and said how to fix them: a
    ``torch._dynamo.exc.UserError`` (torch 2.1 - 2.14) whose message lists ``Suggested fixes:``
    (``ShapeEnv``'s ``prettify_results``, torch 2.3+)."""
    from torch._dynamo.exc import UserError

    return isinstance(exc, UserError) and "Suggested fixes:" in str(exc)
