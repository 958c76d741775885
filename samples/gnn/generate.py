"""Generate the seed article's request corpus for the toy GNN, deterministically.

Each request draws four positive counts (nodes, local edges, cross edges, context rows) from
``random.Random(seed)``; the tensors come from ``torch.Generator().manual_seed(seed)``, in the
article's order. At ten requests (``INJECT_ID``) a catalog pattern overrides the counts:

====== ============================================ =================
number pattern                                      injected at
====== ============================================ =================
0      both relations have the same edge count      request 0
1      local relation empty                         request 4
2      cross relation empty                         request 12
3      both relations empty                         request 24
4      context empty                                request 40
5      local relation and context empty             request 60
6      cross relation and context empty             request 84
7      nodes only (relations and context empty)     request 112
8      node-empty graph, context present            request 144
9      everything empty                             request 180
====== ============================================ =================

An empty edge tensor is ``torch.empty_strided((2, 0), (0, 1))``: stride 0 in its first
dimension, unlike a stacked ``[2, E]`` tensor whose first stride is ``E``.

``swap=(a, b)`` exchanges the positions of patterns ``a`` and ``b``; the article's "swapped
catalog" is ``swap=(0, 3)``: request 0 has both relations empty, request 24 equal edge counts.

Command line (from the repository root)::

    python -m samples.gnn.generate /tmp/gnn-full                 # the article's sizes, full model
    python -m samples.gnn.generate samples/gnn/corpus --small    # the committed small corpus
    python -m samples.gnn.generate /tmp/swapped --small --swap 0,3

The manifest's model spec is the path of ``model.py`` relative to the corpus directory
(``../model.py:small`` for ``samples/gnn/corpus``), which guardscope resolves against the
corpus directory first, so it works from any working directory.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import sys
from collections.abc import Iterator

import torch

from guardscope.corpus import CorpusWriter
from guardscope.errors import GuardscopeError
from samples.gnn.model import FEATURE_DIM

INJECT_ID = (0, 4, 12, 24, 40, 60, 84, 112, 144, 180)
SEED = 17
SAMPLES = 300
MIN_SIZE = 1_000
MAX_SIZE = 4_000
# The small variant: the same patterns at the same requests, rows that keep the committed
# corpus small. Bounds stay above 16 (the feature dim): with duck sizing a count equal to 16
# would share the feature dim's symbol and be specialized with it.
SMALL_MIN_SIZE = 20
SMALL_MAX_SIZE = 60
COMPILE_OPTIONS = {"dynamic": True, "fullgraph": True}
MODEL_FILE = pathlib.Path(__file__).resolve().with_name("model.py")


def apply_pattern(
    pattern: int | None, nodes: int, local_edges: int, cross_edges: int, context_rows: int
) -> tuple[int, int, int, int]:
    """The counts of a request after catalog ``pattern`` (None: a plain request) overrides them."""
    if pattern is None:
        return nodes, local_edges, cross_edges, context_rows
    if pattern == 0:
        return nodes, local_edges, local_edges, context_rows
    # Patterns 1..9: which of (nodes, local, cross, context) are forced to zero.
    zeroed = {
        1: (False, True, False, False),
        2: (False, False, True, False),
        3: (False, True, True, False),
        4: (False, False, False, True),
        5: (False, True, False, True),
        6: (False, False, True, True),
        7: (False, True, True, True),
        8: (True, True, True, False),
        9: (True, True, True, True),
    }
    if pattern not in zeroed:
        raise ValueError(f"unknown catalog pattern: {pattern}")
    counts = (nodes, local_edges, cross_edges, context_rows)
    nodes, local_edges, cross_edges, context_rows = (
        0 if zero else count for count, zero in zip(counts, zeroed[pattern], strict=True)
    )
    return nodes, local_edges, cross_edges, context_rows


def pattern_schedule(swap: tuple[int, int] | None = None) -> dict[int, int]:
    """Request index -> catalog pattern, with patterns ``swap[0]`` and ``swap[1]`` exchanged."""
    patterns = list(range(len(INJECT_ID)))
    if swap is not None:
        first, second = swap
        if not (0 <= first < len(patterns) and 0 <= second < len(patterns)):
            raise ValueError(f"swap {swap} must name two patterns in 0..{len(patterns) - 1}")
        patterns[first], patterns[second] = patterns[second], patterns[first]
    return dict(zip(INJECT_ID, patterns, strict=True))


def _edges(nodes: int, count: int, generator: torch.Generator) -> torch.Tensor:
    if count == 0:
        return torch.empty_strided((2, 0), (0, 1), dtype=torch.long)
    sources = torch.randint(nodes, (count,), generator=generator)
    destinations = torch.randint(nodes, (count,), generator=generator)
    return torch.stack((sources, destinations))


def _request(
    nodes: int, local_edges: int, cross_edges: int, context_rows: int, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    # Draw order matters for reproducing the article's values: keep it as the dict reads.
    return {
        "x": torch.randn(nodes, FEATURE_DIM, generator=generator),
        "local_edge_index": _edges(nodes, local_edges, generator),
        "cross_edge_index": _edges(nodes, cross_edges, generator),
        "local_edge_scale": torch.randn(local_edges, 1, generator=generator),
        "cross_edge_scale": torch.randn(cross_edges, 1, generator=generator),
        "context": torch.randn(context_rows, FEATURE_DIM, generator=generator),
    }


def iter_samples(
    samples: int = SAMPLES,
    seed: int = SEED,
    min_size: int = MIN_SIZE,
    max_size: int = MAX_SIZE,
    swap: tuple[int, int] | None = None,
) -> Iterator[dict[str, torch.Tensor]]:
    """Yield the requests one by one (see :func:`make_samples`)."""
    if not 1 <= min_size <= max_size:
        raise ValueError(f"need 1 <= min_size <= max_size, got {min_size}, {max_size}")
    shape_rng = random.Random(seed)
    tensor_rng = torch.Generator().manual_seed(seed)
    schedule = pattern_schedule(swap)
    for index in range(samples):
        # Four positive counts are drawn for every request, injected or not.
        counts = [shape_rng.randint(min_size, max_size) for _ in range(4)]
        yield _request(*apply_pattern(schedule.get(index), *counts), tensor_rng)


def make_samples(
    samples: int = SAMPLES,
    seed: int = SEED,
    min_size: int = MIN_SIZE,
    max_size: int = MAX_SIZE,
    swap: tuple[int, int] | None = None,
) -> list[dict[str, torch.Tensor]]:
    """The corpus as a list of keyword-argument dicts for ``MessagePassingModel.forward``.

    Example::

        requests = make_samples(samples=30, min_size=SMALL_MIN_SIZE, max_size=SMALL_MAX_SIZE)
        small()(**requests[0])
    """
    return list(iter_samples(samples, seed, min_size, max_size, swap))


def model_spec(directory: str | os.PathLike[str], factory: str) -> str:
    """``model.py:factory`` as a path relative to the corpus directory."""
    return f"{os.path.relpath(MODEL_FILE, pathlib.Path(directory).resolve())}:{factory}"


def write_corpus(
    directory: str | os.PathLike[str],
    *,
    model: str | None = None,
    samples: int = SAMPLES,
    seed: int = SEED,
    min_size: int = MIN_SIZE,
    max_size: int = MAX_SIZE,
    swap: tuple[int, int] | None = None,
    overwrite: bool = False,
) -> pathlib.Path:
    """Write the corpus to ``directory`` with ``CorpusWriter``; returns the directory.

    ``model`` defaults to this ``model.py``'s ``full`` factory, spelled relative to
    ``directory`` (see :func:`model_spec`).

    Example::

        write_corpus("/tmp/gnn-small", model=model_spec("/tmp/gnn-small", "small"),
                     min_size=SMALL_MIN_SIZE, max_size=SMALL_MAX_SIZE)
    """
    spec = model if model is not None else model_spec(directory, "full")
    with CorpusWriter(
        directory, model=spec, compile=COMPILE_OPTIONS, overwrite=overwrite
    ) as writer:
        for request in iter_samples(samples, seed, min_size, max_size, swap):
            writer.add(**request)
    return pathlib.Path(directory)


def _swap_option(text: str) -> tuple[int, int]:
    try:
        first, second = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected two pattern numbers like 0,3, got {text!r}"
        ) from None
    return first, second


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m samples.gnn.generate",
        description="Write the seed article's GNN request corpus as a guardscope corpus directory.",
    )
    parser.add_argument("out", help="corpus directory to write")
    parser.add_argument(
        "--small",
        action="store_true",
        help=f"small model (model.py:small), counts {SMALL_MIN_SIZE}..{SMALL_MAX_SIZE}",
    )
    parser.add_argument("--samples", type=int, default=SAMPLES)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument(
        "--min-size",
        type=int,
        help=f"smallest random count (default {MIN_SIZE}, --small {SMALL_MIN_SIZE})",
    )
    parser.add_argument(
        "--max-size",
        type=int,
        help=f"largest random count (default {MAX_SIZE}, --small {SMALL_MAX_SIZE})",
    )
    parser.add_argument("--swap", type=_swap_option, help="exchange two catalog patterns, e.g. 0,3")
    parser.add_argument("--overwrite", action="store_true", help="replace a corpus already in OUT")
    options = parser.parse_args(argv)
    if options.small:
        factory, min_size, max_size = "small", SMALL_MIN_SIZE, SMALL_MAX_SIZE
    else:
        factory, min_size, max_size = "full", MIN_SIZE, MAX_SIZE
    try:
        directory = write_corpus(
            options.out,
            model=model_spec(options.out, factory),
            samples=options.samples,
            seed=options.seed,
            min_size=options.min_size if options.min_size is not None else min_size,
            max_size=options.max_size if options.max_size is not None else max_size,
            swap=options.swap,
            overwrite=options.overwrite,
        )
    except (GuardscopeError, ValueError) as exc:
        parser.exit(2, f"error: {exc}\n")
    print(f"wrote {options.samples} samples to {directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
