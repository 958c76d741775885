"""Pure: raw recompile-reason text -> typed :class:`GuardFailure` records.

A reason looks like ``"0/1: 2 <= lei.size()[1]  # <user line>  # model.py:16 in forward (...0/1
specialization...)"``: the compile id of the cache entry that rejected the input, the failing
guard, then ``  # ``-separated comments (the user's code, its location, torch's explanation and
hint). Tensor checks read ``"tensor 'x' stride mismatch at index 0. expected 0, actual 3888"``.

Patterns are data, tried in this order: :data:`TENSOR_PATTERNS` (the first match names the
kind); :data:`NOTE_PATTERNS` (torch's own explanation: every match is a cause); then
:data:`OPERATOR_LOCATION` (a torch operator's implementation added the guard: ``operator_guard``);
then :data:`EXPRESSION_PATTERNS` on the guard itself (the first match names the kind, and says
what an operator's guard checks). A reason no pattern explains is kept verbatim as ``other`` —
counted, never dropped.

The caller renames frame 0's argument sources to the forward's parameters (``kwargs['mask']``
and ``L['x']`` become ``mask`` and ``x``); later frames keep their locals (``___stack0``). Both
spellings classify alike. A guard on a value (its type, its constant) that the rejected sample
passed as None or left out names ``optional_argument``: the caller says which arguments those
were (``absent``), since torch's text does not.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ..model import FailureKind, GuardFailure
from ..text import normalize_reason

K = FailureKind

# "tensor 'x' <what> mismatch ..." from Dynamo's C++ TENSOR_MATCH guard. The input's name is all
# between "tensor '" and "' <what> mismatch": it may quote itself ("kwargs['input_ids']").
TENSOR_PATTERNS: tuple[tuple[FailureKind, re.Pattern[str]], ...] = (
    (
        K.SIZE_MISMATCH,
        re.compile(
            r"tensor '(?P<input>.+?)' size mismatch at index (?P<axis>\d+)\. "
            r"expected (?P<expected>[^,]+), actual (?P<actual>\S+)"
        ),
    ),
    (
        K.STRIDE_MISMATCH,
        re.compile(
            r"tensor '(?P<input>.+?)' stride mismatch at index (?P<axis>\d+)\. "
            r"expected (?P<expected>[^,]+), actual (?P<actual>\S+)"
        ),
    ),
    (
        K.DTYPE_MISMATCH,
        re.compile(
            r"tensor '(?P<input>.+?)' dtype mismatch\. expected (?P<expected>[^,]+), "
            r"actual (?P<actual>\S+)"
        ),
    ),
    (
        K.NDIM_MISMATCH,
        re.compile(
            r"tensor '(?P<input>.+?)' rank mismatch\. expected (?P<expected>\d+), "
            r"actual (?P<actual>\d+)"
        ),
    ),
    (
        K.REQUIRES_GRAD_MISMATCH,
        re.compile(r"tensor '(?P<input>.+?)' requires_grad mismatch\. expected requires_grad=(?P<expected>\d)"),
    ),
    (
        # Same device, other keys: e.g. an inference-mode tensor (no ADInplaceOrView) against a
        # normal one. Key sets naming different devices are a device mismatch.
        K.DISPATCH_KEY_MISMATCH,
        re.compile(
            r"tensor '(?P<input>.+?)' dispatch key set mismatch\. expected (?P<expected>.+?), "
            r"actual (?P<actual>.+)"
        ),
    ),
    (
        K.DEVICE_MISMATCH,
        re.compile(
            r"tensor '(?P<input>.+?)' Tensor device index mismatch\. Expected device index to be "
            r"(?P<expected>\d+), actual (?P<actual>\d+)"
        ),
    ),
)

# Torch's own explanation in the guard's comment.
NOTE_PATTERNS: tuple[tuple[FailureKind, re.Pattern[str]], ...] = (
    (K.DUCK_SIZING, re.compile(r"duck sizing added this equality")),
    (K.ZERO_ONE_SPECIALIZATION, re.compile(r"0/1 specialization")),
)

# The innermost torch frame that added the guard, in parentheses after the user's line. Inside an
# operator's implementation (fake and meta kernels, refs, prims, decompositions) the operator
# picked a path by size or layout: ``(_subclasses/fake_impls.py:1811 in conv)``. Dynamo's own
# frames are not operators: ``(variables/tensor.py:2606 in evaluate_expr)`` is the user's branch.
OPERATOR_LOCATION = re.compile(
    r"\((?P<path>(?:_subclasses|_refs|_prims_common|_prims|_decomp)/[^\s():]+\.py|_meta_registrations\.py)"
    r":(?P<line>\d+) in (?P<function>[\w<>.]+)\)"
)

# An argument path: "x", "xs[0]", "kwargs['input_ids']", "___stack0[0]", and attributes of an
# object (``cache.layers[0].is_initialized``), stopping before a method call (``x.size()``).
_NAME = r"[A-Za-z_]\w*(?:\[[^\]]+\]|\.[A-Za-z_]\w*(?![\w(]))*"

# The guard expression itself, when the comment does not explain it. An optional argument is
# one present in one call and absent (a missing key, None, an empty container) in another; a
# bare ``kwargs`` is the keyword dict of a ``wrapper(*args, **kwargs)`` (transformers wraps
# ``forward`` so): its length is the number of keyword arguments passed, not a user list's.
# A comparison other than ``==`` with no size, stride or numel term bounds a Python number
# (``0 <= n <= 1``, ``___stack0 > 0.45`` from ``if t.item() > 0.45``); ``n == 29`` is a constant.
# A stride equated to sizes (``x.stride()[0] == x.size()[1]``) is the input's layout, not the
# user's shape logic: a stride mismatch on that stride.
EXPRESSION_PATTERNS: tuple[tuple[FailureKind, re.Pattern[str]], ...] = (
    (K.GLOBAL_STATE, re.compile(r"GLOBAL_STATE|___check_global_state|global state", re.I)),
    (K.OPTIONAL_ARGUMENT, re.compile(rf"^(?P<input>{_NAME}) is None$")),
    (K.OPTIONAL_ARGUMENT, re.compile(r"^KeyError on (?P<input>.+)$")),
    (K.OPTIONAL_ARGUMENT, re.compile(r"^expected type of '(?P<input>.+?)' to be .*but found <class 'NoneType'>")),
    (K.OPTIONAL_ARGUMENT, re.compile(r"^len\((?P<input>(?:\*\*)?kwargs)\) == (?P<expected>\d+)$")),
    (K.OPTIONAL_ARGUMENT, re.compile(rf"^(?:not )?(?P<input>{_NAME})$")),
    (K.LIST_LENGTH, re.compile(r"^len\((?P<input>.+?)\) == (?P<expected>\d+)$")),
    (K.TYPE_MISMATCH, re.compile(r"___check_type_id\((?P<input>[^,]+),|\bisinstance\(|\btype\(|TYPE_MISMATCH|expected type of")),
    (K.CONSTANT_VALUE, re.compile(rf"___check_obj_id\(|^(?P<input>{_NAME}) == (?P<expected>[^=<>]+)$")),
    (
        K.SCALAR_VALUE,
        re.compile(
            r"^(?!.*\.(?:size|stride|numel|storage_offset)\(\))(?!.*==)(?=.*(?:<|>|!=))"
            rf"[^A-Za-z_]*(?P<input>{_NAME})"
        ),
    ),
    (K.STRIDE_MISMATCH, re.compile(rf"^(?P<dim>(?P<input>{_NAME})\.stride\(\)\[\d+\]) == (?P<expected>.+)$")),
    (K.SHAPE_RELATION, re.compile(r"\.(?:size|stride)\(\)\[\d+\]|\.numel\(\)|\.storage_offset\(\)")),
)

# What a guard checks of a present value, failed by a sample that passed the argument as None or
# left it out: ``temperature == 0.5`` (a graph specialised to one float), or
# ``___check_type_id(temperature, <id>), type=<class 'float'>`` (one compiled for any float). The
# argument was absent, not of another type or value: ``optional_argument``.
ABSENT_VALUE_KINDS = frozenset({K.TYPE_MISMATCH, K.CONSTANT_VALUE, K.SCALAR_VALUE})
_CHECKED_TYPE = re.compile(r"type=<class '(?P<type>[\w.]+)'>")
_ROOT = re.compile(r"^[A-Za-z_]\w*")

_COMPILE_ID = re.compile(r"^\s*\[?(?P<id>\d+/\d+)\]?:\s*")
_DIM = re.compile(rf"(?P<input>{_NAME})\.(?P<which>size|stride)\(\)\[(?P<axis>\d+)\]")
_LOCATION = re.compile(r"(?P<loc>[^\s#()]+:\d+ in [\w<>.]+)")
# Torch's advice ends where its parenthesised note does; "and <another use>" may follow.
_HINT = re.compile(r"to avoid (?:this )?specialization,? (?:set|try) (?:[^()]|\([^()]*\))*")
_BOUNDS = re.compile(r"^\s*(?P<low>-?\d+)\s*<=\s*(?P<expr>.+?)(?:\s*<=\s*(?P<high>-?\d+))?\s*$")
_UPPER = re.compile(r"^\s*(?P<expr>.+?)\s*<=\s*(?P<high>-?\d+)\s*$")
# Largest values torch prints for an unbounded size (int64 max, int32 max, sympy's int_oo).
_UNBOUNDED = {"9223372036854775807", "9223372036854775806", "2147483647", "int_oo"}


@dataclass(frozen=True)
class _Parts:
    against: str | None
    guard: str
    comments: tuple[str, ...]
    user_stack: str | None


def _split(reason: str) -> _Parts:
    text, _, user_stack = reason.partition("\nUser stack trace:\n")
    against = None
    match = _COMPILE_ID.match(text)
    if match:
        against = match.group("id")
        text = text[match.end():]
    pieces = [p.strip() for p in text.split("  # ")]
    return _Parts(
        against=against,
        guard=pieces[0],
        comments=tuple(p for p in pieces[1:] if p),
        user_stack=user_stack.strip() or None,
    )


def _user_source(parts: _Parts) -> str | None:
    for position, comment in enumerate(parts.comments):
        match = _LOCATION.search(comment)
        if match:
            code = parts.comments[position - 1] if position > 0 else None
            location = match.group("loc")
            return f"{location}: {code}" if code else location
    if parts.user_stack:
        return parts.user_stack.splitlines()[-1].strip()
    return None


def _hint(parts: _Parts) -> str | None:
    for comment in parts.comments:
        match = _HINT.search(comment)
        if match:
            return match.group(0).strip()
    return None


def _operator(reason: str) -> str | None:
    match = OPERATOR_LOCATION.search(reason)
    return f"{match.group('function')} ({match.group('path')}:{match.group('line')})" if match else None


def _dims(guard: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    dims: list[str] = []
    inputs: list[str] = []
    for match in _DIM.finditer(guard):
        if match.group(0) not in dims:
            dims.append(match.group(0))
        if match.group("input") not in inputs:
            inputs.append(match.group("input"))
    return tuple(dims), tuple(inputs)


_DEVICE_KEYS = re.compile(r"\b(CPU|CUDA|XPU|MPS|HPU|XLA|Meta|PrivateUse1|MTIA|Lazy|IPU|VE|HIP)\b")


def _device_keys_differ(expected: str, actual: str) -> bool:
    return set(_DEVICE_KEYS.findall(expected)) != set(_DEVICE_KEYS.findall(actual))


def _is_user_bounded(guard: str) -> bool:
    """True when a 0/1-specialization guard also carries bounds from the user's own code."""
    match = _BOUNDS.match(guard)
    if match:
        low, high = match.group("low"), match.group("high")
        return low not in {"0", "1", "2"} or (high is not None and high not in _UNBOUNDED)
    match = _UPPER.match(guard)
    return bool(match and match.group("high") not in _UNBOUNDED)


@dataclass(frozen=True)
class _Broken:
    """The bound of a ``low <= expr <= high`` guard that the sample's own value broke."""

    expected: str  # ">= 2", "<= 512"
    actual: int
    zero_one: bool  # the 0/1 specialization's own lower bound (2, 1 or 0), not a user's


def _broken_bound(guard: str, values: Mapping[str, int] | None) -> _Broken | None:
    match = _BOUNDS.match(guard) or _UPPER.match(guard)
    value = values.get(match.group("expr").strip()) if match and values else None
    if value is None:
        return None
    low, high = match.groupdict().get("low"), match.group("high")
    if low is not None and value < int(low):
        return _Broken(f">= {low}", value, zero_one=low in {"0", "1", "2"})
    if high is not None and high not in _UNBOUNDED and value > int(high):
        return _Broken(f"<= {high}", value, zero_one=False)
    return None


def _expression(guard: str) -> tuple[FailureKind, dict[str, str | None]]:
    for kind, pattern in EXPRESSION_PATTERNS:
        match = pattern.search(guard)
        if match:
            return kind, match.groupdict()
    return K.OTHER, {}


def _absent_input(kind: FailureKind, fields: Mapping[str, str | None], absent: Collection[str]) -> bool:
    """Whether the guard checks a value (its type or constant) of an argument the sample passed
    as None or left out."""
    found = _ROOT.match(fields.get("input") or "")
    return kind in ABSENT_VALUE_KINDS and found is not None and found.group(0) in absent


def classify_reason(reason: str, values: Mapping[str, int] | None = None,
                    absent: Collection[str] = ()) -> GuardFailure:
    """Classify one recompile reason (one rejecting cache entry).

    ``values`` maps an expression spelled as in the guard (a dim, ``"x.size()[0]"``) to the value
    the rejected sample had. A bounded guard ``2 <= x.size()[0] <= 16`` is then judged by the
    bound the sample broke, which becomes ``expected`` (``">= 2"``) with the value as ``actual``:
    a size of 0 or 1 below the 0/1 specialization's bound names ``zero_one_specialization``
    first, a size past the user's bound ``shape_relation``. Without it (or without the dim), a
    user's bound is named first.

    ``absent`` names the forward's arguments the rejected sample passed as None or left out. A
    type, constant or number guard on one of them failed because it was absent: the failure is
    ``optional_argument``, ``expected`` what the graph holds (``"0.5"``, ``"float"``) and
    ``actual`` ``"None"``.
    """
    # Torch prints its own files relative to its folder; read before normalisation cuts a deep one
    # (_refs/nn/functional/__init__.py) to its last two components.
    operator = _operator(reason)
    reason = normalize_reason(reason)
    parts = _split(reason)
    tensor = _tensor_failure(parts, reason)
    if tensor is not None:
        return tensor
    return _shape_failure(parts, reason, operator, values, absent)


def _tensor_failure(parts: _Parts, reason: str) -> GuardFailure | None:
    """The failure of a guard on one tensor's properties (dtype, device, size, stride...: the
    first of :data:`TENSOR_PATTERNS` it matches), else None."""
    guard = parts.guard
    for kind, pattern in TENSOR_PATTERNS:
        match = pattern.search(guard)
        if not match:
            continue
        fields = match.groupdict()
        if kind is K.DISPATCH_KEY_MISMATCH and _device_keys_differ(fields["expected"], fields["actual"]):
            kind = K.DEVICE_MISMATCH
        name = fields["input"]
        axis = fields.get("axis")
        dims: tuple[str, ...] = ()
        if axis is not None:
            which = "stride" if kind is K.STRIDE_MISMATCH else "size"
            dims = (f"{name}.{which}()[{axis}]",)
        expected = fields.get("expected")
        actual = fields.get("actual")
        return GuardFailure(
            kind=kind,
            causes=(kind,),
            against=parts.against,
            inputs=(name,),
            dims=dims,
            guard=guard,
            expected=expected.strip() if expected else None,
            actual=actual.strip() if actual else None,
            user_source=_user_source(parts),
            hint=_hint(parts),
            raw=reason,
        )
    return None


def _shape_failure(parts: _Parts, reason: str, operator: str | None, values: Mapping[str, int] | None,
                   absent: Collection[str]) -> GuardFailure:
    """The failure of any other guard: the causes its notes name (:func:`_note_causes`), else
    what its expression checks (:data:`EXPRESSION_PATTERNS`; an absent optional argument's, an
    operator's own guard)."""
    guard = parts.guard
    dims, inputs = _dims(guard)
    broken = _broken_bound(guard, values)
    causes = _note_causes(parts, guard, broken)
    expected = broken.expected if broken else None
    actual_value = None
    if not causes:
        kind, fields = _expression(guard)
        if _absent_input(kind, fields, absent):
            checked = _CHECKED_TYPE.search(guard)
            fields = {**fields, "expected": fields.get("expected") or (checked.group("type") if checked else None)}
            kind, actual_value = K.OPTIONAL_ARGUMENT, "None"
        # An operator's own guard: the expression says what it checks, the operator why.
        causes.append(K.OPERATOR_GUARD if operator else kind)
        if fields.get("input") and not inputs:
            inputs = (fields["input"],)
        if fields.get("dim"):
            dims = (fields["dim"],)
        expected = fields.get("expected") or expected
    return GuardFailure(
        kind=causes[0],
        causes=tuple(causes),
        against=parts.against,
        inputs=inputs,
        dims=dims,
        guard=guard,
        expected=expected.strip() if expected else None,
        actual=str(broken.actual) if broken else actual_value,
        user_source=_user_source(parts),
        hint=_hint(parts),
        raw=reason,
        operator=operator,
    )


def _note_causes(parts: _Parts, guard: str, broken: _Broken | None) -> list[FailureKind]:
    """The causes the guard's notes name (:data:`NOTE_PATTERNS`, in order), the one that names the
    fix first."""
    causes: list[FailureKind] = []
    note = " ".join(parts.comments)
    for kind, pattern in NOTE_PATTERNS:
        if pattern.search(note):
            causes.append(kind)
    if K.ZERO_ONE_SPECIALIZATION in causes and _is_user_bounded(guard):
        # The user's own branch set a bound besides 2: marking the dim unbacked cannot remove
        # that one, so it is the kind that names the fix; 0/1 stays recorded as a cause.
        causes.insert(0, K.SHAPE_RELATION)
        if broken and broken.zero_one:
            # This sample broke the 0/1 bound itself (a size of 0 or 1): that one names the fix.
            causes.remove(K.ZERO_ONE_SPECIALIZATION)
            causes.insert(0, K.ZERO_ONE_SPECIALIZATION)
    return causes


def classify_reasons(
    reasons: tuple[str, ...] | list[str], values: Mapping[str, int] | None = None, absent: Collection[str] = ()
) -> tuple[GuardFailure, ...]:
    return tuple(classify_reason(r, values, absent) for r in reasons if r and r.strip())
