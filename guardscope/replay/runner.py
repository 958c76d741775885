"""Running one call of a replay: a sample's arguments moved to the device and marked, run through
a fresh compile of the model, and the graph that serves it found in Dynamo's cache.

:class:`Runner` holds the compiled model for one replay (a fresh ``torch.compile`` through
:func:`~guardscope.replay.compiling.compile_model`); :meth:`Runner.prepare` turns a sample into a
:class:`Call`. :func:`check_call_fits` refuses a corpus whose calls do not fit the model's
``forward`` and :func:`check_marks` ``--mark-unbacked`` marks that cannot apply, before anything
runs; :meth:`Runner.apply_marks` applies them.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, NamedTuple

import torch

from .. import torch_compat
from ..corpus.reader import SignatureRecord
from ..corpus.values.structured import needs_lowering, to_device_structured
from ..errors import CallMismatchError, CompileOptionsError
from ..model import Sample
from ..options import ReplayOptions
from .arguments import CallBinder, lookup
from .compiling import compile_model


class Call(NamedTuple):
    """One sample ready to run: the call's arguments on the device, Dynamo's first-frame locals
    (for guard checks) and the arguments by forward's own names (for marks and descriptions)."""

    args: tuple
    kwargs: dict
    named: dict[str, Any]
    frame: dict[str, Any]


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        # Tensor.to costs ~15 us even when it returns the tensor itself: skip it then.
        return value if value.device == device else value.to(device)
    if type(value) is tuple:
        return tuple(_to_device(v, device) for v in value)
    if type(value) is list:
        return [_to_device(v, device) for v in value]
    if type(value) is dict:
        return {k: _to_device(v, device) for k, v in value.items()}
    return to_device_structured(value, device, _to_device)


def _call_text(args: tuple, kwargs: dict) -> str:
    """``(Tensor, y=Tensor)``: a call's form, by its values' types."""
    parts = [type(a).__name__ for a in args] + [f"{k}={type(v).__name__}" for k, v in kwargs.items()]
    return f"({', '.join(parts)})"


def check_call_fits(model: Any, sample: Sample, where: str, spec: str) -> None:
    """Refuse a corpus whose recorded calls do not fit the model's ``forward`` before anything
    runs (a traffic log recorded for another model, or a forward whose parameters were renamed
    since): every sample would raise the same ``TypeError``. ``where`` names the log or corpus,
    ``spec`` the model. Checked against the signature Python binds the call to (the frame's); a
    forward behind a ``*args, **kwargs`` wrapper accepts any call and is not checked."""
    signature = CallBinder(model).frame_signature
    if signature is None:
        return
    owner = torch_compat.forward_owner(model)
    name = f"{type(owner).__name__}.forward" if owner is not None else getattr(model, "__qualname__", "forward")
    try:
        signature.bind(*sample.args, **sample.kwargs)
    except TypeError as exc:
        raise CallMismatchError(
            f"{where}: its calls do not fit the model's {name}{signature} ({spec}): {exc}; sample "
            f"{sample.index} passes {_call_text(sample.args, sample.kwargs)}. Was it recorded for another model? "
            "Pass --model with the one that served these calls.") from None


def check_marks(model: Any, sample: Sample, marks: tuple[tuple[str, int], ...]) -> None:
    """Refuse ``--mark-unbacked`` marks that cannot apply, before anything runs: an argument
    forward does not have, a value that is not a tensor, or a dim the tensor does not have (as
    recorded in ``sample``; an optional argument the sample does not pass is not checked)."""
    if not marks:
        return
    binder = CallBinder(model)
    names = set(binder.argument_names())
    named = binder.named_or_positional(sample.args, sample.kwargs)
    for path, dim in marks:
        top = path.split("[")[0]
        if top not in names and top not in named:
            known = ", ".join(sorted(names | set(named))) or "none"
            raise CompileOptionsError(f"--mark-unbacked {path}:{dim}: forward has no argument {top!r} (it has: {known})")
        try:
            value = lookup(named, path)
        except (KeyError, IndexError, TypeError):
            continue
        if not isinstance(value, torch.Tensor):
            raise CompileOptionsError(f"--mark-unbacked {path}:{dim}: {path} is a {type(value).__name__} in sample "
                                      f"{sample.index}, not a tensor")
        if not -value.dim() <= dim < value.dim():
            raise CompileOptionsError(f"--mark-unbacked {path}:{dim}: {path} has {value.dim()} dims in sample "
                                      f"{sample.index} (shape {tuple(value.shape)}): there is no dim {dim}")


class Runner:
    """A fresh ``torch.compile`` of ``model`` with the replay's settings and marking rules."""

    def __init__(self, model: Any, options: ReplayOptions) -> None:
        options.validate()
        owner = torch_compat.forward_owner(model)
        if owner is not None:  # a module, or the module of a compiled bound forward
            owner.to(options.device).eval()
        self.model = model
        self.options = options
        self.binder = CallBinder(model)
        self.code = self.binder.code
        self.grad_context = functools.partial(torch_compat.grad_context, options.grad_mode)
        self._entries: list | None = None
        self.lookup = torch_compat.LookupOrder()
        device = torch.device(options.device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        torch_compat.reset_dynamo()
        self.compiled = compile_model(model, options)

    def prepare(self, sample: Sample, mark: bool) -> Call:
        # Outside inference mode, wherever it is called from: a tensor copied (to the device, or
        # from a mutable input) under it would be an inference tensor, whose dispatch keys no
        # request's have, and would compile a graph of its own.
        with torch.inference_mode(False):
            return self._prepare(sample, mark)

    def _prepare(self, sample: Sample, mark: bool) -> Call:
        args = _to_device(sample.args, self.device)
        kwargs = _to_device(sample.kwargs, self.device)
        named = self.binder.named_or_positional(args, kwargs)
        if mark:
            self.apply_marks(named)
        frame = self.binder.frame_locals(args, kwargs)
        if needs_lowering(args) or needs_lowering(kwargs):
            # The forward may change the objects it receives (a DynamicCache grows, a StaticCache
            # is written in place and counts its length): it runs on a copy (marks included), and
            # the call is described and guard-checked on the objects as they came in, which a
            # later run of the same sample (a warmup's coverage trials) finds unchanged.
            args, kwargs = copy.deepcopy((args, kwargs))
        return Call(args, kwargs, named, frame)

    def apply_marks(self, named: dict[str, Any]) -> None:
        """``mark_unbacked`` the options' dims of a call given by forward's argument names."""
        for path, dim in self.options.mark_unbacked:
            try:
                value = lookup(named, path)
            except (KeyError, IndexError, TypeError):
                continue  # an optional argument this call does not pass
            if isinstance(value, torch.Tensor) and value.dim() > dim:
                torch._dynamo.decorators.mark_unbacked(value, dim)

    def warm_device(self, sample: Sample) -> None:
        """One eager (uncompiled) forward of ``sample``, then wait for the device: CUDA context,
        cuBLAS handles and the caching allocator are what any server pays before its first
        request, whatever it serves with, so set-up timings start after this."""
        call = self.prepare(sample, mark=False)
        with self.grad_context():
            self.model(*call.args, **call.kwargs)
        torch_compat.synchronize(self.device)

    def run(self, sample: Sample, mark: bool = True, carry: Any = None) -> None:
        """Run ``sample``; ``carry`` (a :class:`guardscope.corpus.chains.CarriedState`) hands it
        the model state its request's previous step extended, as production does."""
        self.forget_entries()
        call = self.prepare(sample, mark)
        args, kwargs = call.args, call.kwargs
        if carry is not None:
            args, kwargs = carry.carry(sample.index, args, kwargs)
            if mark and (args is not call.args or kwargs is not call.kwargs):
                self.apply_marks(self.binder.named_or_positional(args, kwargs))  # the live state's dims
        with self.grad_context():
            self.compiled(*args, **kwargs)

    def serving(self, sample: Sample, mark: bool = True) -> str | None:
        call = self.prepare(sample, mark)
        with self.grad_context():
            return self.serving_locals(call.frame)

    def record_arguments(self, record: SignatureRecord) -> tuple[tuple, dict, list] | None:
        """A signature record's shared arguments (its call template's; for guard checks),
        when its tensors are already where this runner runs; None otherwise (prepare one of
        its samples instead: moving them would change what is checked)."""
        if record.key is None or any(device != self.device for device in record.call.devices):
            return None
        return record.arguments()

    def serving_arguments(self, args: tuple, kwargs: dict) -> str | None:
        """:meth:`serving_locals` of a call given by its arguments (already on the device)."""
        with self.grad_context():
            return self.serving_locals(self.binder.frame_locals(args, kwargs))

    def entries(self) -> list:
        if self._entries is None:
            self._entries = torch_compat.entries_by_age(self.code)
        return self._entries

    def serving_locals(self, f_locals: dict[str, Any]) -> str | None:
        """The earliest-compiled graph accepting these frame locals (see torch_compat)."""
        return torch_compat.first_accepting(self.entries(), f_locals)

    def ran_locals(self, f_locals: dict[str, Any]) -> str | None:
        """After a call (run or skipped) with these frame locals: the graph Dynamo's
        most-recently-used-first lookup ran for it, moved to the front of that order."""
        return self.lookup.call(self.entries(), f_locals)

    def forget_entries(self) -> None:
        """A forward ran: it may have compiled a graph, so the entry list must be re-read."""
        self._entries = None

    def graphs(self) -> int:
        return len(torch_compat.cache_entries(self.code) or [])
