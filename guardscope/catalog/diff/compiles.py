"""Compiles and their guard failures compared (pure), for
:func:`guardscope.catalog.diff.diff_catalogs`.

A compile is identified by :func:`guardscope.catalog.matching.compiles_by_key` (its sample, frame
and rank). A failure is compared on its fields, less the ignored ones, naming the graph it failed
against by the topology that graph serves when that topology is in both analyses, else by the
sample whose compile made it; an ignored field is masked in the guard and reason texts that spell
it too. A compile whose failures fail against the same graphs, with the same outcome, differs in
wording only, whatever kinds its guard texts read as.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

from ...model import FAILURE_FIELDS
from ...text import guard_text, normalize_reason
from .changes import CompileChange, TopologyChange, failure_order
from ..matching import CompileKey, compiles_by_key


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


def _kinds(compile_: dict | None) -> dict[str, int]:
    if compile_ is None:
        return {}
    return dict(sorted(Counter(f["kind"] for f in compile_["failures"]).items()))


def _same_in_production(a: dict, b: dict, old_graphs: dict[str, tuple], new_graphs: dict[str, tuple],
                        fields: tuple[str, ...]) -> bool:
    """Whether one compile's two versions end alike and fail against the same graphs. Their guard
    texts, and the kinds guardscope reads out of them, may differ: that is wording (inductor
    printing ``0<=num_nodes<=1`` where eager printed ``num_nodes==1`` makes an operator guard of a
    0/1 specialization: the same compile, against the same graph, for the same samples)."""
    core = tuple(name for name in ("against",) if name in fields)
    return a.get("fail_type") == b.get("fail_type") and (
        Counter(_failure_signature(f, old_graphs, core) for f in a.get("failures", []))
        == Counter(_failure_signature(f, new_graphs, core) for f in b.get("failures", [])))


def compile_changes(old: dict, new: dict, topologies: tuple[TopologyChange, ...],
                    fields: tuple[str, ...]) -> tuple[CompileChange, ...]:
    """Each compile in one analysis only, or in both with other failures or outcome, in sample
    order; ``topologies`` (the diff's) name the graphs failures failed against, ``fields`` are
    the failure fields compared."""
    old_compiles, new_compiles = compiles_by_key(old), compiles_by_key(new)
    old_graphs = _graph_identities(old_compiles, topologies, "old")
    new_graphs = _graph_identities(new_compiles, topologies, "new")
    old_topology, new_topology = _topology_ids(old), _topology_ids(new)
    old_sample = {c["compile_id"]: key[0] for key, c in old_compiles.items()}
    new_sample = {c["compile_id"]: key[0] for key, c in new_compiles.items()}
    changes = []
    for key in sorted(set(old_compiles) | set(new_compiles), key=_sort_key):
        a, b = old_compiles.get(key), new_compiles.get(key)
        old_failures = [(_failure_signature(f, old_graphs, fields), _annotated(f, old_sample, old_topology))
                        for f in (a or {}).get("failures", [])]
        new_failures = [(_failure_signature(f, new_graphs, fields), _annotated(f, new_sample, new_topology))
                        for f in (b or {}).get("failures", [])]
        removed = sorted(_unmatched(old_failures, new_failures), key=failure_order)
        added = sorted(_unmatched(new_failures, old_failures), key=failure_order)
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


def failures_by_kind(old: dict, new: dict) -> tuple[tuple[str, int, int], ...]:
    a = old.get("summary", {}).get("failures_by_kind", {})
    b = new.get("summary", {}).get("failures_by_kind", {})
    return tuple((kind, a.get(kind, 0), b.get(kind, 0)) for kind in sorted(set(a) | set(b)))

