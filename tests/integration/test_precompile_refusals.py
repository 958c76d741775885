"""What cannot be precompiled is refused in one line before any process starts, the
compile-cache bundle left as the warm start (tests/subprocess/test_precompiled.py builds real ones)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from guardscope import cli, pipeline
from guardscope.errors import PrecompileError

from ..sessions import copy_analysis


def test_a_model_with_a_graph_break_is_refused_naming_it(emitted, tmp_path):
    """The gated model's ``.item()`` branch breaks its graph: torch's AOT compile is fullgraph only."""
    source, _ = emitted("gated")
    out = copy_analysis(source, tmp_path / "out")
    with pytest.raises(PrecompileError, match=r"graph breaks \(2 frames: .*\); torch's AOT compile needs one fullgraph"):
        pipeline.precompile(out)
    result = CliRunner().invoke(cli.main, ["precompile", str(out)])
    assert result.exit_code == 2 and "error: the warmup cannot be precompiled: the model has graph breaks" in result.output
    assert not (out / "warmup.precompiled.bin").exists() and not (out / "warmup.precompiled.json").exists()


def test_an_analysis_without_its_warmup_is_told_to_emit_first(seed_analysis, tmp_path):
    out = copy_analysis(seed_analysis, tmp_path / "out")
    with pytest.raises(PrecompileError, match=r"warmup.py not found in .*: run 'guardscope emit-warmup"):
        pipeline.precompile(out)
