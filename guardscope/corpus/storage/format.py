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
recorded tensors, comma-joined, ``"cpu"`` when there are none) describe the recording. An optional
``method`` (any format version) names the model's method production compiled, ``"forward"`` for
``torch.compile(model.forward)``: the replay compiles that bound method of the spec's model.
Absent, the spec's result itself is compiled. An optional ``recorded_model`` (written by a
writer or recorder given the served model, ``recorded_from=``) is the shape of that model's
weights, never their values::

    "recorded_model": {"class": "GPT2LMHeadModel", "tensors": 148, "elements": 1234567,
                       "dtypes": ["float32"], "sha256": "5be1..."}

(``sha256`` digests each parameter's and buffer's name, size and dtype); an analysis that
builds a model of other weights says so (:mod:`guardscope.corpus.storage.weights`). An optional
``dynamo_config`` holds the Dynamo settings production ran with that differ from torch's defaults
(read where the calls were recorded; written only when some differ)::

    "dynamo_config": {"automatic_dynamic_shapes": false, "recompile_limit": 16}

The analysis models the recompile limits (``recompile_limit``, ``accumulated_recompile_limit``,
``fail_on_recompile_limit_hit``; ``compile`` may also hold ``recompile_limit``, torch 2.13's
per-call ``torch.compile(recompile_limit=N)``; the recorder's ``wrap()`` also writes
``inductor_options``, the ``options=`` beyond the mode's, and ``isolate_recompiles: true``, both
kept for the record in the catalog's ``production``) and replays under the settings that change guards
(:data:`guardscope.torch_compat.DYNAMO_SETTINGS`). An optional ``grad_mode`` says which autograd
mode production served the calls under (``"inference_mode"``, ``"no_grad"`` or ``"grad"``: grad
enabled), read by the traffic recorders on the serving thread; Dynamo guards on it, so the analysis
replays under it (``--grad-mode`` for a corpus that does not say; ``inference_mode`` otherwise)::

    "grad_mode": "no_grad"

An optional ``"recording": true`` says the writer was still open when it wrote the manifest: the
calls it holds since its last flush are not on disk yet (``close()`` rewrites the manifest
without it).

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
call's signature (:func:`guardscope.corpus.signatures.signature.signature`, taken with ``inference=False``)
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
arguments shared per call template (:class:`guardscope.corpus.signatures.call_template.CallTemplate`).

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

The modules of this package, by job: ``format`` (this specification, the manifest),
``values`` (what a sample may hold: checks and copies), ``structured`` (values that are not
tensors or plain containers, stored as a registered type name and a state), ``shards`` (a
shard's bytes, encoded and decoded safely), ``writer`` (:class:`CorpusWriter`) and ``reader``
(:class:`Corpus`, :func:`load_corpus`).

Recording::

    from guardscope.corpus import CorpusWriter

    with CorpusWriter("corpus", model="myapp.model:build", compile={"dynamic": True}) as writer:
        for request in requests:
            writer.add(**request)

    # Every request, but tensor data only for the first of each signature, within 64 MiB (format 3):
    with CorpusWriter("corpus", model="myapp.model:build", keep="signatures") as writer:
        ...

Reading::

    from guardscope.corpus import load_corpus

    corpus = load_corpus("corpus")
    for sample in corpus:
        model(*sample.args, **sample.kwargs)
"""

from __future__ import annotations

import json
import keyword
import os
import pathlib
import re
from dataclasses import dataclass
from typing import Any, Callable

from ...errors import CorpusError, ManifestError, ModelSpecError
from ...model import GRAD_MODES
from ..spec import split_spec

FORMAT = "guardscope-corpus"
FORMAT_VERSION = 2
# Written when a corpus keeps signature records (CorpusWriter(keep="signatures")); a corpus of
# full samples stays format 2, so that older guardscope versions read it.
SIGNATURE_FORMAT_VERSION = 3
# Written when a call held an object a codec stores (corpus.values.structured): format 3 plus the "o"
# tag, so that an older guardscope refuses the corpus by its version instead of a shard's tag.
STRUCTURED_FORMAT_VERSION = 4
# Written when signature records go to Parquet traffic logs (CorpusWriter(log="parquet"), the
# TrafficRecorder's default; corpus.traffic_log.parquet): format 4's values, each flush a shard-NNNNN.parquet
# of every call it holds and, for the calls kept in full, a shard-NNNNN.pt data shard beside it.
TRAFFIC_FORMAT_VERSION = 5
# The versions this guardscope reads.
READ_VERSIONS = (1, 2, 3, 4, 5)
KEEP_CHOICES = ("all", "signatures")
MANIFEST_NAME = "corpus.json"

# What a corpus directory holds, for error messages that say what was expected.
_CORPUS_LAYOUT = (
    f"a corpus directory holds {MANIFEST_NAME} (the manifest) and its shards: shard-NNNNN.pt files "
    "(guardscope.CorpusWriter), or a traffic log's shard-NNNNN.parquet files with their "
    "shard-NNNNN.pt data shards (guardscope.runtime.TrafficRecorder, serve(traffic_dir=...))"
)
SHARD_NAME = re.compile(r"shard-\d{5,}\.pt")
LOG_NAME = re.compile(r"shard-\d{5,}\.parquet")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ShardInfo:
    """One shard as listed in the manifest: samples ``first .. first + samples - 1``."""

    file: str
    first: int
    samples: int
    sha256: str
    # Format 5: a traffic log's data shard (the tensors of its calls kept in full), as
    # (file, sha256); None when the flush kept none in full.
    data: tuple[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "first": self.first,
            "samples": self.samples,
            "sha256": self.sha256,
            **({"data": {"file": self.data[0], "sha256": self.data[1]}} if self.data is not None else {}),
        }


_PRINT_KEYS = ("class", "tensors", "elements", "dtypes", "sha256")


@dataclass(frozen=True)
class ModelPrint:
    """The shape of a module's weights: what ``"recorded_model"`` in ``corpus.json`` holds."""

    cls: str  # the module's class name, "GPT2LMHeadModel"
    tensors: int  # parameters and buffers
    elements: int
    dtypes: tuple[str, ...]  # sorted, "bfloat16"
    sha256: str  # of every tensor's kind, name, size and dtype, in name order

    def to_json(self) -> dict[str, Any]:
        return {"class": self.cls, "tensors": self.tensors, "elements": self.elements,
                "dtypes": list(self.dtypes), "sha256": self.sha256}

    @classmethod
    def from_json(cls, raw: Any) -> ModelPrint:
        """Read one back; ``ValueError`` saying what is wrong with it."""
        if not isinstance(raw, dict) or sorted(raw) != sorted(_PRINT_KEYS):
            keys = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
            raise ValueError(f"must be an object with exactly the keys {', '.join(_PRINT_KEYS)}, got {keys}")
        if not (isinstance(raw["class"], str) and raw["class"]):  # a class's __name__: any non-empty text
            raise ValueError(f"'class' must be a class name, got {json.dumps(raw['class'])[:60]}")
        for key in ("tensors", "elements"):
            if type(raw[key]) is not int or raw[key] < 0:
                raise ValueError(f"'{key}' must be an integer >= 0, got {json.dumps(raw[key])[:60]}")
        dtypes = raw["dtypes"]
        if not (isinstance(dtypes, list) and all(isinstance(name, str) for name in dtypes)
                and dtypes == sorted(set(dtypes))):
            raise ValueError(f"'dtypes' must be a sorted list of distinct dtype names, got {json.dumps(dtypes)[:60]}")
        if not (isinstance(raw["sha256"], str) and _SHA256.fullmatch(raw["sha256"])):
            raise ValueError("'sha256' must be 64 lowercase hex digits")
        return cls(raw["class"], raw["tensors"], raw["elements"], tuple(dtypes), raw["sha256"])

    def describe(self) -> str:
        """``GPT2LMHeadModel (1,234,567 elements in 148 tensors, float32)``"""
        return (f"{self.cls} ({self.elements:,} elements in {self.tensors:,} tensors, "
                f"{', '.join(self.dtypes) or 'no dtype'})")


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
    # The model's method production compiles (``torch.compile(model.forward)``); None: the model
    # spec's result itself. Written only when set.
    method: str | None = None
    # The shape of the served model's weights (guardscope.corpus.storage.weights), when the recorder
    # was given the model; written only when set.
    recorded_model: ModelPrint | None = None
    # The Dynamo settings production ran with that differ from torch's defaults (recorded where
    # the calls were served); None: not recorded. Written only when some differ.
    dynamo_config: dict[str, Any] | None = None
    # The grad mode production served the calls under (model.GRAD_MODES); None: not recorded.
    grad_mode: str | None = None
    # The writer recording into the corpus was still open when it wrote this manifest: the calls
    # it holds since its last flush are not on disk yet. Written only when set (close() clears it).
    recording: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": self.format_version,
            "model": self.model,
            **({"method": self.method} if self.method is not None else {}),
            **({"recorded_model": self.recorded_model.to_json()} if self.recorded_model is not None else {}),
            **({"dynamo_config": dict(sorted(self.dynamo_config.items()))} if self.dynamo_config else {}),
            **({"grad_mode": self.grad_mode} if self.grad_mode is not None else {}),
            **({"recording": True} if self.recording else {}),
            "compile": self.compile,
            "torch_version": self.torch_version,
            "device": self.device,
            "samples": self.samples,
            "shards": [shard.to_json() for shard in self.shards],
        }


def check_model_spec(spec: object) -> str:
    """Check the shape of a model spec, ``"pkg.mod:attr"`` or ``"path/file.py:attr"``.

    Only the shape: nothing is imported. Returns the spec; raises ``ModelSpecError``.
    """
    split_spec(spec)  # type: ignore[arg-type]
    return spec  # type: ignore[return-value]


def check_method_name(name: object) -> str:
    """A method name as a manifest stores it (``"forward"``): an identifier, not a dunder."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or name.startswith("__"):
        raise ModelSpecError(f"method {name!r} is not a method name such as 'forward'")
    return name


def check_dynamo_config(raw: Any) -> dict[str, Any]:
    """A manifest's ``dynamo_config``: setting names and their values (bool, int or float);
    ``ValueError`` saying what is wrong with it."""
    if not isinstance(raw, dict):
        raise ValueError(f"must be an object of setting names and values, got {type(raw).__name__}")
    for name, value in raw.items():
        if not name.isidentifier():
            raise ValueError(f"names a setting {json.dumps(name)[:60]}, which is not a Dynamo config name")
        if type(value) not in (bool, int, float):
            raise ValueError(f"gives {name} the value {json.dumps(value)[:60]}; a setting is a bool, int or float")
    return dict(raw)


def check_grad_mode(raw: Any) -> str:
    """A manifest's ``grad_mode``; ``ValueError`` saying what is wrong with it."""
    if raw not in GRAD_MODES:
        raise ValueError(f"is {json.dumps(raw)[:60]}; use one of {', '.join(GRAD_MODES)}")
    return str(raw)


def _check_recording(raw: Any) -> bool:
    if raw is not True:
        raise ValueError(f"is {json.dumps(raw)[:60]}; it is true while the writer is open, absent after")
    return True


def corpus_directory(directory: str | os.PathLike[str]) -> pathlib.Path:
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
    path = corpus_directory(directory) / MANIFEST_NAME
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{path} is not valid JSON ({exc}); re-record the corpus") from None
    return _parse_manifest(path, raw)


_JSON_NAMES = {str: "string", int: "integer", dict: "object", list: "array"}


def _optional(path: pathlib.Path, raw: dict, name: str, check: Callable[[Any], Any]) -> Any:
    """An optional manifest field through ``check`` (its ValueError says what is wrong); None when absent."""
    if raw.get(name) is None:
        return None
    try:
        return check(raw[name])
    except ValueError as exc:
        raise ManifestError(f"{path}: field {name!r} {exc}; fix the manifest or re-record the corpus") from None


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
    version = _format_version(path, raw)
    model = _field(path, raw, "model", str)
    try:
        check_model_spec(model)
    except ModelSpecError as exc:
        raise ManifestError(f"{path}: field 'model': {exc}") from None
    method = raw.get("method")
    if method is not None:
        try:
            check_method_name(_field(path, raw, "method", str))
        except ModelSpecError as exc:
            raise ManifestError(f"{path}: field 'method': {exc}") from None
    recorded_model = _optional(path, raw, "recorded_model", ModelPrint.from_json)
    dynamo_config = _optional(path, raw, "dynamo_config", check_dynamo_config)
    grad_mode = _optional(path, raw, "grad_mode", check_grad_mode)
    recording = _optional(path, raw, "recording", _check_recording)
    samples = _field(path, raw, "samples", int)
    shards = []
    expected_first = 0
    for position, entry in enumerate(_field(path, raw, "shards", list)):
        shard = _shard_info(path, entry, position, version, expected_first)
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
        method=method,
        recorded_model=recorded_model,
        dynamo_config=dynamo_config,
        grad_mode=grad_mode,
        recording=bool(recording),
    )


def _format_version(path: pathlib.Path, raw: dict) -> int:
    """The manifest's format version, checked to be a guardscope corpus's and one this release reads."""
    fmt = _field(path, raw, "format", str)
    if fmt != FORMAT:
        raise ManifestError(
            f"{path}: field 'format' is {fmt!r}, expected {FORMAT!r}; "
            "this is not a guardscope corpus"
        )
    version = _field(path, raw, "format_version", int)
    if version not in READ_VERSIONS:
        advice = "upgrade guardscope" if version > max(READ_VERSIONS) else "re-record the corpus"
        raise ManifestError(
            f"{path}: field 'format_version' is {version}, this guardscope reads versions "
            f"{', '.join(map(str, READ_VERSIONS))}; {advice}"
        )
    return version


def _shard_info(path: pathlib.Path, entry: Any, position: int, version: int, expected_first: int) -> ShardInfo:
    """The manifest's shard at ``position``, checked: its file name (a traffic log's from format 5),
    its data shard, its sha256, and its samples continuing the shards before it (``expected_first``)."""
    where = f"shards[{position}]."
    if not isinstance(entry, dict):
        raise ManifestError(f"{path}: field 'shards[{position}]' must be a JSON object")
    data = None
    if entry.get("data") is not None:
        raw_data = _field(path, entry, "data", dict, where)
        data = (_field(path, raw_data, "file", str, f"{where}data."),
                _field(path, raw_data, "sha256", str, f"{where}data."))
        if not SHARD_NAME.fullmatch(data[0]) or not _SHA256.fullmatch(data[1]):
            raise ManifestError(f"{path}: field '{where}data' must name a shard-NNNNN.pt file and its sha256")
    shard = ShardInfo(
        file=_field(path, entry, "file", str, where),
        first=_field(path, entry, "first", int, where),
        samples=_field(path, entry, "samples", int, where),
        sha256=_field(path, entry, "sha256", str, where),
        data=data,
    )
    logs = version >= TRAFFIC_FORMAT_VERSION
    if not (SHARD_NAME.fullmatch(shard.file) or (logs and LOG_NAME.fullmatch(shard.file))):
        raise ManifestError(
            f"{path}: field '{where}file' is {shard.file!r}, not a shard-NNNNN.pt"
            + (" or shard-NNNNN.parquet" if logs else "") + " name"
        )
    if data is not None and not LOG_NAME.fullmatch(shard.file):
        raise ManifestError(f"{path}: field '{where}data' belongs to a traffic log (shard-NNNNN.parquet)")
    if shard.first != expected_first or shard.samples < 1:
        raise ManifestError(
            f"{path}: field '{where}first'/'{where}samples' ({shard.first}, {shard.samples}) "
            f"do not continue the previous shards (next sample is {expected_first}); "
            "re-record the corpus"
        )
    if not _SHA256.fullmatch(shard.sha256):
        raise ManifestError(f"{path}: field '{where}sha256' is not 64 lowercase hex digits")
    return shard
