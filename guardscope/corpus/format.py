"""The corpus directory: recorded forward calls, written by :class:`CorpusWriter`, read safely.

A corpus is a directory holding a manifest and shard files::

    corpus/
      corpus.json       the manifest (JSON, sorted keys, indent 2)
      shard-00000.pt    samples 0 .. shard_size-1
      shard-00001.pt    the next shard_size samples, and so on

``corpus.json`` looks like this::

    {
      "compile": {"dynamic": true, "fullgraph": true},
      "device": "cpu",
      "format": "guardscope-corpus",
      "format_version": 2,
      "model": "samples/gnn/model.py:small",
      "samples": 300,
      "shards": [
        {"file": "shard-00000.pt", "first": 0, "samples": 256, "sha256": "9f2c..."},
        {"file": "shard-00001.pt", "first": 256, "samples": 44, "sha256": "07ab..."}
      ],
      "torch_version": "2.13.0+cpu"
    }

``model`` is the model spec (``"pkg.mod:attr"`` or ``"path/file.py:attr"``, a relative path
being resolved against the corpus directory, then the working directory); ``compile`` holds the
production ``torch.compile`` options; ``torch_version`` and ``device`` (the device types of the
recorded tensors, comma-joined, ``"cpu"`` when there are none) describe the recording.

A shard (``format_version`` 2) is one ``torch.save`` archive holding a single tensor::

    {"format": "guardscope-corpus", "format_version": 2,
     "blob": <1-D uint8 tensor: the bytes of every distinct storage the shard's tensors use>,
     "index": '{"segments": [[byte_start, byte_length], ...], "samples": [[args, kwargs], ...]}'}

``index`` is JSON text (format 3: that text deflated with zlib, as a 1-D uint8 tensor). ``segments`` lists one byte range of the blob per recorded storage, in
first-use order; ``samples`` holds each call's ``args`` and ``kwargs`` with every value tagged:
``None``, ``bool``, ``int``, ``float`` and ``str`` are JSON values, everything else an array
whose first item says what it is: ``["t", item, ...]`` a tuple, ``["l", item, ...]`` a list,
``["d", key, value, key, value, ...]`` a dict (str or int keys, in order), ``["c", real, imag]``
a complex, ``["y", "float32"]`` a ``torch.dtype``, ``["v", "cuda:0"]`` a ``torch.device``, and
``["T", segment, storage_offset, shape, stride, dtype, requires_grad, device]`` a tensor
(``dtype`` a name such as ``"float32"``, ``device`` the storage's location tag such as ``"cpu"``
or ``"cuda:0"``, which ``map_location`` maps as ``torch.load`` does). Each storage is written
once, so tensors that shared one when recorded (a view and its base) name the same segment and
share one storage again when loaded; each segment becomes its own storage of exactly the
recorded size. Every record is validated (types, tags, dtype names, segments within the blob,
every element of a tensor within its segment) before a tensor is built on it, so a malformed
shard gives a ``ShardError``, never a read outside the blob.

A format 3 corpus (written by ``CorpusWriter(..., keep="signatures")``; ``format_version`` 3 in
the manifest and in each shard) is format 2 plus *signature records*. Its ``samples`` list holds
either full samples, the ``[args, kwargs]`` pairs above, or records such as::

    {"full": 0, "repeat": 49, "signature": ["call", ["tuple", 1, ["tensor", "Tensor", [64, 4],
     [4, 1], 0, "float32", "cpu", "torch.strided", false, false, null]], ["dict"]]}

which stand for ``repeat`` consecutive samples (the manifest's counts are of samples, not
records) that were recorded as their signature only: no tensor data. ``signature`` is the
call's signature (:func:`guardscope.corpus.signature.signature`, taken with ``inference=False``)
with tuples written as arrays: ``["call", args, kwargs]``, where a value is ``["none"]``,
``["bool", v]``, ``["int", v]``, ``["str", v]``, ``["float", repr]``, ``["complex", repr]``,
``["dtype", name]``, ``["device", name]``, ``["list"|"tuple", length, item, ...]``,
``["dict", [repr(key), value], ...]`` or ``["tensor", "Tensor", shape, stride, storage_offset,
dtype, device, layout, requires_grad, inference, alias]`` (``alias``: the walk position of the
first tensor of the call sharing its storage, or null). ``full`` is the index of the earlier
sample recorded in full with the same signature, or null when the corpus holds none
(``full_per_signature=0``). Loading gives each such sample as a :class:`~guardscope.model.Sample`
with ``recorded == "signature"``, its ``signature`` and ``data_of`` (``full``), and arguments
materialised from the signature: zero-filled tensors of the recorded sizes, strides, offsets,
dtypes, devices (``map_location`` applies) and aliasing. Equal signatures pass the same
frame-0 guards, so an analysis is exact for them; the replay runs a signature sample that must
run on the data of its ``full`` sample when there is one. :meth:`Corpus.load_records` gives a
shard as recorded instead, each signature record one :class:`SignatureRecord` whose arguments
are built only when asked: an analysis checks a million of them against the guards on
arguments shared per call template (:class:`guardscope.corpus.signature.CallTemplate`).

Format 1 shards (still read) pickled every tensor: ``torch.save({"format": ...,
"samples": [{"args": (...), "kwargs": {...}}, ...]})``; rebuilding each one through torch's
pure-Python safe unpickler made loading about 8 times slower than format 2.

Every shard is only ever read with ``torch.load(..., weights_only=True)`` after its SHA-256 is
checked against the manifest: reading a corpus never executes code.

What a sample may hold, and what survives the round trip:

* tensors (strided layout, plain ``torch.Tensor``): shape, strides (zero strides of expanded
  or ``empty_strided`` tensors included), storage offset, dtype, device, ``requires_grad``, and
  aliasing: tensors that share storage in one sample still share it when loaded, so a view and
  its base keep sharing one storage at their offsets. A view is stored with its whole base
  storage; the autograd view relation (``_base``) is not kept, only the shared storage. A tensor with a ``grad_fn`` is stored detached, keeping ``requires_grad=True``; the
  autograd graph that produced it is not recorded. Python attributes on tensors, Dynamo's
  ``mark_dynamic``/``mark_unbacked`` marks included, are not recorded: marking is replay
  configuration, not data. A lazily conjugated or negated view (``x.conj()``) is stored
  resolved, as its values;
* ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``torch.dtype``,
  ``torch.device``;
* ``list``, ``tuple`` and ``dict`` (keys ``str`` or ``int``) of these, nested; tuples stay
  tuples, lists stay lists, dict order is kept.

Anything else (an arbitrary object, a lambda, a set, a tensor subclass, a sparse, quantized or
``meta`` tensor) is refused by :meth:`CorpusWriter.add` with a
:class:`~guardscope.errors.SampleError` naming where it is, e.g. ``kwargs['d'][2]``.

Output is deterministic: the same samples give byte-identical shards and manifest. (Shards are
serialized in memory: ``torch.save`` to a *path* names the archive's inner folder after the
file, and the atomic write goes through a temporary file name.)

Recording::

    from guardscope.corpus import CorpusWriter

    with CorpusWriter("corpus", model="myapp.model:build", compile={"dynamic": True}) as writer:
        for request in requests:
            writer.add(**request)

    # Every request, but tensor data only for the first of each signature (format 3):
    with CorpusWriter("corpus", model="myapp.model:build", keep="signatures") as writer:
        ...

Reading::

    from guardscope.corpus import load_corpus

    corpus = load_corpus("corpus")
    for sample in corpus:
        model(*sample.args, **sample.kwargs)
"""

from __future__ import annotations

import bisect
import copy
import gc
import hashlib
import io
import json
import os
import pathlib
import pickle
import re
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import CorpusError, ManifestError, ModelSpecError, SampleError, ShardError
from ..files import write_atomic
from ..model import Sample
from ..text import message_line
from ..torch_compat import DTYPES, dtype_name
from .signature import (
    CallTemplate,
    NoTemplate,
    check_devices,
    materialise,
    signature,
    signature_digest,
    signature_from_json,
    signature_to_json,
)
from .spec import anchored, split_spec

FORMAT = "guardscope-corpus"
FORMAT_VERSION = 2
# Written when a corpus keeps signature records (CorpusWriter(keep="signatures")); a corpus of
# full samples stays format 2, so that older guardscope versions read it.
SIGNATURE_FORMAT_VERSION = 3
# The versions this guardscope reads.
READ_VERSIONS = (1, 2, 3)
KEEP_CHOICES = ("all", "signatures")
# The largest shard index (format 3: inflated) a reader accepts.
MAX_INDEX_BYTES = 1 << 30
# Shards Corpus.full_sample keeps decoded.
FULL_SHARDS_KEPT = 4
# Call templates (signature structures, corpus.signature.CallTemplate) a Corpus keeps.
TEMPLATES_KEPT = 64
MANIFEST_NAME = "corpus.json"

# What a corpus directory holds, for error messages that say what was expected.
_CORPUS_LAYOUT = (
    f"a corpus directory holds {MANIFEST_NAME} (the manifest) and shard-NNNNN.pt files, "
    "as written by guardscope.CorpusWriter"
)
_SHARD_NAME = re.compile(r"shard-\d{5,}\.pt")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SCALAR_TYPES = (type(None), bool, int, float, complex, str, torch.dtype, torch.device)
# Placeholder numbers (offsets, sizes, strides) must stay below this: no int64 overflow.
_MAX_INDEX = 2**62


@dataclass(frozen=True)
class ShardInfo:
    """One shard as listed in the manifest: samples ``first .. first + samples - 1``."""

    file: str
    first: int
    samples: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "first": self.first,
            "samples": self.samples,
            "sha256": self.sha256,
        }


@dataclass(frozen=True)
class Manifest:
    """The contents of ``corpus.json``."""

    format_version: int
    model: str
    compile: dict
    torch_version: str
    device: str
    samples: int
    shards: tuple[ShardInfo, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": self.format_version,
            "model": self.model,
            "compile": self.compile,
            "torch_version": self.torch_version,
            "device": self.device,
            "samples": self.samples,
            "shards": [shard.to_json() for shard in self.shards],
        }


# --------------------------------------------------------------------------------------------
# Writing


def check_model_spec(spec: object) -> str:
    """Check the shape of a model spec, ``"pkg.mod:attr"`` or ``"path/file.py:attr"``.

    Only the shape: nothing is imported. Returns the spec; raises ``ModelSpecError``.
    """
    split_spec(spec)  # type: ignore[arg-type]
    return spec  # type: ignore[return-value]


class CorpusWriter:
    """Records forward calls into a corpus directory, one shard file per ``shard_size`` samples.

    ``model`` is the model spec written into the manifest (its shape is checked, nothing is
    imported); ``compile`` the production ``torch.compile`` options (JSON values).
    ``keep="all"`` (the default) records every call in full (format 2); ``keep="signatures"``
    records the first ``full_per_signature`` calls of each signature in full and every other
    one as its signature only, without tensor data (format 3; ``full_per_signature=0`` keeps no
    tensor data at all, for traffic whose contents may not be stored); ``max_signatures`` bounds
    the signatures it remembers (None: all), ``max_full_bytes`` the tensor storage bytes of the
    calls it keeps in full (a call that would pass it is recorded as its signature; None: no
    bound), so a corpus of a million new signatures stays small. The
    directory is created if needed; one that already holds a corpus is refused unless
    ``overwrite=True``, which deletes that corpus's manifest and shard files (nothing else).

    Each finished shard is written at once and the manifest rewritten after it, both atomically,
    so an interrupted recording keeps every finished shard. :meth:`add` takes a snapshot of its
    arguments (a deep copy that keeps aliasing), so buffers reused by the caller afterwards do
    not change what is recorded. Not thread-safe.

    Example::

        with CorpusWriter("corpus", model="myapp.model:build",
                          compile={"dynamic": True, "fullgraph": True}) as writer:
            writer.add(x, edge_index, scale=0.5)   # returns 0
            writer.add(x2, edge_index2, scale=0.5) # returns 1
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        model: str,
        compile: dict | None = None,
        *,
        shard_size: int = 256,
        overwrite: bool = False,
        keep: str = "all",
        full_per_signature: int = 1,
        max_signatures: int | None = None,
        max_full_bytes: int | None = None,
    ) -> None:
        self.directory = pathlib.Path(directory)
        # A relative file spec is stored relative to the corpus folder, where it is resolved first:
        # the corpus then works from any working directory.
        self.model = anchored(check_model_spec(model), self.directory)
        self.compile = dict(compile or {})
        try:
            json.dumps(self.compile, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise CorpusError(
                f"compile options {self.compile!r} cannot be written to {MANIFEST_NAME}: "
                f"{exc}; pass a dict of str keys and JSON values (bool, int, float, str, "
                "None, lists, dicts)"
            ) from None
        if type(shard_size) is not int or shard_size < 1:
            raise CorpusError(f"shard_size must be a positive int, got {shard_size!r}")
        self.shard_size = shard_size
        if keep not in KEEP_CHOICES:
            raise CorpusError(f"keep must be one of {', '.join(map(repr, KEEP_CHOICES))}, got {keep!r}")
        if type(full_per_signature) is not int or full_per_signature < 0:
            raise CorpusError(
                f"full_per_signature must be an int >= 0 (0: no tensor data at all), got {full_per_signature!r}"
            )
        if max_signatures is not None and (type(max_signatures) is not int or max_signatures < 0):
            raise CorpusError(f"max_signatures must be an int >= 0 or None, got {max_signatures!r}")
        if max_full_bytes is not None and (type(max_full_bytes) is not int or max_full_bytes < 0):
            raise CorpusError(f"max_full_bytes must be an int >= 0 or None, got {max_full_bytes!r}")
        if max_full_bytes is not None and keep != "signatures":
            raise CorpusError('max_full_bytes bounds the calls kept in full besides signatures: use keep="signatures"')
        self.max_full_bytes = max_full_bytes
        self.full_bytes = 0  # tensor storage bytes of the calls kept in full (keep="signatures")
        self.keep = keep
        self.full_per_signature = full_per_signature
        self.max_signatures = max_signatures
        # keep="signatures": signature digest -> [first full sample's index, full samples kept],
        # for at most max_signatures signatures (later new ones are not remembered: each of
        # their calls counts as the first of its signature).
        self._signatures: dict[str, list] = {}
        self._records = 0  # the signature records written so far
        self._pending: list[dict[str, Any]] = []
        self._shards: list[ShardInfo] = []
        self._devices: set[str] = set()
        self._count = 0
        self._closed = False
        self._prepare_directory(overwrite)
        self._write_manifest()

    def _prepare_directory(self, overwrite: bool) -> None:
        if self.directory.exists() and not self.directory.is_dir():
            raise CorpusError(f"{self.directory} exists and is not a directory; pick another path")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CorpusError(f"cannot create the corpus directory {self.directory}: {exc.strerror or exc}") from exc
        previous = sorted(
            path
            for path in self.directory.iterdir()
            if path.name == MANIFEST_NAME or _SHARD_NAME.fullmatch(path.name)
        )
        if previous and not overwrite:
            raise CorpusError(
                f"{self.directory} already holds a corpus ({previous[0].name}); "
                "pass overwrite=True to replace it, or pick another directory"
            )
        for path in previous:
            path.unlink()

    def __enter__(self) -> CorpusWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        # Also on an exception: the samples added so far are kept.
        self.close()

    def __len__(self) -> int:
        return self._count

    @property
    def signature_samples(self) -> int:
        """Samples recorded as their signature only so far (always 0 with ``keep="all"``)."""
        return self._records

    def add(self, *args: Any, **kwargs: Any) -> int:
        """Record one forward call's arguments; returns the sample's index.

        With ``keep="signatures"`` the first ``full_per_signature`` calls of each signature
        are recorded in full and every later one as its signature only (no tensor data is
        copied or kept), consecutive calls of one signature as one record with a repeat count.

        Raises ``SampleError`` (nothing recorded) if an argument holds a value the format cannot
        store, naming where: ``args[1]``, ``kwargs['d'][2]``.
        """
        return self._add(args, kwargs, copied=False)

    def add_snapshot(self, args: tuple, kwargs: dict, sig: tuple | None = None) -> int:
        """Record a call that :func:`snapshot` copied already (a recorder that copies on the
        serving thread and writes on another): as :meth:`add`, without copying it again.
        ``sig``: the call's ``signature(args, kwargs, inference=False)`` when the caller took
        it already (a copy has its original's signature), so that it is not taken again."""
        return self._add(tuple(args), dict(kwargs), copied=True, sig=sig)

    def add_signature(self, sig: tuple, devices: frozenset[str] | set[str] = frozenset()) -> int:
        """Record one call known by its signature only (``signature(args, kwargs,
        inference=False)``, taken where the call was served); returns the sample's index.

        Only with ``keep="signatures"``. The record names the first full sample of that
        signature, when one was added. ``devices`` are the device types of its tensors (for the
        manifest's ``device``). ``CorpusError`` when the writer is closed or keeps everything in
        full, ``SampleError`` when ``sig`` is not a call signature this format can rebuild.
        """
        self._check_open()
        if self.keep != "signatures":
            raise CorpusError('add_signature() records signatures: open the CorpusWriter with keep="signatures"')
        try:
            materialise(sig, device="meta")  # the check loading makes, without allocating
        except (ValueError, RuntimeError, TypeError) as exc:
            raise SampleError(f"not a call signature this corpus format can store: {message_line(exc)}") from None
        self._add_signature_record(sig, signature_digest(sig))
        return self._advance(set(devices))

    def _check_open(self) -> None:
        if self._closed:
            raise CorpusError(f"the writer for {self.directory} is closed; open a new CorpusWriter")

    def _add(self, args: tuple, kwargs: dict, *, copied: bool, sig: tuple | None = None) -> int:
        self._check_open()
        devices = check_sample(args, kwargs)  # SampleError before anything is recorded
        if self.keep == "signatures":
            # As the corpus will give it back: a loaded tensor is never an inference tensor.
            if sig is None:
                sig = signature(args, kwargs, inference=False)
            digest = signature_digest(sig)
            seen = self._seen(digest)
            size = 0
            if seen[1] < self.full_per_signature and self.max_full_bytes is not None:
                size = storage_bytes((args, kwargs))
            if seen[1] >= self.full_per_signature or (
                    self.max_full_bytes is not None and self.full_bytes + size > self.max_full_bytes):
                self._add_signature_record(sig, digest)
                return self._advance(devices)
            if seen[1] == 0:
                seen[0] = self._count
            seen[1] += 1
            self.full_bytes += size
        if not copied:
            args, kwargs = _copy_call(args, kwargs)
        self._pending.append({"args": args, "kwargs": kwargs})
        return self._advance(devices)

    def _advance(self, devices: set[str]) -> int:
        """Count the sample just recorded; write the shard when it is full. Returns its index."""
        self._devices |= devices
        index = self._count
        self._count += 1
        if len(self._pending) == self.shard_size:
            self._flush()
        return index

    def _seen(self, digest: str) -> list:
        """[first full sample's index, full samples kept] of a signature; a fresh one, not kept,
        past ``max_signatures``."""
        seen = self._signatures.get(digest)
        if seen is None:
            seen = [None, 0]
            if self.max_signatures is None or len(self._signatures) < self.max_signatures:
                self._signatures[digest] = seen
        return seen

    def _add_signature_record(self, sig: tuple, digest: str) -> None:
        seen = self._seen(digest)
        self._records += 1
        last = self._pending[-1] if self._pending else None
        if last is not None and last.get("digest") == digest:
            last["repeat"] += 1
        else:
            self._pending.append({"signature": sig, "digest": digest, "repeat": 1, "full": seen[0]})

    def flush(self) -> None:
        """Write the samples added since the last shard as a shard of their own now, so they are
        on disk (and listed in the manifest) before ``shard_size`` samples have been added; a
        corpus's shards may differ in size. Does nothing when none are pending."""
        if self._pending and not self._closed:
            self._flush()

    def close(self) -> None:
        """Write the last, partial shard and the final manifest. Calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._pending:
            self._flush()

    def _flush(self) -> None:
        buffer = io.BytesIO()
        torch.save(_encode_shard(self._pending, self._version), buffer)
        data = buffer.getvalue()
        name = f"shard-{len(self._shards):05d}.pt"
        _atomic_write(self.directory / name, data)
        first = self._shards[-1].first + self._shards[-1].samples if self._shards else 0
        samples = sum(record.get("repeat", 1) for record in self._pending)
        self._shards.append(ShardInfo(name, first, samples, hashlib.sha256(data).hexdigest()))
        self._pending = []
        self._write_manifest()

    @property
    def _version(self) -> int:
        return SIGNATURE_FORMAT_VERSION if self.keep == "signatures" else FORMAT_VERSION

    def _write_manifest(self) -> None:
        manifest = Manifest(
            format_version=self._version,
            model=self.model,
            compile=self.compile,
            torch_version=str(torch.__version__),
            device=",".join(sorted(self._devices)) or "cpu",
            samples=sum(shard.samples for shard in self._shards),
            shards=tuple(self._shards),
        )
        text = json.dumps(manifest.to_json(), sort_keys=True, indent=2) + "\n"
        _atomic_write(self.directory / MANIFEST_NAME, text.encode())


def storage_bytes(value: Any) -> int:
    """Bytes a corpus stores for the tensors in ``value``: each distinct storage once, whole
    (a view is stored with its base)."""
    seen: set[tuple[str, int]] = set()
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            try:
                storage = item.untyped_storage()
            except Exception:  # sparse, quantized...: no storage; the corpus refuses them anyway
                continue
            key = (str(item.device), storage.data_ptr())
            if key not in seen:
                seen.add(key)
                total += storage.nbytes()
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return total


def check_sample(args: tuple, kwargs: dict) -> set[str]:
    """Raise ``SampleError`` unless a corpus can store this call's arguments (naming the first
    value it cannot, e.g. ``kwargs['d'][2]``); returns the device types of its tensors. Copies
    nothing."""
    devices: set[str] = set()
    _check_value(tuple(args), "args", devices, set())
    _check_value(dict(kwargs), "kwargs", devices, set())
    return devices


def snapshot(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A private copy of one call's arguments, exactly as :meth:`CorpusWriter.add` records them
    (aliasing kept, autograd history and tensor attributes dropped), for a caller that must
    let the caller's buffers go before the sample is written (a background recorder).

    Raises ``SampleError`` naming the first value the format cannot store.
    """
    args, kwargs, _ = _snapshot(tuple(args), dict(kwargs))
    return args, kwargs


def _snapshot(args: tuple, kwargs: dict) -> tuple[tuple, dict, set[str]]:
    devices = check_sample(args, kwargs)
    args, kwargs = _copy_call(args, kwargs)
    return args, kwargs, devices


def _copy_call(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """One deep copy of the whole (checked) call: it keeps aliasing between its tensors."""
    return copy.deepcopy(_plain((args, kwargs)))


def _check_value(value: Any, path: str, devices: set[str], active: set[int]) -> None:
    """Raise SampleError unless ``value`` is storable; collect tensor device types."""
    kind = type(value)
    if kind is torch.Tensor:
        if value.layout != torch.strided:
            raise SampleError(
                f"{path} is a {value.layout} tensor; a corpus stores strided (dense) tensors "
                "only: pass value.to_dense()"
            )
        if value.is_quantized:
            raise SampleError(
                f"{path} is a quantized tensor; a corpus stores plain tensors only: pass "
                "value.dequantize()"
            )
        if value.device.type == "meta":
            raise SampleError(
                f"{path} is a meta tensor, which holds no data; a corpus stores real tensors"
            )
        devices.add(value.device.type)
        return
    if kind in _SCALAR_TYPES:
        return
    if kind in (list, tuple, dict):
        if id(value) in active:
            raise SampleError(f"{path} contains itself; a corpus cannot store cyclic structures")
        active.add(id(value))
        if kind is dict:
            for key, item in value.items():
                if type(key) not in (str, int):
                    raise SampleError(
                        f"{path} has a key {key!r} of type {type(key).__qualname__}; "
                        "dict keys must be str or int"
                    )
                _check_value(item, f"{path}[{key!r}]", devices, active)
        else:
            for position, item in enumerate(value):
                _check_value(item, f"{path}[{position}]", devices, active)
        active.discard(id(value))
        return
    if isinstance(value, torch.Tensor):
        hint = "pass value.as_subclass(torch.Tensor) if a plain tensor will do"
    elif isinstance(value, (set, frozenset)):
        hint = "pass a sorted list or a tuple (set order is not reproducible)"
    elif isinstance(value, torch.Size):
        hint = "pass tuple(value)"
    else:
        hint = (
            "a sample holds tensors, None, bool, int, float, complex, str, torch.dtype, "
            "torch.device, and lists, tuples and dicts of these"
        )
    raise SampleError(
        f"{path} is of type {kind.__module__}.{kind.__qualname__}, which a corpus cannot "
        f"store; {hint}"
    )


def _plain(value: Any) -> Any:
    """The call's structure with each tensor replaced by a plain alias of its storage.

    ``detach()`` keeps storage, offset, shape and strides but drops the ``grad_fn`` (a tensor
    with one cannot be deep-copied) and Python attributes such as Dynamo's ``mark_dynamic`` /
    ``mark_unbacked`` marks, which ``torch.save`` would otherwise record and replay would obey.
    """
    if type(value) is torch.Tensor:
        plain = value.detach()
        if plain.is_conj() or plain.is_neg():
            plain = plain.resolve_conj().resolve_neg()
        return plain.requires_grad_(value.requires_grad)
    if type(value) is list:
        return [_plain(item) for item in value]
    if type(value) is tuple:
        return tuple(_plain(item) for item in value)
    if type(value) is dict:
        return {key: _plain(item) for key, item in value.items()}
    return value


def _encode_shard(samples: list[dict[str, Any]], version: int = FORMAT_VERSION) -> dict[str, Any]:
    """A format 2 (or 3) shard: one blob of storage bytes, and the samples as tagged JSON text;
    format 3 also holds signature records.

    Storages are grouped by identity, numbered in first-use order, and their bytes laid end to
    end in the blob, so the same samples always give the same shard.
    """
    segments: list[list[int]] = []
    parts: list[torch.Tensor] = []
    numbers: dict[int, int] = {}
    position = 0

    def encode(value: Any) -> Any:
        nonlocal position
        kind = type(value)
        if kind is torch.Tensor:
            storage = value.untyped_storage()
            number = numbers.get(storage._cdata)
            if number is None:
                number = numbers[storage._cdata] = len(segments)
                data = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
                parts.append(data.cpu())
                segments.append([position, storage.nbytes()])
                position += storage.nbytes()
            return [
                "T",
                number,
                value.storage_offset(),
                list(value.shape),
                list(value.stride()),
                dtype_name(value.dtype),
                value.requires_grad,
                torch.serialization.location_tag(storage),
            ]
        if kind is list:
            return ["l", *(encode(item) for item in value)]
        if kind is tuple:
            return ["t", *(encode(item) for item in value)]
        if kind is dict:
            flat: list[Any] = ["d"]
            for key, item in value.items():
                flat += (key, encode(item))
            return flat
        if kind is complex:
            return ["c", value.real, value.imag]
        if kind is torch.dtype:
            return ["y", dtype_name(value)]
        if kind is torch.device:
            return ["v", str(value)]
        return value  # None, bool, int, float, str: JSON values

    encoded = [
        {"signature": signature_to_json(s["signature"]), "repeat": s["repeat"], "full": s["full"]}
        if "signature" in s
        else [encode(s["args"]), encode(s["kwargs"])]
        for s in samples
    ]
    index: Any = json.dumps({"segments": segments, "samples": encoded}, separators=(",", ":"))
    if version >= 3:
        # Signature records repeat their words ("tensor", "float32", ...): deflated, a record
        # of six tensors takes about a tenth of its JSON text.
        index = torch.frombuffer(bytearray(zlib.compress(index.encode(), 6)), dtype=torch.uint8)
    blob = torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8)
    return {"format": FORMAT, "format_version": version, "blob": blob, "index": index}


def _atomic_write(path: pathlib.Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, then rename over ``path``; a read-only or
    full disk is a :class:`CorpusError` naming the path."""
    try:
        write_atomic(path, data, sync=True)
    except OSError as exc:
        raise CorpusError(f"cannot write {path}: {exc.strerror or exc}") from exc


# --------------------------------------------------------------------------------------------
# Reading


class SignatureRecord:
    """A format 3 signature record as read: ``repeat`` consecutive samples from ``first``,
    recorded as their signature only (``array``, its JSON form), ``full`` the index of the
    sample of that signature recorded in full (or None).

    ``call`` and ``key`` (:class:`~guardscope.corpus.signature.CallTemplate`) when the signature is
    a call template's, else None; :meth:`arguments` then gives shared read-only arguments, built
    once per argument and size. :meth:`sample` builds one sample afresh, as loading does.
    """

    __slots__ = ("first", "repeat", "array", "full", "call", "key", "_signature", "_placement")

    def __init__(self, first: int, repeat: int, array: list, full: int | None, call: CallTemplate | None,
                 key: tuple | None, sig: tuple | None, placement: Any) -> None:
        self.first, self.repeat, self.array, self.full = first, repeat, array, full
        self.call, self.key, self._signature, self._placement = call, key, sig, placement

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
        return SignatureRecord(index, self.repeat - skipped, self.array, self.full, self.call, self.key,
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
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ShardError(
                f"shard {path} is missing (the manifest lists it); restore it or re-record "
                "the corpus"
            ) from None
        except OSError as exc:
            raise ShardError(f"shard {path} cannot be read: {exc.strerror}") from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != shard.sha256:
            raise ShardError(
                f"shard {path} fails its checksum (sha256 {digest[:12]}..., manifest says "
                f"{shard.sha256[:12]}...; {len(data)} bytes): it was truncated or modified after "
                "recording; restore it or re-record the corpus"
            )
        if not zipfile.is_zipfile(io.BytesIO(data)):
            raise ShardError(f"shard {path} is not a torch.save archive (truncated or not a shard)")
        version = self.manifest.format_version
        try:
            content = torch.load(
                io.BytesIO(data),
                # Format 2 holds one CPU blob; map_location applies to the rebuilt storages.
                map_location=self._map_location if version == 1 else "cpu",
                weights_only=True,
            )
        except pickle.UnpicklingError as exc:
            raise ShardError(
                f"shard {path} was refused by safe loading (torch.load weights_only=True): "
                f"{_weights_only_reason(exc)}. A corpus holds only tensors and plain Python "
                "values; nothing in this shard was run. Re-record it with guardscope.CorpusWriter"
            ) from None
        except Exception as exc:  # torch raises RuntimeError and others for corrupt archives
            raise ShardError(f"shard {path} cannot be loaded: {message_line(exc)}") from None
        if version != 1:
            content = _decode_shard(path, content, self._map_location, version)
        return self._records(path, shard, content)

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
        for entry in entries:
            if isinstance(entry, dict) and "signature" in entry:
                full = entry["full"]
                if full is not None and not full < index:
                    raise ShardError(
                        f"shard {path}: sample {index} names sample {full} as its full recording, "
                        "which does not come before it; re-record the corpus"
                    )
                try:
                    call, key, sig = self._match(entry["signature"])
                except (ValueError, RuntimeError, RecursionError) as exc:
                    raise ShardError(
                        f"shard {path}: sample {index}'s signature cannot be rebuilt "
                        f"({message_line(exc)}); re-record the corpus"
                    ) from None
                records.append(SignatureRecord(index, entry["repeat"], entry["signature"], full, call, key, sig,
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
            records.append(Sample(index, entry["args"], entry["kwargs"]))
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


def _weights_only_reason(exc: BaseException) -> str:
    """The informative middle of torch's weights_only message, without its advice to turn the
    protection off."""
    paragraphs = [part.strip() for part in str(exc).split("\n\n") if part.strip()]
    reasons = [
        part
        for part in paragraphs
        if not part.startswith(("Weights only load failed", "Check the documentation"))
    ]
    return " ".join(" ".join(reasons).split()) or "unsupported content"


def _placement(map_location: Any) -> Any:
    """For :func:`materialise`: where a tensor recorded on a device goes, as ``torch.load``'s
    ``map_location`` would put it (None: on its recorded device)."""
    if map_location is None:
        return None
    restore = torch.serialization._get_restore_location(map_location)
    return lambda recorded: restore(torch.UntypedStorage(0), recorded).device


def _decode_shard(path: pathlib.Path, content: Any, map_location: Any, version: int = 2) -> dict[str, Any]:
    """A format 2 (or 3) shard's samples, decoded and with their tensors built (ShardError if
    any part is malformed: nothing is read outside the blob, no storage is resized); a format 3
    signature record stays a ``{"signature", "repeat", "full"}`` dict."""
    # Decoding allocates tens of thousands of acyclic objects per shard, and the cyclic garbage
    # collector's passes over them cost about as much as the decoding itself: pause it.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _decode_shard_unpaused(path, content, map_location, version)
    finally:
        if enabled:
            gc.enable()


def _decode_shard_unpaused(path: pathlib.Path, content: Any, map_location: Any, version: int) -> dict[str, Any]:
    if not isinstance(content, dict) or content.get("format") != FORMAT:
        raise ShardError(f"shard {path} is not a {FORMAT} shard (no 'format': {FORMAT!r} entry)")
    if content.get("format_version") != version:
        raise ShardError(
            f"shard {path} is not a format {version} shard, as the manifest says; re-record the corpus"
        )
    blob = content.get("blob")
    if (
        type(blob) is not torch.Tensor
        or blob.dtype != torch.uint8
        or blob.dim() != 1
        or not blob.is_contiguous()
    ):
        raise ShardError(f"shard {path} has no 'blob' (a 1-D uint8 tensor)")
    index = content.get("index")
    if version >= 3:
        index = _inflate(index)
    try:
        index = json.loads(index) if type(index) is str else None
    except (ValueError, RecursionError):
        index = None
    if type(index) is not dict:
        raise ShardError(
            f"shard {path} has no 'index' (JSON text holding segments and samples"
            + (", deflated into a uint8 tensor)" if version >= 3 else ")")
        )
    segments = index.get("segments")
    size = blob.numel()
    if type(segments) is not list or not all(
        type(segment) is list
        and len(segment) == 2
        and type(segment[0]) is int
        and type(segment[1]) is int
        and 0 <= segment[0] <= size
        and 0 <= segment[1] <= size - segment[0]
        for segment in segments
    ):
        raise ShardError(
            f"shard {path}: 'segments' must list [byte_start, byte_length] pairs within the "
            f"blob ({size} bytes)"
        )
    entries = index.get("samples")
    if type(entries) is not list:
        raise ShardError(f"shard {path} has no 'samples' list")
    blob_bytes = memoryview(blob.numpy())
    restore = torch.serialization._get_restore_location(map_location)
    # torch.load's restore_location, skipped for the common case it would not change.
    cpu_stays = map_location is None or map_location in ("cpu", torch.device("cpu"))
    # Segment number -> (its own storage, on its device; recorded location), built on first use.
    storages: list[tuple[Any, str] | None] = [None] * len(segments)

    def bad(value: Any, why: str) -> ShardError:
        return ShardError(
            f"shard {path} has a malformed value ({why}): {str(value)[:120]}; "
            "the shard was modified after recording: re-record the corpus"
        )

    def tensor(record: list) -> torch.Tensor:
        if len(record) != 8:
            raise bad(record, "a tensor record has 8 fields")
        _, number, offset, shape, stride, dtype_text, requires_grad, location = record
        if type(number) is not int or not 0 <= number < len(segments):
            raise bad(record, "no such segment")
        if type(shape) is not list or type(stride) is not list or len(shape) != len(stride):
            raise bad(record, "shape and stride must be lists of one length")
        for value in (offset, *shape, *stride):
            if type(value) is not int or not 0 <= value < _MAX_INDEX:
                raise bad(record, "offsets, sizes and strides must be non-negative ints")
        dtype = DTYPES.get(dtype_text) if type(dtype_text) is str else None
        if dtype is None:
            raise bad(record, "unknown dtype")
        if type(requires_grad) is not bool or type(location) is not str:
            raise bad(record, "requires_grad must be a bool, device a str")
        start, length = segments[number]
        if 0 not in shape:
            last = offset
            for n, s in zip(shape, stride):
                last += (n - 1) * s
            if (last + 1) * dtype.itemsize > length:
                raise bad(record, f"elements beyond its segment of {length} bytes")
        built = storages[number]
        if built is None:
            # Its own storage (a copy), as many bytes as the recorded one.
            storage = torch.UntypedStorage.from_buffer(
                blob_bytes[start : start + length], byte_order="native", dtype=torch.uint8
            )
            try:
                if not (location == "cpu" and cpu_stays):
                    storage = restore(storage, location)
            except Exception as exc:
                raise bad(record, f"device {location!r}: {message_line(exc)}") from None
            built = storages[number] = (storage, location)
        elif built[1] != location:
            raise bad(record, "one segment on two devices")
        storage = built[0]
        try:
            result = torch.empty(0, dtype=dtype, device=storage.device).set_(
                storage, offset, shape, stride
            )
            if requires_grad:
                result.requires_grad_()
        except Exception as exc:  # an impossible size, requires_grad on an integer dtype
            raise bad(record, message_line(exc)) from None
        return result

    def signature_record(entry: dict) -> dict[str, Any]:
        # The signature stays a JSON array here: the reader checks it (Corpus._match).
        if sorted(entry) != ["full", "repeat", "signature"]:
            raise bad(entry, "a signature record holds signature, repeat and full")
        repeat, full = entry["repeat"], entry["full"]
        if type(repeat) is not int or not 1 <= repeat < _MAX_INDEX:
            raise bad(entry, "repeat is a positive int")
        if full is not None and (type(full) is not int or full < 0):
            raise bad(entry, "full is a sample index or null")
        if type(entry["signature"]) is not list:
            raise bad(entry, "not a signature: a signature is a JSON array")
        return entry

    def decode(value: Any) -> Any:
        if type(value) is not list:
            if type(value) is dict:
                raise bad(value, "a JSON object where a tagged value belongs")
            return value  # None, bool, int, float, str
        tag = value[0] if value else None
        if tag == "T":
            return tensor(value)
        if tag == "d":
            if len(value) % 2 == 0:
                raise bad(value, "a dict needs key, value pairs")
            keys = value[1::2]
            for key in keys:
                if type(key) is not str and type(key) is not int:
                    raise bad(value, "dict keys are str or int")
            return dict(zip(keys, map(decode, value[2::2])))
        if tag == "t":
            return tuple(map(decode, value[1:]))
        if tag == "l":
            return list(map(decode, value[1:]))
        if tag == "c":
            if len(value) != 3 or type(value[1]) is not float or type(value[2]) is not float:
                raise bad(value, "a complex is two floats")
            return complex(value[1], value[2])
        if tag == "y":
            if len(value) != 2 or type(value[1]) is not str or value[1] not in DTYPES:
                raise bad(value, "unknown dtype")
            return DTYPES[value[1]]
        if tag == "v":
            try:
                if len(value) != 2 or type(value[1]) is not str:
                    raise ValueError(value)
                return torch.device(value[1])
            except (RuntimeError, ValueError):
                raise bad(value, "not a device") from None
        raise bad(value, f"unknown tag {tag!r}")

    samples: list[dict[str, Any]] = []
    for entry in entries:
        if version >= 3 and type(entry) is dict:
            samples.append(signature_record(entry))
            continue
        if type(entry) is not list or len(entry) != 2:
            raise bad(entry, "a sample is an [args, kwargs] pair")
        try:
            args, kwargs = decode(entry[0]), decode(entry[1])
        except RecursionError:
            raise bad(entry, "nested too deeply") from None
        samples.append({"args": args, "kwargs": kwargs})
    return {"format": FORMAT, "samples": samples}


def _inflate(index: Any) -> str | None:
    """A format 3 shard's index: JSON text deflated into a 1-D uint8 tensor (None when it is
    not one, or would inflate past MAX_INDEX_BYTES)."""
    if type(index) is not torch.Tensor or index.dtype != torch.uint8 or index.dim() != 1:
        return None
    inflater = zlib.decompressobj()
    try:
        text = inflater.decompress(index.contiguous().numpy().tobytes(), MAX_INDEX_BYTES)
        if inflater.unconsumed_tail or not inflater.eof:
            return None
        return text.decode()
    except (zlib.error, UnicodeDecodeError):
        return None


def _corpus_directory(directory: str | os.PathLike[str]) -> pathlib.Path:
    path = pathlib.Path(directory)
    if not path.exists():
        raise CorpusError(f"corpus directory {path} does not exist; {_CORPUS_LAYOUT}")
    if not path.is_dir():
        raise CorpusError(f"{path} is not a directory; {_CORPUS_LAYOUT}")
    if not (path / MANIFEST_NAME).is_file():
        raise CorpusError(f"{path} has no {MANIFEST_NAME}, so it is not a corpus; {_CORPUS_LAYOUT}")
    return path


def read_manifest(directory: str | os.PathLike[str]) -> Manifest:
    """Read and validate ``DIRECTORY/corpus.json``; no shard is opened.

    Raises ``CorpusError`` when the directory or manifest is missing, ``ManifestError`` naming
    the field when the manifest is malformed.
    """
    path = _corpus_directory(directory) / MANIFEST_NAME
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{path} is not valid JSON ({exc}); re-record the corpus") from None
    return _parse_manifest(path, raw)


_JSON_NAMES = {str: "string", int: "integer", dict: "object", list: "array"}


def _field(path: pathlib.Path, raw: dict, name: str, kind: type, where: str = "") -> Any:
    label = f"{where}{name}"
    if name not in raw:
        raise ManifestError(f"{path} misses the field {label!r}; re-record the corpus")
    value = raw[name]
    # bool is an int subclass; the manifest never means one for the other.
    if type(value) is not kind:
        raise ManifestError(
            f"{path}: field {label!r} must be a JSON {_JSON_NAMES[kind]}, "
            f"got {json.dumps(value)[:60]}; fix the manifest or re-record the corpus"
        )
    return value


def _parse_manifest(path: pathlib.Path, raw: Any) -> Manifest:
    if not isinstance(raw, dict):
        raise ManifestError(f"{path} must hold a JSON object; re-record the corpus")
    fmt = _field(path, raw, "format", str)
    if fmt != FORMAT:
        raise ManifestError(
            f"{path}: field 'format' is {fmt!r}, expected {FORMAT!r}; "
            "this is not a guardscope corpus"
        )
    version = _field(path, raw, "format_version", int)
    if version not in READ_VERSIONS:
        advice = "upgrade guardscope" if version > FORMAT_VERSION else "re-record the corpus"
        raise ManifestError(
            f"{path}: field 'format_version' is {version}, this guardscope reads versions "
            f"{', '.join(map(str, READ_VERSIONS))}; {advice}"
        )
    model = _field(path, raw, "model", str)
    try:
        check_model_spec(model)
    except ModelSpecError as exc:
        raise ManifestError(f"{path}: field 'model': {exc}") from None
    samples = _field(path, raw, "samples", int)
    shards = []
    expected_first = 0
    for position, entry in enumerate(_field(path, raw, "shards", list)):
        where = f"shards[{position}]."
        if not isinstance(entry, dict):
            raise ManifestError(f"{path}: field 'shards[{position}]' must be a JSON object")
        shard = ShardInfo(
            file=_field(path, entry, "file", str, where),
            first=_field(path, entry, "first", int, where),
            samples=_field(path, entry, "samples", int, where),
            sha256=_field(path, entry, "sha256", str, where),
        )
        if not _SHARD_NAME.fullmatch(shard.file):
            raise ManifestError(
                f"{path}: field '{where}file' is {shard.file!r}, not a shard-NNNNN.pt name"
            )
        if shard.first != expected_first or shard.samples < 1:
            raise ManifestError(
                f"{path}: field '{where}first'/'{where}samples' ({shard.first}, {shard.samples}) "
                f"do not continue the previous shards (next sample is {expected_first}); "
                "re-record the corpus"
            )
        if not _SHA256.fullmatch(shard.sha256):
            raise ManifestError(f"{path}: field '{where}sha256' is not 64 lowercase hex digits")
        shards.append(shard)
        expected_first += shard.samples
    if samples != expected_first:
        raise ManifestError(
            f"{path}: field 'samples' is {samples} but the shards hold {expected_first}; "
            "re-record the corpus"
        )
    return Manifest(
        format_version=version,
        model=model,
        compile=_field(path, raw, "compile", dict),
        torch_version=_field(path, raw, "torch_version", str),
        device=_field(path, raw, "device", str),
        samples=samples,
        shards=tuple(shards),
    )


def load_corpus(directory: str | os.PathLike[str], *, map_location: Any = None) -> Corpus:
    """Open a corpus directory: read and validate its manifest; shards load as they are used.

    ``map_location`` is passed to ``torch.load`` (e.g. ``"cpu"`` to read a CUDA recording on a
    machine without a GPU; views and strides are kept).

    Example::

        corpus = load_corpus("samples/gnn/corpus")
        for sample in corpus:
            ...
    """
    path = _corpus_directory(directory)
    return Corpus(path, read_manifest(path), map_location=map_location)
