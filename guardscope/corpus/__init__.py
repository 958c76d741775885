"""Inputs: the corpus directory format (manifest and shards; written by :class:`CorpusWriter`,
read safely by :func:`load_corpus`) and model specs (``"pkg.mod:attr"`` or ``"path/file.py:attr"``).

Stage order, by concern (each subpackage's docstring names its own): ``spec`` (resolving a model
spec; no torch), ``values/`` (what a sample may hold: codecs, structured values, the sample check),
``signatures/`` (what a frame-0 guard can read of a call, without its data; arguments built back
from it; call templates; signature records), ``storage/`` (the folder on disk: the format's
specification and its manifest, shards, the recorded model's weights' shapes, request tags, the
compile log), ``traffic_log/`` (format 5: Parquet rows, written a window at a time, read back as
records or columns), ``writer_options``, then ``writer``, ``reader`` and ``chains`` (calls that
carry model state: a decode step run on the KV cache its request's earlier steps extended; its path
is fixed, generated warmup modules import it), then ``converting`` (any corpus as a traffic log)
and ``fleet/`` (many replicas' traffic as one corpus; :func:`guardscope.corpus.fleet.replicas.fleet_of`
answers whether corpus arguments are a fleet). ``spec`` and ``storage``'s ``format``, ``requests`` and
``compile_log`` import no torch. Names are imported on first use, so ``guardscope --help`` imports
no torch.
"""

from __future__ import annotations

from ..lazy import lazy_exports

_EXPORTS = {
    "Corpus": "reader",
    "CorpusWriter": "writer",
    "MANIFEST_NAME": "storage.format",
    "Manifest": "storage.format",
    "ModelPrint": "storage.format",
    "ShardInfo": "storage.format",
    "load_corpus": "reader",
    "read_manifest": "storage.format",
    "register_type": "values.structured",
    "snapshot": "values.sample",
    "load_model": "spec",
    "model_label": "spec",
    "split_spec": "spec",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
