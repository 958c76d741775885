"""The samples compared (pure), for :func:`guardscope.catalog.diff.diff_catalogs`: each topology's
status over the pairs :func:`guardscope.catalog.matching.match_topologies` makes, the samples that
changed place (a topology, or raised, not analysed...), the input dimensions' statistics and the
errors samples raised. A sample is identified by its index in the corpus.
"""

from __future__ import annotations

from collections import defaultdict

from .changes import (
    NOT_ANALYSED,
    NOT_IN_CORPUS,
    NOT_REPLAYED,
    RAISED,
    RAN_EAGERLY,
    TOPOLOGY_STATUSES,
    DimensionChange,
    ErrorChange,
    SampleMove,
    TopologyChange,
)
from ..matching import match_topologies, topology_sides

DIMENSION_FIELDS = ("min", "max", "dynamic", "ever_zero", "ever_one", "equal_to")


def topology_changes(old: dict, new: dict) -> tuple[tuple[TopologyChange, ...], dict[int, int]]:
    """Every topology with its status, and old id -> new id for the matched ones."""
    members_old = {t["id"]: frozenset(t["samples"]) for t in old["topologies"]}
    members_new = {t["id"]: frozenset(t["samples"]) for t in new["topologies"]}
    changes, partner = [], {}
    for a, b in match_topologies(topology_sides(old), topology_sides(new), members_old, members_new):
        before = members_old[a.id] if a else frozenset()
        after = members_new[b.id] if b else frozenset()
        old_only: tuple[str, ...] = ()
        new_only: tuple[str, ...] = ()
        if a and b:
            partner[a.id] = b.id
            old_only = tuple(f for f in a.facts if f not in set(b.facts))
            new_only = tuple(f for f in b.facts if f not in set(a.facts))
            if before != after or a.compile_sample != b.compile_sample or a.graphs != b.graphs:
                status = "changed"
            else:
                status = "reworded" if old_only or new_only else "unchanged"
        else:
            status = "vanished" if a else "new"
        changes.append(TopologyChange(
            status=status, facts=(b or a).facts, old=a, new=b,
            lost=tuple(sorted(before - after)), gained=tuple(sorted(after - before)),
            old_only=old_only, new_only=new_only,
        ))
    changes.sort(key=lambda t: (TOPOLOGY_STATUSES.index(t.status), (t.old or t.new).first_sample,
                                t.old.id if t.old else -1, t.new.id if t.new else -1))
    return tuple(changes), partner


def _places(catalog: dict) -> dict[int, str]:
    places = {}
    for t in catalog["topologies"]:
        for sample in t["samples"]:
            places[sample] = f"T{t['id']}"
    for sample in catalog.get("not_analysed", []):
        places.setdefault(sample, NOT_ANALYSED)
    for skipped in catalog.get("skipped_frames", []):
        for sample in skipped["eager_samples"] or ():
            places.setdefault(sample, RAN_EAGERLY)
    for failed in catalog.get("failed_samples", []):
        places.setdefault(failed["sample"], RAISED)
    return places


def _same_place(place: str, partner: dict[int, int]) -> str | None:
    """An old place in the new numbering (None for a vanished topology)."""
    if not place.startswith("T"):
        return place
    now = partner.get(int(place[1:]))
    return None if now is None else f"T{now}"


def sample_moves(old: dict, new: dict, partner: dict[int, int]) -> tuple[SampleMove, ...]:
    """Samples whose place changed, grouped by (old place, new place)."""
    old_places, new_places = _places(old), _places(new)
    sizes = (old["corpus"]["samples"], new["corpus"]["samples"])
    back = {b: a for a, b in partner.items()}
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    everything = set(old_places) | set(new_places) | set(range(max(sizes)))
    for sample in sorted(everything):
        a = old_places.get(sample, NOT_REPLAYED if sample < sizes[0] else NOT_IN_CORPUS)
        b = new_places.get(sample, NOT_REPLAYED if sample < sizes[1] else NOT_IN_CORPUS)
        if _same_place(a, partner) != b:
            groups[(a, b)].append(sample)

    def old_note(place: str) -> str:
        if not place.startswith("T"):
            return ""
        now = partner.get(int(place[1:]))
        return "vanished" if now is None else ("" if f"T{now}" == place else f"now T{now}")

    def new_note(place: str) -> str:
        if not place.startswith("T"):
            return ""
        was = back.get(int(place[1:]))
        return "new" if was is None else ("" if f"T{was}" == place else f"was T{was}")

    moves = [SampleMove(old=a, new=b, old_note=old_note(a), new_note=new_note(b), samples=tuple(samples))
             for (a, b), samples in groups.items()]
    return tuple(sorted(moves, key=lambda m: m.samples[0]))


def _dimension_stats(catalog: dict) -> dict[str, dict]:
    return {d["dim"]: d for d in catalog.get("dimensions", [])}


def dimension_changes(old: dict, new: dict) -> tuple[DimensionChange, ...]:
    a, b = _dimension_stats(old), _dimension_stats(new)
    changes = []
    for dim in sorted(set(a) | set(b)):
        if dim not in b:
            changes.append(DimensionChange(dim, "removed", ()))
        elif dim not in a:
            changes.append(DimensionChange(dim, "added", ()))
        else:
            differing = []
            for field in DIMENSION_FIELDS:
                x, y = a[dim].get(field), b[dim].get(field)
                if field == "equal_to":
                    x, y = sorted(x or []), sorted(y or [])
                if x != y:
                    differing.append((field, x, y))
            if differing:
                changes.append(DimensionChange(dim, "changed", tuple(differing)))
    return tuple(changes)


def error_changes(old: dict, new: dict) -> tuple[ErrorChange, ...]:
    a = {f["sample"]: f["error"] for f in old.get("failed_samples", [])}
    b = {f["sample"]: f["error"] for f in new.get("failed_samples", [])}
    return tuple(ErrorChange(s, a[s], b[s]) for s in sorted(set(a) & set(b)) if a[s] != b[s])
