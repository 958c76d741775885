"""One compiled graph's guards as a predicate over columns of recorded calls.

Dynamo accepts a call for a cache entry when ``entry.guard_manager.check(f_locals)`` holds; for
calls that differ only in tensor sizes, strides, storage offsets and int values, that predicate
becomes a few numpy comparisons over columns. What is read of Dynamo (torch 2.13), and why:

* ``torch._dynamo.eval_frame._debug_get_cache_entry_list(code)``: the entries, each with its
  ``compile_id`` and ``guard_manager`` (a ``GuardManagerWrapper`` whose ``root`` is the C++ tree).
* The tree (``get_leaf_guards``, ``get_child_managers``, ``get_epilogue_lambda_guards``), each
  leaf's ``verbose_code_parts()`` being its Python text. ``guard_manager.code_parts`` is NOT
  complete: its walk skips the epilogue guards, i.e. every shape-environment relation
  (``2 <= L['x'].size()[0]``, duck-sizing equalities, mark_dynamic bounds, stride relations).
* Guards that do not read a varying local (global state and grad mode, torch-function mode stack,
  default device, ``L['self']`` module guards, ``G[...]`` globals, constant locals) are evaluated
  ONCE by Dynamo itself: ``root.clone_manager`` keeps every node whose source does not name a
  varying local, and its ``check_verbose`` runs on the example locals with each varying local
  replaced by a sentinel. Epilogue guards run last and are cloned too; a failure raised by the
  sentinel (or a failing epilogue over varying locals) means every other guard held.
* The subtrees of the varying locals are translated by kind: TENSOR_MATCH (``check_tensor``
  text: class, dispatch keys, dtype, device index, requires_grad against the ``TensorColumn``;
  int sizes/strides against the columns), DIMENSION_DYNAMIC_MARKING_GUARD (torch 2.11: a
  NO_HASATTR guard on a ``_dynamo_*`` attribute; evaluated on a fresh probe tensor: rows are
  fresh tensors without ``_dynamo_*`` marks), TYPE_MATCH, NONE_MATCH,
  NOT_NONE, EQUALS_MATCH on an int. The epilogue texts (the shape guards Dynamo prints with
  ``ShapeGuardPythonPrinter``; comments dropped) are parsed with ``ast`` into numpy expressions
  over a closed grammar; anything else makes the entry not vectorisable, with the text as reason.

Assumptions: rows' tensors are fresh, non-view tensors, each with its own storage, so
NO_TENSOR_ALIASING holds and ``L['a'] is L['b']`` fails; the constant locals are those of the
example for every row; global state is read when :func:`column_guards` runs.
"""

from __future__ import annotations

import ast
import functools
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import torch

Columns = Mapping[tuple, np.ndarray]
_Fn = Callable[[Columns, int], tuple[Any, Any]]  # (value, error mask or None)
_SAFE = 2**31  # operands below this never overflow int64 in +, -, *


@dataclass(frozen=True)
class TensorColumn:
    """A plain strided tensor local: sizes/strides/offset vary by row, the rest is fixed."""
    ndim: int
    dtype: torch.dtype
    device: torch.device
    requires_grad: bool = False


@dataclass(frozen=True)
class ScalarColumn:
    """An int local whose value varies by row (only ``kind="int"`` is supported)."""
    kind: str = "int"


@dataclass
class ColumnGuards:
    """One cache entry, translated."""
    compile_id: str
    check: Callable[[dict], bool]
    predicate: Callable[[Columns], np.ndarray] | None
    reason: str | None
    constant_ok: bool
    # Shape-environment guards that read no varying local (globals: ``G['torch'].backends.mha is
    # ...``), the same for every row but not translated: the predicate leaves them out, so a
    # caller checks one row the predicate accepts with ``check`` (true there: true for all).
    assumed: tuple[str, ...] = ()


class _Untranslatable(Exception):
    """A guard text outside what this module translates with certainty."""


def _rows(columns: Columns) -> int:
    return len(next(iter(columns.values()))) if columns else 0


def _strip(text: str) -> str:
    """A verbose code part without its ``  # user code`` comment."""
    return text.split("  # ")[0].strip()


def _local(node: ast.AST) -> str | None:
    """``L['name']`` -> name."""
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "L"
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
        return node.slice.value
    return None


# ---------------------------------------------------------------- shape expressions -> numpy

def _widen(*xs: Any) -> list[Any]:
    """Python-int (object) arrays when int64 could overflow, else unchanged."""
    def big(x: Any) -> bool:
        if isinstance(x, np.ndarray):
            return x.size > 0 and max(abs(int(x.min())), abs(int(x.max()))) >= _SAFE
        return abs(int(x)) >= _SAFE
    if any(big(x) for x in xs):
        return [x.astype(object) if isinstance(x, np.ndarray) else x for x in xs]
    return list(xs)


def _or(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else a | b


def _truth(v: Any, kind: str, n: int) -> np.ndarray:
    out = np.asarray(v != 0 if kind == "int" else v, dtype=bool)
    return np.broadcast_to(out, (n,))


def _err(e: Any, n: int) -> np.ndarray:
    return np.zeros(n, bool) if e is None else np.broadcast_to(e, (n,))


_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
_DIV = {ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge}


class _ExprCompiler:
    """Compiles one shape-guard text (Python source) to ``fn(columns, n) -> (value, err)``;
    ``err`` marks rows where Python would raise (division by zero), which Dynamo counts as
    failing. Short-circuit ``and``/``or``/chained comparisons keep Python's error semantics."""

    def __init__(self, layout: Mapping[str, Any]):
        self.layout = layout

    def compile(self, text: str) -> Callable[[Columns, int], np.ndarray]:
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError as error:
            raise _Untranslatable(text) from error
        kind, fn = self.node(tree.body)

        def holds(columns: Columns, n: int) -> np.ndarray:
            value, err = fn(columns, n)
            return _truth(value, kind, n) & ~_err(err, n)
        return holds

    def node(self, node: ast.AST) -> tuple[str, _Fn]:
        if isinstance(node, ast.Constant) and type(node.value) in (int, bool):
            value = node.value
            return ("bool" if isinstance(value, bool) else "int"), lambda c, n: (value, None)
        if isinstance(node, ast.Subscript) or isinstance(node, ast.Call) and _attr_call(node):
            return "int", self.column(node)
        if isinstance(node, ast.UnaryOp):
            kind, fn = self.node(node.operand)
            if isinstance(node.op, ast.Not):
                return "bool", lambda c, n: (lambda v, e: (~_truth(v, kind, n), e))(*fn(c, n))
            if kind == "int" and isinstance(node.op, (ast.USub, ast.UAdd)):
                sign = -1 if isinstance(node.op, ast.USub) else 1
                return "int", lambda c, n: (lambda v, e: (_widen(v)[0] * sign, e))(*fn(c, n))
        if isinstance(node, ast.BinOp):
            return "int", self.binop(node)
        if isinstance(node, ast.BoolOp):
            return "bool", self.boolop(node)
        if isinstance(node, ast.Compare):
            return "bool", self.compare(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            name, args = node.func.id, [self.int_node(a) for a in node.args]
            if name in ("max", "min") and len(args) >= 2:
                reduce = np.maximum if name == "max" else np.minimum
                return "int", lambda c, n: self.apply(c, n, args,
                                                      lambda *vs: functools.reduce(reduce, _widen(*vs)))
            if name == "abs" and len(args) == 1:
                return "int", lambda c, n: self.apply(c, n, args, lambda v: abs(_widen(v)[0]))
        raise _Untranslatable(ast.unparse(node))

    def int_node(self, node: ast.AST) -> _Fn:
        kind, fn = self.node(node)
        if kind != "int":
            raise _Untranslatable(ast.unparse(node))
        return fn

    def column(self, node: ast.AST) -> _Fn:
        """``L['n']``, ``L['x'].size()[i]``, ``L['x'].stride()[i]``, ``L['x'].storage_offset()``."""
        name, spec = _local(node), self.layout.get(_local(node) or "")
        if name is not None and isinstance(spec, ScalarColumn) and spec.kind == "int":
            key: tuple = (name, "value")
        elif (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
              and type(node.slice.value) is int and _attr_call(node.value) in ("size", "stride")):
            name = _local(node.value.func.value)
            spec, axis = self.layout.get(name or ""), node.slice.value
            if not isinstance(spec, TensorColumn) or not 0 <= axis < spec.ndim:
                raise _Untranslatable(ast.unparse(node))
            key = (name, node.value.func.attr, axis)
        elif _attr_call(node) == "storage_offset" and isinstance(
                self.layout.get(_local(node.func.value) or ""), TensorColumn):
            key = (_local(node.func.value), "offset")
        else:
            raise _Untranslatable(ast.unparse(node))
        return lambda c, n: (np.asarray(c[key], dtype=np.int64), None)

    def apply(self, c: Columns, n: int, args: list[_Fn], op: Callable) -> tuple[Any, Any]:
        """``op`` over the arguments' values (all evaluated); errors add up."""
        results = [fn(c, n) for fn in args]
        return op(*[v for v, _ in results]), functools.reduce(_or, [e for _, e in results], None)

    def binop(self, node: ast.BinOp) -> _Fn:
        left, right = self.int_node(node.left), self.int_node(node.right)
        op = type(node.op)
        if op in _ARITH:
            return lambda c, n: self.apply(c, n, [left, right], lambda a, b: _ARITH[op](*_widen(a, b)))
        if op in _DIV:
            def divide(c: Columns, n: int) -> tuple[Any, Any]:
                (a, ea), (b, eb) = left(c, n), right(c, n)
                zero = np.asarray(b == 0)
                a, b = _widen(a, np.where(zero, 1, b) if zero.any() else b)
                return _DIV[op](a, b), _or(_or(ea, eb), zero if zero.any() else None)
            return divide
        if op is ast.Pow and isinstance(node.right, ast.Constant) and type(node.right.value) is int \
                and 0 <= node.right.value <= 64:
            power = node.right.value

            return lambda c, n: self.apply(c, n, [left], lambda base: functools.reduce(
                lambda a, b: operator.mul(*_widen(a, b)), [base] * power, 1))
        raise _Untranslatable(ast.unparse(node))

    def boolop(self, node: ast.BoolOp) -> _Fn:
        parts = [self.node(v) for v in node.values]
        is_and = isinstance(node.op, ast.And)

        def run(c: Columns, n: int) -> tuple[Any, Any]:
            err, going, result = np.zeros(n, bool), np.ones(n, bool), np.zeros(n, bool)
            for kind, fn in parts:  # rows still evaluating: `going`
                value, e = fn(c, n)
                e, t = _err(e, n), _truth(value, kind, n)
                err |= going & e
                going = going & ~e
                if is_and:
                    going = going & t
                else:
                    result |= going & t
                    going = going & ~t
            return (going if is_and else result), err
        return run

    def compare(self, node: ast.Compare) -> _Fn:
        names = [_local(node.left), _local(node.comparators[0])]
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)) \
                and all(isinstance(self.layout.get(x or ""), TensorColumn) for x in names):  # aliasing
            same = (names[0] == names[1]) == isinstance(node.ops[0], ast.Is)  # fresh objects
            return lambda c, n: (np.full(n, same), None)
        operands = [self.int_node(node.left)] + [self.int_node(v) for v in node.comparators]
        ops = [_CMP.get(type(o)) for o in node.ops]
        if None in ops:
            raise _Untranslatable(ast.unparse(node))

        def run(c: Columns, n: int) -> tuple[Any, Any]:
            left, err = operands[0](c, n)
            err, going = _err(err, n).copy(), np.ones(n, bool)
            for op, fn in zip(ops, operands[1:]):
                right, e = fn(c, n)
                err |= going & _err(e, n)
                going = going & ~_err(e, n)
                a, b = _widen(left, right)
                going = going & np.broadcast_to(np.asarray(op(a, b), dtype=bool), (n,))
                left = right
            return going, err
        return run


def _attr_call(node: ast.AST) -> str | None:
    """``L['x'].size()`` -> "size" (no arguments)."""
    if (isinstance(node, ast.Call) and not node.args and not node.keywords
            and isinstance(node.func, ast.Attribute) and _local(node.func.value) is not None):
        return node.func.attr
    return None


# ---------------------------------------------------------------- leaf guards of varying locals

_MARKING_NAMES = {"hasattr", "getattr", "set", "L", "True", "False", "None"}
_MARKING_NODES = (ast.Expression, ast.IfExp, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Call,
                  ast.Subscript, ast.Name, ast.Constant, ast.Set, ast.Tuple, ast.List, ast.Load,
                  ast.Attribute, ast.And, ast.Or, ast.Not, ast.Eq, ast.NotEq, ast.Is, ast.IsNot)


def _marking_guard(text: str, name: str, probe: Any) -> bool:
    """A ``_dynamo_*_indices`` marking guard, evaluated on a fresh probe (rows carry no marks)."""
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        ok = isinstance(node, _MARKING_NODES)
        if isinstance(node, ast.Name):
            ok = node.id in _MARKING_NAMES
        elif isinstance(node, ast.Attribute):
            ok = node.attr == "issubset"
        elif isinstance(node, ast.Subscript):
            ok = _local(node) == name
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id != "set":
            ok = (node.func.id in ("hasattr", "getattr") and len(node.args) >= 2
                  and isinstance(node.args[1], ast.Constant)
                  and str(node.args[1].value).startswith("_dynamo"))
        if not ok:
            raise _Untranslatable(text)
    scope = {"__builtins__": {}, "hasattr": hasattr, "getattr": getattr, "set": set, "L": {name: probe}}
    return bool(eval(compile(tree, "<guard>", "eval"), scope))  # noqa: S307 - whitelisted AST


def _probe(spec: TensorColumn) -> torch.Tensor:
    # A normal tensor, as the rows' are, even where the checks run under inference_mode (the
    # dispatch keys it has then are the thread's; an inference tensor would lack ADInplaceOrView).
    with torch.inference_mode(False):
        probe = torch.empty((0,) * spec.ndim, dtype=spec.dtype, device=spec.device)
    return probe.requires_grad_(spec.requires_grad)


def _tensor_match(text: str, name: str, spec: TensorColumn, probe: torch.Tensor) -> tuple[bool, list]:
    """``check_tensor(...)`` -> (static part holds, [(column key, required int)])."""
    call = ast.parse(text, mode="eval").body
    kw = {k.arg: k.value for k in getattr(call, "keywords", [])}
    if (not isinstance(call, ast.Call) or len(call.args) != 4 or _local(call.args[0]) != name
            or set(kw) != {"device", "requires_grad", "size", "stride"}):
        raise _Untranslatable(text)
    sizes, strides = ast.literal_eval(kw["size"]), ast.literal_eval(kw["stride"])
    keys = (torch._C._dispatch_keys(probe) | torch._C._dispatch_tls_local_include_set()) \
        - torch._C._dispatch_tls_local_exclude_set()
    static = (ast.unparse(call.args[1]) == type(probe).__qualname__
              and ast.unparse(call.args[2]) == ast.unparse(ast.parse(str(keys), mode="eval").body)
              and ast.unparse(call.args[3]) == str(spec.dtype)
              and ast.literal_eval(kw["device"]) == probe.device.index
              and ast.literal_eval(kw["requires_grad"]) == spec.requires_grad
              and len(sizes) == len(strides) == spec.ndim)
    fixed = [((name, what, d), v) for what, values in (("size", sizes), ("stride", strides))
             for d, v in enumerate(values) if v is not None]
    if any(type(v) is not int for _, v in fixed):
        raise _Untranslatable(text)
    return static, fixed


# rows are never None, and each row tensor owns its storage (so never aliases another)
_FIXED_KINDS = {"NO_TENSOR_ALIASING": True, "NONE_MATCH": False, "NOT_NONE": True}


def _leaf(kind: str, text: str, name: str, spec: Any, probe: Any) -> tuple[bool, list]:
    """One leaf under a varying local -> (holds for the whole batch, [(column key, int)])."""
    if kind in _FIXED_KINDS:
        return _FIXED_KINDS[kind], []
    if kind == "TYPE_MATCH":
        match = re.match(r"___check_type_id\(L\['(\w+)'\], (\d+)\)", text)
        if not match or match.group(1) != name:
            raise _Untranslatable(text)
        return int(match.group(2)) == id(type(probe)), []
    if isinstance(spec, TensorColumn):
        if kind == "TENSOR_MATCH":
            return _tensor_match(text, name, spec, probe)
        if kind in ("DIMENSION_DYNAMIC_MARKING_GUARD", "NO_HASATTR", "HASATTR"):
            # torch 2.11 spells the unmarked check hasattr(L['x'], '_dynamo_dynamic_indices') == False,
            # a NO_HASATTR guard; _marking_guard refuses any attribute but a _dynamo_* one.
            return _marking_guard(text, name, probe), []
    elif kind == "TENSOR_MATCH":
        return False, []  # an int is not a Tensor
    elif kind == "EQUALS_MATCH":
        node = ast.parse(text, mode="eval").body
        if isinstance(node, ast.Compare) and _local(node.left) == name and len(node.ops) == 1 \
                and isinstance(node.ops[0], ast.Eq):
            value = ast.literal_eval(node.comparators[0])
            if type(value) is int:
                return True, [((name, "value"), value)]
    raise _Untranslatable(text)


# ---------------------------------------------------------------- entries

_TOKEN = "guardscope-varying-local-sentinel"


class _Sentinel:
    """Stands for a varying local in the once-only check: any use raises, with :data:`_TOKEN`."""
    def _raise(self, *args: Any) -> Any:
        raise _Untranslatable(_TOKEN)
    __getattr__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = _raise
    __index__ = __int__ = __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _raise
    __hash__ = object.__hash__


def _mentions(text: str, names: set[str]) -> bool:
    return any(f"L['{n}']" in text for n in names)


def _constant_ok(root: Any, varying: set[str], constants: Mapping[str, Any]) -> bool:
    """Every guard that reads no varying local, run once by Dynamo on the example's locals."""
    clone = root.clone_manager(lambda mgr: not _mentions(mgr.get_source(), varying))
    values = {k: v for k, v in constants.items() if k not in varying}
    values.update({k: _Sentinel() for k in varying})
    info = clone.check_verbose(values)
    if info.result:
        return True
    parts = list(info.verbose_code_parts)
    if any(_TOKEN in p for p in parts):
        return True
    return any(parts == list(g.verbose_code_parts()) and _mentions(" ".join(parts), varying)
               for g in root.get_epilogue_lambda_guards())


def _translate(entry: Any, layout: Mapping[str, Any], constants: Mapping[str, Any]) -> ColumnGuards:
    """One entry: call-independent guards run once, varying-local guards and shape guards
    translated; any guard failing for the whole batch makes the predicate all-False (exact)."""
    root, varying = entry.guard_manager.root, set(layout)
    result = ColumnGuards(str(entry.compile_id), entry.guard_manager.check, None, None, False)
    if not hasattr(root, "clone_manager") or not hasattr(root, "get_epilogue_lambda_guards"):
        result.reason = "this torch cannot clone a guard tree"
        return result
    static, fixed, exprs, refused, missing = True, [], [], [], []
    compiler = _ExprCompiler(layout)
    for guard in root.get_leaf_guards():
        refused += [_strip(t) for t in guard.verbose_code_parts() if _mentions(t, varying)]
    for manager in root.get_child_managers():
        source = manager.get_source()
        name = source[3:-2] if re.fullmatch(r"L\['\w+'\]", source) else None
        if not _mentions(source, varying):
            if name is not None and name not in constants:
                missing.append(f"{source} is guarded but is neither in the layout nor in constants")
            continue
        if name not in varying or manager.get_child_managers():
            inner = [m.get_source() for m in manager.get_child_managers()]
            refused.append(f"guards on {', '.join(inner or [source])}")
            continue
        spec = layout[name]
        try:
            probe = _probe(spec) if isinstance(spec, TensorColumn) else 0
        except Exception as error:  # e.g. a device this process cannot create
            refused.append(f"cannot make a probe for {source}: {error}")
            continue
        for guard in manager.get_leaf_guards():
            for text in guard.verbose_code_parts() or [""]:
                if type(guard).__name__ == "OBJECT_ALIASING":
                    # torch 2.14.1 checks ``L['x'] is L['y']`` as a leaf guard of the locals' managers
                    # (2.13.0: an epilogue lambda guard): the same expression, translated alike (fresh rows)
                    try:
                        compiler.compile(_strip(text))
                        exprs.append(_strip(text))
                        continue
                    except (_Untranslatable, SyntaxError, ValueError, TypeError):
                        pass
                try:
                    holds, keys = _leaf(type(guard).__name__, _strip(text), name, spec, probe)
                except (_Untranslatable, SyntaxError, ValueError, TypeError):
                    refused.append(f"{type(guard).__name__}: {_strip(text)}")
                    continue
                static = static and holds
                fixed.extend(keys)
    assumed = []
    for guard in root.get_epilogue_lambda_guards():
        for text in guard.verbose_code_parts():
            if not _mentions(text, varying) and not re.search(r"\bL\[", text):
                assumed.append(_strip(text))  # constant over the rows: checked on one by the caller
                continue
            try:
                compiler.compile(_strip(text))  # translatable?
                exprs.append(_strip(text))
            except (_Untranslatable, SyntaxError, ValueError, TypeError):
                refused.append(_strip(text))
    if missing:
        result.reason = missing[0]
        return result
    result.constant_ok = _constant_ok(root, varying, constants)
    result.assumed = tuple(assumed)
    if not (result.constant_ok and static):  # some guard fails whatever the row
        result.predicate = Never()
    elif refused:
        result.reason = refused[0]
    else:
        result.predicate = Conjunction(tuple(fixed), tuple(exprs), dict(layout))
    return result


class Never:
    """The predicate of an entry some guard of which fails whatever the row."""

    def __call__(self, columns: Columns) -> np.ndarray:
        return np.zeros(_rows(columns), dtype=bool)


class Conjunction:
    """Rows where every fixed size/stride/value holds and every shape guard holds.

    Plain data (the fixed keys and values, the shape guards' texts, the layout), so it pickles:
    a Dask worker evaluates it on the shards it reads (:mod:`guardscope.replay.engines`); the
    texts are compiled to numpy on first use, once per process."""

    def __init__(self, fixed: tuple, texts: tuple[str, ...], layout: Mapping[str, Any]) -> None:
        self.fixed, self.texts, self.layout = fixed, texts, layout
        self._exprs: list | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"fixed": self.fixed, "texts": self.texts, "layout": self.layout}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.fixed, self.texts, self.layout = state["fixed"], state["texts"], state["layout"]
        self._exprs = None

    def __call__(self, columns: Columns) -> np.ndarray:
        if self._exprs is None:
            compiler = _ExprCompiler(self.layout)
            self._exprs = [compiler.compile(text) for text in self.texts]
        n = _rows(columns)
        out = np.ones(n, dtype=bool)
        for key, value in self.fixed:
            out &= np.asarray(columns[key]) == value
        for holds in self._exprs:
            out &= holds(columns, n)
        return out


def _order(entry: Any) -> tuple:
    """Compile order: frame id, then recompile number ("0/10" after "0/9")."""
    cid = entry.compile_id
    frame, number = getattr(cid, "frame_id", None), getattr(cid, "frame_compile_id", None)
    if frame is None or number is None:
        frame, number = ([int(p) for p in re.findall(r"\d+", str(cid))[:2]] + [0, 0])[:2]
    return (frame, number, str(cid))


def column_guards(code: Any, layout: Mapping[str, TensorColumn | ScalarColumn],
                  constants: Mapping[str, Any] | None = None) -> list[ColumnGuards] | None:
    """Every cache entry of ``code`` translated, earliest compiled first; None if torch hides
    the entries. ``layout`` names the locals that vary per row; ``constants`` holds the other
    locals of one example call (``self``, optional arguments, flags): a guarded local in neither
    leaves that entry's predicate None. ``predicate`` includes ``constant_ok``, which is read
    now (grad mode, global state): rebuild after changing them."""
    getter = getattr(torch._dynamo.eval_frame, "_debug_get_cache_entry_list", None)
    if getter is None or code is None:
        return None
    try:
        entries = getter(code)
    except Exception:  # pragma: no cover - a torch build without the debug hook
        return None
    for name, spec in layout.items():
        if isinstance(spec, ScalarColumn) and spec.kind != "int":
            raise ValueError(f"{name}: only int scalar columns are supported, not {spec.kind!r}")
        if isinstance(spec, TensorColumn) and spec.requires_grad and not (
                spec.dtype.is_floating_point or spec.dtype.is_complex):
            raise ValueError(f"{name}: only floating or complex tensors can require grad")
    return [_translate(entry, layout, constants or {}) for entry in sorted(entries, key=_order)]
