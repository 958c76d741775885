"""Reading: :func:`load_corpus` opens a corpus directory; :class:`Corpus` streams its samples
(or its records, signature records unbuilt) shard by shard, every shard checked against the
manifest and loaded safely; see :mod:`guardscope.corpus.format`."""

from __future__ import annotations

import bisect
import copy
import functools
import json
import os
import pathlib
import secrets
from collections.abc import Iterator
from typing import Any

import torch

from ..errors import ShardError
from ..model import Sample
from ..text import message_line
from .format import FORMAT, Manifest, ShardInfo, corpus_directory, read_manifest
from .requests import RequestRuns, read_requests
from .shards import read_shard
from .signature import (
    CallTemplate,
    NoTemplate,
    check_devices,
    materialise,
    signature_from_json,
)
from .structured import rebuild

# Shards Corpus.full_sample keeps decoded.
FULL_SHARDS_KEPT = 4
# Call templates (signature structures, corpus.signature.CallTemplate) a Corpus keeps.
TEMPLATES_KEPT = 64


class SignatureRecord:
    """A format 3 signature record as read: ``repeat`` consecutive samples from ``first``,
    recorded as their signature only (``array``, its JSON form), ``full`` the index of the
    sample of that signature recorded in full (or None).

    ``call`` and ``key`` (:class:`~guardscope.corpus.signature.CallTemplate`) when the signature is
    a call template's, else None; :meth:`arguments` then gives shared read-only arguments, built
    once per argument and size. :meth:`sample` builds one sample afresh, as loading does.
    """

    __slots__ = ("first", "repeat", "_array", "full", "call", "key", "_signature", "_placement")

    def __init__(self, first: int, repeat: int, array: list | str, full: int | None, call: CallTemplate | None,
                 key: tuple | None, sig: tuple | None, placement: Any) -> None:
        """``array``: the signature's JSON array, or its JSON text (parsed when asked for)."""
        self.first, self.repeat, self._array, self.full = first, repeat, array, full
        self.call, self.key, self._signature, self._placement = call, key, sig, placement

    @property
    def array(self) -> list:
        if type(self._array) is str:
            self._array = json.loads(self._array)
        return self._array  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"SignatureRecord(first={self.first}, repeat={self.repeat}, full={self.full})"

    @property
    def signature(self) -> tuple:
        if self._signature is None:
            self._signature = signature_from_json(self.array)
        return self._signature

    def arguments(self) -> tuple[tuple, dict[str, Any], list[torch.Tensor]]:
        """``(args, kwargs, tensors)`` of a call template's record, shared: read only."""
        if self.call is None or self.key is None:
            raise ValueError("only a call template's record has shared arguments")
        return self.call.arguments(self.key)

    def sample(self, offset: int) -> Sample:
        """Sample ``first + offset``, its arguments materialised afresh."""
        if not 0 <= offset < self.repeat:
            raise IndexError(f"a record of {self.repeat} samples has no sample {offset}")
        args, kwargs = materialise(self.signature, self._placement)
        return Sample(self.first + offset, args, kwargs, signature=self.signature, data_of=self.full)

    def starting_at(self, index: int) -> SignatureRecord:
        """The same record from sample ``index`` on (a resumed replay)."""
        skipped = index - self.first
        if not 0 <= skipped < self.repeat:
            raise IndexError(f"sample {index} is not in {self!r}")
        return SignatureRecord(index, self.repeat - skipped, self._array, self.full, self.call, self.key,
                               self._signature, self._placement)


class Corpus:
    """A corpus directory opened for reading (see :func:`load_corpus`).

    Iteration streams the samples shard by shard, in recorded order, holding one shard in
    memory. Every shard read is checked against the manifest's SHA-256 and sample count, then
    loaded with ``torch.load(weights_only=True)``. Each read builds fresh objects, so a caller
    may mutate what it gets (``mark_unbacked`` does) without affecting later reads.

    Example::

        corpus = load_corpus("corpus")
        len(corpus)                       # 300
        corpus.manifest.model             # "samples/gnn/model.py:small"
        first = corpus.sample(0)          # Sample(index=0, args=(...), kwargs={...})
        for sample in corpus:
            model(*sample.args, **sample.kwargs)
    """

    def __init__(self, path: pathlib.Path, manifest: Manifest, map_location: Any = None) -> None:
        self.path = path
        self.manifest = manifest
        self._map_location = map_location
        self._firsts = [shard.first for shard in manifest.shards]
        self._full_shards: dict[str, tuple[list[Sample | SignatureRecord], list[int]]] = {}
        self._placement = _placement(map_location)
        self._templates: list[CallTemplate] = []  # those of the signature records read, last matched first

    def __len__(self) -> int:
        return self.manifest.samples

    @functools.cached_property
    def requests(self) -> RequestRuns | None:
        """Which request and step each call was (``requests.json``, written when the recorder
        knew); None for a corpus without it. ``corpus.requests.of(index)`` -> ``(tag, step)``."""
        return read_requests(self.path, self.manifest.samples)

    def __repr__(self) -> str:
        return f"Corpus({str(self.path)!r}, samples={len(self)}, model={self.manifest.model!r})"

    def __iter__(self) -> Iterator[Sample]:
        for _, samples in self.iter_shards():
            yield from samples

    def iter_shards(self) -> Iterator[tuple[ShardInfo, list[Sample]]]:
        """Yield each shard's manifest entry with its samples, in recorded order."""
        for shard in self.manifest.shards:
            yield shard, self.load_shard(shard)

    def iter_records(self, start: int = 0) -> Iterator[Sample | SignatureRecord]:
        """The corpus from sample ``start`` on, as recorded (:meth:`load_records`), shard by
        shard; a signature record holding ``start`` begins there."""
        for shard in self.manifest.shards:
            if shard.first + shard.samples > start:
                yield from records_from(self.load_records(shard), start)

    def sample(self, index: int) -> Sample:
        """Sample ``index`` (negative counts from the end); loads only the shard holding it."""
        shard, position = self._locate(index)
        return self.load_shard(shard)[position - shard.first]

    def _locate(self, index: int) -> tuple[ShardInfo, int]:
        """The shard holding sample ``index`` and the sample's position in the corpus."""
        if type(index) is not int:
            raise TypeError(f"sample index must be an int, got {type(index).__qualname__}")
        position = index + len(self) if index < 0 else index
        if not 0 <= position < len(self):
            raise IndexError(f"sample {index} is out of range: the corpus has {len(self)} samples")
        return self.manifest.shards[bisect.bisect_right(self._firsts, position) - 1], position

    def full_sample(self, index: int) -> Sample:
        """Sample ``index``, a fresh copy, for a replay that runs signature-only samples on
        the data of the full sample of their signature: the last few shards read this way are
        kept, so a run of such samples does not load a shard each."""
        cache = self._full_shards
        shard, position = self._locate(index)
        if shard.file not in cache:
            if len(cache) >= FULL_SHARDS_KEPT:
                del cache[next(iter(cache))]
            # As recorded: a shard's signature records are not materialised to reach its full samples.
            records = self.load_records(shard)
            cache[shard.file] = (records, [record.index if type(record) is Sample else record.first
                                           for record in records])
        records, firsts = cache[shard.file]
        kept = records[bisect.bisect_right(firsts, position) - 1]
        if type(kept) is SignatureRecord:
            return kept.sample(position - kept.first)
        args, kwargs = copy.deepcopy((kept.args, kept.kwargs))
        return Sample(kept.index, args, kwargs, kept.signature, kept.data_of)

    def load_shard(self, shard: ShardInfo) -> list[Sample]:
        """The samples of one shard (every tensor built, signature samples materialised; their
        signatures were checked when the shard was read, devices included)."""
        samples: list[Sample] = []
        for item in self.load_records(shard):
            if type(item) is Sample:
                samples.append(item)
            else:
                samples.extend(item.sample(offset) for offset in range(item.repeat))
        return samples

    def load_records(self, shard: ShardInfo) -> list[Sample | SignatureRecord]:
        """One shard as recorded: full samples (tensors built) and, in a format 3 corpus,
        :class:`SignatureRecord` s, each standing for ``repeat`` samples whose arguments are
        not built yet (a replay checks most of them against the guards without building
        them). Everything is checked as :meth:`load_shard` checks it."""
        path = self.path / shard.file
        content = read_shard(path, shard.sha256, self.manifest.format_version, self._map_location,
                             self._prematch if self._templates else None)
        return self._records(path, shard, content)

    def _prematch(self, text: str) -> tuple[str, list[str], list[_Matched]]:
        """A format 3 index's text with the signatures its call templates match in their text
        (:meth:`CallTemplate.match_text`) replaced by placeholders: the text, the placeholders
        and the matches, in order (:func:`guardscope.corpus.shards.decode_shard`)."""
        calls = list(self._templates)
        pieces: list[str] = []
        names: list[str] = []
        matched: list[_Matched] = []
        nonce = secrets.token_hex(8)  # no shard can hold it: a placeholder is never a record's own
        last = 0
        start = text.find(_SIGNATURE_ENTRY)
        while start >= 0:
            start += len(_SIGNATURE_ENTRY)
            for position, call in enumerate(calls):
                found = call.match_text(text, start)
                if found is not None:
                    if position:
                        calls.insert(0, calls.pop(position))
                    key, end = found
                    name = f"{nonce}:{len(names)}"
                    pieces.append(text[last:start])
                    pieces.append(f'"{name}"')
                    names.append(name)
                    matched.append(_Matched(call, key, text[start:end]))
                    last = start = end
                    break
            start = text.find(_SIGNATURE_ENTRY, start)
        if not matched:
            return text, names, matched
        pieces.append(text[last:])
        return "".join(pieces), names, matched

    def _records(self, path: pathlib.Path, shard: ShardInfo, content: Any) -> list[Sample | SignatureRecord]:
        if not isinstance(content, dict) or content.get("format") != FORMAT:
            raise ShardError(f"shard {path} is not a {FORMAT} shard (no 'format': {FORMAT!r} entry)")
        entries = content.get("samples")
        if not isinstance(entries, list):
            raise ShardError(f"shard {path} has no 'samples' list")
        held = sum(entry.get("repeat", 1) if isinstance(entry, dict) and "signature" in entry else 1
                   for entry in entries)
        if held != shard.samples:
            raise ShardError(
                f"shard {path} holds {held} samples but the manifest lists {shard.samples}; "
                "the corpus is inconsistent: re-record it"
            )
        records: list[Sample | SignatureRecord] = []
        index = shard.first
        structured = content.get("structured", False)
        # Signatures matched in the shard's text keep their call template and key when the
        # templates cannot change meanwhile: each other record adds at most one template, so
        # none is dropped (TEMPLATES_KEPT) while they are fewer than the room left. Otherwise
        # (or for a template not kept) they are parsed and matched in order, as the others are.
        others = sum(1 for entry in entries if isinstance(entry, dict) and type(entry.get("signature")) is list)
        trusted = len(self._templates) + others <= TEMPLATES_KEPT
        calls = self._templates
        for entry in entries:
            if isinstance(entry, dict) and "signature" in entry:
                full = entry["full"]
                if full is not None and not full < index:
                    raise ShardError(
                        f"shard {path}: sample {index} names sample {full} as its full recording, "
                        "which does not come before it; re-record the corpus"
                    )
                signature = entry["signature"]
                if type(signature) is _Matched:
                    if trusted and signature.call in calls:
                        # As _match would find it: the one template matching it, moved to the front.
                        position = calls.index(signature.call)
                        if position:
                            calls.insert(0, calls.pop(position))
                        records.append(SignatureRecord(index, entry["repeat"], signature.text, full, signature.call,
                                                       signature.key, None, self._placement))
                        index += entry["repeat"]
                        continue
                    signature = json.loads(signature.text)
                try:
                    call, key, sig = self._match(signature)
                except (ValueError, RuntimeError, RecursionError) as exc:
                    raise ShardError(
                        f"shard {path}: sample {index}'s signature cannot be rebuilt "
                        f"({message_line(exc)}); re-record the corpus"
                    ) from None
                records.append(SignatureRecord(index, entry["repeat"], signature, full, call, key, sig,
                                               self._placement))
                index += entry["repeat"]
                continue
            if (
                not isinstance(entry, dict)
                or type(entry.get("args")) is not tuple
                or type(entry.get("kwargs")) is not dict
            ):
                raise ShardError(
                    f"shard {path}: sample {index} is not an args/kwargs pair"
                )
            args, kwargs = entry["args"], entry["kwargs"]
            if structured:
                try:
                    args, kwargs = rebuild(args), rebuild(kwargs)
                except (ValueError, RecursionError) as exc:
                    raise ShardError(f"shard {path}: sample {index}: {message_line(exc)}") from None
            records.append(Sample(index, args, kwargs))
            index += 1
        return records

    def _match(self, array: Any) -> tuple[CallTemplate | None, tuple | None, tuple | None]:
        """A signature record's call template and key (the signature unparsed), or, for a
        signature no call template holds, ``(None, None, signature)``; ``ValueError`` when it is
        not a signature this version can rebuild."""
        calls = self._templates
        for position, call in enumerate(calls):
            key = call.match(array)
            if key is not None:
                if position:
                    calls.insert(0, calls.pop(position))  # most recently matched first
                return call, key, None
        sig = signature_from_json(array)
        materialise(sig, device="meta")  # every check loading makes, without allocating
        check_devices(sig, self._placement)
        try:
            call = CallTemplate(sig, self._placement)
        except NoTemplate:
            return None, None, sig
        key = call.match(array)
        if key is None:  # cannot happen for a signature the call was made from
            return None, None, sig
        calls.insert(0, call)
        del calls[TEMPLATES_KEPT:]
        return call, key, sig


# How a format 3 index's signature record starts, as the corpus writer spells it.
_SIGNATURE_ENTRY = '{"signature":'


class _Matched:
    """A signature record's signature read from its text: its call template, key and text."""

    __slots__ = ("call", "key", "text")

    def __init__(self, call: CallTemplate, key: tuple, text: str) -> None:
        self.call, self.key, self.text = call, key, text


def records_from(records: list[Sample | SignatureRecord], start: int) -> list[Sample | SignatureRecord]:
    """A shard's records from sample ``start`` on (a resumed replay may start inside a
    signature record: it is cut there)."""
    kept: list[Sample | SignatureRecord] = []
    for record in records:
        if type(record) is SignatureRecord:
            if record.first + record.repeat <= start:
                continue
            kept.append(record.starting_at(start) if record.first < start else record)
        elif record.index >= start:
            kept.append(record)
    return kept


def _placement(map_location: Any) -> Any:
    """For :func:`materialise`: where a tensor recorded on a device goes, as ``torch.load``'s
    ``map_location`` would put it (None: on its recorded device)."""
    if map_location is None:
        return None
    restore = torch.serialization._get_restore_location(map_location)
    return lambda recorded: restore(torch.UntypedStorage(0), recorded).device


def load_corpus(directory: str | os.PathLike[str], *, map_location: Any = None) -> Corpus:
    """Open a corpus directory: read and validate its manifest; shards load as they are used.

    ``map_location`` is passed to ``torch.load`` (e.g. ``"cpu"`` to read a CUDA recording on a
    machine without a GPU; views and strides are kept).

    Example::

        corpus = load_corpus("samples/gnn/corpus")
        for sample in corpus:
            ...
    """
    path = corpus_directory(directory)
    return Corpus(path, read_manifest(path), map_location=map_location)
