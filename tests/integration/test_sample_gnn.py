"""The seed GNN sample: generator semantics, determinism, and the committed small corpus.

This file holds the tests that compile in this process; the others are in
tests/unit/test_sample_gnn.py.
"""

from __future__ import annotations

import pathlib

import pytest

from guardscope.corpus.reader import load_corpus

REPO = pathlib.Path(__file__).resolve().parents[2]
COMMITTED = REPO / "samples" / "gnn" / "corpus"

# The article's catalog, written out independently: which counts each pattern forces to zero.


@pytest.mark.slow
def test_committed_corpus_recompiles_where_the_article_says():
    """Plain replay (eager backend: Dynamo decides guards): first compile + 10 recompiles."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from samples.gnn.model import small

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(small(), backend="eager", dynamic=True, fullgraph=True)
    compiles = []
    with torch._dynamo.config.patch(recompile_limit=64), torch.inference_mode():
        for sample in load_corpus(COMMITTED):
            before = counters["stats"]["unique_graphs"]
            compiled(*sample.args, **sample.kwargs)
            if counters["stats"]["unique_graphs"] > before:
                compiles.append(sample.index)
    torch._dynamo.reset()
    assert compiles == [0, 1, 4, 12, 24, 40, 60, 84, 112, 144, 180]
