"""Which topology of one analysis is which of another's: :func:`match_topologies`.

:mod:`guardscope.catalog.diff` compares two catalogs; this module pairs their topologies first.
Identity across analyses never uses guardscope's numbering (topology ids, compile ids), which
shifts as soon as one graph more or less is compiled:

- a **compile** is identified by the sample that triggered it, its frame's code name, and its rank
  when one sample compiled one frame twice (:data:`CompileKey`, :func:`compiles_by_key`);
- a **topology** is identified by its members first: two topologies with the same member samples
  are the same class of inputs, whatever their facts say (a guard one backend adds changes the
  facts, not the graph those samples share). The others are paired by their facts (the set of
  fact strings, order aside; by compile sample, then in order of first sample, when several
  share them), then by their graphs (the samples whose compiles made them). What is left is
  vanished (old only) or new (new only).

It is pure: loaded ``catalog.json`` dicts in, frozen dataclasses out; no torch, no files.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

CompileKey = tuple[int | None, str, int]   # (sample, co_name, rank of that frame's compile at the sample)


@dataclass(frozen=True)
class TopologySide:
    """One analysis's view of a topology (ids and compile ids are that analysis's numbering)."""

    id: int
    compile_id: str | None
    compile_sample: int | None     # the sample whose compile made the serving graph
    first_sample: int
    count: int
    facts: tuple[str, ...]
    # the graphs its samples run, one per frame, each named by its compile (sample, frame, rank)
    graphs: tuple[tuple, ...] = ()


Pairs = list[tuple[TopologySide | None, TopologySide | None]]


def compiles_by_key(catalog: dict) -> dict[CompileKey, dict]:
    """Each compile of the catalog by its identity across analyses: (sample, frame, rank), the rank
    counting the earlier compiles of that frame at that sample."""
    seen: Counter = Counter()
    keyed = {}
    for c in catalog["compiles"]:
        base = (c.get("sample"), c.get("co_name") or "")
        keyed[(*base, seen[base])] = c
        seen[base] += 1
    return keyed


def topology_sides(catalog: dict) -> list[TopologySide]:
    """Each topology of the catalog as a :class:`TopologySide`, its graphs named by their compiles'
    identities (:func:`compiles_by_key`)."""
    compile_sample = {c["compile_id"]: c.get("sample") for c in catalog["compiles"]}
    keys = {c["compile_id"]: key for key, c in compiles_by_key(catalog).items()}

    def graphs(t: dict) -> tuple[tuple, ...]:
        # the serving graph is compile_id; "graphs" adds the later frames' (catalogs before it: none)
        ids = [t.get("compile_id"), *(t.get("graphs") or [None])[1:]]
        return tuple(keys.get(graph, (None, str(graph), -1)) for graph in ids if graph is not None)

    return [TopologySide(
        id=t["id"], compile_id=t.get("compile_id"), compile_sample=compile_sample.get(t.get("compile_id")),
        first_sample=t["first_sample"], count=t["count"], facts=tuple(t["facts"]), graphs=graphs(t),
    ) for t in catalog["topologies"]]


def _pair(olds: list[TopologySide], news: list[TopologySide]) -> Pairs:
    """Pair topologies with the same facts: by compile sample, then in order of first sample."""
    olds = sorted(olds, key=lambda t: t.first_sample)
    news = sorted(news, key=lambda t: t.first_sample)
    pairs: Pairs = []
    for o in list(olds):
        match = next((n for n in news if n.compile_sample is not None and n.compile_sample == o.compile_sample), None)
        if match is not None:
            pairs.append((o, match))
            olds.remove(o)
            news.remove(match)
    pairs += list(zip(olds, news))
    pairs += [(o, None) for o in olds[len(news):]] + [(None, n) for n in news[len(olds):]]
    return pairs


def match_topologies(olds: list[TopologySide], news: list[TopologySide], members_old: dict[int, frozenset],
                     members_new: dict[int, frozenset]) -> Pairs:
    """Pair the two analyses' topologies: the same members first (the same inputs sharing one
    graph, whatever their facts say), then the same facts, then the same graphs (compiled at the
    same samples in the same frames); the rest are vanished or new."""
    by_members = {members_new[n.id]: n for n in news}
    pairs: Pairs = []
    taken: set[int] = set()
    for o in olds:
        n = by_members.get(members_old[o.id])
        if n is not None and n.id not in taken:
            pairs.append((o, n))
            taken.add(n.id)
    paired = {o.id for o, _ in pairs if o is not None}
    groups: dict[tuple[str, ...], tuple[list, list]] = defaultdict(lambda: ([], []))
    for o in olds:
        if o.id not in paired:
            groups[tuple(sorted(o.facts))][0].append(o)
    for n in news:
        if n.id not in taken:
            groups[tuple(sorted(n.facts))][1].append(n)
    left_old: list[TopologySide] = []
    left_new: list[TopologySide] = []
    for key in sorted(groups):
        for a, b in _pair(*groups[key]):
            if a is not None and b is not None:
                pairs.append((a, b))
            elif a is not None:
                left_old.append(a)
            elif b is not None:
                left_new.append(b)
    left_new.sort(key=lambda t: t.first_sample)
    for o in sorted(left_old, key=lambda t: t.first_sample):
        n = next((n for n in left_new if o.graphs and n.graphs == o.graphs), None)
        if n is not None:
            left_new.remove(n)
        pairs.append((o, n))
    pairs += [(None, n) for n in left_new]
    return pairs

