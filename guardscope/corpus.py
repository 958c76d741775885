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
      "format_version": 1,
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

A shard is ``torch.save({"format": "guardscope-corpus", "samples": [{"args": (...),
"kwargs": {...}}, ...]})`` and is only ever read with ``torch.load(..., weights_only=True)``
after its SHA-256 is checked against the manifest: reading a corpus never executes code.

What a sample may hold, and what survives the round trip:

* tensors (strided layout, plain ``torch.Tensor``): shape, strides (zero strides of expanded
  or ``empty_strided`` tensors included), storage offset, dtype, device, ``requires_grad``, and
  aliasing: tensors that share storage in one sample still share it when loaded, so a view and
  its base keep sharing one storage at their offsets. A view is stored with its whole base
  storage; ``torch.save`` does not keep the autograd view relation (``_base``), only the shared
  storage. A tensor with a ``grad_fn`` is stored detached, keeping ``requires_grad=True``; the
  autograd graph that produced it is not recorded. Python attributes on tensors, Dynamo's
  ``mark_dynamic``/``mark_unbacked`` marks included, are not recorded: marking is replay
  configuration, not data;
* ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``torch.dtype``,
  ``torch.device``;
* ``list``, ``tuple`` and ``dict`` (keys ``str`` or ``int``) of these, nested; tuples stay
  tuples, lists stay lists, dict order is kept.

Anything else (an arbitrary object, a lambda, a set, a tensor subclass, a sparse tensor) is
refused by :meth:`CorpusWriter.add` with a :class:`~guardscope.errors.SampleError` naming
where it is, e.g. ``kwargs['d'][2]``.

Output is deterministic: the same samples give byte-identical shards and manifest. (Shards are
serialized in memory: ``torch.save`` to a *path* names the archive's inner folder after the
file, and the atomic write goes through a temporary file name.)

Recording::

    from guardscope.corpus import CorpusWriter

    with CorpusWriter("corpus", model="myapp.model:build", compile={"dynamic": True}) as writer:
        for request in requests:
            writer.add(**request)

Reading::

    from guardscope.corpus import load_corpus

    corpus = load_corpus("corpus")
    for sample in corpus:
        model(*sample.args, **sample.kwargs)
"""

from __future__ import annotations

import bisect
import copy
import hashlib
import io
import json
import os
import pathlib
import pickle
import re
import secrets
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from .errors import CorpusError, ManifestError, ModelSpecError, SampleError, ShardError
from .model import Sample
from .modelspec import split_spec

FORMAT = "guardscope-corpus"
FORMAT_VERSION = 1
MANIFEST_NAME = "corpus.json"

# What a corpus directory holds, for error messages that say what was expected.
_CORPUS_LAYOUT = (
    f"a corpus directory holds {MANIFEST_NAME} (the manifest) and shard-NNNNN.pt files, "
    "as written by guardscope.CorpusWriter"
)
_SHARD_NAME = re.compile(r"shard-\d{5,}\.pt")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SCALAR_TYPES = (type(None), bool, int, float, complex, str, torch.dtype, torch.device)


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
    imported); ``compile`` the production ``torch.compile`` options (JSON values). The
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
    ) -> None:
        self.directory = pathlib.Path(directory)
        self.model = check_model_spec(model)
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
        self.directory.mkdir(parents=True, exist_ok=True)
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

    def add(self, *args: Any, **kwargs: Any) -> int:
        """Record one forward call's arguments; returns the sample's index.

        Raises ``SampleError`` (nothing recorded) if an argument holds a value the format cannot
        store, naming where: ``args[1]``, ``kwargs['d'][2]``.
        """
        if self._closed:
            raise CorpusError(f"the writer for {self.directory} is closed; open a new CorpusWriter")
        devices: set[str] = set()
        _check_value(args, "args", devices, set())
        _check_value(kwargs, "kwargs", devices, set())
        # One deep copy of the whole call keeps aliasing between its tensors and snapshots them.
        args, kwargs = copy.deepcopy(_plain((args, kwargs)))
        self._pending.append({"args": args, "kwargs": kwargs})
        self._devices |= devices
        index = self._count
        self._count += 1
        if len(self._pending) == self.shard_size:
            self._flush()
        return index

    def close(self) -> None:
        """Write the last, partial shard and the final manifest. Calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._pending:
            self._flush()

    def _flush(self) -> None:
        buffer = io.BytesIO()
        torch.save({"format": FORMAT, "samples": self._pending}, buffer)
        data = buffer.getvalue()
        name = f"shard-{len(self._shards):05d}.pt"
        _atomic_write(self.directory / name, data)
        first = self._shards[-1].first + self._shards[-1].samples if self._shards else 0
        self._shards.append(
            ShardInfo(name, first, len(self._pending), hashlib.sha256(data).hexdigest())
        )
        self._pending = []
        self._write_manifest()

    def _write_manifest(self) -> None:
        manifest = Manifest(
            format_version=FORMAT_VERSION,
            model=self.model,
            compile=self.compile,
            torch_version=str(torch.__version__),
            device=",".join(sorted(self._devices)) or "cpu",
            samples=sum(shard.samples for shard in self._shards),
            shards=tuple(self._shards),
        )
        text = json.dumps(manifest.to_json(), sort_keys=True, indent=2) + "\n"
        _atomic_write(self.directory / MANIFEST_NAME, text.encode())


def _check_value(value: Any, path: str, devices: set[str], active: set[int]) -> None:
    """Raise SampleError unless ``value`` is storable; collect tensor device types."""
    kind = type(value)
    if kind is torch.Tensor:
        if value.layout != torch.strided:
            raise SampleError(
                f"{path} is a {value.layout} tensor; a corpus stores strided (dense) tensors "
                "only: pass value.to_dense()"
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
        return value.detach().requires_grad_(value.requires_grad)
    if type(value) is list:
        return [_plain(item) for item in value]
    if type(value) is tuple:
        return tuple(_plain(item) for item in value)
    if type(value) is dict:
        return {key: _plain(item) for key, item in value.items()}
    return value


def _atomic_write(path: pathlib.Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, then rename over ``path``."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    # os.open with 0o666 lets the umask decide permissions, as for any file the user writes
    # (tempfile.mkstemp would leave them at 0o600).
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        pathlib.Path(temporary).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------------------------
# Reading


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

    def sample(self, index: int) -> Sample:
        """Sample ``index`` (negative counts from the end); loads only the shard holding it."""
        if type(index) is not int:
            raise TypeError(f"sample index must be an int, got {type(index).__qualname__}")
        position = index + len(self) if index < 0 else index
        if not 0 <= position < len(self):
            raise IndexError(f"sample {index} is out of range: the corpus has {len(self)} samples")
        shard = self.manifest.shards[bisect.bisect_right(self._firsts, position) - 1]
        return self.load_shard(shard)[position - shard.first]

    def load_shard(self, shard: ShardInfo) -> list[Sample]:
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
        try:
            content = torch.load(
                io.BytesIO(data), map_location=self._map_location, weights_only=True
            )
        except pickle.UnpicklingError as exc:
            raise ShardError(
                f"shard {path} was refused by safe loading (torch.load weights_only=True): "
                f"{_weights_only_reason(exc)}. A corpus holds only tensors and plain Python "
                "values; nothing in this shard was run. Re-record it with guardscope.CorpusWriter"
            ) from None
        except Exception as exc:  # torch raises RuntimeError and others for corrupt archives
            raise ShardError(f"shard {path} cannot be loaded: {_first_line(exc)}") from None
        return _samples_from_shard(path, shard, content)


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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _samples_from_shard(path: pathlib.Path, shard: ShardInfo, content: Any) -> list[Sample]:
    if not isinstance(content, dict) or content.get("format") != FORMAT:
        raise ShardError(f"shard {path} is not a {FORMAT} shard (no 'format': {FORMAT!r} entry)")
    entries = content.get("samples")
    if not isinstance(entries, list):
        raise ShardError(f"shard {path} has no 'samples' list")
    if len(entries) != shard.samples:
        raise ShardError(
            f"shard {path} holds {len(entries)} samples but the manifest lists {shard.samples}; "
            "the corpus is inconsistent: re-record it"
        )
    samples = []
    for offset, entry in enumerate(entries):
        if (
            not isinstance(entry, dict)
            or type(entry.get("args")) is not tuple
            or type(entry.get("kwargs")) is not dict
        ):
            raise ShardError(
                f"shard {path}: sample {shard.first + offset} is not an args/kwargs pair"
            )
        samples.append(Sample(shard.first + offset, entry["args"], entry["kwargs"]))
    return samples


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
    if version != FORMAT_VERSION:
        advice = "upgrade guardscope" if version > FORMAT_VERSION else "re-record the corpus"
        raise ManifestError(
            f"{path}: field 'format_version' is {version}, this guardscope reads version "
            f"{FORMAT_VERSION}; {advice}"
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
