"""The seed GNN sample: generator semantics, determinism, and the committed small corpus.

This file holds the pure tests (no torch.compile, no child process); the others are in
tests/integration/test_sample_gnn.py.
"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest
import torch

from guardscope.corpus.reader import load_corpus
from samples.gnn import generate
from samples.gnn.generate import INJECT_ID, SMALL_MAX_SIZE, SMALL_MIN_SIZE, make_samples

REPO = pathlib.Path(__file__).resolve().parents[2]
COMMITTED = REPO / "samples" / "gnn" / "corpus"

# The article's catalog, written out independently: which counts each pattern forces to zero.
ZEROED = {
    1: {"local"},
    2: {"cross"},
    3: {"local", "cross"},
    4: {"context"},
    5: {"local", "context"},
    6: {"cross", "context"},
    7: {"local", "cross", "context"},
    8: {"nodes", "local", "cross"},
    9: {"nodes", "local", "cross", "context"},
}


def counts(request: dict[str, torch.Tensor]) -> dict[str, int]:
    return {
        "nodes": request["x"].shape[0],
        "local": request["local_edge_index"].shape[1],
        "cross": request["cross_edge_index"].shape[1],
        "context": request["context"].shape[0],
    }


def small_samples(**options):
    return make_samples(min_size=SMALL_MIN_SIZE, max_size=SMALL_MAX_SIZE, **options)


def assert_consistent(request: dict[str, torch.Tensor]) -> None:
    """Edge scales match their edge counts; empty edges have the article's zero stride."""
    assert list(request) == [
        "x",
        "local_edge_index",
        "cross_edge_index",
        "local_edge_scale",
        "cross_edge_scale",
        "context",
    ]
    for relation in ("local", "cross"):
        edges, scale = request[f"{relation}_edge_index"], request[f"{relation}_edge_scale"]
        assert edges.dtype == torch.long and scale.shape == (edges.shape[1], 1)
        if edges.shape[1] == 0:
            assert edges.shape == (2, 0) and edges.stride() == (0, 1)
        else:
            assert edges.stride() == (edges.shape[1], 1)
            assert int(edges.max()) < request["x"].shape[0]
    assert request["x"].shape[1] == request["context"].shape[1] == 16


def test_generator_is_deterministic():
    first, second = small_samples(samples=200), small_samples(samples=200)
    for one, two in zip(first, second, strict=True):
        assert one.keys() == two.keys()
        for name in one:
            assert one[name].stride() == two[name].stride() and torch.equal(one[name], two[name])


def test_patterns_are_injected_at_the_article_requests():
    requests = small_samples(samples=INJECT_ID[-1] + 1)
    for index, request in enumerate(requests):
        assert_consistent(request)
        found = counts(request)
        if index not in INJECT_ID:
            assert all(SMALL_MIN_SIZE <= n <= SMALL_MAX_SIZE for n in found.values()), index
            continue
        pattern = INJECT_ID.index(index)
        if pattern == 0:
            assert found["local"] == found["cross"] > 0 and 0 not in found.values()
        else:
            assert {name for name, n in found.items() if n == 0} == ZEROED[pattern], index


def test_default_sizes_are_the_articles():
    (request,) = make_samples(samples=1)
    assert all(1000 <= n <= 4000 for n in counts(request).values())


def test_swap_exchanges_two_patterns():
    plain, swapped = small_samples(samples=30), small_samples(samples=30, swap=(0, 3))
    assert {n for n, c in counts(swapped[0]).items() if c == 0} == {"local", "cross"}
    assert counts(swapped[24])["local"] == counts(swapped[24])["cross"] > 0
    # The shape draws do not depend on the patterns: everything else keeps its counts.
    for index in set(range(30)) - {0, 24}:
        assert counts(swapped[index]) == counts(plain[index])
    with pytest.raises(ValueError):
        small_samples(samples=1, swap=(0, 10))


def test_committed_corpus_loads_and_names_its_model_relative_to_itself():
    corpus = load_corpus(COMMITTED)
    assert len(corpus) == 300
    assert corpus.manifest.compile == {"dynamic": True, "fullgraph": True}
    assert corpus.manifest.model == "../model.py:small"
    path, attribute = corpus.manifest.model.split(":")
    model_file = (COMMITTED / path).resolve()
    assert model_file == REPO / "samples" / "gnn" / "model.py"
    spec = importlib.util.spec_from_file_location("gnn_model_by_path", model_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = getattr(module, attribute)()
    sample = corpus.sample(144)  # pattern 8: no nodes, context present
    assert counts(sample.kwargs)["nodes"] == 0
    assert model(*sample.args, **sample.kwargs).shape == (4,)


def test_committed_corpus_is_what_the_documented_command_writes(tmp_path, capsys):
    out = tmp_path / "corpus"
    assert generate.main([str(out), "--small"]) == 0
    assert "wrote 300 samples" in capsys.readouterr().out
    for shard in load_corpus(COMMITTED).manifest.shards:
        assert (out / shard.file).read_bytes() == (COMMITTED / shard.file).read_bytes()
    assert load_corpus(out).manifest.shards == load_corpus(COMMITTED).manifest.shards


def test_cli_refuses_an_existing_corpus_without_overwrite(tmp_path, capsys):
    out = tmp_path / "corpus"
    generate.main([str(out), "--small", "--samples", "3"])
    with pytest.raises(SystemExit) as exited:
        generate.main([str(out), "--small", "--samples", "3"])
    assert exited.value.code == 2
    assert "overwrite" in capsys.readouterr().err
    generate.main([str(out), "--small", "--samples", "5", "--swap", "0,3", "--overwrite"])
    assert len(load_corpus(out)) == 5
