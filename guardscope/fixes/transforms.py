"""Input transforms: what a user could do to a call's arguments before the compiled model, so
that fewer inputs differ in what Dynamo guards on.

Each transform is parsed from a spec string (``guardscope whatif --transform SPEC``) and applied
to one call's ``(args, kwargs)`` by argument path and dim, the way ``--mark-unbacked ARG:DIM``
names them (``images``, ``input_ids``, ``xs[0]``, ``batch['mask']``):

- ``cast:PATH:DTYPE`` casts a tensor to a torch dtype; ``cast:PATH:DTYPE:scale`` also divides a
  uint8 tensor by 255 (pixels to [0, 1]); other dtypes are cast only.
- ``contiguous:PATH`` and ``channels_last:PATH`` set the memory layout (channels-last: 4-D only).
- ``pad:PATH:DIMS:OPTION...`` pads dims (``1``, or ``2,3``) up to a multiple (``multiple=64``) or
  to the smallest of some sizes (``buckets=1,2,4,8``; a larger size is left as it is), with
  ``value=V`` (default 0) on ``side=right`` (default) or ``left``; ``with=PATH`` pads a companion
  (an attention mask) on the same dims with 0, so the mask hides what was added. Padding dim 0
  is batch bucketing (rows of ``value``).
- ``fn:FILE.py:NAME`` (or ``fn:pkg.module:NAME``) is the user's own: ``NAME(args, kwargs)``
  returns the new ``(args, kwargs)``.

Transforms make new tensors and never change the ones they are given. Pure tensor operations:
nothing here compiles.
"""

from __future__ import annotations

import abc
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import torch_compat
from ..errors import GuardscopeError, TransformError
from ..replay.arguments import CallBinder, tensors_of

KINDS = ("cast", "contiguous", "channels_last", "pad", "fn")
SPEC_FORMS = ("cast:PATH:DTYPE[:scale]", "contiguous:PATH", "channels_last:PATH",
              "pad:PATH:DIMS:multiple=N|buckets=A,B,...[:value=V][:side=right|left][:with=PATH]",
              "fn:FILE.py:NAME")
_PATH = re.compile(r"\w+(?:\[-?\d+\]|\[(['\"]).*?\1\])*")
_STEP = re.compile(r"\[(-?\d+)\]|\[(['\"])(.*?)\2\]")
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


# --- one call's arguments, by forward's names ---------------------------------------------------


class NotPassed(LookupError):
    """The call does not pass the argument (an optional one), or has nothing at the path."""


class CallArguments:
    """One call's ``(args, kwargs)``, read and replaced by argument path. A name is found among
    the keywords, else at its position among forward's positional parameters; ``[i]`` and
    ``['key']`` steps go into lists, tuples and dicts, which are copied, never changed."""

    def __init__(self, positional: tuple[str, ...], args: tuple, kwargs: dict) -> None:
        self.positional = positional
        self.args = list(args)
        self.kwargs = dict(kwargs)

    def call(self) -> tuple[tuple, dict]:
        return tuple(self.args), dict(self.kwargs)

    def _top(self, name: str) -> tuple[Any, Any]:
        if name in self.kwargs:
            return self.kwargs, name
        if name in self.positional:
            position = self.positional.index(name)
            if position < len(self.args):
                return self.args, position
        raise NotPassed(name)

    @staticmethod
    def _steps(path: str) -> tuple[str, list[Any]]:
        top = re.match(r"\w+", path)
        if top is None or _PATH.fullmatch(path) is None:
            raise TransformError(f"{path!r} is not an argument path: a name, then [i] or ['key'] steps "
                                 "(a transform does not reach into objects by .attribute)")
        steps: list[Any] = []
        for step in _STEP.finditer(path, top.end()):
            index, _, key = step.groups()
            steps.append(int(index) if index is not None else key)
        return top.group(0), steps

    def get(self, path: str) -> Any:
        name, steps = self._steps(path)
        holder, key = self._top(name)
        value = holder[key]
        for step in steps:
            try:
                value = value[step]
            except (KeyError, IndexError, TypeError):
                raise NotPassed(path) from None
        if value is None:  # passed as None: absent, as an optional argument left out
            raise NotPassed(path)
        return value

    def set(self, path: str, new: Any) -> None:
        name, steps = self._steps(path)
        holder, key = self._top(name)
        holder[key] = _replaced(holder[key], steps, new)


def _replaced(value: Any, steps: list[Any], new: Any) -> Any:
    if not steps:
        return new
    step, rest = steps[0], steps[1:]
    if isinstance(value, (list, tuple)):
        items = list(value)
        items[step] = _replaced(items[step], rest, new)
        return items if isinstance(value, list) else type(value)(items) if type(value) is tuple else type(value)(*items)
    copied = dict(value)
    copied[step] = _replaced(copied[step], rest, new)
    return copied


class Call:
    """Reads and rebuilds the calls of one model by forward's parameter names (its binder's)."""

    def __init__(self, model: Any) -> None:
        binder = CallBinder(model)
        signature = binder.user_signature
        parameters = list(signature.parameters.values()) if signature is not None else []
        positional = []
        for parameter in parameters:
            if parameter.kind not in _POSITIONAL:
                break
            positional.append(parameter.name)
        self.positional = tuple(positional)
        self.names = tuple(binder.argument_names())

    def arguments(self, args: tuple, kwargs: dict) -> CallArguments:
        return CallArguments(self.positional, args, kwargs)


def input_elements(args: tuple, kwargs: dict) -> int:
    """Elements of every tensor in a call (the measure of what padding costs)."""
    return sum(tensor.numel() for _, tensor in tensors_of({"args": args, "kwargs": kwargs}))


# --- the transforms -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Padded:
    """One dim a transform padded in one call: its size before and after."""

    path: str
    dim: int
    before: int
    after: int
    side: str


@dataclass
class Applied:
    """What a transform did to one call."""

    padded: list[Padded] = field(default_factory=list)
    over: int = 0  # sizes beyond the largest bucket, left as they were


def cut_padding(output: Any, padded: list[Padded]) -> Any:
    """``output`` of a canonicalised call with the rows, columns... a pad transform added cut off:
    every tensor in it (nested in tuples, lists and dicts too; a dict comes back a plain dict) whose
    dim ``d`` has a padded size where a pad of the call's dim ``d`` grew ``before`` to ``after`` is
    narrowed back to ``before`` (from the start for ``side=right``, the end for ``side=left``).
    The output's dims are taken to line up with the padded input's, as a batch or sequence dim
    does; a tensor of another size on that dim is left as it is."""
    if isinstance(output, torch.Tensor):
        for pad in padded:
            if pad.after > pad.before and output.dim() > pad.dim and output.shape[pad.dim] == pad.after:
                start = 0 if pad.side == "right" else pad.after - pad.before
                output = output.narrow(pad.dim, start, pad.before)
        return output
    if isinstance(output, (list, tuple)) and not hasattr(output, "_fields"):
        return type(output)(cut_padding(item, padded) for item in output)
    if isinstance(output, dict):
        return {key: cut_padding(item, padded) for key, item in output.items()}
    return output


@dataclass(frozen=True)
class Transform(abc.ABC):
    """One parsed spec; ``apply`` edits one call's :class:`CallArguments`."""

    spec: str

    def paths(self) -> tuple[str, ...]:
        """Argument paths the transform reads (checked on the first sample)."""
        return ()

    def check(self, call: Call, arguments: CallArguments, index: int) -> None:
        """Refuse a transform that cannot apply to the model's calls, on one sample: an argument
        forward does not have, a value that is not a tensor, a dim it does not have."""
        for path in self.paths():
            name = CallArguments._steps(path)[0]
            if name not in call.names and name not in arguments.kwargs:
                known = ", ".join(sorted(set(call.names) | set(arguments.kwargs))) or "none"
                raise TransformError(f"--transform {self.spec}: forward has no argument {name!r} (it has: {known})")
            try:
                value = arguments.get(path)
            except NotPassed:
                continue  # an optional argument the sample does not pass
            if not isinstance(value, torch.Tensor):
                raise TransformError(f"--transform {self.spec}: {path} is a {type(value).__name__} in sample "
                                     f"{index}, not a tensor")
            self.check_tensor(path, value, index)

    def check_tensor(self, path: str, value: torch.Tensor, index: int) -> None:
        pass

    @abc.abstractmethod
    def apply(self, arguments: CallArguments, index: int) -> Applied:
        """Transform sample ``index``'s arguments in place; what it did (for the padding's cost
        and for cutting padded outputs back)."""

    def _tensor(self, arguments: CallArguments, path: str, index: int) -> torch.Tensor | None:
        try:
            value = arguments.get(path)
        except NotPassed:
            return None
        if not isinstance(value, torch.Tensor):
            raise TransformError(f"--transform {self.spec}: {path} is a {type(value).__name__} in sample {index}, "
                                 "not a tensor")
        return value


@dataclass(frozen=True)
class Cast(Transform):
    path: str = ""
    dtype: str = "float32"
    scale: bool = False

    def paths(self) -> tuple[str, ...]:
        return (self.path,)

    def apply(self, arguments: CallArguments, index: int) -> Applied:
        value = self._tensor(arguments, self.path, index)
        if value is not None:
            dtype = getattr(torch, self.dtype)
            cast = value.to(dtype)
            if self.scale and value.dtype == torch.uint8:
                cast = cast / 255
            arguments.set(self.path, cast)
        return Applied()


@dataclass(frozen=True)
class Layout(Transform):
    path: str = ""
    channels_last: bool = False

    def paths(self) -> tuple[str, ...]:
        return (self.path,)

    def check_tensor(self, path: str, value: torch.Tensor, index: int) -> None:
        if self.channels_last and value.dim() != 4:
            raise TransformError(f"--transform {self.spec}: {path} has {value.dim()} dims in sample {index} "
                                 f"(shape {tuple(value.shape)}): channels-last needs 4")

    def apply(self, arguments: CallArguments, index: int) -> Applied:
        value = self._tensor(arguments, self.path, index)
        if value is not None:
            if self.channels_last:
                self.check_tensor(self.path, value, index)
            memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
            arguments.set(self.path, value.contiguous(memory_format=memory_format))
        return Applied()


@dataclass(frozen=True)
class Pad(Transform):
    path: str = ""
    dims: tuple[int, ...] = ()
    multiple: int | None = None
    buckets: tuple[int, ...] = ()
    value: float = 0
    side: str = "right"
    companions: tuple[str, ...] = ()

    def paths(self) -> tuple[str, ...]:
        return (self.path, *self.companions)

    def check_tensor(self, path: str, value: torch.Tensor, index: int) -> None:
        for dim in self.dims:
            if not -value.dim() <= dim < value.dim():
                raise TransformError(f"--transform {self.spec}: {path} has {value.dim()} dims in sample {index} "
                                     f"(shape {tuple(value.shape)}): there is no dim {dim}")

    def size(self, size: int) -> int | None:
        """The padded size of ``size``; None beyond the largest bucket."""
        if self.multiple is not None:
            return -(-size // self.multiple) * self.multiple
        return next((bucket for bucket in self.buckets if bucket >= size), None)

    def apply(self, arguments: CallArguments, index: int) -> Applied:
        applied = Applied()
        value = self._tensor(arguments, self.path, index)
        if value is None:
            return applied
        self.check_tensor(self.path, value, index)
        companions = [(path, tensor) for path in self.companions
                      if (tensor := self._tensor(arguments, path, index)) is not None]
        for dim in self.dims:
            dim %= value.dim()
            before = value.shape[dim]
            after = self.size(before)
            if after is None:
                applied.over += 1
                continue
            if after == before:
                continue
            value = _pad(value, dim, after, self.value, self.side)
            applied.padded.append(Padded(self.path, dim, before, after, self.side))
            for position, (path, tensor) in enumerate(companions):
                if tensor.dim() <= dim or tensor.shape[dim] != before:
                    raise TransformError(
                        f"--transform {self.spec}: sample {index}: {path} has shape {tuple(tensor.shape)}, "
                        f"{self.path} has {before} on dim {dim}: a companion must match it there")
                companions[position] = (path, _pad(tensor, dim, after, 0, self.side))
                applied.padded.append(Padded(path, dim, before, after, self.side))
        arguments.set(self.path, value)
        for path, tensor in companions:
            arguments.set(path, tensor)
        return applied


def _pad(value: torch.Tensor, dim: int, size: int, fill: float, side: str) -> torch.Tensor:
    """``value`` grown to ``size`` on ``dim`` with ``fill`` on ``side``, in its dtype, device and
    (channels-last kept) layout."""
    shape = list(value.shape)
    before, shape[dim] = shape[dim], size
    padded = value.new_full(shape, fill)
    if value.dim() == 4 and not value.is_contiguous() and value.is_contiguous(memory_format=torch.channels_last):
        padded = padded.contiguous(memory_format=torch.channels_last)
    start = 0 if side == "right" else size - before
    padded.narrow(dim, start, before).copy_(value)
    return padded


@dataclass(frozen=True)
class Function(Transform):
    target: str = ""

    def load(self) -> Callable[..., Any]:
        from ..corpus.spec import resolve_callable

        try:
            return resolve_callable(self.target)
        except GuardscopeError as exc:
            raise TransformError(f"--transform {self.spec}: {str(exc).replace('model spec', 'function')}") from None

    def check(self, call: Call, arguments: CallArguments, index: int) -> None:
        self.apply(arguments, index)

    def apply(self, arguments: CallArguments, index: int) -> Applied:
        function = self.load()
        args, kwargs = arguments.call()
        try:
            result = function(args, kwargs)
        except Exception as exc:
            raise TransformError(f"--transform {self.spec}: sample {index}: {type(exc).__name__}: {exc}") from exc
        if not (isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[0], (tuple, list))
                and isinstance(result[1], dict)):
            raise TransformError(f"--transform {self.spec}: returned a {type(result).__name__}, not (args, kwargs)")
        arguments.args, arguments.kwargs = list(result[0]), dict(result[1])
        return Applied()


# --- parsing ------------------------------------------------------------------------------------


def _malformed(spec: str, why: str) -> TransformError:
    return TransformError(f"--transform {spec}: {why}; the forms are {', '.join(SPEC_FORMS)}")


def _path(spec: str, text: str) -> str:
    if not text or _PATH.fullmatch(text) is None:
        raise _malformed(spec, f"{text!r} is not an argument path (a name, then [i] or ['key'] steps)")
    return text


def _int(spec: str, text: str, what: str) -> int:
    if not text.lstrip("-").isdigit():
        raise _malformed(spec, f"{what} {text!r} is not a whole number")
    return int(text)


def _dtype(spec: str, name: str) -> str:
    name = name.removeprefix("torch.")
    if not isinstance(getattr(torch, name, None), torch.dtype):
        raise TransformError(f"--transform {spec}: torch has no dtype {name!r} (e.g. float32, float16, bfloat16, "
                             "uint8, int64)")
    return torch_compat.dtype_name(getattr(torch, name))


def _pad_options(spec: str, path: str, dims: str, options: list[str]) -> Pad:
    dim_list = tuple(_int(spec, d, "dim") for d in dims.split(","))
    if len(set(dim_list)) != len(dim_list):
        raise _malformed(spec, f"dims {dims} name a dim twice")
    found: dict[str, str] = {}
    for option in options:
        key, equals, text = option.partition("=")
        if not equals or key not in ("multiple", "buckets", "value", "side", "with"):
            raise _malformed(spec, f"{option!r} is not multiple=, buckets=, value=, side= or with=")
        if key in found:
            raise _malformed(spec, f"{key}= is given twice")
        found[key] = text
    if ("multiple" in found) == ("buckets" in found):
        raise _malformed(spec, "give multiple=N or buckets=A,B,... (one of them)")
    multiple = None
    buckets: tuple[int, ...] = ()
    if "multiple" in found:
        multiple = _int(spec, found["multiple"], "multiple")
        if multiple < 1:
            raise TransformError(f"--transform {spec}: the pad multiple {multiple} is below 1")
    else:
        buckets = tuple(sorted({_int(spec, b, "bucket") for b in found["buckets"].split(",")}))
        if buckets[0] < 1:
            raise TransformError(f"--transform {spec}: bucket {buckets[0]} is below 1")
    try:
        value = float(found.get("value", "0"))
    except ValueError:
        raise _malformed(spec, f"value {found['value']!r} is not a number") from None
    side = found.get("side", "right")
    if side not in ("right", "left"):
        raise _malformed(spec, f"side {side!r} is not right or left")
    companions = tuple(_path(spec, c) for c in found["with"].split(",")) if "with" in found else ()
    if path in companions:
        raise _malformed(spec, f"with={path} is the padded argument itself")
    return Pad(spec=spec, path=path, dims=dim_list, multiple=multiple, buckets=buckets,
               value=int(value) if value.is_integer() else value, side=side, companions=companions)


def parse_transform(spec: str) -> Transform:
    """One ``--transform`` spec as a :class:`Transform`; :class:`TransformError` when malformed,
    naming a dtype torch does not know, or a pad multiple or bucket below 1. Arguments and dims
    are checked against a sample later (:func:`check_transforms`)."""
    kind, _, rest = spec.partition(":")
    if kind not in KINDS or not rest:
        raise _malformed(spec, f"{kind!r} is not one of {', '.join(KINDS)}" if kind not in KINDS else "it names nothing")
    if kind == "fn":
        target, _, name = rest.rpartition(":")
        if not target or not name:
            raise _malformed(spec, "fn: needs FILE.py:NAME or pkg.module:NAME")
        return Function(spec=spec, target=rest)
    parts = rest.split(":")
    path = _path(spec, parts[0])
    if kind == "cast":
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "scale"):
            raise _malformed(spec, "cast takes PATH:DTYPE, then optionally :scale")
        dtype = _dtype(spec, parts[1])
        if len(parts) == 3 and not getattr(torch, dtype).is_floating_point:
            raise _malformed(spec, f":scale divides by 255, which needs a floating dtype, not {dtype}")
        return Cast(spec=spec, path=path, dtype=dtype, scale=len(parts) == 3)
    if kind in ("contiguous", "channels_last"):
        if len(parts) != 1:
            raise _malformed(spec, f"{kind} takes only PATH")
        return Layout(spec=spec, path=path, channels_last=kind == "channels_last")
    if len(parts) < 3:
        raise _malformed(spec, "pad takes PATH:DIMS, then multiple=N or buckets=A,B,...")
    return _pad_options(spec, path, parts[1], parts[2:])


def parse_transforms(specs: tuple[str, ...] | list[str]) -> tuple[Transform, ...]:
    if not specs:
        raise TransformError("give at least one --transform SPEC; the forms are " + ", ".join(SPEC_FORMS))
    return tuple(parse_transform(spec) for spec in specs)


def check_transforms(model: Any, transforms: tuple[Transform, ...], sample: Any) -> Call:
    """Refuse transforms that cannot apply to ``model``'s calls, on ``sample`` (the corpus's
    first), before anything runs; returns the model's :class:`Call`."""
    call = Call(model)
    for transform in transforms:
        with torch.inference_mode(False):
            transform.check(call, call.arguments(sample.args, sample.kwargs), sample.index)
    return call


def apply_chain(call: Call, transforms: tuple[Transform, ...], args: tuple, kwargs: dict,
                index: int) -> tuple[tuple, dict, list[Applied]]:
    """``transforms`` applied in order to one call: the new ``(args, kwargs)`` and what each did."""
    arguments = call.arguments(args, kwargs)
    applied = []
    with torch.inference_mode(False):  # new tensors as a request's are: not inference tensors
        for transform in transforms:
            applied.append(transform.apply(arguments, index))
    new_args, new_kwargs = arguments.call()
    return new_args, new_kwargs, applied

