"""``guardscope convert``: a corpus of any format rewritten as a traffic log (format 5), sample for
sample: the same samples at the same indices, those kept in full with their tensors, the others by
signature, the request tags and the manifest's settings kept; an analysis of either gives the same
catalog."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable

from ..errors import CorpusError
from ..model import Sample
from .reader import SignatureRecord, load_corpus
from .spec import respec
from .writer import CorpusWriter


def convert_corpus(source: str | os.PathLike[str], destination: str | os.PathLike[str], *,
                   overwrite: bool = False, replica: str | None = None,
                   progress: Callable[[int, int], None] | None = None) -> CorpusWriter:
    """Write the corpus at ``source`` again at ``destination`` as format 5 (Parquet traffic logs);
    returns the closed writer (its :meth:`~CorpusWriter.summary` says what was written).

    Every full sample stays full, every signature-only sample stays one, in recorded order: the
    writer merges consecutive samples of one signature only (no windows), so each keeps its index.
    Rows carry no timestamps (the source did not record them); ``replica``: the name its rows
    carry (None: this process's ``host:pid``). ``progress(samples_done, total)`` after each shard.
    ``CorpusError`` when the destination is the source or already holds a corpus (unless
    ``overwrite``)."""
    corpus = load_corpus(source)
    target = pathlib.Path(destination)
    if target.exists() and target.resolve() == corpus.path.resolve():
        raise CorpusError(f"{target} is the corpus being converted; write the traffic log to another directory")
    manifest = corpus.manifest
    writer = CorpusWriter(
        target, respec(manifest.model, corpus.path, target), dict(manifest.compile), keep="signatures",
        log="parquet", aggregate=False, replica=replica, overwrite=overwrite,
        full_per_signature=1 << 62, max_full_bytes=None, timestamps=False,  # what the source kept in full stays so
        method=manifest.method, recorded_from=manifest.recorded_model, dynamo_config=manifest.dynamo_config or {},
        grad_mode=manifest.grad_mode)
    requests = corpus.requests
    done = 0
    with writer:
        for shard in manifest.shards:
            for record in corpus.load_records(shard):
                if type(record) is Sample:
                    tag = requests.of(record.index) if requests is not None else None
                    writer._add(record.args, record.kwargs, copied=False, request=tag)  # lowered and copied as add() does
                    continue
                _add_record(writer, record, requests)
            done += shard.samples
            if progress is not None:
                progress(done, len(corpus))
    return writer


def _add_record(writer: CorpusWriter, record: SignatureRecord, requests: object) -> None:
    """A signature record's samples, by signature, tagged as the source tagged them."""
    sig = record.signature
    devices = _devices(sig)
    if requests is None:
        writer.add_signature(sig, devices, count=record.repeat)
        return
    for offset in range(record.repeat):
        writer.add_signature(sig, devices, request=requests.of(record.first + offset))  # type: ignore[attr-defined]


def _devices(sig: tuple) -> set[str]:
    """The device types of a signature's tensors (for the manifest's ``device``)."""
    found: set[str] = set()

    def walk(node: object) -> None:
        if type(node) is not tuple:
            return
        if node[:1] == ("tensor",) and len(node) == 11:
            found.add(str(node[6]).split(":")[0])
            return
        for item in node:
            walk(item)

    walk(sig)
    return found


__all__ = ["convert_corpus"]
