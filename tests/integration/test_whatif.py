"""What-if replays (guardscope whatif): the corpus replayed with input transforms applied, alone
and chained, with real torch.compile (eager backend) on an image model behind an input
normalisation that pads sides to a multiple of 32 itself, a Hugging Face decoder called with input_ids and attention_mask, and the
Elementwise model through the command line. Spec parsing and output comparison are in
tests/unit/test_transforms.py."""

from __future__ import annotations

import json

import torch
from click.testing import CliRunner

import guardscope
from guardscope import cli, pipeline, store
from guardscope.corpus.writer import CorpusWriter

from ..builders import write_image_corpus
from ..pages import parse, words
from ..paths import REPO
from ..sessions import copy_analysis

# (batch, height, width, dtype, layout) for tests/models.py's NormalisedCNN: float32 NCHW first,
# then 120 px, uint8, float16 and bfloat16, channels-last, other sides and batches, a batch of 1
# (tests/subprocess/test_canonicalise.py's corpus).
REQUESTS = (
    (4, 128, 128, "float32", "nchw"), (2, 120, 120, "float32", "nchw"), (8, 128, 128, "float32", "nchw"),
    (4, 128, 128, "uint8", "nchw"), (4, 128, 128, "float16", "nchw"), (4, 128, 128, "bfloat16", "nchw"),
    (4, 128, 128, "float32", "channels_last"), (3, 64, 64, "float32", "nchw"), (2, 96, 160, "float32", "nchw"),
    (6, 128, 128, "float32", "nchw"), (2, 128, 128, "uint8", "channels_last"), (1, 128, 128, "float32", "nchw"),
)
# The same kinds of request for tests/models.py's SizeDivisibleCNN, as the corpus: 128 px
# mostly plus 96-213 px sides, multiples of 32 and not (the model pads a side that is not one
# itself, after normalising: its `if` guards on each side's remainder by 32, so the two kinds take
# different graphs), uint8, float16 and bfloat16, channels-last, batches 1-8. The batch changes
# apart from the sides (sample 2 after sample 1 once 120 px is padded to 128): torch's automatic
# dynamic makes dynamic only the dims that changed at a recompile, so sides that all pad to
# multiples of 32 still take one graph of their own, and those that do not take more.
IMAGES = (
    (4, 128, 128, "float32", "nchw"), (2, 120, 120, "float32", "nchw"), (8, 128, 128, "float32", "nchw"),
    (4, 128, 128, "uint8", "nchw"), (4, 128, 128, "float16", "nchw"), (4, 128, 128, "bfloat16", "nchw"),
    (4, 128, 128, "float32", "channels_last"), (4, 160, 96, "float32", "nchw"), (2, 100, 213, "float32", "nchw"),
    (6, 128, 128, "float32", "nchw"), (2, 128, 128, "uint8", "channels_last"), (1, 128, 128, "float32", "nchw"),
    (4, 128, 150, "float32", "nchw"), (8, 192, 128, "float32", "nchw"),
)
CAST, LAYOUT = "cast:images:float32:scale", "contiguous:images"
BATCH, SIDES = "pad:images:0:buckets=2,4,8", "pad:images:2,3:multiple=32"


def test_image_transforms_merge_graphs_and_padding_the_sides_changes_the_results(tmp_path):
    """Slow: nine replays of a 14-image CNN corpus (as recorded, each transform alone, the chain
    of one to four), each with its warmup set up and measured, one test for the whole chain so the
    rows are compared with each other."""
    out = tmp_path / "out"
    guardscope.analyze(write_image_corpus(tmp_path / "corpus", IMAGES, model="SizeDivisibleCNN"), out)
    document = pipeline.whatif(out, (CAST, LAYOUT, BATCH, SIDES), json_path=tmp_path / "whatif.json")
    rows = {row["label"]: row for row in document["rows"]}
    recorded = rows["as recorded"]
    assert recorded["graphs"] == json.loads((out / "catalog.json").read_text())["summary"]["compiles"]
    chain = [rows[" + ".join((CAST, LAYOUT, BATCH, SIDES)[:n])] for n in (1, 2, 3, 4)]
    # each transform added merges graphs: the cast (uint8, float16, bfloat16 become float32), the
    # layout (channels-last becomes contiguous), the batch buckets (no batch of 1 to specialise on),
    # the sides padded to multiples of 32 (no side that the model pads itself)
    graphs = [recorded["graphs"], *(row["graphs"] for row in chain)]
    assert graphs == sorted(set(graphs), reverse=True), [(row["label"], row["graphs"]) for row in document["rows"]]
    for row in document["rows"]:
        # each row's warmup: one transformed sample per graph, its set-up measured
        assert row["warmup_samples"] == row["warmup_graphs"] == row["graphs"] > 0, row
        assert row["warmup_setup_seconds"] > 0, row
        assert row["raised"] == 0 and row["frames"] == 1 and row["compile_seconds"] > 0
    for row in (rows[CAST], rows[LAYOUT], rows[BATCH], *chain[:3]):
        assert row["outputs_equal"] and not row["changes_results"], row
    assert rows[CAST]["max_diff"] == 0.0  # the model casts to float itself: the same numbers
    assert rows[CAST]["padding_percent"] == 0.0 and rows[BATCH]["padding_percent"] > 0
    # the zero rows of a batch bucket are cut from the logits before comparing
    assert any(t["cut"] == ["output"] for t in rows[BATCH]["topologies"])
    # zero-padding the sides before the normalisation: the model's own padding was zeros after it,
    # the convolutions see -mean/std instead, and the logits differ, where a side was not 32 * n
    sides = rows[SIDES]
    assert sides["outputs_equal"] is False and sides["changes_results"] and sides["max_diff"] > 1e-4
    assert chain[3]["changes_results"] and sides["padding_percent"] > 0
    differing = {t["sample"] for t in sides["topologies"] if not t["equal"]}
    padded = {t["sample"] for t in sides["topologies"] if any(side % 32 for side in IMAGES[t["sample"]][1:3])}
    assert differing == padded and 1 in differing
    assert all(t["cut"] == [] for t in sides["topologies"])
    assert json.loads((tmp_path / "whatif.json").read_text()) == json.loads((out / store.WHATIF).read_text())
    assert document["catalog_sha256"] == store.catalog_digest(store.read_catalog(out))
    # the catalog suggests the three that keep the answers, and says why the sides cannot be padded
    assert [a["spec"] for a in document["advice"] if a["applies"]] == [CAST, LAYOUT, BATCH]
    assert not document["suggested"]
    sides_advice = [a for a in document["advice"] if not a["applies"]]
    assert sides_advice and all(a["subject"] in ("images dim 2", "images dim 3") for a in sides_advice)
    assert all(a["text"].startswith("no mask says which part is real") for a in sides_advice)
    # the report's "Fixes at the input" leads with the cheapest chain that keeps the outputs equal
    page = parse((out / store.REPORT).read_text())
    best = words(page.find(id="input-fixes-best"))
    assert best.startswith(f"Cheapest chain that keeps the outputs equal: {CAST} + {LAYOUT} + {BATCH}: "), best
    body = page.find("section", id="input-fixes").find("tbody").find_all("tr")
    assert len(body) == len(document["rows"])
    assert [words(tr.find_all("td")[4]) for tr in body] == [str(row["graphs"]) for row in document["rows"]]


def test_right_padding_a_decoder_with_its_mask_merges_topologies_and_keeps_its_answers(tmp_path):
    """GPT-2 called directly with input_ids and attention_mask (batches of 2, some rows padded):
    lengths 1..60 compile three graphs (a static first, a dynamic length, a length of 1);
    padded to 64 with the mask extended by zeros they all take one, and the logits and KV cache
    on the real tokens are the same."""
    generator = torch.Generator().manual_seed(0)
    with CorpusWriter(tmp_path / "corpus", model=f"{REPO / 'tests' / 'real_models.py'}:gpt2") as writer:
        for length in (5, 17, 1, 40, 33, 9, 60, 23):
            mask = torch.ones(2, length, dtype=torch.long)
            mask[1, max(1, length // 2):] = 0
            writer.add(input_ids=torch.randint(0, 1000, (2, length), generator=generator), attention_mask=mask)
    out = tmp_path / "out"
    guardscope.analyze(tmp_path / "corpus", out)
    spec = "pad:input_ids:1:multiple=64:with=attention_mask"
    recorded, padded = pipeline.whatif(out, (spec,))["rows"]
    assert recorded["graphs"] == 3 and padded["graphs"] == 1
    for row in (recorded, padded):  # each row's warmup compiles its graphs again, its set-up measured
        assert row["warmup_graphs"] == row["graphs"] and 0 < row["warmup_samples"] <= row["graphs"], row
        assert row["warmup_setup_seconds"] > 0
    assert padded["padding_percent"] > 100  # the cost: most of what runs is padding
    assert padded["outputs_equal"] and padded["max_diff"] < 1e-5
    for topology in padded["topologies"]:
        assert topology["equal"] and "output['logits']" in topology["cut"]
        assert "output['cache'].layers[0].keys" in topology["cut"]


def test_whatif_command_prints_the_table_and_refuses_bad_arguments(elementwise_analysis, tmp_path):
    """Rows 5, 7, 1, 9, 0, 6 (dynamic, fullgraph: replayed guard-only) bucketed to 8 or 16 rows."""
    runner = CliRunner()
    result = runner.invoke(cli.main, ["whatif", str(elementwise_analysis), "--transform", "pad:x:0:buckets=8,16",
                                      "--json", str(tmp_path / "copy.json")])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()  # progress goes to stderr
    assert lines[0].split() == ["transform", "graphs", "frames", "compile", "s", "warmup", "set-up", "s", "padding",
                                "%", "outputs"]
    assert lines[1].startswith("as recorded") and lines[1].endswith("(the reference)")
    assert lines[2].startswith("pad:x:0:buckets=8,16") and " equal (max diff 0)" in lines[2]
    assert lines[2].split()[1] == "1" and int(lines[1].split()[2]) > 1  # graphs: one, against several
    # each row's warmup: one sample per graph, and the seconds it takes to set up
    for line in lines[1:3]:
        cells = line.replace("as recorded", "as-recorded").split()
        assert cells[4] == cells[1] and float(cells[5]) > 0, line
    assert (elementwise_analysis / store.WHATIF).is_file() and (tmp_path / "copy.json").is_file()
    for spec, message in (("pad:y:0:multiple=8", "forward has no argument 'y' (it has: x)"),
                          ("pad:x:2:multiple=8", "x has 2 dims in sample 0 (shape (5, 4)): there is no dim 2"),
                          ("cast:x:float128", "torch has no dtype 'float128'")):
        result = runner.invoke(cli.main, ["whatif", str(elementwise_analysis), "--transform", spec])
        (line,) = result.output.strip().splitlines()
        assert result.exit_code == 2 and line.startswith(f"error: --transform {spec}: {message}")
    assert json.loads((elementwise_analysis / store.WHATIF).read_text())["transforms"] == ["pad:x:0:buckets=8,16"]


def test_whatif_without_transforms_on_the_seed_corpus_says_why_nothing_applies(seed_analysis, tmp_path):
    """The seed GNN's recompiles are edge counts and node counts: no mask, so no padding can keep
    its answers; the command says so per dim, replays nothing, and the report shows the advice."""
    out = copy_analysis(seed_analysis, tmp_path / "out")
    result = CliRunner().invoke(cli.main, ["whatif", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert ("advice      does not apply  local_edge_index dim 1: edges cannot be padded without a mask: "
            "a padded edge would connect real nodes") in lines
    assert not any(line.startswith("advice      applies") for line in lines)
    assert "advice      the catalog suggests no input transform; give --transform SPEC to measure one" in lines
    document = json.loads((out / store.WHATIF).read_text())
    assert document["rows"] == [] and document["suggested"]
    page = parse((out / store.REPORT).read_text())
    assert words(page.find(id="input-fixes-best")).startswith("The catalog suggests no input transform")
    advice = [words(li) for li in page.find("ul", class_="input-advice").find_all("li")]
    assert any(line.startswith("does not apply cross_edge_index dim 1: edges cannot be padded") for line in advice)
