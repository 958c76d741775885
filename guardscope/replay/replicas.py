"""What each replica of a fleet compiles in its own process (issue 51).

A fleet's analysis replays every replica's calls in one process, in fleet order: its graphs are
the fleet's union, compiled once. Each replica is a process of its own, though: it compiles its
own first call's graph (a static one, for the shapes its first call had: which call that is
differs from replica to replica) and each later graph its own calls need. Each replica's calls
are replayed here alone, in their order, from an empty Dynamo state, and the graphs counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ..corpus.signatures.records import SignatureRecord
from ..options import ReplayOptions
from .session import SIGNATURE_CACHE, ReplaySession


def replica_items(items: Iterable[Any], codes: Any, code: int) -> Iterator[Any]:
    """The samples and signature records of ``items`` that replica ``code`` served (``codes``:
    each sample's replica, by position). A record whose samples all came from it is kept whole; a
    compact merge's record of several replicas' calls gives that replica's samples one by one."""
    for item in items:
        if type(item) is not SignatureRecord:
            if codes[item.index] == code:
                yield item
            continue
        served = codes[item.first:item.first + item.repeat] == code
        if served.all():
            yield item
        else:
            for offset in served.nonzero()[0]:
                yield item.sample(int(offset))


def replica_compiles(corpus: Any, model: Any, options: ReplayOptions, names: list[str], codes: Any) -> dict[str, int]:
    """The graphs each replica's own process compiles, in every frame, by name: its calls
    replayed alone (:func:`replica_items`) in a fresh session, guard-checked as the analysis is."""
    compiled = {}
    for code, name in enumerate(names):
        with ReplaySession(model, options, on_sample=lambda meta: None, guard_only=True,
                           full_sample=corpus.full_sample,
                           signature_cache=SIGNATURE_CACHE if corpus.manifest.format_version >= 3 else 0) as session:
            session.replay(replica_items(corpus.iter_records(), codes, code))
            compiled[name] = sum(1 for event in session.result().events if event.fail_type is None)
    return compiled


__all__ = ["replica_compiles", "replica_items"]
