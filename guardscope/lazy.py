"""Names a package exports but imports on first use (PEP 562), so that ``guardscope --help`` and
anything else that needs no torch does not pay for importing it."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str], submodules: tuple[str, ...] = ()
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` for ``exports`` (name -> submodule, relative
    to ``package``) and for ``submodules`` reached as attributes (``guardscope.runtime`` after a
    plain ``import guardscope``). A name is imported once, then kept in the package's namespace."""

    def __getattr__(name: str) -> Any:
        if name in submodules:  # importing it binds it on the package, as the import system does
            return importlib.import_module(f".{name}", package)
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports) | set(submodules))

    return __getattr__, __dir__
