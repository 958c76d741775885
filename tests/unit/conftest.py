"""tests/unit holds pure tests: no torch.compile, no torch.export, no child process. This folder
enforces it, so the whole folder stays fast (docs/benchmarks.md §6 has its time)."""

from __future__ import annotations

import subprocess

import pytest
import torch
import torch._dynamo
import torch.export


def _refuse(what: str):
    def refuse(*args, **kwargs):
        raise AssertionError(f"tests/unit is for pure code, and this test {what}: "
                             "move it to tests/integration (in-process compile) or tests/subprocess")
    return refuse


@pytest.fixture(autouse=True)
def _pure(monkeypatch):
    monkeypatch.setattr(torch, "compile", _refuse("calls torch.compile"))
    monkeypatch.setattr(torch._dynamo, "optimize", _refuse("calls torch._dynamo.optimize"))
    monkeypatch.setattr(torch.export, "export", _refuse("calls torch.export.export"))
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("starts a child process"))
