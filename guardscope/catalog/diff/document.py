"""What changed between two analyses: :func:`diff_catalogs` over two loaded ``catalog.json`` dicts.

A torch upgrade, a model change or another backend can add or remove recompiles, change why a
graph was rejected, and regroup the inputs. This module compares two catalogs and says so, in a
:class:`CatalogDiff` that renders as text (:meth:`CatalogDiff.summary_lines`), JSON
(:meth:`CatalogDiff.to_json`) and HTML (``guardscope.report.page.render_diff`` and the reusable partial
``templates/_diff.html``). It is pure: dicts in, frozen dataclasses out; no torch, no files.
The records it lists are in :mod:`guardscope.catalog.diff.changes`, their words in
:mod:`guardscope.catalog.diff.words`; :mod:`guardscope.catalog.diff.compiles` compares the
compiles and failures, :mod:`guardscope.catalog.diff.samples` the topologies, samples,
dimensions and errors.

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

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Iterable

from ...model import FAILURE_FIELDS, GUARD_TEXT, IGNORABLE
from ...text import format_samples, guard_text
from .changes import (
    NOT_IN_CORPUS,
    PRODUCTION_STATUSES,
    TOPOLOGY_STATUSES,
    CompileChange,
    ContextChange,
    DimensionChange,
    ErrorChange,
    SampleMove,
    TopologyChange,
)
from .compiles import compile_changes, failures_by_kind
from .samples import dimension_changes, error_changes, sample_moves, topology_changes
from .words import (
    arrow,
    clip,
    compile_label,
    compile_words,
    facts_words,
    failure_changes,
    failure_words,
    move_words,
    run_words,
    topology_label,
    topology_words,
    value_words,
)
from ..matching import TopologySide

# The verdicts, strongest last: nothing differs; only wording does; production would feel it.
IDENTICAL, WORDING, DIFFERENT = "identical", "wording", "different"
VERDICT_WORDS = {IDENTICAL: "identical", WORDING: "same in production (wording differs)", DIFFERENT: "different"}
VERDICT_TITLES = {IDENTICAL: "IDENTICAL", WORDING: "SAME IN PRODUCTION (wording differs)", DIFFERENT: "DIFFERENT"}


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
        against which graph, which samples share a graph, dimensions, errors. The kinds a guard
        text reads as are guardscope's words: counts of a kind that move between compiles
        production runs alike are wording."""
        return bool(
            any(not c.wording_only for c in self.compiles)
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
            f"old         {self.labels[0]}: {run_words(self.old_run, self.old_counts)}",
            f"new         {self.labels[1]}: {run_words(self.new_run, self.new_counts)}",
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
                lines += ([f"      - {clip(fact, 200)}" for fact in t.old_only]
                          + [f"      + {clip(fact, 200)}" for fact in t.new_only])
            else:
                lines.append(f"  {_MARK[t.status]} {topology_label(t)}  {topology_words(t)}: {facts_words(t.facts)}")
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
                lines.append(f"  ~ sample {e.sample}: {clip(e.old)} → {clip(e.new)}")
            lines += more(hidden)
        return lines


_MARK = {"added": "+", "new": "+", "removed": "-", "vanished": "-", "changed": "~", "reworded": "≈", "unchanged": "="}


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

    topologies, partner = topology_changes(old, new)
    dimensions = dimension_changes(old, new)
    return CatalogDiff(
        labels=(str(labels[0]), str(labels[1])),
        ignore=ignored,
        old_counts=_counts(old),
        new_counts=_counts(new),
        old_run=_run(old),
        new_run=_run(new),
        context=_context(old, new),
        warnings=_warnings(old, new, dimensions),
        compiles=compile_changes(old, new, topologies, fields),
        failures_by_kind=failures_by_kind(old, new),
        topologies=topologies,
        moves=sample_moves(old, new, partner),
        dimensions=dimensions,
        errors=error_changes(old, new),
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
