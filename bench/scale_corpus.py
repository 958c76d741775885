"""Write the seed GNN's request distribution at any size (default 100,000 samples).

The small variant's distribution (``samples/gnn/generate.py``): four random counts per request
in ``SMALL_MIN_SIZE..SMALL_MAX_SIZE`` from ``random.Random(seed)``, tensors from
``torch.Generator().manual_seed(seed)``, model ``samples/gnn/model.py:small`` spelled relative
to the output directory. The ten catalog patterns are injected at the article's requests
(0, 4, ..., 180) and then recur: each pattern again at ``--recurrences`` positions drawn
deterministically from ``300..samples-1``, so every topology shows up again far into the corpus.
With the default seed (17) the first 300 samples are exactly the committed small corpus
(``samples/gnn/corpus``; its first shard is byte-identical).

Streaming: samples are generated one at a time and ``CorpusWriter`` holds at most one shard
(``--shard-size``, 256 by default) in memory.

    python -m bench.scale_corpus /tmp/gnn-scale-100k                  # 100,000 samples
    python -m bench.scale_corpus /tmp/gnn-scale-10k --samples 10000
    python -m bench.scale_corpus /tmp/gnn-sigs-10k --samples 10000 --keep signatures
"""

from __future__ import annotations

import argparse
import pathlib
import random
import sys
import time
from collections.abc import Iterator

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import torch

from guardscope.corpus.writer import DEFAULT_MAX_FULL_BYTES, CorpusWriter
from guardscope.errors import GuardscopeError
from samples.gnn.generate import (
    COMPILE_OPTIONS,
    INJECT_ID,
    SAMPLES,
    SEED,
    SMALL_MAX_SIZE,
    SMALL_MIN_SIZE,
    _request,
    apply_pattern,
    model_spec,
    pattern_schedule,
)

SCALE_SAMPLES = 100_000
RECURRENCES = 3
SHARD_SIZE = 256


def scale_schedule(samples: int, seed: int = SEED, recurrences: int = RECURRENCES) -> dict[int, int]:
    """Request index -> catalog pattern: the article's ten positions (below ``samples``), then
    each pattern ``recurrences`` more times at positions drawn from ``SAMPLES..samples-1``."""
    schedule = {index: pattern for index, pattern in pattern_schedule().items() if index < samples}
    tail = range(SAMPLES, samples)
    if recurrences < 0:
        raise ValueError(f"recurrences must be >= 0, got {recurrences}")
    count = min(len(tail), recurrences * len(INJECT_ID))
    # A str seed is hashed with SHA-512 by random.seed: the same positions on every run/machine.
    rng = random.Random(f"{seed}:recurrences")
    positions = sorted(rng.sample(tail, count))
    patterns = [pattern for _ in range(recurrences) for pattern in range(len(INJECT_ID))][:count]
    rng.shuffle(patterns)
    schedule.update(zip(positions, patterns, strict=True))
    return schedule


def iter_scale_samples(
    samples: int = SCALE_SAMPLES, seed: int = SEED, recurrences: int = RECURRENCES
) -> Iterator[dict[str, torch.Tensor]]:
    """Yield the requests one by one, drawn as ``samples.gnn.generate.iter_samples`` draws them
    (same generators, same draw order) but with :func:`scale_schedule`'s injections."""
    schedule = scale_schedule(samples, seed, recurrences)
    shape_rng = random.Random(seed)
    tensor_rng = torch.Generator().manual_seed(seed)
    for index in range(samples):
        counts = [shape_rng.randint(SMALL_MIN_SIZE, SMALL_MAX_SIZE) for _ in range(4)]
        yield _request(*apply_pattern(schedule.get(index), *counts), tensor_rng)


def write_scale_corpus(
    directory: str | pathlib.Path,
    *,
    samples: int = SCALE_SAMPLES,
    seed: int = SEED,
    recurrences: int = RECURRENCES,
    shard_size: int = SHARD_SIZE,
    overwrite: bool = False,
    keep: str = "all",
    full_per_signature: int = 1,
    max_full_bytes: int | None = DEFAULT_MAX_FULL_BYTES,
) -> CorpusWriter:
    """Write the corpus with ``CorpusWriter`` (model ``model.py:small`` relative to
    ``directory``; ``keep``, ``full_per_signature`` and ``max_full_bytes`` as CorpusWriter
    takes them, with its defaults); returns the closed writer (``summary()``, ``directory``)."""
    with CorpusWriter(
        directory,
        model=model_spec(directory, "small"),
        compile=COMPILE_OPTIONS,
        shard_size=shard_size,
        overwrite=overwrite,
        keep=keep,
        full_per_signature=full_per_signature,
        max_full_bytes=max_full_bytes,
    ) as writer:
        for request in iter_scale_samples(samples, seed, recurrences):
            writer.add(**request)
    return writer


def bound(text: str) -> int | None:
    """A ``--max-full-bytes`` value: bytes, or ``none`` (no bound)."""
    return None if text.lower() == "none" else int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale_corpus",
        description="Write the small seed GNN's request distribution at any size as a guardscope "
        "corpus (the ten catalog patterns at the article's requests, then recurring).",
    )
    parser.add_argument("out", help="corpus directory to write (keep it out of the repository, e.g. under /tmp)")
    parser.add_argument("--samples", type=int, default=SCALE_SAMPLES, help="number of samples (default %(default)s)")
    parser.add_argument("--seed", type=int, default=SEED, help="seed of both generators (default %(default)s)")
    parser.add_argument(
        "--recurrences", type=int, default=RECURRENCES,
        help="extra injections of each pattern after the first 300 samples (default %(default)s)",
    )
    parser.add_argument("--shard-size", type=int, default=SHARD_SIZE, help="samples per shard (default %(default)s)")
    parser.add_argument("--overwrite", action="store_true", help="replace a corpus already in OUT")
    parser.add_argument(
        "--keep", choices=("all", "signatures"), default="all",
        help="'signatures': record repeated signatures without tensor data (format 3; default %(default)s)",
    )
    parser.add_argument(
        "--full-per-signature", type=int, default=1,
        help="with --keep signatures: calls of each signature recorded in full (0: none; default %(default)s)",
    )
    parser.add_argument(
        "--max-full-bytes", type=bound, default=DEFAULT_MAX_FULL_BYTES,
        help="with --keep signatures: tensor bytes of the calls kept in full, at most, or 'none' for no "
        "bound (default %(default)s, the writer's)",
    )
    options = parser.parse_args(argv)
    if options.samples < 1:
        parser.error("--samples must be at least 1")
    started = time.perf_counter()
    try:
        writer = write_scale_corpus(
            options.out,
            samples=options.samples,
            seed=options.seed,
            recurrences=options.recurrences,
            shard_size=options.shard_size,
            overwrite=options.overwrite,
            keep=options.keep,
            full_per_signature=options.full_per_signature,
            max_full_bytes=options.max_full_bytes,
        )
    except (GuardscopeError, ValueError) as exc:
        parser.exit(2, f"error: {exc}\n")
    seconds = time.perf_counter() - started
    directory = writer.directory
    size = sum(path.stat().st_size for path in directory.iterdir() if path.is_file())
    schedule = scale_schedule(options.samples, options.seed, options.recurrences)
    by_pattern: dict[int, list[int]] = {}
    for index, pattern in sorted(schedule.items()):
        by_pattern.setdefault(pattern, []).append(index)
    shards = len(list(directory.glob("shard-*.pt")))
    print(f"wrote       {options.samples} samples to {directory} ({shards} shards, {size / 1e6:.1f} MB)")
    print(f"took        {seconds:.1f} s ({options.samples / seconds:,.0f} samples/s)")
    print(f"writer      {writer.summary()}")
    print(f"patterns    {len(schedule)} injected requests:")
    for pattern, positions in sorted(by_pattern.items()):
        print(f"  pattern {pattern}  at {positions}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
