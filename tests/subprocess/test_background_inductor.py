"""serve(..., background_compile="thread") with inductor: serving goes on while the worker's compile is
inside an FX trace.

torch keeps one process-wide "FX tracing" flag (``torch.fx._symbolic_trace._is_fx_tracing_flag``),
set by every thread's ``Tracer.trace`` — AOTAutograd's ``make_fx`` inside an inductor compile
among them — and a Dynamo-compiled function entered while it is set refuses to run ("Detected
that you are using FX to symbolically trace a dynamo-optimized function"). The eager backend of
tests/integration/test_background.py never sets it. Here the worker is held inside its real
inductor compile's ``make_fx`` (the fake kernel of a custom op waits there), and the serving
thread calls topologies the plan compiled and ones that fall back meanwhile.
"""

from __future__ import annotations

import contextlib
import gc
import threading

import pytest
import torch

from guardscope import runtime, torch_compat


def fx_flag() -> bool:
    return bool(getattr(torch.fx._symbolic_trace, "_is_fx_tracing_flag", False))


class Hold:
    """Armed: the first fake-kernel call on a thread other than the arming one, inside an FX
    trace, sets ``inside`` and waits for ``go``.

    While it waits, ``torch.compiler.is_compiling()``'s flag is cleared as torch 2.11 has it:
    torch 2.12+ also sets that flag process-wide for Dynamo's whole compile session, and Dynamo
    refuses only when FX traces and nothing compiles, so on them the refusal needs an FX trace
    outside a compile — the state torch 2.11 is in during every inductor compile's make_fx."""

    def __init__(self):
        self.thread: int | None = None
        self.inside = threading.Event()
        self.go = threading.Event()

    def arm(self):
        self.thread = threading.get_ident()

    def __call__(self):
        if self.thread is not None and threading.get_ident() != self.thread and fx_flag() and not self.go.is_set():
            compiling = getattr(torch.compiler, "_is_compiling_flag", None)
            if compiling is not None:
                torch.compiler._is_compiling_flag = False
            try:
                self.inside.set()
                self.go.wait(120)
            finally:
                if compiling is not None:
                    torch.compiler._is_compiling_flag = compiling


HOLD = Hold()


@torch.library.custom_op("guardscope_test::held_identity", mutates_args=())
def held_identity(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@held_identity.register_fake
def _held_identity_fake(x):
    HOLD()  # make_fx runs fake kernels with the FX tracing flag set
    return torch.empty_like(x)


class HeldInTrace(torch.nn.Module):
    """``Elementwise`` (x.sin() * 2), through a custom op whose fake kernel can hold a compile."""

    def forward(self, x):
        return held_identity(x.sin()) * 2


def eager(model, x):
    with torch.inference_mode():
        return model(x)


@pytest.fixture
def hold(monkeypatch, tmp_path):
    """A fresh :class:`Hold`, with empty inductor and AOTAutograd caches (a hit would skip the
    trace the test holds; their config switches are thread-local in recent torch, the worker would
    not see them: the directory is process-wide)."""
    global HOLD
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    torch._dynamo.reset()
    HOLD = Hold()
    yield HOLD
    HOLD.go.set()
    torch._dynamo.reset()
    gc.unfreeze()  # background compiles froze the objects of this process (background_gc_freeze)


@contextlib.contextmanager
def _released(hold):
    try:
        yield
    finally:
        hold.go.set()  # before close() waits for the worker


def test_serving_goes_on_while_a_background_inductor_compile_is_fx_tracing(tiny_plan, hold, monkeypatch):
    model = HeldInTrace()
    compile_threads = []
    with runtime.serve(model, tiny_plan, plan="warmup", backend="inductor", background_compile="thread") as served:
        assert served.graphs == 1
        serving = threading.get_ident()
        hold.arm()
        with torch_compat.compile_start_callback(lambda _: compile_threads.append(threading.get_ident())), \
                _released(hold):
            matrix = torch.randn(2, 3)
            assert torch.equal(served(matrix), eager(model, matrix))  # falls back: compiled in the background
            assert hold.inside.wait(120), "the background compile never reached its FX trace"
            assert fx_flag() and served.background.running
            assert torch.fx._symbolic_trace.is_fx_symbolic_tracing()  # Dynamo refuses compiled calls now

            # The worker sits inside make_fx: every call is served, none raises.
            vectors = [torch.randn(n) for n in (2, 5, 9)]
            for x in vectors:  # topologies the plan compiled
                assert torch.allclose(served(x), eager(model, x))
            for x in (torch.randn(3, 4), torch.randn(4, 2)):  # the pending topology: eager fallbacks
                assert torch.equal(served(x), eager(model, x))
            # A call that passes the flag check just before the flag is set reaches Dynamo's
            # refusal instead: it is served eagerly all the same.
            monkeypatch.setattr(torch_compat, "fx_symbolic_tracing", lambda: False)
            for x in vectors:
                assert torch.allclose(served(x), eager(model, x))
            monkeypatch.undo()
            stats = served.stats
            assert (stats.calls, stats.compiled, stats.fallbacks, stats.background_eager_tracing) == (9, 0, 3, 6)
            assert stats.to_json()["background"]["eager_while_tracing"] == 6

            hold.go.set()
            assert served.wait_background(timeout=300)
            assert not fx_flag()
            for x in vectors + [torch.randn(5, 6)]:
                assert torch.allclose(served(x), eager(model, x))
        stats = served.stats
    assert (stats.background_done, stats.background_failed) == (1, 0)
    assert stats.background_compiles[0].eager_calls == 3
    assert (stats.calls, stats.compiled, stats.fallbacks, stats.background_eager_tracing) == (13, 4, 3, 6)
    assert len(compile_threads) == 1 and compile_threads[0] != serving  # compiled on the worker only
