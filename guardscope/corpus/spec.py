"""Resolve a model spec into a model.

A spec is ``"pkg.mod:attr"`` (an importable module) or ``"path/file.py:attr"`` (a source file;
a relative path is tried against the corpus directory first, then the working directory). A source
file imports the modules beside it, as ``python path/file.py`` would: its folder is put on
``sys.path`` (see :func:`_load_file_module`). ``attr`` names an ``nn.Module`` subclass or a
zero-argument factory returning the model; a dotted ``attr`` (``"mod:Factory.build"``) walks
attributes.

Importing runs the user's code: that is the point of a model spec, and the reason a *corpus*
never carries one that is executed on load — the spec is text the user chose to trust.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Callable

from ..errors import ModelSpecError


def split_spec(spec: str) -> tuple[str, str]:
    """Split ``"target:attr"``; raise :class:`ModelSpecError` when the shape is wrong."""
    if not isinstance(spec, str) or spec.count(":") < 1:
        raise ModelSpecError(
            f"model spec {spec!r} is not of the form 'pkg.module:attr' or 'path/file.py:attr'"
        )
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise ModelSpecError(
            f"model spec {spec!r} is not of the form 'pkg.module:attr' or 'path/file.py:attr'"
        )
    return target, attr


def anchored(spec: str, corpus_dir: Path) -> str:
    """A file spec as a corpus must store it: relative to the corpus folder (where it is resolved
    first), so the corpus works from any working directory. A relative path that names a file
    from the working directory but not from the corpus folder is rewritten; anything else is
    kept as given."""
    target, attr = split_spec(spec)
    if not (target.endswith(".py") or "/" in target) or Path(target).is_absolute():
        return spec
    if (corpus_dir / target).is_file() or not (Path.cwd() / target).is_file():
        return spec
    relative = os.path.relpath((Path.cwd() / target).resolve(), corpus_dir.resolve())
    return f"{Path(relative).as_posix()}:{attr}"


def respec(spec: str, corpus_dir: Path, new_dir: Path) -> str:
    """A file spec as another corpus directory must store it (a warmup corpus, a fallback corpus):
    relative to ``new_dir``, pointing at the file the spec names from ``corpus_dir``."""
    target, attr = split_spec(spec)
    if not (target.endswith(".py") or "/" in target) or Path(target).is_absolute():
        return spec
    source = corpus_dir / target if (corpus_dir / target).is_file() else Path.cwd() / target
    return f"{Path(os.path.relpath(source.resolve(), new_dir.resolve())).as_posix()}:{attr}"


def model_label(spec: str) -> str:
    """How terminal and report name a model: ``"small (gnn/model.py)"`` for the spec
    ``"../model.py:small"`` (a file spec is relative to the corpus folder, which would read
    oddly from anywhere else, so only the file's last two path components are kept) and
    ``"build (myapp.models)"`` for ``"myapp.models:build"``."""
    try:
        target, attr = split_spec(spec)
    except ModelSpecError:
        return str(spec)
    if target.endswith(".py") or "/" in target or "\\" in target:
        parts = [part for part in Path(target).parts if part not in ("..", ".", "/")]
        target = "/".join(parts[-2:]) or target
    return f"{attr} ({target})"


def raised_words(exc: BaseException) -> str:
    """An exception in words with its root cause and where that was raised: ``RuntimeError:
    Failed to import x (root cause ModuleNotFoundError: No module named 'y', at
    /app/model.py, line 3)``. The root is the last of its ``__cause__``/``__context__`` chain;
    where, the innermost frame of its traceback (importlib's own frames are not in it)."""
    root, seen = exc, {id(exc)}
    while True:
        following = root.__cause__ or (None if root.__suppress_context__ else root.__context__)
        if following is None or id(following) in seen:
            break
        root = following
        seen.add(id(root))
    words = f"{type(exc).__name__}: {exc}"
    tb = root.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f"{tb.tb_frame.f_code.co_filename}, line {tb.tb_lineno}" if tb is not None else None
    if root is not exc:
        return f"{words} (root cause {type(root).__name__}: {root}" + (f", at {where})" if where else ")")
    return words + (f" (at {where})" if where else "")


def _load_file_module(path: Path, spec: str) -> Any:
    # A stable, path-derived module name: re-resolving the same file reuses the module, and two
    # different files named model.py do not collide.
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    name = f"guardscope_user_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise ModelSpecError(f"model spec {spec!r}: cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    # The file's folder goes on the import path, as ``python path/file.py`` puts it there, so
    # ``models/net.py`` can ``from layers import Block`` with ``models/layers.py`` beside it: at the
    # front (a module beside the file wins over an installed one of the same name, as for a script),
    # once, and for the rest of the process (a factory or a forward may import later). As in any
    # process, a module name already imported is not imported again from a second folder.
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise ModelSpecError(
            f"model spec {spec!r}: importing {path} raised {raised_words(exc)}"
        ) from exc
    return module


def _import_target(target: str, spec: str, base_dirs: tuple[Path, ...]) -> Any:
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target)
        candidates = [path] if path.is_absolute() else [d / path for d in base_dirs]
        for candidate in candidates:
            if candidate.is_file():
                return _load_file_module(candidate.resolve(), spec)
        tried = ", ".join(str(c) for c in candidates)
        raise ModelSpecError(f"model spec {spec!r}: file not found (tried {tried})")
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name is not None and not (target == exc.name or target.startswith(exc.name + ".")):
            # The module was found; a module it imports was not (a broken environment).
            raise ModelSpecError(
                f"model spec {spec!r}: importing {target!r} raised {raised_words(exc)}: a module it imports "
                "is missing"
            ) from exc
        raise ModelSpecError(
            f"model spec {spec!r}: module {target!r} not found ({exc}); "
            "install it or use a 'path/file.py:attr' spec"
        ) from exc
    except Exception as exc:
        raise ModelSpecError(
            f"model spec {spec!r}: importing {target!r} raised {raised_words(exc)}"
        ) from exc


def resolve_callable(spec: str, base_dir: str | Path | None = None) -> Callable[[], Any]:
    """Return the class or factory a spec names, without calling it."""
    target, attr = split_spec(spec)
    base_dirs = tuple(Path(d) for d in (base_dir, Path.cwd()) if d is not None)
    obj = _import_target(target, spec, base_dirs)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ModelSpecError(
                f"model spec {spec!r}: {target!r} has no attribute {attr!r}"
            ) from None
    if not callable(obj):
        raise ModelSpecError(
            f"model spec {spec!r}: {attr!r} is a {type(obj).__name__}, not a class or factory"
        )
    return obj


def load_model(spec: str, base_dir: str | Path | None = None, method: str | None = None) -> Any:
    """Resolve ``spec`` and call it with no arguments; return the model, or with ``method`` (a
    corpus's manifest says which) the model's bound method production compiles
    (``model.forward``). A factory that already returns that bound method is taken as it is.

    >>> model = load_model("samples/gnn/model.py:small")  # doctest: +SKIP
    """
    factory = resolve_callable(spec, base_dir)
    try:
        model = factory()
    except Exception as exc:
        raise ModelSpecError(
            f"model spec {spec!r}: calling {getattr(factory, '__name__', factory)!r}() raised {raised_words(exc)}"
        ) from exc
    if not callable(model):
        raise ModelSpecError(
            f"model spec {spec!r}: the factory returned a {type(model).__name__}, "
            "which cannot be called like a model"
        )
    return model if method is None else bound_method(model, method, spec)


def bound_method(model: Any, method: str, spec: str) -> Any:
    """``model.<method>``, the callable production compiled; ``model`` itself when it already is
    that bound method (a spec whose factory returns ``model.forward``)."""
    if getattr(model, "__name__", None) == method and getattr(model, "__self__", None) is not None:
        return model
    bound = getattr(model, method, None)
    if not callable(bound) or getattr(bound, "__self__", None) is not model:
        raise ModelSpecError(
            f"model spec {spec!r}: the corpus says production compiles the model's method {method!r}, "
            f"but the {type(model).__name__} the spec gives has no such method"
        )
    return bound
