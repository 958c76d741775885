"""Which model a corpus was recorded from: the shape of its weights, never their values.

A manifest names its model by spec, and an analysis builds whatever that spec (or ``--model``)
gives on the day it runs. Dynamo guards on the weights too (their sizes and dtypes, as inputs of
the graph or as constants), and the model's config decides the code path, so a replay against
another configuration (a smaller test config, float32 instead of the bfloat16 that served)
catalogs another model's compiles without saying so. A recorder wrapped around the served model
keeps a :class:`~guardscope.corpus.storage.format.ModelPrint` of it in the manifest (``"recorded_model"``): the module's class,
how many parameter and buffer tensors it holds, how many elements, their dtypes, and a digest of
every tensor's name, size and dtype. The device is left out: a corpus recorded on a GPU replays
on the CPU. :func:`recorded_model_warning` compares it with the model an analysis builds.

A module with lazy parameters (``torch.nn.LazyLinear``, PyG's ``in_channels=-1``) has no sizes
before its first call; its print is not taken, and nothing is compared against one.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from ... import torch_compat
from ...errors import CorpusError
from .format import ModelPrint


def module_of(model: Any) -> torch.nn.Module | None:
    """The module behind ``model``: the module itself, the one ``torch.compile`` wrapped, the
    module a bound method (``model.forward``, compiled or wrapped by ``functools.wraps``
    decorators) belongs to; None when there is none."""
    target, seen = model, 0
    while target is not None and seen < 32:
        if isinstance(target, torch.nn.Module):
            # torch.compile(module) gives an OptimizedModule around the user's module.
            wrapped = torch_compat.compiled_module_original(target)
            return target if wrapped is None else module_of(wrapped)
        owner = getattr(target, "__self__", None)
        if isinstance(owner, torch.nn.Module):
            return module_of(owner)
        target, seen = getattr(target, "__wrapped__", None) or torch_compat.compiled_function_original(target), seen + 1
    return None


def model_print(model: Any) -> ModelPrint | None:
    """The print of the module behind ``model`` (:func:`module_of`), or None when there is no
    module or some of its parameters are still lazy."""
    module = module_of(model)
    if module is None:
        return None
    lines, elements, dtypes = [], 0, set()
    for kind, named in (("parameter", module.named_parameters()), ("buffer", module.named_buffers())):
        for name, tensor in named:
            if torch.nn.parameter.is_lazy(tensor):
                return None
            dtype = torch_compat.dtype_name(tensor.dtype)
            lines.append(f"{kind} {name} {list(tensor.shape)} {dtype}")
            elements += tensor.numel()
            dtypes.add(dtype)
    digest = hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()
    return ModelPrint(type(module).__name__, len(lines), elements, tuple(sorted(dtypes)), digest)


def as_model_print(source: Any) -> ModelPrint | None:
    """What a writer or recorder keeps of its ``recorded_from`` argument: a :class:`ModelPrint`
    as given, else the print of the module behind it; None for None. A value with no module
    behind it is a :class:`CorpusError` (it names what was given)."""
    if source is None or isinstance(source, ModelPrint):
        return source
    module = module_of(source)
    if module is None:
        raise CorpusError(
            f"recorded_from must be the served model (a torch.nn.Module, its compiled form or a bound "
            f"method of it such as model.forward), got a {type(source).__name__}"
        )
    return model_print(module)


def recorded_model_warning(recorded: ModelPrint | None, model: Any) -> str | None:
    """A warning when the model an analysis built is not the one the corpus was recorded from;
    None when they match or either side has no print."""
    current = model_print(model)
    if recorded is None or current is None or (current.sha256, current.cls) == (recorded.sha256, recorded.cls):
        return None
    differs = [what for what, same in (
        ("classes", current.cls == recorded.cls),
        ("dtypes", current.dtypes == recorded.dtypes),
        ("sizes", (current.tensors, current.elements) == (recorded.tensors, recorded.elements)),
    ) if not same]
    if current.sha256 != recorded.sha256 and differs in ([], ["classes"]):
        differs.append("tensor names, sizes or dtypes")  # the same totals, other tensors
    return (
        f"the corpus was recorded from {recorded.describe()}, but the model spec gives "
        f"{current.describe()}: their {' and '.join(differs)} differ, so the analysis catalogs the "
        "compiles of another model than production's (guards on its weights and the code its config "
        "takes may differ); analyse with the recorded configuration (--model SPEC), unless the two are "
        "known to take the same code"
    )


__all__ = ["as_model_print", "model_print", "module_of", "recorded_model_warning"]
