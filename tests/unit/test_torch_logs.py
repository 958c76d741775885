"""torch's own log lines kept out of the terminal while emit-warmup tries its plans (issue 23 item
9): what torch_compat.torch_logs_captured keeps, and the lines the terminal prints of it."""

from __future__ import annotations

import io
import logging
import os
import sys
import warnings

import torch
from torch._logging import _internal

from guardscope import torch_compat
from guardscope.torch_compat.logs import terminal_handler_types
from guardscope.text import TORCH_LOG_CAUSES_SHOWN, torch_log_lines

TORCH_DIR = os.path.dirname(torch.__file__)


class GuardOnDataDependentSymNode(RuntimeError):
    """Stands in for torch.fx.experimental.symbolic_shapes' exception of that name."""


def terminal_streams(monkeypatch) -> io.StringIO:
    """Every terminal handler torch put on its loggers writes here for the test: a
    ``StreamHandler``'s stream (torch 2.9 to 2.13), and ``sys.stderr``, which torch 2.14's
    ``_StderrHandler`` writes to whatever it is at the time."""
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    for name in _internal.log_registry.get_log_qnames():
        for handler in logging.getLogger(name).handlers:
            if type(handler) is logging.StreamHandler and _internal._is_torch_handler(handler):
                monkeypatch.setattr(handler, "stream", stream)
    return stream


def test_torch_prints_to_the_terminal_through_handlers_guardscope_knows():
    """Drift: torch's terminal handlers are of a class torch_compat.logs recognises (a plain
    StreamHandler up to torch 2.13, torch._logging._internal._StderrHandler in 2.14); a new class
    would leave torch's tracebacks on the terminal while emit-warmup tries its plans."""
    kinds = terminal_handler_types()
    made = [(name, type(handler)) for name in _internal.log_registry.get_log_qnames()
            for handler in logging.getLogger(name).handlers if _internal._is_torch_handler(handler)]
    terminal = [(name, kind) for name, kind in made if not issubclass(kind, logging.FileHandler)
                and kind.__name__ != "LazyTraceHandler"]
    assert terminal, "torch._logging._internal put no terminal handler on its registered loggers"
    unknown = sorted({f"{kind.__module__}.{kind.__qualname__}" for _, kind in terminal if kind not in kinds})
    assert not unknown, f"torch prints its logs through {unknown}, a handler class torch_compat.logs does not know"


def log_failed_meta(times: int) -> None:
    """What fake_tensor.py does when a meta kernel raises: ``log.exception(...)``, traceback included."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    for _ in range(times):
        try:
            raise GuardOnDataDependentSymNode("Could not guard on data-dependent expression Eq(16*u0*u1, 0)")
        except GuardOnDataDependentSymNode:
            log.exception("failed while attempting to run meta for %s", "aten._transformer_encoder_layer_fwd.default")


def test_torch_logs_stay_out_of_the_terminal_while_held(monkeypatch):
    terminal = terminal_streams(monkeypatch)
    before = {name: list(logging.getLogger(name).handlers) for name in _internal.log_registry.get_log_qnames()}
    with torch_compat.torch_logs_captured() as logged:
        log_failed_meta(3)
        logging.getLogger("torch._dynamo").warning("a warning from %s", "dynamo")
    assert terminal.getvalue() == ""
    assert logged.causes == {
        ("error", ("GuardOnDataDependentSymNode: failed while attempting to run meta for "
                   "aten._transformer_encoder_layer_fwd.default")): 3,
        ("warning", "a warning from dynamo"): 1,
    }
    # the file gets torch's own lines: its prefix, the message, the whole traceback
    assert logged.text.count("Traceback (most recent call last)") == 3
    assert "Could not guard on data-dependent expression Eq(16*u0*u1, 0)" in logged.text
    assert logged.lines[0].startswith("E") and "failed while attempting to run meta" in logged.lines[0]
    assert logged.lines[-1].startswith("W") and logged.lines[-1].endswith("a warning from dynamo")
    # afterwards torch prints as before
    assert {name: list(logging.getLogger(name).handlers) for name in before} == before
    log_failed_meta(1)
    assert "failed while attempting to run meta" in terminal.getvalue()


def test_torch_warnings_are_kept_and_the_others_shown():
    shown = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, category, *rest: shown.append(str(message))
        with torch_compat.torch_logs_captured() as logged:
            warnings.warn_explicit("The PyTorch API of nested tensors is in prototype stage", UserWarning,
                                   os.path.join(TORCH_DIR, "nn", "modules", "transformer.py"), 529)
            warnings.warn_explicit("the user's own", UserWarning, "/srv/app/model.py", 3)
    assert shown == ["the user's own"]
    assert logged.causes == {("warning", "UserWarning: The PyTorch API of nested tensors is in prototype stage"): 1}
    assert "transformer.py:529: UserWarning" in logged.text


def test_one_terminal_line_per_cause_most_frequent_first():
    causes = [("error", "GuardOnDataDependentSymNode: failed while attempting to run meta", 124),
              ("warning", "UserWarning: nested tensors are a prototype", 1)]
    assert torch_log_lines(causes, "out/emit-warmup.log", "emit-warmup tried its plans") == [
        ("logged 124 errors while emit-warmup tried its plans: GuardOnDataDependentSymNode: failed while "
         "attempting to run meta (full log: out/emit-warmup.log)"),
        ("logged 1 warning while emit-warmup tried its plans: UserWarning: nested tensors are a prototype "
         "(full log: out/emit-warmup.log)"),
    ]
    many = [("warning", f"cause {n}", 10 - n) for n in range(TORCH_LOG_CAUSES_SHOWN + 2)]
    lines = torch_log_lines(many, "out/emit-warmup.log", "emit-warmup tried its plans")
    assert len(lines) == TORCH_LOG_CAUSES_SHOWN + 1
    assert lines[-1] == "logged 9 more warnings and errors of 2 other causes (full log: out/emit-warmup.log)"
    assert torch_log_lines([], None, "emit-warmup tried its plans") == []
    assert torch_log_lines([], "out/emit-warmup.log", "emit-warmup tried its plans") == [
        "logged lines TORCH_LOGS asked for while emit-warmup tried its plans (full log: out/emit-warmup.log)"]
