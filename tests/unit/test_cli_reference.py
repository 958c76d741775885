"""docs/cli.md is the commands' own ``--help``, regenerated here in-process, so the reference never
drifts from the command line; and the text depends on no terminal and no program name."""

from __future__ import annotations

import importlib.util
import sys

import click.formatting

from ..conftest import REPO

SCRIPT = REPO / "docs" / "make_cli_reference.py"


def load_script():
    spec = importlib.util.spec_from_file_location("make_cli_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_cli_md_is_the_commands_help():
    script = load_script()
    message = script.difference((REPO / "docs" / "cli.md").read_text(encoding="utf-8"), script.render())
    assert not message, message


def test_the_reference_depends_on_no_terminal_and_no_program_name(monkeypatch):
    script = load_script()
    text = script.render()
    monkeypatch.setenv("COLUMNS", "41")
    monkeypatch.setattr(click.formatting, "FORCED_WIDTH", 123)  # as click's CliRunner sets it
    monkeypatch.setattr(sys, "argv", ["/somewhere/else/python3 -m guardscope.cli"])
    assert script.render() == text
    assert "Usage: guardscope analyze [OPTIONS] CORPUS" in text
    assert f"`{script.COMMAND}`" in text and str(REPO) not in text
