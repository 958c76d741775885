"""Every failure a user can cause or fix: one class each, with the fix in the message.

The CLI turns any :class:`GuardscopeError` into a short message and exit status 2; anything else
is a bug in guardscope and keeps its traceback.
"""

from __future__ import annotations


class GuardscopeError(Exception):
    """Base class: a problem with the user's input or environment, explained in the message."""


class CorpusError(GuardscopeError):
    """The corpus directory is missing, empty, malformed, or holds data that cannot be read safely."""


class ManifestError(CorpusError):
    """``corpus.json`` is malformed, misses a field, or has an unknown format version."""


class ShardError(CorpusError):
    """A shard file is truncated, corrupt, or holds objects that safe loading refuses."""


class SampleError(CorpusError):
    """A sample holds a value the corpus format cannot store (an arbitrary object, a lambda...)."""


class CallMismatchError(CorpusError):
    """The corpus's recorded calls do not fit the model's ``forward``: recorded for another model,
    or for another version of its signature."""


class ModelSpecError(GuardscopeError):
    """A model spec (``pkg.mod:attr`` or ``path/file.py:attr``) cannot be resolved into a model."""


class CompileOptionsError(GuardscopeError):
    """Compile options in the manifest or on the command line are not valid for torch.compile."""


class TransformError(GuardscopeError):
    """A ``--transform`` spec is malformed or cannot apply: an argument or dim the model's calls
    do not have, a dtype torch does not know, a pad multiple below 1, a function that cannot be
    loaded or does not return ``(args, kwargs)``."""


class TraceParseError(GuardscopeError):
    """In strict mode: a structured-trace record or guard text could not be parsed or classified."""


class OutputError(GuardscopeError):
    """The output directory exists and holds results, or cannot be written."""


class CatalogError(GuardscopeError):
    """``catalog.json`` is missing, malformed, or of an unknown schema."""


class ServeError(GuardscopeError):
    """``guardscope.runtime.serve`` cannot start: the plan directory lacks the chosen fix (run
    ``guardscope emit-warmup``), no plan passed verification, the model is already compiled, or
    the fallback directory already holds a corpus."""
class BundleError(GuardscopeError):
    """A compile-cache bundle could not be made: the plan failed to compile, the process died,
    or torch saved no cache artifacts (a backend without caches, or caches turned off)."""


class PrecompileError(GuardscopeError):
    """A plan could not be precompiled (torch's AOT compile): graph breaks, a compiled method, a
    torch without the API, a backend that cannot serialize, or the process died. Nothing was
    written; the compile-cache bundle, when there is one, stays the warm start."""


class EngineError(GuardscopeError):
    """The engine an analysis was asked to run on cannot: Dask not installed, a scheduler that
    cannot be reached."""
