"""torch 2.13's declarative dynamic shapes: ``torch.compile(..., shapes_spec=ShapesSpec(...))``
(``torch.fx.experimental.dynamic_spec``, experimental; absent in 2.11).

A spec names the dims that are unbacked (a ``ShapeVar`` in a ``TensorSpec``) by the compiled
function's parameter names, nested through ``ObjectSpec`` (attributes), ``SeqSpec`` (list and
tuple positions) and ``DictSpec`` (keys). Torch's rule: every dim a spec does not name is static,
and ``dynamic=`` cannot be given with it. :func:`shapes_spec_of` builds one from guardscope's
``(argument path, dim, rank)`` triples, the form the generated ``unbacked.py`` carries too (its
own ``shapes_spec()`` builds the same spec with no guardscope import: verify compares the two).
"""

from __future__ import annotations

import re
from typing import Any, Iterable

import torch

_ROOT = re.compile(r"[A-Za-z_]\w*")
_STEP = re.compile(r"\.(\w+)|\[(\d+)\]|\['(\w+)'\]")


def supports_shapes_spec() -> bool:
    """Whether this torch has ``torch.fx.experimental.dynamic_spec`` and ``torch.compile(...,
    shapes_spec=)``."""
    import importlib.util
    import inspect

    try:
        found = importlib.util.find_spec("torch.fx.experimental.dynamic_spec") is not None
    except ModuleNotFoundError:  # pragma: no cover - a torch without torch.fx.experimental
        return False
    return found and "shapes_spec" in inspect.signature(torch.compile).parameters


def path_steps(path: str) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """``cache.layers[0].keys`` as ``("cache", (("attribute", "layers"), ("index", 0),
    ("attribute", "keys")))``; ValueError for text that is not such a path."""
    root = _ROOT.match(path)
    if root is None:
        raise ValueError(f"{path!r} is not an argument path")
    steps, position = [], root.end()
    while position < len(path):
        step = _STEP.match(path, position)
        if step is None:
            raise ValueError(f"{path!r} is not an argument path (at {path[position:]!r})")
        attribute, index, key = step.groups()
        steps.append(("attribute", attribute) if attribute is not None
                     else ("index", int(index)) if index is not None else ("key", key))
        position = step.end()
    return root.group(0), tuple(steps)


def shapes_spec_of(dims: Iterable[tuple[str, int, int]]) -> Any:
    """A ``ShapesSpec`` making each ``(argument path, dim, rank)`` unbacked (a ``ShapeVar`` named
    ``path.size()[dim]``); the tensor at a path has ``rank`` dims, the others static. ValueError
    when a path reaches one value both by attribute and by position, or a dim outside its rank."""
    from torch.fx.experimental.dynamic_spec import DictSpec, ObjectSpec, SeqSpec, ShapesSpec, ShapeVar, TensorSpec

    tree: dict[Any, Any] = {}
    for path, axis, rank in dims:
        if not 0 <= axis < rank:
            raise ValueError(f"dim {axis} of {path} is outside its {rank} dims")
        root, steps = path_steps(path)
        node = tree.setdefault(("root", root), {})
        for step in steps:
            node = node.setdefault(step, {})
        leaf = node.setdefault("tensor", [None] * rank)
        if len(leaf) != rank:
            raise ValueError(f"{path} is given {len(leaf)} and {rank} dims")
        leaf[axis] = ShapeVar(f"{path}.size()[{axis}]")

    def build(node: dict[Any, Any], where: str) -> Any:
        if "tensor" in node:
            if len(node) > 1:
                raise ValueError(f"{where} is both a tensor and a container")
            return TensorSpec(node["tensor"])
        kinds = {kind for kind, _ in node}
        if len(kinds) != 1:
            raise ValueError(f"{where} is reached both by {' and by '.join(sorted(kinds))}")
        kind = kinds.pop()
        if kind == "attribute":
            return ObjectSpec({name: build(child, f"{where}.{name}") for (_, name), child in node.items()})
        if kind == "key":
            return DictSpec({name: build(child, f"{where}[{name!r}]") for (_, name), child in node.items()})
        positions = {index: child for (_, index), child in node.items()}
        return SeqSpec([build(positions[i], f"{where}[{i}]") if i in positions else None
                        for i in range(max(positions) + 1)])

    return ShapesSpec({name: build(child, name) for (_, name), child in tree.items()})
