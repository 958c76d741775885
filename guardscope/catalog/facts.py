"""Facts read from a compiled entry's guards (pure): guard lines in, plain-words facts out.

A topology's *facts* are read from the guards of the cache entry that served its samples: every
constraint the entry has that not all entries share ("local_edge_index dim 1 is 0",
"cross_edge_index dim 1 equals local_edge_index dim 1"). :func:`guard_atoms` normalises one
entry's guard lines into constraints (atoms), :func:`always_equal` folds the equalities every
entry holds, :func:`render_facts` says the rest in words, and :func:`later_frame_facts` does the
same for the later frames' graphs that tell topologies sharing a first-frame graph apart.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

import networkx as nx

from ..model import compile_order
from ..sources import strip_locals
from ..text import any_float_words, dim_words, flag_words, value_words
from .frames import frame_of

_TENSOR_MATCH = re.compile(
    r"check_tensor\((?P<source>[^,]+), .*?torch\.(?P<dtype>\w+), .*?size=\[(?P<size>[^\]]*)\], "
    r"stride=\[(?P<stride>[^\]]*)\]\)"
)
_EQUALITY = re.compile(r"^(?P<a>\S+\.(?:size|stride)\(\)\[\d+\]) == (?P<b>\S+\.(?:size|stride)\(\)\[\d+\])$")
# Inductor's int32-indexing guards ("32*x.size()[0] <= 2147483647"): bounds, not topologies.
# Inductor's indexing bounds: an expression at most about int32 or int64 max ("16*s0 <= 2147483631"
# on CUDA, "<= 2147483646" as the top of a two-sided bound): they depend on the backend, not the input.
_LIMIT = r"(?:21474\d{5}|92233720368547\d{5})"
_OVERFLOW_BOUND = re.compile(rf"<= {_LIMIT}$")
_OVERFLOW_END = re.compile(rf"^(?P<bounded>-?\d+ <= .+?) <= {_LIMIT}$")
# A guard on the frame's inputs reads a local (``L['x']``), not the wrapper's closure or globals.
_ON_INPUTS = re.compile(r"L\[['\"](?!self['\"])\w+['\"]\](?!(?:\[[^\]]*\])*\.__(?:closure|defaults|code|kwdefaults)__)")
_LAYER = re.compile(r"\.layers\[\d+\]")
# The implicit guard of a float input Dynamo did not specialise ("NaN specialization"): any value.
# Torch 2.12.1, 2.13.0 and 2.14.1 write it on the float (``not math.isnan(L['t'])``); 2.11.0 on the
# float passed as a tensor (``not math.isnan(___as_tensor(L['t']).item())``), beside the round
# trip ``L['t'] == ___as_tensor(L['t']).item()``, which every float but NaN passes.
_ANY_FLOAT = re.compile(r"^not math\.isnan\((?:___as_tensor\((?P<tensor>[^()]+)\)\.item\(\)|(?P<name>[^()]+))\)$")
_FLOAT_ROUND_TRIP = re.compile(r"^(?P<name>[^()\s]+) == ___as_tensor\((?P=name)\)\.item\(\)$")
_LOWER_TWO = re.compile(r"^2 <= (?P<dim>\S+\.size\(\)\[\d+\])(?: <= \d+)?$")


Atom = tuple


def _ints(text: str) -> list[int | None]:
    values: list[int | None] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        values.append(int(part) if part.lstrip("-").isdigit() else None)
    return values


def guard_atoms(guards: Iterable[str], rename: Callable[[str], str] = strip_locals) -> set[Atom]:
    """Normalised constraints of one compiled entry, from its guard lines; ``rename`` turns the
    frame's sources into the names facts use (the first frame's: the user's argument names)."""
    atoms: set[Atom] = set()
    static: dict[str, int] = {}
    graph = nx.Graph()
    for line in guards:
        kind, _, body = line.partition(":")
        body = body.strip()
        expression = rename(body.split("  # ")[0].split(" # ")[0]).strip()
        if kind == "TENSOR_MATCH":
            match = _TENSOR_MATCH.search(body)
            if not match:
                continue
            name = rename(match.group("source")).strip()
            atoms.add(("dtype", name, match.group("dtype")))
            for axis, value in enumerate(_ints(match.group("size"))):
                if value is not None:
                    dim = f"{name}.size()[{axis}]"
                    static[dim] = value
                    atoms.add(("size", dim, value))
            for axis, value in enumerate(_ints(match.group("stride"))):
                if value is not None:
                    atoms.add(("stride", f"{name}.stride()[{axis}]", value))
        elif kind in ("LAMBDA_GUARD", "LENGTH_CHECK", "EQUALS_MATCH") and not _ON_INPUTS.search(body.split("  # ")[0]):
            continue  # on globals or on the wrapper's closure (a library's own code), not on inputs
        elif kind == "EQUALS_MATCH":
            # A Python scalar baked into the graph as a constant (``temperature == 0.5``).
            name, equals, value = expression.partition(" == ")
            if equals:
                atoms.add(("value", name.strip(), value.strip()))
        elif kind == "LAMBDA_GUARD" and (_ANY_FLOAT.match(expression) or _FLOAT_ROUND_TRIP.match(expression)):
            # Dynamo's implicit guard on a float it did not specialise: the graph takes any value.
            match = _ANY_FLOAT.match(expression) or _FLOAT_ROUND_TRIP.match(expression)
            atoms.add(("any_float", match.groupdict().get("tensor") or match.group("name")))
        elif kind == "LAMBDA_GUARD":
            equality = _EQUALITY.match(expression)
            lower = _LOWER_TWO.match(expression)
            if equality and ".stride()" not in expression:
                graph.add_edge(equality.group("a"), equality.group("b"))
            elif equality:
                continue  # stride == size: the layout of a contiguous tensor, not a topology fact
            elif lower:
                atoms.add(("ge2", lower.group("dim")))
            elif _OVERFLOW_END.match(expression):
                atoms.add(("relation", _OVERFLOW_END.match(expression).group("bounded")))
            elif expression and not _OVERFLOW_BOUND.search(expression):
                atoms.add(("relation", expression))
        elif kind == "LENGTH_CHECK":
            atoms.add(("relation", rename(body.split(" # ")[0]).strip()))
        elif kind in ("TRUE_MATCH", "FALSE_MATCH") and _ON_INPUTS.search(body.split("  # ")[0]):
            # A bool attribute of an input object (a cache layer's is_initialized): the graph is
            # for one value of it.
            atoms.add(("flag", expression.partition(" == ")[0].strip(), kind == "TRUE_MATCH"))
    # Dims fixed to the same value are equal too: that keeps "les dim 0 equals lei dim 1" a
    # shared constraint when both are 0 in one entry and tied by a guard in another.
    by_value: dict[int, list[str]] = {}
    for dim, value in static.items():
        by_value.setdefault(value, []).append(dim)
    for dims in by_value.values():
        for other in dims[1:]:
            graph.add_edge(dims[0], other)
    for component in nx.connected_components(graph):
        ordered = sorted(component)
        for i, a in enumerate(ordered):
            for b in ordered[i + 1:]:
                atoms.add(("eq", a, b))
    return atoms


def always_equal(shared: set[Atom], rank: dict[str, int]) -> dict[str, str]:
    """Map each dim to the representative of the dims every entry holds equal to it: the one
    of the earliest forward argument, so facts read in the model's own order."""
    graph = nx.Graph()
    graph.add_edges_from((a[1], a[2]) for a in shared if a[0] == "eq")
    aliases = {}
    for component in nx.connected_components(graph):
        representative = min(component, key=lambda d: (rank.get(d, len(rank)), d))
        aliases.update({dim: representative for dim in component})
    return aliases


def render_facts(
    atoms: set[Atom], static_dims: set[str], aliases: dict[str, str], rank: dict[str, int]
) -> tuple[str, ...]:
    """Plain-words facts; equalities that hold in every entry (a scale's rows always match its
    edge count) are folded so only the equalities that define this topology remain."""
    facts: list[tuple[int, str]] = []
    graph = nx.Graph()
    for atom in atoms:
        if atom[0] != "eq" or (atom[1] in static_dims and atom[2] in static_dims):
            continue  # both fixed: their "is N" facts already say it
        a, b = aliases.get(atom[1], atom[1]), aliases.get(atom[2], atom[2])
        if a != b:
            graph.add_edge(a, b)
    for component in nx.connected_components(graph):
        representative, *others = sorted(component, key=lambda d: (rank.get(d, len(rank)), d))
        for other in others:
            facts.append((1, f"{dim_words(other)} equals {dim_words(representative)}"))
    for atom in atoms:
        if atom[0] == "size":
            facts.append((0, f"{dim_words(atom[1])} is {atom[2]}"))
        elif atom[0] == "ge2":
            facts.append((2, f"{dim_words(atom[1])} is at least 2"))
        elif atom[0] == "stride":
            facts.append((3, f"{dim_words(atom[1])} is {atom[2]}"))
        elif atom[0] == "dtype":
            facts.append((4, f"{atom[1]} is {atom[2]}"))
        elif atom[0] == "relation":
            facts.append((5, f"guard: {atom[1]}"))
        elif atom[0] == "value":
            facts.append((-1, value_words(atom[1], atom[2])))
        elif atom[0] == "any_float":
            facts.append((-1, any_float_words(atom[1])))

    # A flag every layer of a cache repeats (is_initialized) is said once, for its first layer.
    said: set[tuple[str, bool]] = set()
    for _, path, value in sorted(atom for atom in atoms if atom[0] == "flag"):
        key = (_LAYER.sub(".layers[*]", path), value)
        if key not in said:
            said.add(key)
            facts.append((-1, flag_words(path, value)))
    return tuple(text for _, text in sorted(facts))


def later_frame_facts(paths: dict[str, list[str]], guards: dict[str, tuple[str, ...]],
                      labels: dict[int, str]) -> dict[str, tuple[str, ...]]:
    """``{topology key: facts}`` for topologies that share their first-frame graph with others
    and differ in a later frame: the facts of each later-frame graph it runs that not all of
    those siblings run, against that frame's other graphs among them, prefixed with the frame.
    A graph whose guards say nothing the others' do not is named by its compile id."""
    siblings: dict[str, list[str]] = {}
    for key, path in paths.items():
        siblings.setdefault(path[0], []).append(key)
    atoms_of: dict[str, set[Atom]] = {}
    facts: dict[str, tuple[str, ...]] = {}
    for keys in siblings.values():
        if len(keys) < 2:
            continue
        runs = {key: set(paths[key][1:]) for key in keys}
        everywhere = set.intersection(*runs.values())
        by_frame: dict[int, set[str]] = {}
        for graph in set().union(*runs.values()) - everywhere:
            by_frame.setdefault(frame_of(graph), set()).add(graph)
        for graph in set().union(*by_frame.values()) if by_frame else ():
            if graph not in atoms_of:
                atoms_of[graph] = guard_atoms(guards.get(graph, ()))
        # The graphs fewest siblings run say most about a topology: they come first.
        runners = {graph: sum(graph in run for run in runs.values()) for graph in set().union(*runs.values())}
        for key in keys:
            found: list[str] = []
            for graph in sorted(runs[key] - everywhere, key=lambda g: (runners[g], compile_order(g))):
                frame = frame_of(graph)
                common = set.intersection(*(atoms_of[g] for g in by_frame[frame]))
                own = atoms_of[graph] - common
                # What no other graph of the frame guards comes first: it tells most.
                unique = own - set().union(*(atoms_of[g] for g in by_frame[frame] if g != graph))
                static = {a[1] for a in atoms_of[graph] if a[0] == "size"}
                words = (render_facts(unique, static, {}, {}) + render_facts(own - unique, static, {}, {})
                         if own else (f"graph {graph}",))
                label = labels.get(frame, f"frame {frame}")
                found.extend(f"in {label}: {text}" for text in words)
            facts[key] = tuple(found)
    return facts
