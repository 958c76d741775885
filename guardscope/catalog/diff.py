"""What changed between two analyses: :func:`diff_catalogs` over two loaded ``catalog.json`` dicts.

A torch upgrade, a model change or another backend can add or remove recompiles, change why a
graph was rejected, and regroup the inputs. This module compares two catalogs and says so, in a
:class:`CatalogDiff` that renders as text (:meth:`CatalogDiff.summary_lines`), JSON
(:meth:`CatalogDiff.to_json`) and HTML (``guardscope.report.page.render_diff`` and the reusable partial
``templates/_diff.html``). It is pure: dicts in, frozen dataclasses out; no torch, no files.

Identity across analyses never uses guardscope's numbering (topology ids, compile ids), which
shifts as soon as one graph more or less is compiled:

- a **compile** is identified by the sample that triggered it (and its frame's code name, and
  its rank when one sample compiled one frame twice), as
  :func:`guardscope.catalog.matching.compiles_by_key` keys it;
- a **topology** is identified by its members first, then by its facts, then by its graphs
  (:func:`guardscope.catalog.matching.match_topologies` pairs them; its module says how);
- a guard **failure** is compared on its fields (less ``ignore``), naming the graph it failed
  against by the topology that graph serves when that topology is in both analyses, else by the
  sample whose compile made the graph: a failure against "the general graph" is the same failure
  whether that graph was compiled at sample 0 or at sample 1;
- a **sample** is identified by its index in the corpus. Diffing two different corpora works
  but compares unrelated inputs index by index: :attr:`CatalogDiff.warnings` says so.

Context (torch version, compile options, backend, device, model, corpus path, replay mode) is
listed in :attr:`CatalogDiff.context` but never makes two analyses different:
:attr:`CatalogDiff.identical` is about compiles, failures, topologies, samples and dimensions.

:attr:`CatalogDiff.verdict` tells what production would feel apart from wording:
``different`` when a sample compiles in one analysis only, in another frame, or fails other kinds
of guard or against other graphs, when a topology has other members or a graph compiled at
another sample, when samples move, dimensions or errors change; ``wording`` when only words
differ: a topology with the same members and graphs but other facts (a guard only one backend
adds, such as inductor's ``((96*___stack1.size()[0]) / (96 + 35*___stack1.size()[0])) > 0.0034``),
a compile whose failures have the same kinds against the same graphs but other texts;
``identical`` when nothing does.

``ignore`` drops failure fields from the comparison, for texts that legitimately differ:
inductor prints a 0/1 guard as ``2 <= x.size()[0] <= 2147483647`` where eager prints
``2 <= x.size()[0]``, so a backend-fidelity check passes ``ignore=GUARD_TEXT``. A failure's
``kind`` is always compared. The other fields are read out of the reason torch printed
(``raw``), and a mismatch's ``expected`` and ``actual`` out of its ``guard``: an ignored field is
masked in those texts too, or two failures that differ only in it would still differ there.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Iterable

from ..model import FAILURE_FIELDS, GUARD_TEXT, IGNORABLE
from ..text import format_samples, guard_text, normalize_reason
from .matching import (
    CompileKey,
    TopologySide,
    compiles_by_key,
    match_topologies,
    topology_sides,
)

DIMENSION_FIELDS = ("min", "max", "dynamic", "ever_zero", "ever_one", "equal_to")

# Where a sample can be in one analysis besides a topology.
RAISED = "raised"
NOT_ANALYSED = "not analysed"
RAN_EAGERLY = "ran eagerly"        # after a failed compile made Dynamo skip the forward
NOT_REPLAYED = "not replayed"      # in the corpus, but in no topology (a skipped shard)
NOT_IN_CORPUS = "not in corpus"    # past the end of a shorter corpus

# "reworded": the same members and graphs, other facts (wording only, not a production difference)
TOPOLOGY_STATUSES = ("vanished", "new", "changed", "reworded", "unchanged")
PRODUCTION_STATUSES = TOPOLOGY_STATUSES[:3]

# The verdicts, strongest last: nothing differs; only wording does; production would feel it.
IDENTICAL, WORDING, DIFFERENT = "identical", "wording", "different"
VERDICT_WORDS = {IDENTICAL: "identical", WORDING: "same in production (wording differs)", DIFFERENT: "different"}
VERDICT_TITLES = {IDENTICAL: "IDENTICAL", WORDING: "SAME IN PRODUCTION (wording differs)", DIFFERENT: "DIFFERENT"}

# --- the result --------------------------------------------------------------------------------

@dataclass(frozen=True)
class ContextChange:
    """A difference in where or how the analyses ran: it never makes them different."""

    field: str        # "torch_version", "compile.backend", "corpus.samples", ...
    old: Any
    new: Any


@dataclass(frozen=True)
class CompileChange:
    """A compile present in one analysis only, or in both with other failures or outcome."""

    status: str                    # "added", "removed" or "changed"
    sample: int | None
    co_name: str
    rank: int                      # > 0 when this sample compiled this frame more than once
    old_compile_id: str | None
    new_compile_id: str | None
    old_kinds: dict[str, int]      # failure kind -> count
    new_kinds: dict[str, int]
    old_fail_type: str | None
    new_fail_type: str | None
    removed_failures: tuple[dict, ...]   # catalog failure dicts plus "against_sample", "against_topology"
    added_failures: tuple[dict, ...]
    # "changed" with the same outcome and the same failure kinds against the same graphs: only the
    # failures' other fields (their guard text...) differ
    wording_only: bool = False


@dataclass(frozen=True)
class TopologyChange:
    status: str                     # "vanished", "new", "changed", "reworded" or "unchanged"
    facts: tuple[str, ...]          # the new side's order when both exist
    old: TopologySide | None
    new: TopologySide | None
    lost: tuple[int, ...]           # member samples of the old topology that the new one lacks
    gained: tuple[int, ...]
    old_only: tuple[str, ...] = ()  # facts only the old side states (both sides exist)
    new_only: tuple[str, ...] = ()  # facts only the new side states


@dataclass(frozen=True)
class SampleMove:
    """Samples that were together in one place (a topology, or raised...) and now are in another."""

    old: str                        # "T3" in the old numbering, or RAISED, NOT_ANALYSED, ...
    new: str                        # "T5" in the new numbering, or a state
    old_note: str                   # "vanished", "now T5" or ""
    new_note: str                   # "new", "was T3" or ""
    samples: tuple[int, ...]


@dataclass(frozen=True)
class DimensionChange:
    dim: str
    status: str                     # "added", "removed" or "changed"
    fields: tuple[tuple[str, Any, Any], ...]   # (field, old, new) for the fields that differ


@dataclass(frozen=True)
class ErrorChange:
    """A sample that raised in both analyses, with another error."""

    sample: int
    old: str
    new: str


@dataclass(frozen=True)
class CatalogDiff:
    labels: tuple[str, str]         # how the caller names old and new (paths, "eager"...)
    ignore: tuple[str, ...]
    old_counts: dict[str, int]
    new_counts: dict[str, int]
    old_run: dict[str, Any]         # torch, backend, device, samples: for the header lines
    new_run: dict[str, Any]
    context: tuple[ContextChange, ...]
    warnings: tuple[str, ...]
    compiles: tuple[CompileChange, ...]
    failures_by_kind: tuple[tuple[str, int, int], ...]   # (kind, old, new) for every kind seen
    topologies: tuple[TopologyChange, ...]               # every topology, status first
    moves: tuple[SampleMove, ...]
    dimensions: tuple[DimensionChange, ...]
    errors: tuple[ErrorChange, ...]

    @property
    def identical(self) -> bool:
        """No change in compiles, failures, topologies, sample placement, dimensions or errors,
        wording included; context differences (torch version, backend, options) do not count."""
        return self.verdict == IDENTICAL

    @property
    def production_different(self) -> bool:
        """A difference production would feel: which samples compile, in which frame, failing
        which kinds of guard against which graph, which samples share a graph, dimensions,
        errors."""
        return bool(
            any(not c.wording_only for c in self.compiles)
            or any(old != new for _, old, new in self.failures_by_kind)
            or any(t.status in PRODUCTION_STATUSES for t in self.topologies)
            or self.moves
            or self.dimensions
            or self.errors
        )

    @property
    def verdict(self) -> str:
        """:data:`DIFFERENT` (production would feel it), :data:`WORDING` (only facts or guard
        texts differ: a guard one analysis adds, another printing) or :data:`IDENTICAL`."""
        if self.production_different:
            return DIFFERENT
        if self.reworded_compiles() or self.topologies_with("reworded"):
            return WORDING
        return IDENTICAL

    @property
    def differs(self) -> bool:
        """What ``--exit-code`` fails on: any difference, except that wording alone does not
        count when the guard text is ignored."""
        if self.verdict == WORDING:
            return not set(GUARD_TEXT) <= set(self.ignore)
        return self.verdict == DIFFERENT

    def reworded_compiles(self) -> tuple[CompileChange, ...]:
        return tuple(c for c in self.compiles if c.wording_only)

    def wording_only(self) -> list[dict[str, Any]]:
        """The wording-only differences, apart, one entry per text: a fact only one side's
        reworded topologies state (a guard only that backend adds), or a guard text only one
        side's reworded compiles fail; ``only`` is ``old`` or ``new``, ``where`` the topologies
        and compiles (``T1 → T2``, ``sample 4 (0/2)``) that have it."""
        found: dict[tuple[str, str], list[str]] = defaultdict(list)
        for t in self.topologies_with("reworded"):
            for side, facts in (("old", t.old_only), ("new", t.new_only)):
                for fact in facts:
                    found[(side, fact)].append(topology_label(t))
        for c in self.reworded_compiles():
            for side, failures in (("old", c.removed_failures), ("new", c.added_failures)):
                for failure in failures:
                    found[(side, failure.get("guard") or guard_text(failure))].append(compile_label(c))
        return [{"only": side, "label": self.labels[side == "new"], "text": text, "where": list(dict.fromkeys(where))}
                for (side, text), where in sorted(found.items())]

    def topologies_with(self, status: str) -> tuple[TopologyChange, ...]:
        return tuple(t for t in self.topologies if t.status == status)

    @property
    def moved_samples(self) -> int:
        return sum(len(m.samples) for m in self.moves)

    def _wording_words(self) -> str:
        parts = []
        topologies = len(self.topologies_with("reworded"))
        if topologies:
            parts.append(f"facts of {topologies} topolog{'y' if topologies == 1 else 'ies'}")
        compiles = len(self.reworded_compiles())
        if compiles:
            parts.append(f"guard texts of {compiles} compile{'' if compiles == 1 else 's'}")
        return ", ".join(parts)

    def headline(self) -> str:
        """One line: ``identical``, ``same in production`` (wording differs) or what kind of
        changes there are, with counts."""
        verdict = self.verdict
        if verdict == IDENTICAL:
            return "identical: same compiles, failures and topologies" + (
                " (context differs)" if self.context else "")
        if verdict == WORDING:
            return ("same in production: same compiles, failures and topology members; wording differs: "
                    + self._wording_words())
        parts = []
        by_status = Counter(c.status for c in self.compiles if not c.wording_only)
        compiles = ", ".join(f"{by_status[s]} {s}" for s in ("added", "removed", "changed") if by_status[s])
        if compiles:
            parts.append(f"compiles {compiles}")
        kinds = [k for k, o, n in self.failures_by_kind if o != n]
        if kinds:
            parts.append(f"failure counts of {len(kinds)} kind{'' if len(kinds) == 1 else 's'} changed")
        topology = Counter(t.status for t in self.topologies)
        topologies = ", ".join(f"{topology[s]} {s}" for s in PRODUCTION_STATUSES if topology[s])
        if topologies:
            parts.append(f"topologies {topologies}")
        if self.moves:
            parts.append(f"{self.moved_samples:,} sample{'' if self.moved_samples == 1 else 's'} moved")
        if self.dimensions:
            parts.append(f"{len(self.dimensions)} dimension{'' if len(self.dimensions) == 1 else 's'} changed")
        if self.errors:
            parts.append(f"{len(self.errors)} error{'' if len(self.errors) == 1 else 's'} changed")
        wording = self._wording_words()
        if wording:
            parts.append(f"wording differs: {wording}")
        return "different: " + "; ".join(parts)

    # --- JSON --------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """A deterministic, JSON-serialisable dict (the file ``guardscope diff --json`` writes)."""

        def side(t: TopologySide | None) -> dict | None:
            return None if t is None else {
                "id": t.id, "compile_id": t.compile_id, "compile_sample": t.compile_sample,
                "first_sample": t.first_sample, "count": t.count,
            }

        return {
            "schema": 1,
            "identical": self.identical,
            "verdict": self.verdict,
            "old": {"label": self.labels[0], **self.old_run, "counts": self.old_counts},
            "new": {"label": self.labels[1], **self.new_run, "counts": self.new_counts},
            "ignore": list(self.ignore),
            "warnings": list(self.warnings),
            "context": [{"field": c.field, "old": c.old, "new": c.new} for c in self.context],
            "compiles": [{
                "status": c.status, "sample": c.sample, "co_name": c.co_name, "rank": c.rank,
                "old_compile_id": c.old_compile_id, "new_compile_id": c.new_compile_id,
                "old_kinds": c.old_kinds, "new_kinds": c.new_kinds,
                "old_fail_type": c.old_fail_type, "new_fail_type": c.new_fail_type,
                "removed_failures": list(c.removed_failures), "added_failures": list(c.added_failures),
                "wording_only": c.wording_only,
            } for c in self.compiles],
            "failures_by_kind": [{"kind": k, "old": o, "new": n} for k, o, n in self.failures_by_kind],
            "topologies": [{
                "status": t.status, "facts": list(t.facts), "old": side(t.old), "new": side(t.new),
                "lost": list(t.lost), "gained": list(t.gained),
                "old_only": list(t.old_only), "new_only": list(t.new_only),
            } for t in self.topologies],
            "moves": [{
                "old": m.old, "new": m.new, "old_note": m.old_note, "new_note": m.new_note,
                "count": len(m.samples), "samples": list(m.samples),
            } for m in self.moves],
            "dimensions": [{
                "dim": d.dim, "status": d.status,
                "fields": [{"field": f, "old": o, "new": n} for f, o, n in d.fields],
            } for d in self.dimensions],
            "errors": [{"sample": e.sample, "old": e.old, "new": e.new} for e in self.errors],
            "wording_only": self.wording_only(),
        }

    # --- text --------------------------------------------------------------------------------

    def summary_lines(self, limit: int = 20) -> list[str]:
        """The terminal summary; each list shows at most ``limit`` entries (0: all)."""

        def cut(items: list) -> tuple[list, int]:
            if not limit or len(items) <= limit:
                return items, 0
            return items[:limit], len(items) - limit

        def more(hidden: int, indent: str = "  ") -> list[str]:
            return [f"{indent}… and {hidden:,} more (see --json or --html)"] if hidden else []

        lines = [
            f"old         {self.labels[0]}: {_run_words(self.old_run, self.old_counts)}",
            f"new         {self.labels[1]}: {_run_words(self.new_run, self.new_counts)}",
        ]
        lines += [f"warning     {w}" for w in self.warnings]
        for change in self.context:
            lines.append(f"context     {change.field}: {value_words(change.old)} → {value_words(change.new)}")
        if self.ignore:
            lines.append(f"ignoring    failure fields {', '.join(self.ignore)}")
        lines.append(f"result      {self.headline()}")

        o, n = self.old_counts, self.new_counts
        lines.append(f"compiles    {arrow(o['compiles'], n['compiles'])}, recompiles "
                     f"{arrow(o['recompiles'], n['recompiles'])}"
                     + ("" if self.compiles else "; same compile samples and failures"))
        shown, hidden = cut(list(self.compiles))
        for c in shown:
            mark = _MARK["reworded"] if c.wording_only else _MARK[c.status]
            lines.append(f"  {mark} {compile_label(c)}: {compile_words(c)}")
            listed, rest = cut(failure_changes(c))
            lines += [f"      {_MARK[mark]} {failure_words(f)}" for mark, f in listed]
            lines += more(rest, "      ")
        lines += more(hidden)

        changed = [f"{k} {arrow(o_, n_)}" for k, o_, n_ in self.failures_by_kind if o_ != n_]
        same = [f"{k} {o_:,}" for k, o_, n_ in self.failures_by_kind if o_ == n_]
        parts = ([", ".join(changed)] if changed else []) + ([", ".join(same) + " unchanged"] if same else [])
        lines.append("failures    " + ("; ".join(parts) or "none in either analysis"))

        counts = Counter(t.status for t in self.topologies)
        lines.append(f"topologies  {arrow(o['topologies'], n['topologies'])}: "
                     + ", ".join(f"{counts[s]} {s}" for s in TOPOLOGY_STATUSES if counts[s] or s == "unchanged"))
        shown, hidden = cut([t for t in self.topologies if t.status != "unchanged"])
        for t in shown:
            if t.status == "reworded":
                lines.append(f"  {_MARK[t.status]} {topology_label(t)}  {topology_words(t)}")
                lines += ([f"      - {_clip(fact, 200)}" for fact in t.old_only]
                          + [f"      + {_clip(fact, 200)}" for fact in t.new_only])
            else:
                lines.append(f"  {_MARK[t.status]} {topology_label(t)}  {topology_words(t)}: {_facts_words(t.facts)}")
        lines += more(hidden)

        if self.moves:
            lines.append(f"moves       {self.moved_samples:,} sample{'' if self.moved_samples == 1 else 's'} "
                         "changed place")
            shown, hidden = cut(list(self.moves))
            for m in shown:
                lines.append(f"  {move_words(m)}: {len(m.samples):,} sample{'' if len(m.samples) == 1 else 's'} "
                             f"{format_samples(m.samples, limit=12)}")
            lines += more(hidden)

        lines.append("dimensions  " + (f"{len(self.dimensions)} changed" if self.dimensions else "no change"))
        shown, hidden = cut(list(self.dimensions))
        for d in shown:
            if d.status == "changed":
                detail = ", ".join(f"{f} {value_words(a)} → {value_words(b)}" for f, a, b in d.fields)
            else:
                detail = d.status
            lines.append(f"  {_MARK[d.status]} {d.dim}: {detail}")
        lines += more(hidden)

        if self.errors:
            lines.append(f"errors      {len(self.errors)} sample{'' if len(self.errors) == 1 else 's'} raised another error")
            shown, hidden = cut(list(self.errors))
            for e in shown:
                lines.append(f"  ~ sample {e.sample}: {_clip(e.old)} → {_clip(e.new)}")
            lines += more(hidden)
        return lines


_MARK = {"added": "+", "new": "+", "removed": "-", "vanished": "-", "changed": "~", "reworded": "≈", "unchanged": "="}


# --- words shared by the text summary and the HTML context -------------------------------------

def value_words(value: Any) -> str:
    """A context or dimension value as text: strings as they are, everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def arrow(old: Any, new: Any) -> str:
    fmt = (lambda v: f"{v:,}") if all(isinstance(v, int) for v in (old, new)) else value_words
    return fmt(old) if old == new else f"{fmt(old)} → {fmt(new)}"


def _clip(text: str, most: int = 100) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= most else text[: most - 1] + "…"


def _facts_words(facts: tuple[str, ...], most: int = 4) -> str:
    return "; ".join(facts[:most]) + (" ..." if len(facts) > most else "") if facts else "(no facts)"


def _run_words(run: dict[str, Any], counts: dict[str, int]) -> str:
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
    return sorted(marked, key=lambda item: (_failure_order(item[1])[:3], item[0] != "removed", guard_text(item[1])))


def against_words(failure: dict) -> str:
    """``T1 (graph 0/1)``: the graph a failure failed against, by its topology when it has one."""
    graph = f"graph {failure.get('against') or '?'}"
    if failure.get("against_topology") is not None:
        return f"T{failure['against_topology']} ({graph})"
    if failure.get("against_sample") is not None:
        return f"{graph}, compiled at sample {failure['against_sample']}"
    return graph


def failure_words(failure: dict) -> str:
    return f"{failure['kind']} against {against_words(failure)}: {_clip(failure.get('guard') or guard_text(failure))}"


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


# --- the comparison ----------------------------------------------------------------------------

def diff_catalogs(old: dict[str, Any], new: dict[str, Any], *, ignore: Iterable[str] = (),
                  labels: tuple[str, str] = ("old", "new")) -> CatalogDiff:
    """Compare two loaded ``catalog.json`` dicts (schema 1); ``old`` is the baseline.

    ``ignore`` names failure fields left out of the comparison (any of :data:`IGNORABLE`;
    :data:`GUARD_TEXT` for backend differences in how guards are printed). ``labels`` only name
    the two sides in the text and HTML.
    """
    ignored = tuple(sorted(set(ignore)))
    unknown = [name for name in ignored if name not in IGNORABLE]
    if unknown:
        raise ValueError(f"cannot ignore {unknown}: choose from {', '.join(IGNORABLE)}")
    fields = tuple(f for f in FAILURE_FIELDS if f not in ignored)

    topologies, partner = _topologies(old, new)
    old_compiles, new_compiles = compiles_by_key(old), compiles_by_key(new)
    old_graphs = _graph_identities(old_compiles, topologies, "old")
    new_graphs = _graph_identities(new_compiles, topologies, "new")
    dimensions = _dimension_changes(old, new)
    return CatalogDiff(
        labels=(str(labels[0]), str(labels[1])),
        ignore=ignored,
        old_counts=_counts(old),
        new_counts=_counts(new),
        old_run=_run(old),
        new_run=_run(new),
        context=_context(old, new),
        warnings=_warnings(old, new, dimensions),
        compiles=_compile_changes(old_compiles, new_compiles, old_graphs, new_graphs, fields,
                                  _topology_ids(old), _topology_ids(new)),
        failures_by_kind=_failures_by_kind(old, new),
        topologies=topologies,
        moves=_moves(old, new, partner),
        dimensions=dimensions,
        errors=_error_changes(old, new),
    )


def _counts(catalog: dict) -> dict[str, int]:
    summary = catalog.get("summary", {})
    compiles = catalog["compiles"]
    return {
        "samples": catalog["corpus"]["samples"],
        "compiles": summary.get("compiles", len(compiles)),
        "recompiles": summary.get("recompiles", max(len(compiles) - 1, 0)),
        "failures": sum(summary.get("failures_by_kind", {}).values()),
        "topologies": len(catalog["topologies"]),
        "failed_samples": len(catalog.get("failed_samples", [])),
        "not_analysed": len(catalog.get("not_analysed", [])),
    }


def _run(catalog: dict) -> dict[str, Any]:
    return {
        "torch_version": catalog.get("torch_version"),
        "backend": catalog["compile"].get("backend"),
        "device": catalog["compile"].get("device"),
        "model": catalog.get("model"),
    }


def _context(old: dict, new: dict) -> tuple[ContextChange, ...]:
    def pairs() -> Iterable[tuple[str, Any, Any]]:
        yield "torch_version", old.get("torch_version"), new.get("torch_version")
        yield "model", old.get("model"), new.get("model")
        yield "corpus.path", old["corpus"].get("path"), new["corpus"].get("path")
        yield "corpus.samples", old["corpus"].get("samples"), new["corpus"].get("samples")
        yield "arguments", old.get("arguments"), new.get("arguments")
        for key in sorted(set(old["compile"]) | set(new["compile"])):
            yield f"compile.{key}", old["compile"].get(key), new["compile"].get(key)
        yield "replay_mode", old.get("replay_mode"), new.get("replay_mode")
        yield ("skipped_shards", sorted(s["file"] for s in old.get("skipped_shards", [])),
               sorted(s["file"] for s in new.get("skipped_shards", [])))
        yield ("unparsed", dict(sorted(old.get("summary", {}).get("unparsed", {}).items())),
               dict(sorted(new.get("summary", {}).get("unparsed", {}).items())))

    return tuple(ContextChange(name, a, b) for name, a, b in pairs() if a != b)


def _dimension_stats(catalog: dict) -> dict[str, dict]:
    return {d["dim"]: d for d in catalog.get("dimensions", [])}


def _warnings(old: dict, new: dict, dimensions: tuple[DimensionChange, ...]) -> tuple[str, ...]:
    warnings = []
    a, b = old["corpus"]["samples"], new["corpus"]["samples"]
    if a != b:
        warnings.append(
            f"different corpora ({a:,} vs {b:,} samples): samples are compared by index, and "
            f"samples past the shorter corpus show as '{NOT_IN_CORPUS}'"
        )
    elif dimensions:
        warnings.append(
            "the corpora have the same size but different input dimensions: they are probably "
            "different corpora, compared sample by sample by index"
        )
    if old.get("model") != new.get("model"):
        warnings.append(f"different models ({old.get('model')} vs {new.get('model')})")
    return tuple(warnings)


# --- compiles and failures ---------------------------------------------------------------------

def _graph_identities(compiles: dict[CompileKey, dict], topologies: tuple[TopologyChange, ...],
                      side: str) -> dict[str, tuple]:
    """compile id -> what names that graph in both analyses: the matched topology it serves, else
    the sample that compiled it. A failure against "the general graph" is then the same failure
    whether that graph was compiled at sample 0 or 1."""
    identities: dict[str, tuple] = {c["compile_id"]: ("compile", *key) for key, c in compiles.items()}
    for position, t in enumerate(topologies):
        if t.old and t.new:
            graph = getattr(t, side).compile_id
            if graph is not None:
                identities[graph] = ("topology", position)
    return identities


def _topology_ids(catalog: dict) -> dict[str, int]:
    return {t["compile_id"]: t["id"] for t in catalog["topologies"] if t.get("compile_id") is not None}


def _sort_key(key: CompileKey) -> tuple:
    sample, co_name, rank = key
    return (sample is None, sample or 0, co_name, rank)


# The fields classify reads out of a failure's guard or reason text (``_spellings`` says where).
_SPELLED = ("expected", "actual", "user_source", "hint", "operator")
_LOCATION = re.compile(r"(?P<path>[^\s#()]+):(?P<line>\d+) in (?P<function>[\w<>.]+)")


def _spellings(name: str, value: str) -> list[tuple[re.Pattern[str], str]]:
    """(pattern, replacement) masking the value of field ``name`` where a failure's guard or
    reason spells it (as :mod:`guardscope.catalog.classify` read it from there)."""
    if name in ("expected", "actual"):
        # "expected 12, actual 7", "expected requires_grad=1", "Expected device index to be 0"
        return [(re.compile(rf"(?i)(\b{name}(?: requires_grad=| device index to be | ))" + re.escape(value)), r"\1…")]
    if name == "operator":
        # "conv (_subclasses/fake_impls.py:1811)" stands in the reason as "(fake_impls.py:1811 in conv)"
        function, _, place = value.partition(" (")
        value = f"{normalize_reason(place.removesuffix(')'))} in {function}"
    pieces = [value]
    if name == "user_source":
        # "model.py:70 in forward: <code>" stands in the reason as "<code>  # model.py:70 in forward",
        # and in its user stack trace as 'File "model.py", line 70, in forward'
        location, colon, code = value.partition(": ")
        where = _LOCATION.fullmatch(location)
        if colon and where:
            pieces = [location, f'File "{where["path"]}", line {where["line"]}, in {where["function"]}', code]
    return [(re.compile(re.escape(piece)), "…") for piece in pieces if piece]


def _masked(text: str, failure: dict, ignored: Iterable[str]) -> str:
    """``text`` (the failure's guard or reason) with the values of the ignored fields it spells
    replaced by ``…``."""
    for name in ignored:
        value = failure.get(name)
        if name in _SPELLED and value is not None:
            for pattern, replacement in _spellings(name, str(value)):
                text = pattern.sub(replacement, text)
    return text


def _failure_signature(failure: dict, graphs: dict[str, tuple], fields: tuple[str, ...]) -> tuple:
    ignored = [name for name in FAILURE_FIELDS if name not in fields]
    values = []
    for name in fields:
        value = failure.get(name)
        if name == "against":
            value = graphs.get(value, value)
        elif name == "raw":
            value = _masked(guard_text(failure), failure, ignored)
        elif name == "guard" and value is not None:
            value = _masked(value, failure, ignored)
        elif isinstance(value, list):
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        values.append(value)
    return tuple(values)


def _annotated(failure: dict, compile_sample: dict[str, int | None], topology: dict[str, int]) -> dict:
    """The catalog's failure plus the sample that compiled the graph it failed against and the
    topology that graph serves (in that analysis's numbering)."""
    against = failure.get("against")
    return {**failure, "against_sample": compile_sample.get(against), "against_topology": topology.get(against)}


def _unmatched(items: list[tuple[tuple, dict]], others: list[tuple[tuple, dict]]) -> list[dict]:
    """Items whose signature has no partner left among ``others`` (a multiset difference)."""
    available = Counter(signature for signature, _ in others)
    left = []
    for signature, failure in items:
        if available[signature]:
            available[signature] -= 1
        else:
            left.append(failure)
    return left


def _failure_order(failure: dict) -> tuple:
    against = failure.get("against_sample")
    return (against is None, against or 0, failure["kind"], guard_text(failure))


def _kinds(compile_: dict | None) -> dict[str, int]:
    if compile_ is None:
        return {}
    return dict(sorted(Counter(f["kind"] for f in compile_["failures"]).items()))


def _same_in_production(a: dict, b: dict, old_graphs: dict[str, tuple], new_graphs: dict[str, tuple],
                        fields: tuple[str, ...]) -> bool:
    """Whether one compile's two versions end alike and fail the same kinds of guard against the
    same graphs (their guard texts and other fields may differ: wording)."""
    core = tuple(name for name in ("kind", "against") if name in fields)
    return a.get("fail_type") == b.get("fail_type") and (
        Counter(_failure_signature(f, old_graphs, core) for f in a.get("failures", []))
        == Counter(_failure_signature(f, new_graphs, core) for f in b.get("failures", [])))


def _compile_changes(old: dict[CompileKey, dict], new: dict[CompileKey, dict],
                     old_graphs: dict[str, tuple], new_graphs: dict[str, tuple], fields: tuple[str, ...],
                     old_topology: dict[str, int], new_topology: dict[str, int]) -> tuple[CompileChange, ...]:
    old_sample = {c["compile_id"]: key[0] for key, c in old.items()}
    new_sample = {c["compile_id"]: key[0] for key, c in new.items()}
    changes = []
    for key in sorted(set(old) | set(new), key=_sort_key):
        a, b = old.get(key), new.get(key)
        old_failures = [(_failure_signature(f, old_graphs, fields), _annotated(f, old_sample, old_topology))
                        for f in (a or {}).get("failures", [])]
        new_failures = [(_failure_signature(f, new_graphs, fields), _annotated(f, new_sample, new_topology))
                        for f in (b or {}).get("failures", [])]
        removed = sorted(_unmatched(old_failures, new_failures), key=_failure_order)
        added = sorted(_unmatched(new_failures, old_failures), key=_failure_order)
        if a is None:
            status = "added"
        elif b is None:
            status = "removed"
        elif removed or added or a.get("fail_type") != b.get("fail_type"):
            status = "changed"
        else:
            continue
        changes.append(CompileChange(
            status=status, sample=key[0], co_name=key[1], rank=key[2],
            old_compile_id=a and a["compile_id"], new_compile_id=b and b["compile_id"],
            old_kinds=_kinds(a), new_kinds=_kinds(b),
            old_fail_type=a and a.get("fail_type"), new_fail_type=b and b.get("fail_type"),
            removed_failures=tuple(removed), added_failures=tuple(added),
            wording_only=status == "changed" and _same_in_production(a, b, old_graphs, new_graphs, fields),
        ))
    return tuple(changes)


def _failures_by_kind(old: dict, new: dict) -> tuple[tuple[str, int, int], ...]:
    a = old.get("summary", {}).get("failures_by_kind", {})
    b = new.get("summary", {}).get("failures_by_kind", {})
    return tuple((kind, a.get(kind, 0), b.get(kind, 0)) for kind in sorted(set(a) | set(b)))


# --- topologies and samples --------------------------------------------------------------------

def _topologies(old: dict, new: dict) -> tuple[tuple[TopologyChange, ...], dict[int, int]]:
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


def _moves(old: dict, new: dict, partner: dict[int, int]) -> tuple[SampleMove, ...]:
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


def _dimension_changes(old: dict, new: dict) -> tuple[DimensionChange, ...]:
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


def _error_changes(old: dict, new: dict) -> tuple[ErrorChange, ...]:
    a = {f["sample"]: f["error"] for f in old.get("failed_samples", [])}
    b = {f["sample"]: f["error"] for f in new.get("failed_samples", [])}
    return tuple(ErrorChange(s, a[s], b[s]) for s in sorted(set(a) & set(b)) if a[s] != b[s])
