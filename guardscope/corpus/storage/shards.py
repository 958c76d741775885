"""A shard's bytes: one ``torch.save`` archive, encoded from samples and decoded safely (every
record validated before a tensor is built on it). The format is specified in
:mod:`guardscope.corpus.storage.format`."""

from __future__ import annotations

import gc
import hashlib
import io
import json
import pathlib
import pickle
import zipfile
import zlib
from collections.abc import Callable
from typing import Any

import torch

from ...errors import ShardError
from ...text import message_line
from ...torch_compat import DTYPES, dtype_name
from .format import FORMAT, FORMAT_VERSION, STRUCTURED_FORMAT_VERSION
from ..signatures.signature import signature_to_json
from ..values.structured import Structured

# The largest shard index (format 3: inflated) a reader accepts.
MAX_INDEX_BYTES = 1 << 30
# Placeholder numbers (offsets, sizes, strides) must stay below this: no int64 overflow.
_MAX_INDEX = 2**62


def encode_shard(samples: list[dict[str, Any]], version: int = FORMAT_VERSION) -> dict[str, Any]:
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
        if kind is Structured:
            return ["o", value.name, encode(value.state)]
        return value  # None, bool, int, float, str: JSON values

    # A shard's signature records repeat a few signatures (a recorder hands the writer one object
    # per distinct call): each is converted to JSON once, by identity.
    as_json: dict[int, list] = {}

    def signature_json(sig: tuple) -> list:
        converted = as_json.get(id(sig))
        if converted is None:
            converted = as_json[id(sig)] = signature_to_json(sig)
        return converted

    encoded = [
        {"signature": signature_json(s["signature"]), "repeat": s["repeat"], "full": s["full"]}
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


def read_shard(path: pathlib.Path, sha256: str, version: int, map_location: Any = None,
               prematch: Any = None) -> Any:
    """A shard file's content, its SHA-256 checked against the manifest's and loaded with
    ``torch.load(weights_only=True)``; format 2 and 3 shards decoded (:func:`decode_shard`).
    ``ShardError`` saying what is wrong and what to do."""
    data = read_checked(path, sha256)
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise ShardError(f"shard {path} is not a torch.save archive (truncated or not a shard)")
    try:
        content = torch.load(
            io.BytesIO(data),
            # Format 2 holds one CPU blob; map_location applies to the rebuilt storages.
            map_location=map_location if version == 1 else "cpu",
            weights_only=True,
        )
    except pickle.UnpicklingError as exc:
        raise ShardError(
            f"shard {path} was refused by safe loading (torch.load weights_only=True): "
            f"{weights_only_reason(exc)}. A corpus holds only tensors and plain Python "
            "values; nothing in this shard was run. Re-record it with guardscope.CorpusWriter"
        ) from None
    except Exception as exc:  # torch raises RuntimeError and others for corrupt archives
        raise ShardError(f"shard {path} cannot be loaded: {message_line(exc)}") from None
    if version != 1:
        content = decode_shard(path, content, map_location, version, prematch)
    return content


def read_checked(path: pathlib.Path, sha256: str) -> bytes:
    """A shard file's bytes, its SHA-256 checked against the manifest's: ``ShardError`` saying
    what is wrong and what to do."""
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
    if digest != sha256:
        raise ShardError(
            f"shard {path} fails its checksum (sha256 {digest[:12]}..., manifest says "
            f"{sha256[:12]}...; {len(data)} bytes): it was truncated or modified after "
            "recording; restore it or re-record the corpus"
        )
    return data


def weights_only_reason(exc: BaseException) -> str:
    """The informative middle of torch's weights_only message, without its advice to turn the
    protection off."""
    paragraphs = [part.strip() for part in str(exc).split("\n\n") if part.strip()]
    reasons = [
        part
        for part in paragraphs
        if not part.startswith(("Weights only load failed", "Check the documentation"))
    ]
    return " ".join(" ".join(reasons).split()) or "unsupported content"


def decode_shard(path: pathlib.Path, content: Any, map_location: Any, version: int = 2,
                 prematch: Any = None) -> dict[str, Any]:
    """A format 2 (or 3) shard's samples, decoded and with their tensors built (ShardError if
    any part is malformed: nothing is read outside the blob, no storage is resized); a format 3
    signature record stays a ``{"signature", "repeat", "full"}`` dict.

    ``prematch(text)``, when given, reads signature records straight from a format 3 index's
    text (most of that text, and of the time parsing it): it returns the text with some runs of
    consecutive signature records each replaced by one placeholder string in the samples list,
    the placeholders and what stands for each, in order (:class:`guardscope.corpus.reader.Corpus`
    matches its call templates). The samples then hold what stands for each run where its
    placeholder is, when the placeholders are exactly the samples list's strings, in order;
    otherwise the text is parsed whole as without it."""
    # Decoding allocates tens of thousands of acyclic objects per shard, and the cyclic garbage
    # collector's passes over them cost about as much as the decoding itself: pause it.
    enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            return _decode_shard_unpaused(path, content, map_location, version, prematch)
        except ShardError:
            if prematch is None:
                raise
            # Said of the shard as written, not of its text with placeholders.
            return _decode_shard_unpaused(path, content, map_location, version)
    finally:
        if enabled:
            gc.enable()


def _placed(index: Any, names: list[str]) -> bool:
    """Whether the parsed index holds the placeholder ``names`` exactly as the strings of its
    samples list, in order (a shard's own samples are lists and objects, never strings)."""
    entries = index.get("samples") if type(index) is dict else None
    if type(entries) is not list:
        return False
    return [entry for entry in entries if type(entry) is str] == names


def _decode_shard_unpaused(path: pathlib.Path, content: Any, map_location: Any, version: int,
                           prematch: Any = None) -> dict[str, Any]:
    version, blob = _checked_blob(path, content, version)
    index, matched = _parsed_index(path, content, version, prematch)
    segments = index.get("segments")
    _check_segments(path, segments, blob.numel())
    entries = index.get("samples")
    if type(entries) is not list:
        raise ShardError(f"shard {path} has no 'samples' list")
    decode, stored = _value_decoder(path, _tensor_builder(path, segments, blob, map_location))
    runs = iter(matched)  # what stands for each placeholder (_placed checked them: the strings)
    samples: list[Any] = []
    for entry in entries:
        if matched and type(entry) is str:
            samples.append(next(runs))
            continue
        if version >= 3 and type(entry) is dict:
            samples.append(_signature_record(path, entry))
            continue
        if type(entry) is not list or len(entry) != 2:
            raise _malformed(path, entry, "a sample is an [args, kwargs] pair")
        try:
            args, kwargs = decode(entry[0]), decode(entry[1])
        except RecursionError:
            raise _malformed(path, entry, "nested too deeply") from None
        samples.append({"args": args, "kwargs": kwargs})
    return {"format": FORMAT, "samples": samples, "structured": stored[0]}


def _checked_blob(path: pathlib.Path, content: Any, version: int) -> tuple[int, torch.Tensor]:
    """The shard's own format version (one the manifest's ``version`` allows) and its blob of
    storage bytes, checked to be a 1-D contiguous uint8 tensor."""
    if not isinstance(content, dict) or content.get("format") != FORMAT:
        raise ShardError(f"shard {path} is not a {FORMAT} shard (no 'format': {FORMAT!r} entry)")
    # A format 4 corpus's shards written before its first stored object are format 2 or 3.
    if content.get("format_version") != version and not (
            version == STRUCTURED_FORMAT_VERSION and content.get("format_version") in (2, 3)):
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
    return content["format_version"], blob


def _parsed_index(path: pathlib.Path, content: Any, version: int, prematch: Any) -> tuple[dict, list[Any]]:
    """The shard's index parsed (format 3: inflated first), and what stands for each placeholder
    ``prematch`` put in its text (none when it put none, or put one where no signature belongs)."""
    index = content.get("index")
    if version >= 3:
        index = _inflate(index)
    matched: list[Any] = []
    if prematch is not None and version >= 3 and type(index) is str:
        reduced, names, matched = prematch(index)
        if matched:
            try:
                parsed = json.loads(reduced)
            except (ValueError, RecursionError):
                parsed = None
            if _placed(parsed, names):
                index = parsed
            else:  # a placeholder where no signature belongs: the text as it is
                matched = []
    try:
        index = json.loads(index) if type(index) is str else index
    except (ValueError, RecursionError):
        index = None
    if type(index) is not dict:
        raise ShardError(
            f"shard {path} has no 'index' (JSON text holding segments and samples"
            + (", deflated into a uint8 tensor)" if version >= 3 else ")")
        )
    return index, matched


def _check_segments(path: pathlib.Path, segments: Any, size: int) -> None:
    """``ShardError`` unless ``segments`` lists [byte_start, byte_length] pairs within the blob."""
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


def _malformed(path: pathlib.Path, value: Any, why: str) -> ShardError:
    return ShardError(
        f"shard {path} has a malformed value ({why}): {str(value)[:120]}; "
        "the shard was modified after recording: re-record the corpus"
    )


def _signature_record(path: pathlib.Path, entry: dict) -> dict[str, Any]:
    """A signature record, checked; the signature stays a JSON array here: the reader checks it
    (``Corpus._match``)."""
    if sorted(entry) != ["full", "repeat", "signature"]:
        raise _malformed(path, entry, "a signature record holds signature, repeat and full")
    repeat, full = entry["repeat"], entry["full"]
    if type(repeat) is not int or not 1 <= repeat < _MAX_INDEX:
        raise _malformed(path, entry, "repeat is a positive int")
    if full is not None and (type(full) is not int or full < 0):
        raise _malformed(path, entry, "full is a sample index or null")
    if type(entry["signature"]) is not list:
        raise _malformed(path, entry, "not a signature: a signature is a JSON array")
    return entry


def _tensor_builder(path: pathlib.Path, segments: list, blob: torch.Tensor,
                    map_location: Any) -> Callable[[list], torch.Tensor]:
    """A function building the tensor of a shard's tensor record, each field checked, on its own
    storage: a copy of its segment of ``blob``, made once per segment and restored to its device
    as ``torch.load`` would (``map_location``)."""
    blob_bytes = memoryview(blob.numpy())
    restore = torch.serialization._get_restore_location(map_location)
    # torch.load's restore_location, skipped for the common case it would not change.
    cpu_stays = map_location is None or map_location in ("cpu", torch.device("cpu"))
    # Segment number -> (its own storage, on its device; recorded location), built on first use.
    storages: list[tuple[Any, str] | None] = [None] * len(segments)

    def tensor(record: list) -> torch.Tensor:
        if len(record) != 8:
            raise _malformed(path, record, "a tensor record has 8 fields")
        _, number, offset, shape, stride, dtype_text, requires_grad, location = record
        if type(number) is not int or not 0 <= number < len(segments):
            raise _malformed(path, record, "no such segment")
        if type(shape) is not list or type(stride) is not list or len(shape) != len(stride):
            raise _malformed(path, record, "shape and stride must be lists of one length")
        for value in (offset, *shape, *stride):
            if type(value) is not int or not 0 <= value < _MAX_INDEX:
                raise _malformed(path, record, "offsets, sizes and strides must be non-negative ints")
        dtype = DTYPES.get(dtype_text) if type(dtype_text) is str else None
        if dtype is None:
            raise _malformed(path, record, "unknown dtype")
        if type(requires_grad) is not bool or type(location) is not str:
            raise _malformed(path, record, "requires_grad must be a bool, device a str")
        start, length = segments[number]
        if 0 not in shape:
            last = offset
            for n, s in zip(shape, stride):
                last += (n - 1) * s
            if (last + 1) * dtype.itemsize > length:
                raise _malformed(path, record, f"elements beyond its segment of {length} bytes")
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
                raise _malformed(path, record, f"device {location!r}: {message_line(exc)}") from None
            built = storages[number] = (storage, location)
        elif built[1] != location:
            raise _malformed(path, record, "one segment on two devices")
        storage = built[0]
        try:
            result = torch.empty(0, dtype=dtype, device=storage.device).set_(
                storage, offset, shape, stride
            )
            if requires_grad:
                result.requires_grad_()
        except Exception as exc:  # an impossible size, requires_grad on an integer dtype
            raise _malformed(path, record, message_line(exc)) from None
        return result

    return tensor


def _value_decoder(path: pathlib.Path,
                   tensor: Callable[[list], torch.Tensor]) -> tuple[Callable[[Any], Any], list[bool]]:
    """A function decoding a sample's tagged JSON value (its tensors built by ``tensor``), and a
    one-item list that turns true once a decoded value holds a stored object (the reader rebuilds
    those)."""
    stored = [False]

    def decode(value: Any) -> Any:
        if type(value) is not list:
            if type(value) is dict:
                raise _malformed(path, value, "a JSON object where a tagged value belongs")
            return value  # None, bool, int, float, str
        tag = value[0] if value else None
        if tag == "T":
            return tensor(value)
        if tag == "d":
            if len(value) % 2 == 0:
                raise _malformed(path, value, "a dict needs key, value pairs")
            keys = value[1::2]
            for key in keys:
                if type(key) is not str and type(key) is not int:
                    raise _malformed(path, value, "dict keys are str or int")
            return dict(zip(keys, map(decode, value[2::2])))
        if tag == "t":
            return tuple(map(decode, value[1:]))
        if tag == "l":
            return list(map(decode, value[1:]))
        if tag == "c":
            if len(value) != 3 or type(value[1]) is not float or type(value[2]) is not float:
                raise _malformed(path, value, "a complex is two floats")
            return complex(value[1], value[2])
        if tag == "y":
            if len(value) != 2 or type(value[1]) is not str or value[1] not in DTYPES:
                raise _malformed(path, value, "unknown dtype")
            return DTYPES[value[1]]
        if tag == "v":
            try:
                if len(value) != 2 or type(value[1]) is not str:
                    raise ValueError(value)
                return torch.device(value[1])
            except (RuntimeError, ValueError):
                raise _malformed(path, value, "not a device") from None
        if tag == "o":
            # An object stored by its codec: kept lowered here; the reader rebuilds it through
            # the registry (corpus.values.structured), which resolves the name without importing it.
            if len(value) != 3 or type(value[1]) is not str:
                raise _malformed(path, value, "a stored object is a type name and a state")
            stored[0] = True
            return Structured(value[1], decode(value[2]))
        raise _malformed(path, value, f"unknown tag {tag!r}")

    return decode, stored


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
