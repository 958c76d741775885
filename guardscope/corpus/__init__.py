"""Inputs: the corpus directory format (manifest and shards; written by :class:`CorpusWriter`,
read safely by :func:`load_corpus`) and model specs (``"pkg.mod:attr"`` or ``"path/file.py:attr"``).

Stage order: ``format`` (the directory format's specification and its manifest), ``values`` (what
a sample may hold), ``structured`` (values stored as a registered type name and a state),
``shards`` (a shard's bytes), ``weights`` (the shape of the model a corpus was recorded from, and
the warning when an analysis builds another), ``writer``, ``reader`` (all but ``format`` import torch), ``spec``
(resolving a model spec; no torch), ``signature`` (what a frame-0 guard can read of a call, without its
data; import it from ``guardscope.corpus.signatures.signature``: the package attribute ``signature`` is
that module once it is loaded), ``materialising`` (arguments built back from a signature),
``call_template`` (many signatures of one call structure: a replay's fast path), ``chains`` (calls
that carry model state: a decode step run on the KV cache its request's earlier steps extended). Names are
imported on first use, so ``guardscope --help`` imports no torch.
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
