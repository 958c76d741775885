"""guardscope.torch_compat.guard_columns: each cache entry's guards as a numpy predicate over
columns must agree, row by row, with Dynamo's own ``guard_manager.check`` on the same call.
In-process torch.compile (backend="eager", tiny functions), hence tests/integration."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
import torch._dynamo

from guardscope.torch_compat.guard_columns import (ScalarColumn, TensorColumn, _ExprCompiler, _order,
                                                  column_guards)

CPU = torch.device("cpu")
F32 = TensorColumn(2, torch.float32, CPU, False)
SIZES = [0, 1, 2, 3, 4, 5, 6, 7, 8, 16, 40]
ROWS = 300


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _tensor(size: list[int], stride: list[int], offset: int, spec: TensorColumn) -> torch.Tensor:
    """A fresh non-view tensor with exactly this geometry, on a storage of its own."""
    extent = offset + (1 + sum((s - 1) * st for s, st in zip(size, stride)) if all(size) else 0)
    storage = torch.zeros(max(extent, 1), dtype=spec.dtype, device=spec.device).untyped_storage()
    t = torch.empty(0, dtype=spec.dtype, device=spec.device).set_(storage, offset, size, stride)
    return t.requires_grad_(spec.requires_grad)


def _geometry(rng: np.random.Generator, ndim: int, like: list[int] | None,
              shapes: list[tuple]) -> tuple[list, list, int]:
    """Sizes (often a compiled call's shape, or another tensor's), contiguous strides, some
    transposed, some arbitrary, and now and then a storage offset."""
    shapes = [s for s in shapes if len(s) == ndim]
    if like is not None:
        size = list(like)
    elif shapes and rng.random() < .5:
        size = list(shapes[int(rng.integers(len(shapes)))])
        if rng.random() < .3:
            size[int(rng.integers(ndim))] = int(rng.choice(SIZES))
    else:
        size = [int(rng.choice(SIZES)) if rng.random() < .8 else int(rng.integers(0, 41))
                for _ in range(ndim)]
    mode, order = rng.random(), list(range(ndim))[::-1]
    if mode < .2 and ndim >= 2:
        order[0], order[1] = order[1], order[0]  # transposed: the first dim is innermost
    stride, step = [0] * ndim, 1
    for d in order:
        stride[d], step = step, step * max(size[d], 1)
    if mode > .92:
        stride = [int(rng.integers(0, 50)) for _ in range(ndim)]
    offset = int(rng.integers(1, 6)) if rng.random() < .1 else 0
    return size, stride, offset


def _batch(layout: dict, constants: dict, rng: np.random.Generator, shapes: list[tuple] = (),
           n: int = ROWS):
    """Columns for n random rows, and each row's frame locals."""
    columns: dict[tuple, list] = {}
    rows = [dict(constants) for _ in range(n)]
    for r in range(n):
        first = None
        for name, spec in layout.items():
            if isinstance(spec, ScalarColumn):
                value = int(rng.choice([-1, 0, 1, 2, 3, 5, 7, int(rng.integers(0, 41))]))
                columns.setdefault((name, "value"), []).append(value)
                rows[r][name] = value
                continue
            like = first if first is not None and len(first) == spec.ndim and rng.random() < .4 else None
            size, stride, offset = _geometry(rng, spec.ndim, like, list(shapes))
            first = size if first is None else first
            for d in range(spec.ndim):
                columns.setdefault((name, "size", d), []).append(size[d])
                columns.setdefault((name, "stride", d), []).append(stride[d])
            columns.setdefault((name, "offset"), []).append(offset)
            rows[r][name] = _tensor(size, stride, offset, spec)
    return {k: np.asarray(v, dtype=np.int64) for k, v in columns.items()}, rows


def _agree(code, layout: dict, constants: dict | None = None, seed: int = 0,
           shapes: list[tuple] = ()) -> list:
    """Every entry with a predicate agrees with check on every row; returns the entries."""
    entries = column_guards(code, layout, constants)
    assert entries is not None and entries
    columns, rows = _batch(layout, constants or {}, np.random.default_rng(seed), shapes)
    for entry in entries:
        if entry.predicate is None:
            assert entry.reason
            continue
        got = entry.predicate(columns)
        want = np.array([entry.check(row) for row in rows])
        # What a Dask worker evaluates: the predicate pickled, compiled again from its texts.
        assert np.array_equal(pickle.loads(pickle.dumps(entry.predicate))(columns), got)
        assert got.dtype == bool and got.shape == (ROWS,)
        bad = np.flatnonzero(got != want)
        assert not bad.size, (entry.compile_id, {k: int(v[bad[0]]) for k, v in columns.items()},
                              bool(got[bad[0]]), str(entry.check.__self__))
    return entries


def _some_translated(entries: list) -> int:
    count = sum(e.predicate is not None for e in entries)
    assert count > 0, [e.reason for e in entries]
    return count


def test_entries_come_earliest_compiled_first_with_ids():
    def f(x):
        return x.sum(0)
    c = torch.compile(f, backend="eager")
    for rows in (3, 5, 1):
        c(torch.randn(rows, 4))
    entries = _agree(f.__code__, {"x": F32}, shapes=[(3, 4), (5, 4), (1, 4)])
    assert [e.compile_id for e in entries] == ["0/0", "0/1", "0/2"]
    assert all(e.constant_ok for e in entries)
    _some_translated(entries)


def test_compile_order_sorts_recompile_numbers_as_numbers():
    from types import SimpleNamespace

    from torch._guards import CompileId
    ids = [CompileId(frame_id=0, frame_compile_id=k) for k in (10, 9, 2, 0, 11, 1)]
    ordered = sorted((SimpleNamespace(compile_id=i) for i in ids), key=_order)
    assert [str(e.compile_id) for e in ordered] == ["0/0", "0/1", "0/2", "0/9", "0/10", "0/11"]
    as_text = sorted((SimpleNamespace(compile_id=t) for t in ("1/0", "0/10", "0/9")), key=_order)
    assert [e.compile_id for e in as_text] == ["0/9", "0/10", "1/0"]


def test_duck_sized_equal_dims_then_different():
    def f(x, y):
        return x.sum(0) + y.sum(0)
    c = torch.compile(f, backend="eager")
    c(torch.randn(3, 4), torch.randn(3, 4))
    c(torch.randn(5, 4), torch.randn(5, 4))
    c(torch.randn(5, 4), torch.randn(6, 4))
    c(torch.randn(7, 4), torch.randn(7, 4))
    entries = _agree(f.__code__, {"x": F32, "y": F32}, shapes=[(3, 4), (5, 4), (6, 4)])
    assert len(entries) >= 2
    _some_translated(entries)


def test_elementwise_equal_shapes_and_size_one_specialisation():
    def f(x, y):
        return (x + y).relu()
    c = torch.compile(f, backend="eager")
    for shape in ((3, 4), (5, 4), (1, 4), (5, 1), (6, 7)):
        c(torch.randn(shape), torch.randn(shape))
    _some_translated(_agree(f.__code__, {"x": F32, "y": F32}, seed=1,
                             shapes=[(3, 4), (5, 4), (1, 4), (5, 1), (6, 7)]))


def test_dynamic_true():
    def f(x):
        return x * 2 + x.sum(0, keepdim=True)
    c = torch.compile(f, backend="eager", dynamic=True)
    c(torch.randn(3, 4))
    c(torch.randn(1, 4))
    c(torch.randn(2, 1))
    _some_translated(_agree(f.__code__, {"x": F32}, seed=2, shapes=[(3, 4), (1, 4), (2, 1)]))


def test_mark_dynamic_with_bounds():
    def f(x):
        return x.cos().sum(1)
    c = torch.compile(f, backend="eager")
    x = torch.randn(6, 4)
    torch._dynamo.mark_dynamic(x, 0, min=2, max=64)
    c(x)
    c(torch.randn(70, 4))
    entries = _agree(f.__code__, {"x": F32}, seed=3, shapes=[(6, 4), (70, 4), (64, 4)])
    assert any("<= 64" in str(e.check.__self__) for e in entries)
    _some_translated(entries)


def test_int_argument_specialised_and_dynamic():
    def f(x, n):
        return x * n + n
    layout = {"x": F32, "n": ScalarColumn("int")}
    c = torch.compile(f, backend="eager")
    c(torch.randn(3, 4), 2)
    c(torch.randn(3, 4), 3)
    c(torch.randn(5, 4), 3)
    _some_translated(_agree(f.__code__, layout, seed=4, shapes=[(3, 4), (5, 4)]))
    if not hasattr(torch._dynamo.config, "specialize_int"):
        pytest.skip("this torch has no specialize_int")
    torch._dynamo.reset()
    with torch._dynamo.config.patch(specialize_int=False):
        c = torch.compile(f, backend="eager")
        c(torch.randn(3, 4), 2)
        c(torch.randn(3, 4), 5)
        c(torch.randn(4, 4), 0)
        _some_translated(_agree(f.__code__, layout, seed=5, shapes=[(3, 4), (4, 4)]))


def test_int_argument_in_a_shape_relation():
    def f(x, n):
        return x[:n].sum() + x.reshape(-1)[: n * 2].sum()
    with torch._dynamo.config.patch(specialize_int=False):
        c = torch.compile(f, backend="eager", dynamic=True)
        c(torch.randn(8, 4), 3)
        c(torch.randn(9, 4), 20)
        entries = _agree(f.__code__, {"x": F32, "n": ScalarColumn()}, seed=6,
                         shapes=[(8, 4), (9, 4)])
    _some_translated(entries)


def test_transposed_input_has_stride_guards():
    def f(x):
        return x.sum(1)
    c = torch.compile(f, backend="eager")
    c(torch.randn(3, 4))
    c(torch.empty_strided((3, 6), (1, 3)).normal_())  # transposed, not a view: no _base guards
    c(torch.empty_strided((5, 6), (1, 5)).normal_())
    entries = _agree(f.__code__, {"x": F32}, seed=7, shapes=[(3, 4), (3, 6), (5, 6)])
    assert any("stride=[1, " in str(e.check.__self__) for e in entries)
    _some_translated(entries)


def test_graph_break_only_frame_zero():
    def f(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()
    c = torch.compile(f, backend="eager", fullgraph=False)
    c(torch.randn(3, 4))
    c(torch.randn(5, 4))
    entries = _agree(f.__code__, {"x": F32}, seed=8, shapes=[(3, 4), (5, 4)])
    assert all(e.compile_id.startswith("0/") for e in entries)
    _some_translated(entries)


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.scale = True

    def forward(self, x, bias=None):
        h = self.lin(x)
        if bias is not None:
            h = h + bias.sum()
        return h * 2 if self.scale else h


def test_module_constants_and_an_optional_argument():
    net = _Net()
    c = torch.compile(net, backend="eager")
    c(torch.randn(3, 4))
    c(torch.randn(5, 4))
    c(torch.randn(5, 4), torch.randn(7))
    code = type(net).forward.__code__
    entries = _agree(code, {"x": F32}, {"self": net, "bias": None}, seed=9, shapes=[(3, 4), (5, 4)])
    with_bias = [e for e in entries if "L['bias'] is None" not in str(e.check.__self__)]
    assert with_bias and not any(e.constant_ok for e in with_bias)
    _some_translated(entries)
    missing = column_guards(code, {"x": F32}, {})
    assert all(e.predicate is None and "nor in constants" in e.reason for e in missing)


def test_grad_mode_is_a_constant_guard():
    def f(x):
        return x.exp().sum(0)
    c = torch.compile(f, backend="eager")
    c(torch.randn(3, 4))
    with torch.no_grad():
        c(torch.randn(3, 4))
    entries = _agree(f.__code__, {"x": F32}, seed=10, shapes=[(3, 4)])
    assert [e.constant_ok for e in entries] == [True, False]
    with torch.no_grad():
        entries = _agree(f.__code__, {"x": F32}, seed=10, shapes=[(3, 4)])
    assert [e.constant_ok for e in entries] == [False, True]


def test_dtype_and_requires_grad_mismatch_is_all_false():
    def f(x):
        return x.sum(0)
    c = torch.compile(f, backend="eager")
    c(torch.randn(3, 4))
    for spec in (TensorColumn(2, torch.float64, CPU, False), TensorColumn(2, torch.float32, CPU, True),
                 TensorColumn(3, torch.float32, CPU, False), ScalarColumn()):
        [entry] = _agree(f.__code__, {"x": spec}, seed=11)
        assert entry.predicate is not None and entry.reason is None


def test_aliased_inputs_never_match_fresh_rows():
    """Compiled with the same tensor twice (epilogue ``L['x'] is L['y']``): rows, each tensor
    its own, are never accepted by that entry."""
    def f(x, y):
        return x.sum() + y.sum()
    c = torch.compile(f, backend="eager")
    t = torch.randn(3, 4)
    c(t, t)
    c(torch.randn(3, 4), torch.randn(3, 4))
    entries = _agree(f.__code__, {"x": F32, "y": F32}, seed=14, shapes=[(3, 4)])
    assert all(e.predicate is not None for e in entries)
    assert "L['x'] is L['y']" in str(entries[0].check.__self__)


def test_an_untranslatable_guard_is_reported_not_guessed():
    """A view input under dynamic=True: Dynamo guards the view's base (L['x']._base), which a
    column set does not describe."""
    def f(x):
        return x * 2 + x.sum(0, keepdim=True)
    c = torch.compile(f, backend="eager", dynamic=True)
    c(torch.randn(8, 7).t()[1:])
    [entry] = column_guards(f.__code__, {"x": F32})
    assert entry.predicate is None and "_base" in entry.reason
    assert entry.constant_ok


def test_rows_are_accepted_somewhere():
    """Guard against a vacuous pass: the accepted rows are not all-False."""
    def f(x, y):
        return x.sum(0) + y.sum(0)
    c = torch.compile(f, backend="eager")
    c(torch.randn(3, 4), torch.randn(3, 4))
    c(torch.randn(5, 4), torch.randn(6, 4))
    layout = {"x": F32, "y": F32}
    entries = _agree(f.__code__, layout, seed=12, shapes=[(3, 4), (5, 4)])
    columns, _ = _batch(layout, {}, np.random.default_rng(12))
    accepted = sum(int(e.predicate(columns).sum()) for e in entries if e.predicate is not None)
    assert accepted > 0


class _Geometry:
    def __init__(self, size: list[int], stride: list[int], offset: int):
        self._size, self._stride, self._offset = size, stride, offset

    def size(self):
        return self._size

    def stride(self):
        return self._stride

    def storage_offset(self):
        return self._offset


@pytest.mark.parametrize("text", [
    "L['x'].size()[0] // L['n'] == 2 or L['n'] == 0",
    "L['n'] == 0 or L['x'].size()[0] % L['n'] == 1",
    "(L['n'] - 3) // 2 == -2 and (L['n'] - 3) % 4 <= 3",
    "2 <= L['x'].size()[0] <= 64 and L['x'].stride()[0] != L['x'].size()[1]",
    "max(L['x'].size()[0], L['n'], 3) == min(L['x'].size()[1] * 2, 40) + L['x'].storage_offset()",
    "not (L['x'].size()[0] * L['x'].size()[1] > 20) or abs(L['n']) ** 2 < 9",
    "L['x'].size()[0] * 4611686018427387904 * 4 != 0 and -L['n'] + 9223372036854775807 > 0",
    "1 < L['x'].size()[1] // (L['n'] - 2) < 3 < L['x'].size()[0]",
])
def test_shape_expression_semantics_match_python(text):
    """The numpy translation of a shape guard against Python itself, on rows that divide by
    zero (Python raises: the guard fails), go negative, or overflow int64."""
    rng = np.random.default_rng(13)
    sizes = rng.integers(0, 9, size=(400, 2))
    strides = rng.integers(0, 9, size=(400, 2))
    offsets, values = rng.integers(0, 3, size=400), rng.integers(-4, 6, size=400)
    columns = {("x", "size", 0): sizes[:, 0], ("x", "size", 1): sizes[:, 1],
               ("x", "stride", 0): strides[:, 0], ("x", "stride", 1): strides[:, 1],
               ("x", "offset"): offsets, ("n", "value"): values}
    holds = _ExprCompiler({"x": F32, "n": ScalarColumn()}).compile(text)
    want = []
    for r in range(400):
        frame = {"x": _Geometry(list(sizes[r].tolist()), list(strides[r].tolist()), int(offsets[r])),
                 "n": int(values[r])}
        try:
            want.append(bool(eval(text, {"__builtins__": {"max": max, "min": min, "abs": abs}, "L": frame})))
        except ZeroDivisionError:
            want.append(False)
    assert holds(columns, 400).tolist() == want
    assert 0 < sum(want) < 400 or "4611686018427387904" in text


@pytest.mark.parametrize("text", ["L['x'].size()[0] / 2 == 1", "math.ceil(L['n']) == 2",
                                  "IsNonOverlappingAndDenseIndicator(L['x'].size()[0]) == 1",
                                  "L['y'].size()[0] == 1", "L['x'].size()[2] == 1", "L['x'] == 1",
                                  "L['x']._base.size()[0] == 2"])
def test_unknown_shape_expressions_are_refused(text):
    from guardscope.torch_compat.guard_columns import _Untranslatable
    with pytest.raises(_Untranslatable):
        _ExprCompiler({"x": F32, "n": ScalarColumn()}).compile(text)


def test_checked_under_inference_mode_as_the_replay_checks():
    """The replay checks guards under inference_mode on normal tensors (a corpus's are never
    inference tensors): the dispatch keys a row must have are a normal tensor's, not those of a
    tensor made inside the block (issue 37: a probe made there rejected every row)."""
    def f(x):
        return x.relu().sum(0)
    c = torch.compile(f, backend="eager")
    calls = [torch.randn(rows, 4) for rows in (3, 5)]  # normal tensors, served under inference_mode
    columns, rows = _batch({"x": F32}, {}, np.random.default_rng(3), [(3, 4), (5, 4)])
    with torch.inference_mode():
        for x in calls:
            c(x)
        entries = column_guards(f.__code__, {"x": F32}, {})
        for entry in entries:
            want = np.array([entry.check(row) for row in rows])
            assert want.any() and (entry.predicate(columns) == want).all()


def test_a_global_identity_guard_is_left_to_one_real_check():
    """A shape-environment guard that reads only globals (``nn.functional``'s MHA fast path reads
    ``torch.backends.mha``) is the same for every row: left out of the predicate, named in
    ``assumed`` for the caller to confirm on one row with Dynamo's check."""
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()

    def f(x):
        return layer(x)
    c = torch.compile(f, backend="eager", fullgraph=True)
    with torch.no_grad():
        c(torch.randn(2, 3, 8))
        spec = TensorColumn(3, torch.float32, CPU, False)
        entries = column_guards(f.__code__, {"x": spec}, {"layer": layer})
        (entry,) = entries
        assert entry.predicate is not None, entry.reason
        # torch 2.13.0 guards the fast path's global (torch.backends.mha) in an epilogue guard;
        # torch 2.14.1 emits no such guard for this layer, and nothing is assumed
        assert all("torch.backends.mha" in text or ".torch is " in text for text in entry.assumed), entry.assumed
        columns, rows = _batch({"x": spec}, {"layer": layer}, np.random.default_rng(4), [(2, 3, 8)])
        want = np.array([entry.check(row) for row in rows])
        got = entry.predicate(columns)
        # Where the predicate accepts, Dynamo agrees once the assumed guards hold (they do here).
        assert want.any() and (got == want).all()
