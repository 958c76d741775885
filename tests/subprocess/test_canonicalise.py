"""emit-warmup --transform and verify on an image model behind an input normalisation
(tests/models.py's NormalisedCNN, the 12 requests of tests/integration/test_whatif.py): a
canonicalise.py that merges the dtypes and layouts, its warmup for the transformed inputs, and
verify proving 0 recompiles with it applied (a child process), the output differences recorded.
The rendering itself is in tests/unit/test_canonicalise.py."""

from __future__ import annotations

import json

import torch
from click.testing import CliRunner

import guardscope
from guardscope import cli, store
from guardscope.corpus.reader import load_corpus

from ..builders import write_image_corpus
from ..integration.test_whatif import REQUESTS

CAST, LAYOUT = "cast:images:float32", "contiguous:images"


def _files(folder):
    return sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns) for p in folder.rglob("*"))


def test_emit_warmup_transform_writes_canonicalise_and_verify_proves_no_recompiles(tmp_path):
    out = tmp_path / "out"
    guardscope.analyze(write_image_corpus(tmp_path / "corpus", REQUESTS), out)
    topologies = len(store.read_catalog(out)["topologies"])
    runner = CliRunner()

    # bad input: one line, exit 2, nothing written
    before = _files(out)
    result = runner.invoke(cli.main, ["emit-warmup", str(out), "--transform", CAST, "--transform", "cast:pixels:float32"])
    (line,) = result.output.strip().splitlines()
    assert result.exit_code == 2 and line.startswith("error: --transform cast:pixels:float32: forward has no "
                                                     "argument 'pixels'"), result.output
    assert _files(out) == before

    arguments = ["emit-warmup", str(out), "--transform", CAST, "--transform", LAYOUT]
    result = runner.invoke(cli.main, arguments)
    assert result.exit_code == 0, result.output
    text = (out / store.CANONICALISE).read_text()
    compile(text, store.CANONICALISE, "exec")
    # the cast merges the float16, bfloat16 and uint8 topologies with the float32 ones, the layout
    # the channels-last ones: every transform's line names what it merges
    cast_line, layout_line = (line for line in text.splitlines() if "_CHAIN[" in line and ".apply(" in line)
    assert cast_line.split("# ")[1].startswith(f"{CAST}: merges T0 + ")
    assert layout_line.split("# ")[1].startswith(f"{LAYOUT}: merges T")
    warmup = load_corpus(out / store.CANONICAL_WARMUP)
    assert 0 < len(warmup) < topologies
    assert {sample.args[0].dtype for sample in warmup} == {torch.float32}
    assert runner.invoke(cli.main, arguments).exit_code == 0
    assert (out / store.CANONICALISE).read_text() == text  # byte-stable

    result = runner.invoke(cli.main, ["verify", str(out), "--backend", "eager"])
    assert result.exit_code == 0, result.output
    assert "canonical PASSED" in result.output and "outputs CHANGED on " in result.output
    document = json.loads((out / store.VERIFICATION).read_text())
    (canonical,) = [a for a in document["artifacts"] if a["name"] == "canonical"]
    assert canonical["status"] == "passed" and canonical["replay_recompiles"] == 0, canonical
    assert canonical["samples_replayed"] == len(REQUESTS) and canonical["setup_graphs"] == len(warmup)
    assert canonical["transforms"] == [CAST, LAYOUT]
    outputs = canonical["outputs"]
    assert len(outputs["topologies"]) == topologies
    # a cast to float32 without :scale feeds the uint8 images' 0..255 where the model would have
    # scaled them to 0..1: those outputs change, and only those
    uint8 = {index for index, request in enumerate(REQUESTS) if request[3] == "uint8"}
    changed = {t["sample"] for t in outputs["topologies"] if not t["equal"]}
    assert changed and changed <= uint8 and outputs["changes_results"] and outputs["max_diff"] > 1e-3
