"""The diff of two analyses as a page (``guardscope diff --html``) and as a partial the report
embeds (backend fidelity)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import store
from ..catalog.diff import words
from ..catalog.diff import VERDICT_WORDS
from ..text import format_samples, guard_text
from .common import DIFF_FAILURES_SHOWN, KIND_EXPLANATIONS, LIST_SHOWN, number_text
from .environment import ENVIRONMENT

if TYPE_CHECKING:
    from ..catalog.diff import CatalogDiff

# --- the diff of two analyses ----------------------------------------------------------------

def diff_context(diff: CatalogDiff, *, title: str = "What changed") -> dict:
    """What ``templates/_diff.html`` needs, from a :class:`guardscope.catalog.diff.CatalogDiff`.

    The partial reads one variable, ``diff`` (this dict), so any page can include it: the
    standalone ``diff.html``, or a section of another page (pass its own ``title``)."""

    headline = diff.headline()
    count_names = ("samples", "compiles", "recompiles", "failures", "topologies", "failed_samples", "not_analysed")
    changed_topologies = [t for t in diff.topologies if t.status != "unchanged"]
    return {
        "title": title,
        "identical": diff.identical,
        "verdict": diff.verdict,
        "verdict_words": VERDICT_WORDS[diff.verdict],
        "headline": headline,
        "changes": headline.partition(": ")[2],
        "labels": {"old": diff.labels[0], "new": diff.labels[1]},
        "sides": [_side(diff.labels[0], diff.old_run, diff.old_counts),
                  _side(diff.labels[1], diff.new_run, diff.new_counts)],
        "warnings": list(diff.warnings),
        "ignore": list(diff.ignore),
        "context": [{"field": c.field, "old": words.value_words(c.old), "new": words.value_words(c.new)}
                    for c in diff.context],
        "counts": [{
            "name": name.replace("_", " "),
            "value": words.arrow(diff.old_counts[name], diff.new_counts[name]),
            "changed": diff.old_counts[name] != diff.new_counts[name],
        } for name in count_names],
        "compiles": [_compile(c) for c in diff.compiles[:LIST_SHOWN]],
        "compiles_hidden": max(len(diff.compiles) - LIST_SHOWN, 0),
        "failure_kinds": [_failure_kind(kind, old, new) for kind, old, new in diff.failures_by_kind],
        "topologies": [_topology(t) for t in changed_topologies[:LIST_SHOWN]],
        "topologies_hidden": max(len(changed_topologies) - LIST_SHOWN, 0),
        "wording_only": diff.wording_only()[:LIST_SHOWN],
        "unchanged": [{
            "label": words.topology_label(t),
            "count": t.new.count,
            "facts": "; ".join(t.facts),
        } for t in diff.topologies_with("unchanged")],
        "moved": diff.moved_samples,
        "moves": [_move(m) for m in diff.moves[:LIST_SHOWN]],
        "moves_hidden": max(len(diff.moves) - LIST_SHOWN, 0),
        "dimensions": [_dimension(d) for d in diff.dimensions[:LIST_SHOWN]],
        "dimensions_hidden": max(len(diff.dimensions) - LIST_SHOWN, 0),
        "errors": [{"sample": e.sample, "old": e.old, "new": e.new} for e in diff.errors[:LIST_SHOWN]],
        "errors_hidden": max(len(diff.errors) - LIST_SHOWN, 0),
    }


def _side(label: str, run: dict, counts: dict) -> dict:
    """One analysis's column of the header: its torch, backend, device, model and samples."""
    return {"label": label, "rows": [
        ("torch", run["torch_version"]), ("backend", run["backend"]), ("device", run["device"]),
        ("model", run["model"]), ("samples", number_text(counts["samples"])),
    ]}


def _compile(c: Any) -> dict:
    """A compile that changed, with the first of its guard failures that changed."""
    return {
        "status": c.status,
        "wording_only": c.wording_only,
        "label": words.compile_label(c),
        "words": words.compile_words(c),
        "failures": [_failure(f, mark) for mark, f in words.failure_changes(c)[:DIFF_FAILURES_SHOWN]],
        "failures_hidden": max(len(c.removed_failures) + len(c.added_failures) - DIFF_FAILURES_SHOWN, 0),
    }


def _failure(f: dict, mark: str) -> dict:
    """A guard failure removed or added (``mark``)."""
    return {"mark": mark, "kind": f["kind"], "against": words.against_words(f),
            "guard": f.get("guard"), "text": guard_text(f)}


def _failure_kind(kind: str, old: int, new: int) -> dict:
    """A failure kind's count in each analysis, and the change."""
    return {
        "kind": kind,
        "title": KIND_EXPLANATIONS.get(kind, (kind.replace("_", " ").capitalize(), ""))[0],
        "old": old, "new": new,
        "delta": f"{new - old:+,}" if new != old else "",
    }


def _topology(t: Any) -> dict:
    """A topology that changed: its facts, the samples it gained or lost (or all of them, when
    it is in one analysis only)."""
    return {
        "status": t.status,
        "anchor": f"diff-{t.status}-{(t.new or t.old).id}",
        "label": words.topology_label(t),
        "words": words.topology_words(t),
        "facts": list(t.facts),
        "gained": format_samples(t.gained) if t.old and t.gained else None,
        "lost": format_samples(t.lost) if t.new and t.lost else None,
        "members": format_samples(t.gained or t.lost) if not (t.old and t.new) else None,
        "old_only": list(t.old_only),
        "new_only": list(t.new_only),
    }


def _move(m: Any) -> dict:
    """Samples that moved from one place (topology, error...) to another."""
    return {
        "old": words.place_words(m.old, m.old_note),
        "new": words.place_words(m.new, m.new_note),
        "count": len(m.samples),
        "samples": format_samples(m.samples),
    }


def _dimension(d: Any) -> dict:
    """A dimension whose fields changed."""
    return {
        "dim": d.dim,
        "status": d.status,
        "fields": [{"field": f, "old": words.value_words(a), "new": words.value_words(b)} for f, a, b in d.fields],
    }


def render_diff(diff: CatalogDiff) -> str:
    """The self-contained ``diff.html`` page for a diff. Reads and writes nothing."""
    context = diff_context(diff)
    return ENVIRONMENT.get_template("diff.html").render(
        title=f"guardscope diff: {diff.labels[0]} → {diff.labels[1]}", diff=context)


def write_diff_html(path: str | Path, diff: CatalogDiff) -> Path:
    """Write :func:`render_diff`'s page to ``path`` (atomically); returns the path."""
    return store.write_text(path, render_diff(diff))
