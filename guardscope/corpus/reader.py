"""Reading: :func:`load_corpus` opens a corpus directory; :class:`Corpus` streams its samples
(or its records, signature records unbuilt) shard by shard, every shard checked against the
manifest and loaded safely; see :mod:`guardscope.corpus.storage.format`."""

from __future__ import annotations

import bisect
import copy
import functools
import itertools
import json
import os
import pathlib
import re
import secrets
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..errors import ShardError
from ..model import Sample
from ..text import message_line
from .signatures.call_template import CallTemplate, NoTemplate
from .traffic_log.columns import RecordColumns
from .traffic_log.records import log_records
from .signatures.records import SignatureRecord
from .storage.format import FORMAT, Manifest, ShardInfo, corpus_directory, read_manifest
from .signatures.materialising import check_devices, materialise
from .storage.compile_log import read_compiles
from .storage.requests import RequestRuns, read_requests
from .storage.shards import read_shard
from .signatures.signature import signature_from_json
from .values.structured import rebuild

# Shards Corpus.full_sample keeps decoded.
FULL_SHARDS_KEPT = 4
# Call templates (signature structures, corpus.signatures.call_template.CallTemplate) a Corpus keeps.
TEMPLATES_KEPT = 64


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
        # A version 1 traffic log read so far gathered a signature's repeats without their places:
        # its sample indices are its rows' order, not the calls' (corpus.traffic_log.parquet).
        self.row_indices = False
        # Calls kept in full that load_columns gave among a template's rows (checked by their
        # layout like the signature rows around them): the analysis does not count them as signatures.
        self.full_in_columns: dict[str, int] = {}  # by shard file

    def __len__(self) -> int:
        return self.manifest.samples

    @functools.cached_property
    def requests(self) -> RequestRuns | None:
        """Which request and step each call was (``requests.json``, written when the recorder
        knew); None for a corpus without it. ``corpus.requests.of(index)`` -> ``(tag, step)``."""
        return read_requests(self.path, self.manifest.samples)

    @functools.cached_property
    def production_compiles(self) -> list[dict[str, Any]] | None:
        """What the recording process compiled, as its recorder observed it (``compiles.jsonl``:
        :mod:`.storage.compile_log`); None for a corpus recorded without it."""
        return read_compiles(self.path)

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
        # Only that sample is built: a traffic log's shard holds tens of thousands of calls.
        for item in self.load_columns(shard):
            if type(item) is RecordColumns:
                if item.start <= position < item.end:
                    row = int(np.searchsorted(item.first, position, side="right")) - 1
                    if item.full[row] == item.first[row]:  # a call kept in full: its data
                        return self.full_sample(position)
                    return item.record(row).sample(position - int(item.first[row]))
            elif type(item) is Sample:
                if item.index == position:
                    return item
            elif item.first <= position < item.first + item.repeat:
                return item.sample(position - item.first)
        raise ShardError(f"{self.path / shard.file}: holds no sample {position}, which the manifest places there")

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
        if shard.file.endswith(".parquet"):
            return self._log_records(path, shard)
        content = read_shard(path, shard.sha256, self.manifest.format_version, self._map_location,
                             self._prematch if self._templates else None)
        return self._records(path, shard, content)

    def load_columns(self, shard: ShardInfo) -> list[Any]:
        """:meth:`load_records`, but a traffic log's runs of rows of one flat, tensors-only call
        template come as :class:`~guardscope.corpus.traffic_log.columns.RecordColumns` (no object per
        row), for a replay that checks records over columns; checked alike."""
        if shard.file.endswith(".parquet"):
            return self._log_records(self.path / shard.file, shard, columns=True)
        return self.load_records(shard)

    def _log_records(self, path: pathlib.Path, shard: ShardInfo, columns: bool = False) -> list[Any]:
        return log_records(self, path, shard, columns)

    def _prematch(self, text: str) -> tuple[str, list[str], list[_Run]]:
        """A format 3 index's text with each run of consecutive signature records whose
        signatures its call templates match in their text (:meth:`CallTemplate.text_pattern`:
        the record as the corpus writer spells it, its signature, repeat and full) replaced by
        one placeholder in the samples list: the text, the placeholders and the runs, in order
        (:func:`guardscope.corpus.storage.shards.decode_shard`).

        The most recently matched template's records are found by one ``split`` of the whole
        text (each column of the runs' numbers then converted at once); the text between them
        is scanned record by record for the other templates'. A template's pattern holds one
        ``{"signature":`` (at its start) and no two templates match the same text (each matches
        the signatures of its own structure), so which records are matched, and by which
        template, does not depend on the order they are looked for in."""
        calls = [(call, call.text_pattern(_ENTRY_BEFORE, _ENTRY_AFTER)) for call in self._templates]
        found = _Found(secrets.token_hex(8))  # no shard can hold it: a placeholder is never a record's own
        head_call, head = calls[0]
        flat = head.split(text) if head is not None else [text]
        step = head.groups + 1 if head is not None else 1
        count = (len(flat) - 1) // step  # records the head template matched; flat ends with the text after them
        first = 0
        while first < count:
            self._scan(flat[first * step], calls, found)  # the text before the run
            last = first + 1
            while last < count and flat[last * step] == ",":  # the run goes on
                last += 1
            # Group g of the run's record i is flat[(first + i) * step + 1 + g].
            column = functools.partial(_column, flat, first * step + 1, last * step, step)
            repeats = list(map(int, column(step - 3)))
            found.add(_Run([head_call] * (last - first), column(0), head_call.text_keys(column, 1, last - first),
                           repeats, [None if full == "null" else int(full) for full in column(step - 2)],
                           sum(repeats)))
            first = last
        self._scan(flat[-1], calls, found)  # the text after the last run
        if not found.runs:
            return text, found.names, found.runs
        return "".join(found.pieces), found.names, found.runs

    def _scan(self, text: str, calls: list[tuple[CallTemplate, Any]], found: _Found) -> None:
        """Add ``text`` to ``found``'s pieces, its runs of signature records that a call
        template's pattern matches each replaced by a placeholder (the record by record way)."""
        last = 0
        start = text.find(_SIGNATURE_ENTRY)
        while start >= 0:
            run = _Run([], [], [], [], [], 0)
            position = end = start
            while True:
                for at, (call, pattern) in enumerate(calls):
                    matched = pattern.match(text, position) if pattern is not None else None
                    if matched is not None:
                        break
                else:
                    break
                if at:
                    calls.insert(0, calls.pop(at))
                groups = matched.groups()
                repeat, full = int(groups[-2]), groups[-1]
                run.calls.append(call)
                run.texts.append(groups[0])
                run.keys.append(call.text_key(groups[1:-2]))
                run.repeats.append(repeat)
                run.fulls.append(None if full == "null" else int(full))
                run.held += repeat
                position = end = matched.end()
                if not text.startswith(_NEXT_ENTRY, position):
                    break
                position += 1  # past the comma
            if not run.calls:
                start = text.find(_SIGNATURE_ENTRY, start + 1)
                continue
            found.pieces.append(text[last:start])
            found.add(run)
            last = end
            start = text.find(_SIGNATURE_ENTRY, end)
        found.pieces.append(text[last:] if last else text)

    def _records(self, path: pathlib.Path, shard: ShardInfo, content: Any) -> list[Sample | SignatureRecord]:
        if not isinstance(content, dict) or content.get("format") != FORMAT:
            raise ShardError(f"shard {path} is not a {FORMAT} shard (no 'format': {FORMAT!r} entry)")
        entries = content.get("samples")
        if not isinstance(entries, list):
            raise ShardError(f"shard {path} has no 'samples' list")
        held = sum(entry.held if type(entry) is _Run
                   else entry.get("repeat", 1) if isinstance(entry, dict) and "signature" in entry else 1
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
        for entry in entries:
            if type(entry) is _Run:
                index = self._run_records(path, entry, index, trusted, records)
                continue
            if isinstance(entry, dict) and "signature" in entry:
                full = entry["full"]
                _check_full(path, index, full)
                records.append(self._parsed(path, index, entry["signature"], entry["repeat"], full))
                index += entry["repeat"]
                continue
            records.append(_sample(path, index, entry, structured))
            index += 1
        return records

    def _run_records(self, path: pathlib.Path, run: _Run, index: int, trusted: bool,
                     records: list[Sample | SignatureRecord]) -> int:
        """A run of signature records matched in the shard's text appended to ``records``, the
        first at sample ``index``; the index after them. ``trusted``: the matches' templates and
        keys are kept where the templates are (:meth:`_records` says when), else parsed again."""
        calls = self._templates
        if trusted and all(call is calls[0] or call in calls for call in set(run.calls)):
            firsts = list(itertools.accumulate(run.repeats, initial=index))
            after = firsts.pop()
            if all(full is None or full < first for full, first in zip(run.fulls, firsts)):
                # As record after record below: the templates moved to the front in turn.
                for call in run.calls if len(set(run.calls)) > 1 else run.calls[:1]:
                    if calls[0] is not call:
                        calls.insert(0, calls.pop(calls.index(call)))
                records.extend(map(SignatureRecord, firsts, run.repeats, run.texts, run.fulls,
                                   run.calls, run.keys, itertools.repeat(None),
                                   itertools.repeat(self._placement)))
                return after
        for call, text, key, repeat, full in zip(run.calls, run.texts, run.keys, run.repeats, run.fulls):
            _check_full(path, index, full)
            if trusted and call in calls:
                # As _match would find it: the one template matching it, moved to the front.
                if calls[0] is not call:
                    calls.insert(0, calls.pop(calls.index(call)))
                records.append(SignatureRecord(index, repeat, text, full, call, key, None, self._placement))
            else:
                records.append(self._parsed(path, index, json.loads(text), repeat, full))
            index += repeat
        return index

    def _parsed(self, path: pathlib.Path, index: int, signature: Any, repeat: int, full: int | None) -> SignatureRecord:
        """The signature record of sample ``index`` from its parsed signature (:meth:`_match`)."""
        try:
            call, key, sig = self._match(signature)
        except (ValueError, RuntimeError, RecursionError) as exc:
            raise ShardError(
                f"shard {path}: sample {index}'s signature cannot be rebuilt "
                f"({message_line(exc)}); re-record the corpus"
            ) from None
        return SignatureRecord(index, repeat, signature, full, call, key, sig, self._placement)

    def call_of(self, array: Any) -> CallTemplate:
        """The call template of a signature (its JSON array) that one is known to have, as this
        corpus's records of it hold it (the same object: a replay keeps its plans per template)."""
        call = self._match(array)[0]
        if call is None:
            raise ShardError("a signature without a call template where one was expected")
        return call

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


# How a format 3 index's signature record starts, as the corpus writer spells it; what follows
# one when the next is one too.
_SIGNATURE_ENTRY = '{"signature":'
_NEXT_ENTRY = ',' + _SIGNATURE_ENTRY
# A signature record as the corpus writer spells it around its signature (Corpus._prematch): its
# repeat (1 <= repeat < 10**18 < 2**62) and full (null or 0 <= full < 10**18), every other
# spelling parsed instead.
_ENTRY_BEFORE = re.escape(_SIGNATURE_ENTRY)
_ENTRY_AFTER = r',"repeat":([1-9][0-9]{0,17}),"full":(null|0|[1-9][0-9]{0,17})\}'


def _check_full(path: pathlib.Path, index: int, full: int | None) -> None:
    """``ShardError`` unless sample ``index``'s full recording, if it names one, comes before it."""
    if full is not None and not full < index:
        raise ShardError(
            f"shard {path}: sample {index} names sample {full} as its full recording, "
            "which does not come before it; re-record the corpus"
        )


def _sample(path: pathlib.Path, index: int, entry: Any, structured: bool) -> Sample:
    """Sample ``index`` from its decoded ``{"args", "kwargs"}`` entry, its stored objects rebuilt
    (``structured``: the shard holds some)."""
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
    return Sample(index, args, kwargs)


class _Run:
    """Consecutive signature records matched in a shard's text (:meth:`Corpus._prematch`): each
    one's call template, signature text, key, repeat and full, and how many samples they hold."""

    __slots__ = ("calls", "fulls", "held", "keys", "repeats", "texts")

    def __init__(self, calls: list[CallTemplate], texts: list[str], keys: list[tuple], repeats: list[int],
                 fulls: list[int | None], held: int) -> None:
        self.calls, self.texts, self.keys, self.repeats, self.fulls, self.held = calls, texts, keys, repeats, fulls, held


class _Found:
    """What :meth:`Corpus._prematch` made so far: the text's pieces, placeholders and runs."""

    __slots__ = ("names", "nonce", "pieces", "runs")

    def __init__(self, nonce: str) -> None:
        self.nonce, self.pieces, self.names, self.runs = nonce, [], [], []

    def add(self, run: _Run) -> None:
        name = f"{self.nonce}:{len(self.names)}"
        self.pieces.append(f'"{name}"')
        self.names.append(name)
        self.runs.append(run)


def _column(flat: list, start: int, stop: int, step: int, group: int) -> list:
    """Group ``group`` of each match of a ``split`` (``flat``) from ``start`` to ``stop``."""
    return flat[start + group: stop: step]


def records_from(records: list[Sample | SignatureRecord], start: int) -> list[Sample | SignatureRecord]:
    """A shard's records from sample ``start`` on (a resumed replay may start inside a
    signature record: it is cut there)."""
    kept: list[Sample | SignatureRecord] = []
    for record in records:
        if type(record) is RecordColumns:
            cut = record.starting_at(start)
            if cut is not None:
                kept.append(cut)
        elif type(record) is SignatureRecord:
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
