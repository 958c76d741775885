"""Recording: :class:`CorpusWriter` writes forward calls into a corpus directory (format 2, or
format 3 with signature records); see :mod:`guardscope.corpus.storage.format`."""

from __future__ import annotations

import hashlib
import io
import json
import os
import contextlib
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import torch

from .. import torch_compat
from ..errors import CorpusError, SampleError
from ..files import write_atomic
from ..text import counted, message_line
from .storage.format import (
    FORMAT_VERSION,
    LOG_NAME,
    MANIFEST_NAME,
    SHARD_NAME,
    SIGNATURE_FORMAT_VERSION,
    STRUCTURED_FORMAT_VERSION,
    TRAFFIC_FORMAT_VERSION,
    Manifest,
    ShardInfo,
)
from .traffic_log.files import ROLL_SECONDS, WINDOW_BYTES, LogFiles, roll_bounds
from .traffic_log.tail import FileTail
from .traffic_log.window import LogWindow
from .signatures.materialising import materialise
from .storage.compile_log import COMPILE_LOG
from .storage.requests import REQUESTS_NAME, RequestRuns, check_request
from .storage.shards import encode_shard
from .signatures.signature import holds_objects, signature, signature_digest
from .values.structured import needs_lowering
from .traffic_log.parquet import Layout, signature_text, split_signature, template_digest
from .values.sample import _copy_call, check_sample, lowered, storage_bytes
from .writer_options import LOG_CHOICES  # noqa: F401 (the traffic recorder's, as before)
from .writer_options import DEFAULT_MAX_FULL_BYTES, check_bounds, check_log, default_replica, production

# Distinct signatures add_signature() remembers as checked (then it forgets them all and checks again).
CHECKED_SIGNATURES = 1 << 16


class CorpusWriter:
    """Records forward calls into a corpus directory, one shard file per ``shard_size`` samples.

    ``model`` is the model spec written into the manifest (its shape is checked, nothing is
    imported); ``compile`` the production ``torch.compile`` options (JSON values); ``method``
    the model's method production compiles (``"forward"`` for ``torch.compile(model.forward)``,
    as ``generate()`` users compile; None: the model itself), which the replay then compiles;
    ``recorded_from`` the model the calls are recorded from (the module, its compiled form or a
    bound method of it), whose weights' shape the manifest keeps so an analysis that builds
    another model says so (:mod:`guardscope.corpus.storage.weights`); ``dynamo_config`` production's
    Dynamo settings that differ from torch's defaults (:func:`guardscope.torch_compat.dynamo_settings`
    on the thread that serves; None, the default: read at the first call recorded, on the thread
    that records it), which the analysis models (the recompile limits) and replays under (the
    settings that change guards); ``grad_mode`` the autograd mode production serves the calls
    under (``"inference_mode"``, ``"no_grad"`` or ``"grad"``; None, the default: not recorded, as
    the thread that adds samples is often not the one that serves; the traffic recorders read it
    where the call is served), which the analysis replays under.
    ``keep="all"`` (the default) records every call in full (format 2); ``keep="signatures"``
    records the first ``full_per_signature`` calls of each signature in full and every other
    one as its signature only, without tensor data (format 3; ``full_per_signature=0`` keeps no
    tensor data at all, for traffic whose contents may not be stored); ``max_signatures`` bounds
    the signatures it remembers (None: all), ``max_full_bytes`` the tensor storage bytes of the
    calls it keeps in full (``DEFAULT_MAX_FULL_BYTES``, 64 MiB, unless given; a call that would
    pass it is recorded as its signature; None: no bound), so a corpus of a million new
    signatures stays small. :meth:`summary` says what was kept, the bound, and how many
    signatures got no full sample because of it.

    ``log="parquet"`` (with ``keep="signatures"``; format 5, :mod:`guardscope.corpus.traffic_log.parquet`)
    writes each shard as a Parquet traffic log that DuckDB, pandas or pyarrow read as it is, one
    row per record with its count, ``first_seen``/``last_seen`` timestamps and ``replica`` (default
    ``host:pid``), the tensors of the calls kept in full in a data shard beside it; with
    ``aggregate`` (the default there) the repeats of a signature between two flushes are one row
    (:mod:`guardscope.corpus.traffic_log.window`), so ``shard_size`` counts rows, not calls, and sample
    indices are given when a shard is written (:meth:`add` and friends return None);
    ``timestamps=False`` leaves the rows' times null (a converted corpus's); ``roll_bytes``
    folds the flushes' window files into one past that many bytes or ``roll_seconds`` and at
    :meth:`close` (:mod:`guardscope.corpus.traffic_log.files`; None, the default: a file per flush);
    ``background=True`` writes those files on a thread of their own, in flush order, so adding
    calls does not wait for a window's data shard (:mod:`guardscope.corpus.traffic_log.tail`; :meth:`flush`
    and :meth:`close` wait for them). The
    directory is created if needed; one that already holds a corpus is refused unless
    ``overwrite=True``, which deletes that corpus's manifest, shard, request and compile-log files
    (nothing else).

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
        max_full_bytes: int | None = DEFAULT_MAX_FULL_BYTES,
        method: str | None = None,
        recorded_from: Any = None,
        dynamo_config: dict[str, Any] | None = None,
        grad_mode: str | None = None,
        log: str = "shards",
        aggregate: bool = True,
        replica: str | None = None,
        timestamps: bool = True,
        roll_bytes: int | None = None,
        roll_seconds: float | None = ROLL_SECONDS,
        background: bool = False,
    ) -> None:
        self.directory = pathlib.Path(directory)
        self._set_production(model, compile, method, recorded_from, dynamo_config, grad_mode)
        self._set_bounds(shard_size, keep, full_per_signature, max_signatures, max_full_bytes)
        self._set_log(log, aggregate, replica, timestamps, roll_bytes, roll_seconds, background)
        self._start_state()
        self._prepare_directory(overwrite)
        self._write_manifest()

    def _set_production(self, model: str, compile: dict | None, method: str | None, recorded_from: Any,
                        dynamo_config: dict[str, Any] | None, grad_mode: str | None) -> None:
        """What the manifest says of production (the model, its compile options and settings), checked."""
        settings = production(self.directory, model, compile, method, recorded_from, dynamo_config, grad_mode)
        self.model, self.compile, self.method = settings["model"], settings["compile"], settings["method"]
        self.recorded_model, self.dynamo_config = settings["recorded_model"], settings["dynamo_config"]
        self.grad_mode = settings["grad_mode"]
        self.torch_version = str(torch.__version__)  # the manifest's; a merge keeps its replicas'

    def _set_bounds(self, shard_size: int, keep: str, full_per_signature: int, max_signatures: int | None,
                    max_full_bytes: int | None) -> None:
        """What is kept and how much, checked: the shard size, ``keep`` and its bounds."""
        check_bounds(shard_size, keep, full_per_signature, max_signatures, max_full_bytes)
        self.shard_size, self.keep = shard_size, keep
        self.max_full_bytes = max_full_bytes if keep == "signatures" else None
        self.full_per_signature = full_per_signature
        self.max_signatures = max_signatures

    def _set_log(self, log: str, aggregate: bool, replica: str | None, timestamps: bool, roll_bytes: int | None,
                 roll_seconds: float | None, background: bool) -> None:
        """The traffic log's options (``log="parquet"``), checked; its window, files and their tail."""
        check_log(log, self.keep, replica)
        self.log = log
        self._stamped = timestamps  # False: a log's rows carry no times (a converted corpus's)
        self.replica = replica if replica is not None else default_replica()
        # The rows of the traffic log's next shard (log="parquet").
        self._window = LogWindow(self.replica, aggregate) if log == "parquet" else None
        self._files = LogFiles(self.directory, _atomic_write, *roll_bounds(roll_bytes, roll_seconds, CorpusError))
        # background: the log's files written on a thread of their own (log_tail), in flush order.
        self._tail = FileTail("guardscope-log-files") if background and self._window is not None else None

    def _start_state(self) -> None:
        """Nothing recorded yet."""
        self.full_bytes = 0  # tensor storage bytes of the calls kept in full (keep="signatures")
        # Signatures whose calls were all recorded as signatures because max_full_bytes was
        # reached (each call of a signature past max_signatures counts on its own).
        self.bounded_signatures = 0
        self._templates: dict[str, str] = {}
        self._shapes: dict[tuple, tuple[str, bool]] = {}  # a template's shape -> (its digest, holds objects)
        self._full_rows: list[tuple[list, dict]] = []  # (a signature's _seen entry, its pending full row)
        # keep="signatures": signature digest -> [first full sample's index, full samples kept,
        # refused a full sample by max_full_bytes], for at most max_signatures signatures (later
        # new ones are not remembered: each of their calls counts as the first of its signature).
        self._signatures: dict[str, list] = {}
        # signature -> (digest, holds objects, its log row layout or None)
        self._checked: dict[tuple, tuple[str, bool, Layout | None]] = {}
        self._by_id: dict[int, tuple[tuple, tuple]] = {}  # id(signature) -> (signature, as _checked)
        self._records = 0  # the signature records written so far
        self._pending: list[dict[str, Any]] = []
        self._shards: list[ShardInfo] = []
        self._flushed = 0  # the samples handed to the shards (on disk, or on their way there: _tail)
        self._devices: set[str] = set()
        self._structured = False  # some call held an object a codec stores: format 4
        self._requests = RequestRuns()  # the request and step of each tagged call (requests.json)
        self._request: list[Any] | None = None  # [tag, next step] inside request()
        self._count = 0
        self._closed = False

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
            if path.name in (MANIFEST_NAME, REQUESTS_NAME, COMPILE_LOG) or SHARD_NAME.fullmatch(path.name)
            or LOG_NAME.fullmatch(path.name)
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

    @contextlib.contextmanager
    def request(self, tag: str | int, first_step: int = 0) -> Iterator[None]:
        """Tag the calls :meth:`add` records inside the block as steps 0, 1, 2... of request
        ``tag`` (a str or an int), written to ``requests.json`` beside the manifest::

            with writer.request("req-17"):
                model.generate(...)        # a forward that calls writer.add(...)

        ``first_step``: the step of the block's first call (a request recorded in parts).
        """
        if isinstance(first_step, bool) or not isinstance(first_step, int) or first_step < 0:
            raise ValueError(f"first_step must be an int >= 0, got {first_step!r}")
        previous, self._request = self._request, [check_request(tag), first_step]
        try:
            yield
        finally:
            self._request = previous

    def add_snapshot(self, args: tuple, kwargs: dict, sig: tuple | None = None,
                     request: tuple[str | int, int] | None = None, when: int | None = None) -> int | None:
        """Record a call that :func:`snapshot` copied already (a recorder that copies on the
        serving thread and writes on another): as :meth:`add`, without copying it again.
        ``sig``: the call's ``signature(args, kwargs, inference=False)`` when the caller took
        it already (a copy has its original's signature), so that it is not taken again;
        ``request``: its ``(request tag, step)``, taken where it was served; ``when``: the time
        it was served (ns since the epoch), for a traffic log."""
        return self._add(tuple(args), dict(kwargs), copied=True, sig=sig, request=request, when=when)

    def add_signature(self, sig: tuple, devices: frozenset[str] | set[str] = frozenset(),
                      request: tuple[str | int, int] | None = None, when: int | None = None,
                      count: int = 1) -> int | None:
        """Record one call known by its signature only (``signature(args, kwargs,
        inference=False)``, taken where the call was served); returns the sample's index.

        Only with ``keep="signatures"``. The record names the first full sample of that
        signature, when one was added. ``devices`` are the device types of its tensors (for the
        manifest's ``device``); ``when`` the time the call was served (ns since the epoch; None:
        now), kept by a traffic log; ``count`` consecutive calls of that signature (a converted
        corpus's record). ``CorpusError`` when the writer is closed or keeps everything in
        full, ``SampleError`` when ``sig`` is not a call signature this format can rebuild.
        """
        self._check_open()
        if self.keep != "signatures":
            raise CorpusError('add_signature() records signatures: open the CorpusWriter with keep="signatures"')
        self._read_settings()
        # A busy replica repeats a few signatures: each distinct one is checked (built on the meta
        # device, as loading will) and digested once, then recognised by identity (a recorder
        # hands over one object per layout) or equality.
        known = self._by_id.get(id(sig))
        checked = known[1] if known is not None and known[0] is sig else self._checked.get(sig)
        if checked is None:
            digest = signature_digest(sig)
            layout = self._layout(sig, digest, check=True)
            if layout is None or layout.template is None:
                _check_signature(sig)
            structured = (self._shapes[layout.shape][1] if layout is not None and layout.template is not None
                          else holds_objects(sig))
            checked = (digest, structured, layout)
            if len(self._checked) >= CHECKED_SIGNATURES:
                self._checked.clear()  # bounded: a long tail of new signatures is checked again later
            self._checked[sig] = checked
        if known is None or known[0] is not sig:
            if len(self._by_id) >= CHECKED_SIGNATURES:
                self._by_id.clear()
            self._by_id[id(sig)] = (sig, checked)  # holding sig keeps its id its own
        digest, structured, layout = checked
        self._structured = self._structured or structured
        if type(count) is not int or count < 1:
            raise CorpusError(f"count must be an int >= 1, got {count!r}")
        if layout is not None:
            if self._stamped:
                when = time.time_ns() if when is None else when
            self._window.signature(layout, self._seen(digest)[0], when if self._stamped else None,  # type: ignore[union-attr]
                                   request, count)
            self._records += count
            return self._advance_window(devices, count)
        for _ in range(count):
            self._add_signature_record(sig, digest)
            index = self._advance(devices, request)
        return index

    def _layout(self, sig: tuple, digest: str, check: bool = False) -> Layout | None:
        """The traffic log's row layout of a signature (None: the writer keeps shards). Its call
        template is named once (``_shapes``), its JSON noted for the shards' metadata; with
        ``check``, a template's first signature is checked as loading will (on the meta device)
        and every later one's numbers only (``SampleError``), which is all that differs."""
        if self._window is None:
            return None
        shape, sizes, strides, offsets, dtypes, ints = split_signature(sig)
        if shape is None:
            return Layout(digest, None, None, sizes, strides, offsets, dtypes, ints, signature_text(sig))
        known = self._shapes.get(shape)
        if known is None:
            if check:
                _check_signature(sig)
            known = (template_digest(shape), holds_objects(sig))
            if len(self._shapes) >= CHECKED_SIGNATURES:
                self._shapes.clear()
            self._shapes[shape] = known
            self._templates.setdefault(known[0], signature_text(sig))
        elif check:
            for numbers in (*sizes, *strides, offsets):
                for number in numbers:
                    if type(number) is not int or not 0 <= number < 2**62:
                        raise SampleError(f"not a call signature this corpus format can store: sizes, strides and "
                                          f"offsets must be ints in [0, 2**62), got {number!r}")
        return Layout(digest, known[0], None, sizes, strides, offsets, dtypes, ints, None, shape)

    def _advance_window(self, devices: set[str] | frozenset[str], count: int) -> None:
        """Count calls added to the traffic log's window; write the shard when it holds
        ``shard_size`` rows, or, where the log is folded, ``WINDOW_BYTES`` of calls kept in full."""
        if not devices <= self._devices:
            self._devices |= devices
        self._count += count
        window = self._window
        if len(window.rows) >= self.shard_size or (  # type: ignore[union-attr]
                window.data_bytes >= WINDOW_BYTES and self._files.roll_bytes is not None):  # type: ignore[union-attr]
            self._flush()

    def _check_open(self) -> None:
        if self._closed:
            raise CorpusError(f"the writer for {self.directory} is closed; open a new CorpusWriter")

    def _add(self, args: tuple, kwargs: dict, *, copied: bool, sig: tuple | None = None,
             request: tuple[str | int, int] | None = None, when: int | None = None) -> int | None:
        self._check_open()
        self._read_settings()
        if request is None and self._request is not None:
            request = (self._request[0], self._request[1])
            self._request[1] += 1
        if copied:  # a snapshot: lowered already
            structured = needs_lowering(args) or needs_lowering(kwargs)
        else:
            plain = (args, kwargs)
            args, kwargs = lowered(args, kwargs)
            structured = args is not plain[0] or kwargs is not plain[1]  # lowered() copies only then
        devices = check_sample(args, kwargs)  # SampleError before anything is recorded
        self._structured |= structured
        if self.keep == "signatures":
            # As the corpus will give it back: a loaded tensor is never an inference tensor.
            if sig is None:
                sig = signature(args, kwargs, inference=False)
            digest = signature_digest(sig)
            layout = None
            if self._window is not None:
                when = (time.time_ns() if when is None else when) if self._stamped else None
                checked = self._checked.get(sig)
                layout = checked[2] if checked is not None else self._layout(sig, digest)
            seen = self._seen(digest)
            size = storage_bytes((args, kwargs)) if seen[1] < self.full_per_signature else 0
            if seen[1] >= self.full_per_signature or (
                    self.max_full_bytes is not None and self.full_bytes + size > self.max_full_bytes):
                if seen[1] == 0 < self.full_per_signature and not seen[2]:
                    seen[2] = True  # the bound, not full_per_signature, leaves it without data
                    self.bounded_signatures += 1
                if layout is not None:
                    self._window.signature(layout, seen[0], when, request)  # type: ignore[union-attr]
                    self._records += 1
                    return self._advance_window(devices, 1)
                self._add_signature_record(sig, digest)
                return self._advance(devices, request)
            first_full = seen[1] == 0
            if first_full:
                seen[0] = self._count
                if seen[2]:  # a smaller call of it fitted after all
                    seen[2] = False
                    self.bounded_signatures -= 1
            seen[1] += 1
            self.full_bytes += size
            if layout is not None:
                if not copied:
                    args, kwargs = _copy_call(args, kwargs)
                row = self._window.full(layout, args, kwargs, when, request, size)  # type: ignore[union-attr]
                if first_full:  # its index is given when the window is written
                    seen[0] = row
                    self._full_rows.append((seen, row))
                return self._advance_window(devices, 1)
        if not copied:
            args, kwargs = _copy_call(args, kwargs)
        self._pending.append({"args": args, "kwargs": kwargs})
        return self._advance(devices, request)

    def _advance(self, devices: set[str] | frozenset[str], request: tuple[str | int, int] | None = None) -> int:
        """Count the sample just recorded (tagged with ``(request, step)``); write the shard when
        it is full. Returns its index."""
        self._devices |= devices
        index = self._count
        if request is not None:
            self._requests.add(index, request[0], request[1])
        self._count += 1
        if len(self._pending) == self.shard_size:
            self._flush()
        return index

    def _seen(self, digest: str) -> list:
        """[first full sample's index, full samples kept] of a signature; a fresh one, not kept,
        past ``max_signatures``."""
        seen = self._signatures.get(digest)
        if seen is None:
            seen = [None, 0, False]
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

    def summary(self) -> str:
        """What was recorded so far, in one line: samples in full and by signature, the tensor
        bytes kept in full against ``max_full_bytes``, and how many signatures got no full
        sample because of that bound (``keep="signatures"``)."""
        shards = len(self._shards) + bool(self._pending or self._window)
        head = f"{counted(self._count, 'sample')} in {counted(shards, 'shard')}"
        if self.keep != "signatures":
            return f"{head}, every one in full (keep=\"all\")"
        if not self.full_per_signature:
            return f"{head}, every one by signature only: no tensor data (full_per_signature=0)"
        full = self._count - self._records
        text = f"{head}: {full:,} in full, {self._records:,} by signature only; in full {_size(self.full_bytes)}"
        if self.max_full_bytes is None:
            return f"{text} (max_full_bytes=None: no bound)"
        text += f" of at most {_size(self.max_full_bytes)} (max_full_bytes={self.max_full_bytes})"
        if not self.bounded_signatures:
            return f"{text}; the bound left no signature without a full sample"
        return (f"{text}; {counted(self.bounded_signatures, 'signature')} got no full sample because of it "
                "(a larger max_full_bytes, or None, keeps them)")

    def flush(self, wait: bool = True) -> None:
        """Write the samples added since the last shard as a shard of their own now, so they are
        on disk (and listed in the manifest) before ``shard_size`` samples have been added; a
        corpus's shards may differ in size. Does nothing when none are pending. ``wait=False``
        (with ``background``): hand them to the log's file thread without waiting for it."""
        if (self._pending or self._window) and not self._closed:
            self._flush()
        if wait and self._tail is not None:
            self._tail.wait()

    def then(self, callback: Any) -> None:
        """Call ``callback()`` once everything flushed so far is on disk (or failed): at once, or on ``_tail``."""
        if self._tail is None:
            callback()
        else:
            self._tail.then(callback)

    def close(self) -> None:
        """Write the last, partial shard and the final manifest. Calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._window is not None:  # the last window, the open file folded, the manifest
            try:
                if self._window:
                    self._flush_log()
            finally:
                if self._tail is not None:
                    self._tail.close()  # once the files handed to it are written (raises a failure)
            self._roll(True)
        elif self._pending:
            self._flush()
        else:
            self._write_manifest()  # without the "recording" mark

    def _flush(self) -> None:
        if self._window is not None:
            self._flush_log()
            return
        buffer = io.BytesIO()
        torch.save(encode_shard(self._pending, self._version), buffer)
        data = buffer.getvalue()
        name = f"shard-{len(self._shards):05d}.pt"
        _atomic_write(self.directory / name, data)
        first = self._shards[-1].first + self._shards[-1].samples if self._shards else 0
        samples = sum(record.get("repeat", 1) for record in self._pending)
        self._shards.append(ShardInfo(name, first, samples, hashlib.sha256(data).hexdigest()))
        self._pending = []
        self._write_manifest()

    def _read_settings(self) -> None:
        # Production's Dynamo settings, read where its first call is recorded unless given.
        if self.dynamo_config is None:
            self.dynamo_config = torch_compat.dynamo_settings()

    def _flush_log(self) -> None:
        """Write the window as the log's next window file (and its data shard), fold the open
        file when due (:mod:`guardscope.corpus.traffic_log.files`), then write the manifest."""
        window = self._window
        first = self._flushed
        rows = window.assign(first)  # type: ignore[union-attr]
        for seen, row in self._full_rows:
            seen[0] = row["first"]
        self._full_rows = []
        used = {row["layout"].template for row in rows} - {None}
        for row in rows:
            if row["request"] is not None:
                self._requests.add(row["first"], row["request"][0], row["request"][1])
        self._flushed = first + window.samples  # type: ignore[union-attr]
        self._window = LogWindow(self.replica, window.aggregate)  # type: ignore[union-attr]
        files = (rows, {name: self._templates[name] for name in used}, window.data,  # type: ignore[union-attr]
                 self._structured, first, window.samples)  # type: ignore[union-attr]
        if self._tail is None:
            self._write_window(files, self._manifest_state())
        else:  # the files and the manifest written off this thread, in order (log_tail)
            self._tail.submit(self._write_window, files, self._manifest_state())

    def _write_window(self, files: tuple, state: dict[str, Any]) -> None:
        """A flushed window's files written, the open file folded when due, then the manifest
        (``state``: :meth:`_manifest_state` as the window was flushed)."""
        self._files.write(*files)
        self._roll(self._files.due(), state)

    def _roll(self, fold: bool, state: dict[str, Any] | None = None) -> None:
        """The manifest, after folding the log's open file into one when ``fold``; then the windows
        folded (now or when a window of much data began a file) deleted."""
        folded = self._files.roll(fold)
        self._shards = self._files.shards
        self._write_manifest(state)
        for path in folded:  # once the manifest lists the file they were folded into
            path.unlink(missing_ok=True)

    def append_log(self, table: Any, templates: dict[str, str], data: list[dict[str, Any]], *,
                   structured: bool = False, devices: set[str] | frozenset[str] = frozenset(),
                   requests: list[tuple[int, str | int, int]] = ()) -> None:
        """Write rows taken from other traffic logs as this log's next shard, then the manifest
        (``guardscope merge``). ``table``: an Arrow table of the log's columns, its ``first``
        continuing this corpus's samples and its ``full`` and ``data`` pointing into this corpus
        and into ``data`` (the calls kept in full, as a data shard holds them: lowered, with
        ``structured`` saying whether they hold codec objects); ``templates``: digest -> JSON text
        of the templates its rows use; ``requests``: (sample, tag, step) of its tagged calls."""
        self._check_open()
        if self._window is None or self._window or self._tail is not None:
            raise CorpusError('append_log() writes whole log shards: open the CorpusWriter with log="parquet" '
                              "and add nothing else")
        first = self._flushed
        counts = table.column("count").to_numpy()
        firsts = table.column("first").to_numpy()
        if len(counts) and (firsts[0] != first or (firsts[1:] != firsts[:-1] + counts[:-1]).any()):
            raise CorpusError(f"append_log(): the rows' 'first' must count on from sample {first}")
        self._structured = self._structured or (structured and bool(data))
        self._files.append(table, templates, data, structured, first, int(counts.sum()))
        for index, tag, step in requests:
            self._requests.add(index, tag, step)
        self._devices |= set(devices)
        self._count += int(counts.sum())
        self._flushed += int(counts.sum())
        self._records += int(counts.sum()) - len(data)  # the rows not kept in full are signatures
        self._shards = self._files.shards
        self._write_manifest()

    @property
    def _version(self) -> int:
        if self._window is not None:
            return TRAFFIC_FORMAT_VERSION
        if self._structured:
            return STRUCTURED_FORMAT_VERSION
        return SIGNATURE_FORMAT_VERSION if self.keep == "signatures" else FORMAT_VERSION

    def _manifest_state(self) -> dict[str, Any]:
        """The manifest's fields but its shards, and the text of ``requests.json`` for the samples
        flushed so far, as they are now (a flush's, written by the log's file thread: ``_tail``)."""
        samples = self._flushed if self._window is not None else sum(shard.samples for shard in self._shards)
        tags = None
        if self._requests.runs:
            tags = json.dumps(self._requests.to_json(samples), separators=(",", ":")) + "\n"
        return {"format_version": self._version, "model": self.model, "compile": self.compile,
                "torch_version": self.torch_version, "device": ",".join(sorted(self._devices)) or "cpu",
                "method": self.method, "recorded_model": self.recorded_model, "dynamo_config": self.dynamo_config,
                "grad_mode": self.grad_mode, "recording": not self._closed, "requests": tags}

    def _write_manifest(self, state: dict[str, Any] | None = None) -> None:
        fields = dict(self._manifest_state() if state is None else state)
        tags = fields.pop("requests")
        shards = self._shards
        manifest = Manifest(samples=sum(shard.samples for shard in shards), shards=tuple(shards), **fields)
        text = json.dumps(manifest.to_json(), sort_keys=True, indent=2) + "\n"
        _atomic_write(self.directory / MANIFEST_NAME, text.encode())
        if tags is not None:  # after the manifest: until it is written, the new samples are untagged
            _atomic_write(self.directory / REQUESTS_NAME, tags.encode())


def _check_signature(sig: tuple) -> None:
    """The check loading makes of a signature, without allocating: ``SampleError`` saying why."""
    try:
        materialise(sig, device="meta")
    except (ValueError, RuntimeError, TypeError) as exc:
        raise SampleError(f"not a call signature this corpus format can store: {message_line(exc)}") from None


def _size(count: int) -> str:
    """A byte count for :meth:`CorpusWriter.summary`: ``67,108,864 bytes (64.0 MiB)``."""
    return f"{count:,} bytes ({count / 2**20:,.1f} MiB)"


def _atomic_write(path: pathlib.Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, then rename over ``path``; a read-only or
    full disk is a :class:`CorpusError` naming the path."""
    try:
        write_atomic(path, data, sync=True)
    except OSError as exc:
        raise CorpusError(f"cannot write {path}: {exc.strerror or exc}") from exc
