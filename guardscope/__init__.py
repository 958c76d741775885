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

import importlib
from typing import Any

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
}

__all__ = [
    "Analysis",
    "Catalog",
    "CorpusWriter",
    "FailureKind",
    "GuardFailure",
    "GuardscopeError",
    "Topology",
    "analyze",
    "load_corpus",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'guardscope' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))
