"""Inputs: the corpus directory format (manifest and shards; written by :class:`CorpusWriter`,
read safely by :func:`load_corpus`) and model specs (``"pkg.mod:attr"`` or ``"path/file.py:attr"``).

Stage order: ``format`` (the directory, its writer and reader; imports torch), ``spec`` (resolving
a model spec; no torch), ``signature`` (what a frame-0 guard can read of a call, without its
data). Names are imported on first use, so ``guardscope --help`` imports no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Corpus": "format",
    "CorpusWriter": "format",
    "MANIFEST_NAME": "format",
    "Manifest": "format",
    "ShardInfo": "format",
    "load_corpus": "format",
    "read_manifest": "format",
    "snapshot": "format",
    "signature": "signature",
    "signature_digest": "signature",
    "load_model": "spec",
    "model_label": "spec",
    "split_spec": "spec",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'guardscope.corpus' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))
