"""A user's first hour, through the real command line in a subprocess (exit codes and stderr are
what a user sees): no lost work, no false causes, no tracebacks, feedback while it runs.

This file holds the pure tests (no torch.compile, no child process); the others are in
tests/subprocess/test_first_hour.py.
"""

from __future__ import annotations


# --- rough edges --------------------------------------------------------------------------------


def test_help_texts_render_their_examples_and_say_why_defaults_differ():
    from click.testing import CliRunner

    from guardscope.cli import main

    analyze = CliRunner().invoke(main, ["analyze", "--help"], terminal_width=200).output
    assert "--mode reduce-overhead \\\n" in analyze  # the continuation of a two-line example survives
    assert "Exit status: 0 analysed; 1" in " ".join(analyze.split())
    assert "do not depend on the device" in " ".join(analyze.split())
    fidelity = CliRunner().invoke(main, ["fidelity", "--help"], terminal_width=200).output
    assert "analyze defaults to the CPU" in " ".join(fidelity.split())
    for command in ("emit-warmup", "verify", "probe", "bundle", "fidelity"):
        assert "--corpus" in CliRunner().invoke(main, [command, "--help"]).output, command
