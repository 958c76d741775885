"""guardscope: offline guard analysis and warmup generation for ``torch.compile``.

Record a corpus of real forward calls, replay it through ``torch.compile``, and learn which inputs
recompile, why, and how they group into topologies::

    import guardscope
    with guardscope.CorpusWriter("corpus/", model="mymodels.py:build", compile={"dynamic": True}) as w:
        for request in requests:
            w.add(**request)
    analysis = guardscope.analyze("corpus/", "out/")
"""

from .corpus import CorpusWriter, load_corpus
from .errors import GuardscopeError
from .model import Catalog, FailureKind, GuardFailure, Topology
from .pipeline import Analysis, analyze

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
