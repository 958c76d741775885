"""Two catalogs compared (pure): :func:`diff_catalogs` builds the :class:`CatalogDiff` document
(``document``), over the comparisons of compiles (``compiles``) and of topologies, samples,
dimensions and errors (``samples``) and the words the text summary and the HTML page share
(``words``), over the records a diff lists (``changes``), over the topologies paired by
:mod:`guardscope.catalog.matching`."""

from .document import (
    DIFFERENT,
    IDENTICAL,
    VERDICT_TITLES,
    VERDICT_WORDS,
    WORDING,
    CatalogDiff,
    diff_catalogs,
)

__all__ = ["DIFFERENT", "IDENTICAL", "VERDICT_TITLES", "VERDICT_WORDS", "WORDING", "CatalogDiff", "diff_catalogs"]
