"""One call's arguments as Dynamo's frame holds them and as the user names them; the one walker
that describes them.

:class:`CallBinder` is made once per model. ``frame_locals(args, kwargs)`` is what the first frame
Dynamo compiles holds on entry (the dict its guards are checked against); ``arguments(args,
kwargs)`` is the call by forward's own parameter names, the names every output uses. The two are
the same dict for a plain ``forward``; for a decorated one (transformers' ``wrapper(self, *args,
**kwargs)``) the frame holds ``args``/``kwargs`` while the user names ``input_ids``
(:class:`guardscope.sources.FrameArguments` maps one to the other).

:func:`describe` walks the named arguments (nested lists, tuples and dicts, ``None`` and scalars)
into a :class:`SampleMeta`; :func:`lookup` finds the value at a path such as ``xs[0]``.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import torch

from .. import torch_compat
from ..corpus.values.structured import parts, type_label
from ..model import SampleMeta, TensorMeta
from ..sources import FrameArguments

_POSITIONAL_OR_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD


def _signature(function: Any, follow_wrapped: bool) -> inspect.Signature | None:
    try:
        return inspect.signature(function, follow_wrapped=follow_wrapped)
    except (TypeError, ValueError):
        return None


def _kinds(signature: inspect.Signature | None) -> tuple[tuple[str, Any], ...]:
    return tuple((p.name, p.kind) for p in signature.parameters.values()) if signature else ()


class CallBinder:
    """Binds calls of one model: the frame's locals and the user's named arguments."""

    def __init__(self, model: Any) -> None:
        forward = model.forward if isinstance(model, torch.nn.Module) else model
        self.code = torch_compat.code_of(model)
        self.user_signature = _signature(forward, follow_wrapped=True)
        self.frame_signature = _signature(forward, follow_wrapped=False)
        self.wrapped = _kinds(self.user_signature) != _kinds(self.frame_signature)
        # A module's frame holds the module itself as its first local (``self``); so does a
        # compiled bound method's (``torch.compile(model.forward)``, as generate() users do).
        owner = model if isinstance(model, torch.nn.Module) else getattr(model, "__self__", None)
        # A decorator's wrapper reads the function it wraps from its closure: Dynamo counts the
        # closure's cells among the frame's locals (and guards them, as ``L['func']``).
        function = getattr(type(model), "forward", None) if isinstance(model, torch.nn.Module) else model
        function = getattr(function, "__func__", function)
        # A wrapper ``wrapped_func(*args, **kwargs)`` (transformers' deprecation decorator on a
        # Llama's forward) receives ``self`` as ``args[0]``, not as a local of its own.
        unbound = _signature(function, follow_wrapped=False) if owner is not None else None
        first = next(iter(unbound.parameters.values()), None) if unbound is not None else None
        self.owner_in_varargs = owner if first is not None and first.kind is inspect.Parameter.VAR_POSITIONAL else None
        self.self_local: dict[str, Any] = (
            {self.code.co_varnames[0]: owner}
            if owner is not None and self.owner_in_varargs is None and self.code and self.code.co_varnames else {}
        )
        cells = getattr(function, "__closure__", None) or ()
        names = self.code.co_freevars if self.code is not None else ()
        self.closure: dict[str, Any] = {}
        for name, cell in zip(names, cells):
            try:
                self.closure[name] = cell.cell_contents
            except ValueError:  # an empty cell
                continue
        parameters = list(self.frame_signature.parameters.values()) if self.frame_signature else []
        # The common case, bound without inspect (tens of microseconds a call): every parameter
        # positional-or-keyword and no wrapper.
        self._simple = (not self.wrapped and self.frame_signature is not None
                        and all(p.kind is _POSITIONAL_OR_KEYWORD for p in parameters))
        self._names = tuple(p.name for p in parameters)
        self._name_set = frozenset(self._names)
        self._defaults = tuple((p.name, p.default) for p in parameters if p.default is not p.empty)

    # --- names -----------------------------------------------------------------------------------

    def frame_arguments(self) -> FrameArguments:
        """The frame's parameters and forward's, for renaming guard sources (pure data)."""
        frame = [name for name in self.self_local]
        varargs = varkw = None
        for parameter in (self.frame_signature.parameters.values() if self.frame_signature else ()):
            if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
                varargs = parameter.name
            elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
                varkw = parameter.name
            else:
                frame.append(parameter.name)
        user = tuple(
            p.name for p in (self.user_signature.parameters.values() if self.user_signature else ())
            if p.kind in (_POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY)
        )
        if self.owner_in_varargs is not None:
            user = ("self", *user)  # args[0] is the module: args[1] is forward's first parameter
        return FrameArguments(frame=tuple(frame), varargs=varargs, varkw=varkw, user=user, wrapped=self.wrapped)

    def argument_names(self) -> tuple[str, ...]:
        """forward's parameter names in order (``*args``/``**kwargs`` by their own names)."""
        return tuple(self.user_signature.parameters) if self.user_signature is not None else ()

    # --- binding ---------------------------------------------------------------------------------

    def _fast(self, args: tuple, kwargs: dict) -> dict[str, Any] | None:
        if len(args) > len(self._names) or not self._name_set.issuperset(kwargs):
            return None
        bound = dict(zip(self._names, args))
        if any(name in bound for name in kwargs):
            return None
        bound.update(kwargs)
        if len(bound) < len(self._names):
            for name, default in self._defaults:
                bound.setdefault(name, default)
        return bound if len(bound) == len(self._names) else None

    def frame_locals(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        """The locals of Dynamo's first frame on entry, defaults applied, ``self`` included: what
        its cache entries' guards are checked against. Empty when the call does not fit (it will
        raise its own TypeError)."""
        bound = self._fast(args, kwargs) if self._simple else None
        if bound is None:
            bound = self._bind(self.frame_signature, args, kwargs, defaults=True)
        if bound is None:
            return {}
        if self.owner_in_varargs is not None:
            varargs = next(p.name for p in self.frame_signature.parameters.values()  # type: ignore[union-attr]
                           if p.kind is inspect.Parameter.VAR_POSITIONAL)
            bound[varargs] = (self.owner_in_varargs, *bound.get(varargs, ()))
        if self.closure:
            return {**self.self_local, **bound, **self.closure}
        return {**self.self_local, **bound}

    def arguments(self, args: tuple, kwargs: dict) -> dict[str, Any] | None:
        """The call by forward's parameter names. A plain forward gets its defaults applied (its
        frame holds them); through a wrapper only what the caller passed reaches the frame, and
        keywords forward collects in ``**kwargs`` are named directly. None when the call does
        not fit forward (the call itself will raise the TypeError)."""
        if self._simple:
            bound = self._fast(args, kwargs)
            if bound is not None:
                return bound
        if not self.wrapped:
            return self._bind(self.user_signature, args, kwargs, defaults=True)
        bound = self._bind(self.user_signature, args, kwargs, defaults=False)
        if bound is None:
            return None
        named: dict[str, Any] = {}
        for parameter in self.user_signature.parameters.values():  # type: ignore[union-attr]
            if parameter.name not in bound:
                continue
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                named.update(bound[parameter.name])
            else:
                named[parameter.name] = bound[parameter.name]
        return named

    @staticmethod
    def _bind(signature: inspect.Signature | None, args: tuple, kwargs: dict, *, defaults: bool) -> dict[str, Any] | None:
        if signature is None:
            return {**{f"args[{i}]": a for i, a in enumerate(args)}, **kwargs}
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return None
        if defaults:
            bound.apply_defaults()
        return dict(bound.arguments)

    def bound(self, args: tuple, kwargs: dict) -> inspect.BoundArguments | None:
        """The call bound to forward's own signature (a wrapper's followed), defaults applied, as
        :class:`inspect.BoundArguments`: for a caller that edits arguments and calls again with
        the same form. None when it does not fit."""
        if self.user_signature is None:
            return None
        try:
            bound = self.user_signature.bind(*args, **kwargs)
        except TypeError:
            return None
        bound.apply_defaults()
        return bound

    def named_or_positional(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        """:meth:`arguments`, or ``args[i]``/keyword names when the call does not fit forward."""
        bound = self.arguments(args, kwargs)
        if bound is None:
            bound = {**{f"args[{i}]": a for i, a in enumerate(args)}, **kwargs}
        return bound


# --- describing a sample -----------------------------------------------------------------------



def tensor_meta(value: torch.Tensor) -> TensorMeta:
    """What a description records of one tensor."""
    # Runs for every sample: torch.Size and stride() are tuples of ints already.
    return TensorMeta(
        shape=tuple(value.shape),
        stride=value.stride() if value.layout == torch.strided else (),
        dtype=torch_compat.dtype_name(value.dtype),
        device=str(value.device),
        requires_grad=value.requires_grad,
    )


def _walk(path: str, value: Any, tensors: list, lengths: list, scalars: list) -> None:
    if isinstance(value, torch.Tensor):
        tensors.append((path, tensor_meta(value)))
    elif type(value) is list or type(value) is tuple:
        lengths.append((path, len(value)))
        for i, item in enumerate(value):
            _walk(f"{path}[{i}]", item, tensors, lengths, scalars)
    elif type(value) is dict:
        lengths.append((path, len(value)))
        for key, item in value.items():
            _walk(f"{path}[{key!r}]", item, tensors, lengths, scalars)
    else:
        found = parts(value)
        if found is None:
            scalars.append((path, f"{type(value).__name__}:{value!r}"))
            return
        # An object a codec stores (a KV cache, a graph batch, a named tuple): its parts by the
        # names a user writes (cache.layers[0].keys, batch.x), its type among the scalars.
        scalars.append((path, f"type:{type_label(value)}"))
        for suffix, item in found:
            _walk(f"{path}{suffix}", item, tensors, lengths, scalars)


def describe(bound: dict[str, Any], index: int, serving: str | None, error: str | None, **fields: Any) -> SampleMeta:
    """The guard-relevant description of one call, by argument path; ``fields`` are further
    :class:`SampleMeta` fields (``graphs``, ``ran``, ``recorded``, ``ran_on``)."""
    tensors: list = []
    lengths: list = []
    scalars: list = []
    for name, value in bound.items():
        _walk(name, value, tensors, lengths, scalars)
    return SampleMeta(
        index=index,
        tensors=tuple(tensors),
        lengths=tuple(lengths),
        scalars=tuple(scalars),
        serving=serving,
        error=error,
        **fields,
    )


def tensors_of(arguments: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """(path, tensor) for every tensor in the named arguments, with :func:`describe`'s paths."""
    found: list[tuple[str, torch.Tensor]] = []

    def walk(path: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            found.append((path, value))
        elif type(value) is list or type(value) is tuple:
            for i, item in enumerate(value):
                walk(f"{path}[{i}]", item)
        elif type(value) is dict:
            for key, item in value.items():
                walk(f"{path}[{key!r}]", item)
        else:
            for suffix, item in parts(value) or ():
                walk(f"{path}{suffix}", item)

    for name, value in arguments.items():
        walk(name, value)
    return found


_STEP = re.compile(r"\.(\w+)|\[(-?\d+)\]|\[(['\"])(.*?)\3\]")


def lookup(bound: dict[str, Any], path: str) -> Any:
    """Find the value at an argument path such as ``x``, ``xs[0]``, ``d['k']`` or, in an object a
    codec stores, ``cache.layers[0].keys`` (KeyError/IndexError/TypeError when the call has
    none there)."""
    match = re.match(r"\w+", path)
    if match is None:
        raise KeyError(path)
    value = bound[match.group(0)]
    position = match.end()
    while position < len(path):
        step = _STEP.match(path, position)
        if step is None:
            raise KeyError(path)
        position = step.end()
        attribute, index, _, key = step.groups()
        if attribute is not None:
            named = dict(parts(value) or ())
            if f".{attribute}" not in named:
                raise KeyError(path)
            value = named[f".{attribute}"]
        else:
            value = value[int(index)] if index is not None else value[key]
    return value
