"""Words shared by the diff's text summary and its HTML context (pure): a compile, a failure, a
topology and a sample move of a :class:`guardscope.catalog.diff.CatalogDiff` as text, values and
counts as they change (``12 → 14``)."""

from __future__ import annotations

import json
from typing import Any

from ...text import guard_text
from .changes import CompileChange, SampleMove, TopologyChange, failure_order


def value_words(value: Any) -> str:
    """A context or dimension value as text: strings as they are, everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def arrow(old: Any, new: Any) -> str:
    fmt = (lambda v: f"{v:,}") if all(isinstance(v, int) for v in (old, new)) else value_words
    return fmt(old) if old == new else f"{fmt(old)} → {fmt(new)}"


def clip(text: str, most: int = 100) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= most else text[: most - 1] + "…"


def facts_words(facts: tuple[str, ...], most: int = 4) -> str:
    return "; ".join(facts[:most]) + (" ..." if len(facts) > most else "") if facts else "(no facts)"


def run_words(run: dict[str, Any], counts: dict[str, int]) -> str:
    return (f"torch {run['torch_version']}, {run['backend']} on {run['device']}, "
            f"{counts['samples']:,} samples, {counts['compiles']:,} compiles, {counts['topologies']:,} topologies")


def compile_label(change: CompileChange) -> str:
    """``sample 4 (0/2 → 0/1)``: the compile's identity, then its id in each analysis."""
    where = "sample ?" if change.sample is None else f"sample {change.sample}"
    if change.co_name and change.co_name != "forward":
        where += f" in {change.co_name}"
    if change.rank:
        where += f" (compile {change.rank + 1} there)"
    ids = arrow(change.old_compile_id, change.new_compile_id) if change.status == "changed" else (
        change.old_compile_id if change.status == "removed" else change.new_compile_id)
    return f"{where} ({ids})"


def kinds_words(kinds: dict[str, int]) -> str:
    return ", ".join(f"{k} ×{n}" for k, n in kinds.items()) or "first compile, no failures"


def compile_words(change: CompileChange) -> str:
    if change.status == "added":
        return "new compile: " + kinds_words(change.new_kinds)
    if change.status == "removed":
        return "no longer compiles: " + kinds_words(change.old_kinds)
    parts = []
    kinds = sorted(set(change.old_kinds) | set(change.new_kinds))
    moved = [f"{k} {arrow(change.old_kinds.get(k, 0), change.new_kinds.get(k, 0))}" for k in kinds
             if change.old_kinds.get(k, 0) != change.new_kinds.get(k, 0)]
    if moved:
        parts.append(", ".join(moved))
    elif change.removed_failures or change.added_failures:
        parts.append("same failure kinds, other guards or graphs")
    if change.old_fail_type != change.new_fail_type:
        parts.append(f"outcome {value_words(change.old_fail_type or 'compiled')} → {value_words(change.new_fail_type or 'compiled')}")
    return "; ".join(parts)


def failure_changes(change: CompileChange) -> list[tuple[str, dict]]:
    """("removed" or "added", failure) for one compile, a removed failure next to the added one
    against the same graph with the same kind."""
    marked = [("removed", f) for f in change.removed_failures] + [("added", f) for f in change.added_failures]
    return sorted(marked, key=lambda item: (failure_order(item[1])[:3], item[0] != "removed", guard_text(item[1])))


def against_words(failure: dict) -> str:
    """``T1 (graph 0/1)``: the graph a failure failed against, by its topology when it has one."""
    graph = f"graph {failure.get('against') or '?'}"
    if failure.get("against_topology") is not None:
        return f"T{failure['against_topology']} ({graph})"
    if failure.get("against_sample") is not None:
        return f"{graph}, compiled at sample {failure['against_sample']}"
    return graph


def failure_words(failure: dict) -> str:
    return f"{failure['kind']} against {against_words(failure)}: {clip(failure.get('guard') or guard_text(failure))}"


def topology_label(t: TopologyChange) -> str:
    if t.old and t.new:
        return f"T{t.old.id}" if t.old.id == t.new.id else f"T{t.old.id} → T{t.new.id}"
    return f"T{(t.old or t.new).id} ({t.status})"


def _graphs_words(graphs: tuple[tuple, ...]) -> str:
    """``0, 4 in forward_1``: the samples whose compiles made a topology's graphs (frame aside the forward)."""
    def one(sample: int | None, co_name: str) -> str:
        return ("?" if sample is None else f"{sample}") + (f" in {co_name}" if co_name and co_name != "forward" else "")

    return ", ".join(one(sample, co_name) for sample, co_name, *_ in graphs) or "none"


def topology_words(t: TopologyChange) -> str:
    if t.old is None or t.new is None:
        side = t.old or t.new
        return f"{side.count:,} sample{'' if side.count == 1 else 's'}, first {side.first_sample}"
    if t.status == "reworded":
        return (f"{t.new.count:,} sample{'' if t.new.count == 1 else 's'}, the same members and graphs; "
                "facts differ in wording only")
    words = f"{arrow(t.old.count, t.new.count)} samples"
    if t.gained or t.lost:
        words += f" (+{len(t.gained):,} −{len(t.lost):,})"
    if t.old.first_sample != t.new.first_sample:
        words += f", first {t.old.first_sample} → {t.new.first_sample}"
    if t.old.compile_sample != t.new.compile_sample:
        words += f", graph compiled at sample {arrow(t.old.compile_sample, t.new.compile_sample)}"
    elif t.old.graphs != t.new.graphs:
        words += f", graphs compiled at samples {_graphs_words(t.old.graphs)} → {_graphs_words(t.new.graphs)}"
    return words


def place_words(place: str, note: str) -> str:
    return f"{place} ({note})" if note else place


def move_words(move: SampleMove) -> str:
    return f"{place_words(move.old, move.old_note)} → {place_words(move.new, move.new_note)}"

