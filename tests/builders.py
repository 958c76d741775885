"""Hand-made inputs that tests in more than one folder build from: report documents, an export
plan refined by torch's suggested fixes, small corpora of the Elementwise and NormalisedCNN models.
Pure: nothing here compiles."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from guardscope.corpus.writer import CorpusWriter
from guardscope.fixes.exporting import apply_suggested_fixes, parse_suggested_fixes
from guardscope.fixes.plan import ExportDim, ExportPlan, OutsideTopology

from .paths import model_spec

# --- report documents: fixes.json and verification.json of a seed-like analysis -----------------

FIXES = {"schema": 1, "artifacts": [
    {"name": "warmup", "file": "warmup.py", "title": "Warmup set",
     "summary": "10 samples compile 10 graphs (one per topology would be 11)",
     "code": 'def warmup(model):\n    """Run the warmup samples."""\n    for sample in SAMPLES:\n        model(*sample)\n',
     "details": {"samples": 10, "graphs": 10}},
    {"name": "unbacked", "file": "unbacked.py", "title": "mark_unbacked configuration",
     "summary": "duck sizing off; 4 dimensions unbacked",
     "code": "def configure():\n    pass\n", "details": {}},
    {"name": "export", "file": "export_dims.py", "title": "torch.export dims",
     "summary": "5 Dims", "code": "DYNAMIC_SHAPES = {}\n", "details": {"dims": 5}},
]}

VERIFICATION = {"schema": 1, "artifacts": [
    {"name": "warmup", "status": "passed", "reason": None, "setup_graphs": 10, "setup_seconds": 5.8,
     "replay_recompiles": 0, "recompile_samples": [], "failures": [], "samples_replayed": 300, "topologies": []},
    {"name": "unbacked", "status": "failed", "reason": "2 samples still recompiled", "setup_graphs": 1,
     "setup_seconds": 0.9, "replay_recompiles": 2, "recompile_samples": [1, 4],
     "failures": [{"sample": 1, "reasons": ["0/0: tensor 'x' stride mismatch at index 0"]},
                  {"sample": 4, "reasons": ["0/0: tensor 'x' stride mismatch at index 0"]}],
     "samples_replayed": 300, "topologies": []},
    {"name": "export", "status": "crashed", "reason": "Segmentation fault", "setup_graphs": None,
     "setup_seconds": None, "replay_recompiles": None, "recompile_samples": [], "failures": [],
     "samples_replayed": None, "topologies": [{"id": 0, "passed": True, "error": None},
                                              {"id": 1, "passed": False, "error": "Constraints violated"}]},
]}


# --- an export plan -------------------------------------------------------------------------------

CATALOG = {"model": "models.py:model", "compile": {"dynamic": True}, "topologies": [{"id": 0}, {"id": 1}, {"id": 2}]}


def dim(name: str, low: int, high: int, *members: tuple[str, int]) -> ExportDim:
    return ExportDim(name=name, min=low, max=high, members=members or ((name.rsplit("_", 1)[0], 0),),
                     note=f"corpus range {low}..{high}")


def refined_plan() -> ExportPlan:
    dims = apply_suggested_fixes((dim("x_0", 2, 120, ("x", 0), ("y", 0)), dim("z_1", 3, 9, ("z", 1))),
                                 parse_suggested_fixes("Suggested fixes:\n  _x_0 = Dim('_x_0', min=1, max=60)\n"
                                                       "  x_0 = 2*_x_0\n  z_1 = 4\n"), 1)
    return ExportPlan(dims=dims, arguments=("x", "y", "z", "extras"), example_sample=7, margin=0.0,
                      fixes=("round 1: x_0 = 2*_x_0",), example_topology=1,
                      outside=(OutsideTopology(2, 9, 3, "z is None (in the exported example: a tensor)"),))


# --- corpora ----------------------------------------------------------------------------------------


def write_sized_corpus(path, sizes, seed=0):
    """A corpus of 1-D random tensors of the given sizes for tests/models.py's Elementwise."""
    generator = torch.Generator().manual_seed(seed)
    with CorpusWriter(path, model=model_spec("Elementwise"), compile={"dynamic": True, "fullgraph": True}) as writer:
        for size in sizes:
            writer.add(torch.randn(size, generator=generator))
    return path


# Requests of tests/models.py's NormalisedCNN as (batch, height, width, dtype, layout): batches
# 1-8, mostly 128 px; 32 px, where the stride-32 map is 1x1 (torch.export keeps the guard
# ``1 + (size - 1) // 32 != 1`` beside Dims derived as 32 * n, whose range still starts at 32);
# 120 px (not 32 * n); HWC-permuted and channels-last images; uint8, float16 and bfloat16.
IMAGE_REQUESTS = (
    (4, 128, 128, "float32", "nchw"), (8, 128, 128, "float32", "nchw"), (2, 128, 128, "float32", "nchw"),
    (5, 32, 32, "float32", "nchw"), (3, 64, 64, "float32", "nchw"), (6, 120, 120, "float32", "nchw"),
    (2, 160, 96, "float32", "nchw"), (1, 128, 128, "float32", "nchw"), (4, 128, 128, "uint8", "nchw"),
    (4, 128, 128, "float16", "nchw"), (4, 128, 128, "bfloat16", "nchw"), (4, 128, 128, "float32", "hwc"),
    (4, 128, 128, "float32", "channels_last"), (7, 128, 128, "float32", "nchw"), (2, 32, 64, "float32", "nchw"),
    (6, 192, 64, "float32", "nchw"),
)


def write_image_corpus(path, requests=IMAGE_REQUESTS, keep="all", model="NormalisedCNN"):
    """A corpus of images for tests/models.py's NormalisedCNN, or ``model`` (compile options left
    to the defaults: ``dynamic=None``, ``fullgraph=False``)."""
    with CorpusWriter(path, model=model_spec(model), keep=keep) as writer:
        for index, (batch, height, width, dtype, layout) in enumerate(requests):
            images = torch.rand(batch, 3, height, width, generator=torch.Generator().manual_seed(index))
            images = (images * 255).to(torch.uint8) if dtype == "uint8" else images.to(getattr(torch, dtype))
            if layout == "hwc":
                images = images.permute(0, 2, 3, 1).contiguous()
            elif layout == "channels_last":
                images = images.contiguous(memory_format=torch.channels_last)
            writer.add(images)
    return path


def replace_shard(directory, content) -> None:
    """Write ``content`` (what ``torch.save`` takes) as the first shard of the corpus in
    ``directory`` and fix the manifest's checksum, as a forger who knows the format would: for
    tests of what loading refuses beyond a wrong checksum."""
    import hashlib
    import io
    import json
    from pathlib import Path

    import torch

    buffer = io.BytesIO()
    torch.save(content, buffer)
    (Path(directory) / "shard-00000.pt").write_bytes(buffer.getvalue())
    manifest_path = Path(directory) / "corpus.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["shards"][0]["sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
    manifest_path.write_text(json.dumps(manifest))


def as_log_version_1(directory: Path) -> None:
    """Rewrite a log as guardscope wrote it before issue 53 (log version 1): a row per signature
    and window with no positions, the rows' ``first`` counting on in row order."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = json.loads((directory / "corpus.json").read_text())
    for entry in raw["shards"]:
        path = directory / entry["file"]
        table = pq.read_table(path)
        metadata = dict(table.schema.metadata)
        metadata[b"guardscope.format"] = json.dumps({"format": "guardscope-traffic-log", "version": 1}).encode()
        counts = table.column("count").to_pylist()
        firsts = [entry["first"] + sum(counts[:row]) for row in range(len(counts))]
        table = table.drop_columns([name for name in ("positions",) if name in table.column_names])
        table = table.set_column(0, "first", pa.array(firsts, type=pa.int64())).replace_schema_metadata(metadata)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        path.write_bytes(sink.getvalue().to_pybytes())
        entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (directory / "corpus.json").write_text(json.dumps(raw))
