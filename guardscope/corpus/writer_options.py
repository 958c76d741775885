"""A :class:`~guardscope.corpus.writer.CorpusWriter`'s options, checked before anything is written:
what the manifest says of production, what is kept and how much, and the traffic log's options.
Each check raises :class:`~guardscope.errors.CorpusError` saying what to pass instead."""

from __future__ import annotations

import json
import os
import pathlib
import socket
from typing import Any

from ..errors import CorpusError
from .storage.format import KEEP_CHOICES, MANIFEST_NAME, check_dynamo_config, check_grad_mode, check_method_name, \
    check_model_spec
from .spec import anchored
from .storage.weights import as_model_print

# keep="signatures": the tensor storage bytes of the calls kept in full, at most, unless the
# writer is given another bound (max_full_bytes=None: none). Traffic where most calls have a new
# signature would otherwise be kept almost whole: a million seed requests took 5.7 GB unbounded,
# 95 MB within this bound (docs/benchmarks.md, sections 7 and 9).
DEFAULT_MAX_FULL_BYTES = 64 * 2**20
LOG_CHOICES = ("shards", "parquet")


def default_replica() -> str:
    """The name a traffic log gives the recording process unless told: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def production(directory: pathlib.Path, model: str, compile: dict | None, method: str | None, recorded_from: Any,
               dynamo_config: dict[str, Any] | None, grad_mode: str | None) -> dict[str, Any]:
    """The manifest's account of production, checked: ``model`` (a relative file spec anchored to
    the corpus ``directory``), ``compile``, ``method``, ``recorded_model``, ``dynamo_config``,
    ``grad_mode``."""
    # A relative file spec is stored relative to the corpus folder, where it is resolved first:
    # the corpus then works from any working directory.
    settings = {"model": anchored(check_model_spec(model), directory), "compile": dict(compile or {}),
                "method": None if method is None else check_method_name(method),
                "recorded_model": as_model_print(recorded_from)}
    try:
        settings["dynamo_config"] = None if dynamo_config is None else check_dynamo_config(dynamo_config)
    except ValueError as exc:
        raise CorpusError(f"dynamo_config {exc}") from None
    try:
        settings["grad_mode"] = None if grad_mode is None else check_grad_mode(grad_mode)
    except ValueError as exc:
        raise CorpusError(f"grad_mode {exc}") from None
    try:
        json.dumps(settings["compile"], sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CorpusError(
            f"compile options {settings['compile']!r} cannot be written to {MANIFEST_NAME}: "
            f"{exc}; pass a dict of str keys and JSON values (bool, int, float, str, "
            "None, lists, dicts)"
        ) from None
    return settings


def check_bounds(shard_size: int, keep: str, full_per_signature: int, max_signatures: int | None,
                 max_full_bytes: int | None) -> None:
    """What is kept and how much: the shard size, ``keep`` and its bounds."""
    if type(shard_size) is not int or shard_size < 1:
        raise CorpusError(f"shard_size must be a positive int, got {shard_size!r}")
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
    if max_full_bytes not in (None, DEFAULT_MAX_FULL_BYTES) and keep != "signatures":
        raise CorpusError('max_full_bytes bounds the calls kept in full besides signatures: use keep="signatures"')


def check_log(log: str, keep: str, replica: str | None) -> None:
    """The traffic log's options: ``log`` and the ``replica`` name."""
    if log not in LOG_CHOICES:
        raise CorpusError(f"log must be one of {', '.join(map(repr, LOG_CHOICES))}, got {log!r}")
    if log == "parquet" and keep != "signatures":
        raise CorpusError('log="parquet" writes signature records: use it with keep="signatures"')
    if replica is not None and (type(replica) is not str or not replica):
        raise CorpusError(f"replica must be a non-empty str (the process's name in the log), got {replica!r}")
