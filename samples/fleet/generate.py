"""The seed corpus as four replicas' traffic logs: a fleet to try ``guardscope analyze`` and
``guardscope merge`` on.

The seed's 300 requests (``samples/gnn/corpus``) are dealt to replicas ``web-0`` .. ``web-3`` by
a fixed draw, each request stamped one millisecond after the one before from a fixed epoch; every
replica records its share as a ``TrafficRecorder`` does (a Parquet traffic log, format 5), by
signature only (no tensor data: the seed's calls are plain tensors, which an analysis rebuilds
from their signatures). The fleet's order (first-seen time) is therefore the seed's order, and
its analysis finds the seed's compiles at the seed's samples, with each topology's calls per
replica besides.

Command line (from the repository root)::

    python -m samples.fleet.generate samples/fleet/replicas      # rewrite the shipped replicas
"""

from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from guardscope.corpus.reader import load_corpus
from guardscope.corpus.signatures.signature import signature
from guardscope.corpus.writer import CorpusWriter

SEED = Path(__file__).resolve().parents[1] / "gnn" / "corpus"
REPLICAS = 4
EPOCH = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z, in ns
STEP = 1_000_000  # 1 ms between requests


def generate(directory: str | Path, replicas: int = REPLICAS, seed: int = 0) -> list[Path]:
    """Write the fleet into ``directory`` (replaced); returns the replica folders."""
    directory = Path(directory)
    shutil.rmtree(directory, ignore_errors=True)
    corpus = load_corpus(SEED)
    model = Path("..", "..", "..", "gnn", "model.py").as_posix() + ":small"
    paths = [directory / f"web-{k}" for k in range(replicas)]
    writers = [CorpusWriter(path, model=model, compile=dict(corpus.manifest.compile), keep="signatures",
                            log="parquet", full_per_signature=0, replica=path.name, shard_size=64,
                            dynamo_config={}, grad_mode="inference_mode") for path in paths]
    draw = random.Random(seed)
    for sample in corpus:
        writer = writers[draw.randrange(replicas)]
        writer.add_signature(signature(sample.args, sample.kwargs, inference=False), {"cpu"},
                             when=EPOCH + STEP * sample.index)
    for writer in writers:
        writer.close()
    return paths


if __name__ == "__main__":
    for path in generate(sys.argv[1] if len(sys.argv) > 1 else "samples/fleet/replicas"):
        print(path)
