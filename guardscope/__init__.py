"""guardscope: offline guard analysis and warmup generation for ``torch.compile``.

Record a corpus of real forward calls, replay it through ``torch.compile``, and learn which inputs
recompile, why, and how they group into topologies::

    import guardscope
    with guardscope.CorpusWriter("corpus/", model="mymodels.py:build", compile={"dynamic": True}) as w:
        for request in requests:
            w.add(**request)
    analysis = guardscope.analyze("corpus/", "out/")
"""

from __future__ import annotations

from .lazy import lazy_exports

# Imported on first use, so that ``guardscope --help`` (and anything else that needs no torch)
# does not pay for importing torch.
_EXPORTS = {
    "Analysis": "pipeline",
    "Catalog": "model",
    "CorpusWriter": "corpus",
    "FailureKind": "model",
    "GuardFailure": "model",
    "GuardscopeError": "errors",
    "Topology": "model",
    "analyze": "pipeline",
    "load_corpus": "corpus",
    "register_type": "corpus",
}

__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"
# Subpackages a user reaches as attributes after ``import guardscope`` (the README's
# ``guardscope.runtime.TrafficRecorder``), imported on first use too.
_SUBMODULES = ("runtime",)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _SUBMODULES)
