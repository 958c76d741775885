"""Lazily exported names (guardscope.lazy): the package attribute is the exported object, imported
on first use and kept."""

from __future__ import annotations

import types

import guardscope
import guardscope.corpus


def test_exports_resolve_to_the_exported_objects():
    for package in (guardscope, guardscope.corpus):
        for name in package.__all__:
            value = getattr(package, name)
            # Not a submodule of the same name (the import system binds those on the package).
            assert not isinstance(value, types.ModuleType), (package.__name__, name)
            assert not callable(value) or value.__name__ == name, (package.__name__, name)
            assert name in dir(package) and name in vars(package)  # kept after the first use


def test_an_unknown_name_is_an_attribute_error():
    try:
        guardscope.corpus.nothing_here
    except AttributeError as exc:
        assert str(exc) == "module 'guardscope.corpus' has no attribute 'nothing_here'"
    else:
        raise AssertionError("no AttributeError")
