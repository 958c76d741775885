"""tests/unit holds pure tests: no torch.compile, no torch.export, no child process. This folder
enforces it, so the whole folder stays fast (docs/benchmarks.md §6 has its time)."""

from __future__ import annotations

import functools
import subprocess

import pytest
import torch
import torch._dynamo
import torch.export


def _refuse(what: str, original=None):
    def refuse(*args, **kwargs):
        raise AssertionError(f"tests/unit is for pure code, and this test {what}: "
                             "move it to tests/integration (in-process compile) or tests/subprocess")
    if original is not None:  # its signature stays readable: torch_compat detects features by it
        refuse = functools.wraps(original)(refuse)
    return refuse


@pytest.fixture(autouse=True)
def _pure(monkeypatch):
    monkeypatch.setattr(torch, "compile", _refuse("calls torch.compile", torch.compile))
    monkeypatch.setattr(torch._dynamo, "optimize", _refuse("calls torch._dynamo.optimize"))
    monkeypatch.setattr(torch.export, "export", _refuse("calls torch.export.export"))
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("starts a child process"))
