"""torch's declarative dynamic shapes (``torch.fx.experimental.dynamic_spec``, experimental):
a ``ShapesSpec`` handed to ``torch.compile``, whose keyword is detected, not inferred from the
version (:func:`spec_support`):

* torch 2.13.0: ``torch.compile(..., shapes_spec=ShapesSpec(...))``;
* torch 2.14.0 and 2.14.1: ``torch.compile(..., dynamic_shapes=ShapesSpec | ParamsSpec | dict)``
  (``shapes_spec=`` is gone), and ``dynamic_spec(spec)`` attaches a spec to a function or ``forward``;
* torch 2.9 to 2.12 have no ``torch.fx.experimental.dynamic_spec``.

(Versions read: the installed sources of torch 2.13.0+cpu and 2.14.1, whose modules have the same
names: ``ShapeVar``, ``TensorSpec``, ``ObjectSpec``, ``SeqSpec``, ``DictSpec``, ``ShapesSpec``;
the wheels of 2.9.1, 2.10.0, 2.11.0 and 2.12.1, which have no such module.)

A spec names the dims that are unbacked (a ``ShapeVar`` in a ``TensorSpec``) by the compiled
function's parameter names, nested through ``ObjectSpec`` (attributes), ``SeqSpec`` (list and
tuple positions) and ``DictSpec`` (keys). Torch's rule: every dim a spec does not name is static,
and ``dynamic=`` cannot be given with it. :func:`shapes_spec_of` builds one from guardscope's
``(argument path, dim, rank)`` triples, the form the generated ``unbacked.py`` carries too (its
own ``shapes_spec()`` builds the same spec with no guardscope import: verify compares the two).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

import torch

_ROOT = re.compile(r"[A-Za-z_]\w*")
_STEP = re.compile(r"\.(\w+)|\[(\d+)\]|\['(\w+)'\]")


# torch.compile's keyword for a ShapesSpec, newest first: 2.14's, then 2.13's.
KEYWORD_DYNAMIC_SHAPES, KEYWORD_SHAPES_SPEC = "dynamic_shapes", "shapes_spec"
SPEC_KEYWORDS = (KEYWORD_DYNAMIC_SHAPES, KEYWORD_SHAPES_SPEC)
SPEC_MODULE = "torch.fx.experimental.dynamic_spec"
# What shapes_spec_of builds a spec from (and the generated unbacked.py's shapes_spec() imports).
SPEC_NAMES = ("DictSpec", "ObjectSpec", "SeqSpec", "ShapesSpec", "ShapeVar", "TensorSpec")


@dataclass(frozen=True)
class SpecSupport:
    """Whether the installed torch takes a declarative spec: ``keyword``, the ``torch.compile``
    parameter that takes a ``ShapesSpec`` (``dynamic_shapes`` or ``shapes_spec``), or None with
    ``reason``, the cause detected (the module missing, a name missing from it, or neither keyword
    in ``torch.compile``'s signature)."""

    keyword: str | None
    reason: str | None = None


def spec_support() -> SpecSupport:
    """Detect the declarative spec form this torch takes: the module, the names guardscope builds
    a spec from, and the keyword in ``torch.compile``'s signature (never the version string)."""
    import importlib
    import importlib.util
    import inspect

    version = str(torch.__version__).split("+")[0]
    try:
        found = importlib.util.find_spec(SPEC_MODULE) is not None
    except ModuleNotFoundError:  # pragma: no cover - a torch without torch.fx.experimental
        found = False
    if not found:
        return SpecSupport(None, f"torch {version} has no {SPEC_MODULE} (torch 2.13 and 2.14 have it)")
    module = importlib.import_module(SPEC_MODULE)
    missing = [name for name in SPEC_NAMES if not hasattr(module, name)]
    if missing:
        return SpecSupport(None, f"torch {version}'s {SPEC_MODULE} has no {', '.join(missing)}")
    parameters = inspect.signature(torch.compile).parameters
    for keyword in SPEC_KEYWORDS:
        if keyword in parameters:
            return SpecSupport(keyword)
    return SpecSupport(None, (
        f"torch {version} has {SPEC_MODULE}, but torch.compile takes neither dynamic_shapes= (torch 2.14) nor "
        f"shapes_spec= (torch 2.13); its parameters: {', '.join(parameters)}"))


def supports_shapes_spec() -> bool:
    """Whether this torch has ``torch.fx.experimental.dynamic_spec`` and a ``torch.compile``
    keyword that takes its ``ShapesSpec`` (:func:`spec_support`)."""
    return spec_support().keyword is not None


def spec_keyword() -> str | None:
    """``dynamic_shapes`` (torch 2.14), ``shapes_spec`` (torch 2.13), or None (:func:`spec_support`)."""
    return spec_support().keyword


def spec_compile_kwargs(dims: Iterable[tuple[str, int, int]]) -> dict[str, Any]:
    """``torch.compile``'s keyword arguments for :func:`shapes_spec_of` ``(dims)``, under the
    keyword this torch takes; RuntimeError naming the cause where it takes none."""
    support = spec_support()
    if support.keyword is None:
        raise RuntimeError(support.reason)
    return {support.keyword: shapes_spec_of(dims)}


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
