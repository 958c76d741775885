"""Pure: the names Dynamo's guards use for a call's arguments, mapped to the names the user knows.

Dynamo compiles the code object that ``model(...)`` enters. Usually that is ``forward`` itself and
its guards name the arguments as forward does (``L['x']``). Libraries often wrap ``forward`` in a
decorator — transformers 5 wraps every model's ``forward`` in ``wrapper(self, *args, **kwargs)`` —
and then the frame's locals are the wrapper's: its guards read ``kwargs['input_ids']`` or
``args[0]``. :class:`FrameArguments` records both signatures and rewrites the wrapper's sources
into forward's parameter names (``input_ids``), so every output speaks the user's names.

Sources of later frames (resume functions after a graph break, callees with graph breaks of their
own) are that frame's locals (``___stack0``, ``h``): they are not the model's inputs and are left
as they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# A source in a guard or reason: ``L['kwargs']['input_ids']``, ``kwargs['input_ids']``,
# ``args[0]``, ``x``, each optionally followed by subscripts.
_SOURCE = re.compile(
    r"(?<![\w.])(?:L\[(?P<quote>['\"])(?P<local>\w+)(?P=quote)\]|(?P<bare>[A-Za-z_]\w*))"
    r"(?P<subscripts>(?:\[(?:'[^']*'|\"[^\"]*\"|-?\d+)\])*)"
)
_FIRST_SUBSCRIPT = re.compile(r"^\[(?:'(?P<single>[^']*)'|\"(?P<double>[^\"]*)\"|(?P<index>-?\d+))\]")
_LOCAL = re.compile(r"L\[['\"](\w+)['\"]\]")


def strip_locals(text: str) -> str:
    """``L['x'].size()[0]`` -> ``x.size()[0]`` (torch's own spelling in recompile reasons)."""
    return _LOCAL.sub(lambda m: m.group(1), text)


@dataclass(frozen=True)
class FrameArguments:
    """How the first frame Dynamo compiles receives a call, and forward's own parameters.

    ``frame`` are the frame's named parameters (``self`` first for a module), ``varargs`` and
    ``varkw`` the names of its ``*args``/``**kwargs`` (None when it has none); ``user`` are
    forward's parameters in order, ``self`` left out. ``wrapped`` is True when the frame is a
    wrapper around forward (its code is not forward's): only then are ``args[i]`` and
    ``kwargs['name']`` the user's arguments.
    """

    frame: tuple[str, ...]
    varargs: str | None
    varkw: str | None
    user: tuple[str, ...]
    wrapped: bool

    def user_path(self, path: str) -> str:
        """One source path in the user's names: ``kwargs['input_ids'][0]`` -> ``input_ids[0]``,
        ``args[1]`` -> forward's second parameter. Paths that are not the wrapper's argument
        containers come back unchanged (``L['x']`` loses its ``L[...]``)."""
        match = _SOURCE.fullmatch(path)
        if not match:
            return path
        return self._rename(match)

    def _rename(self, match: re.Match[str]) -> str:
        local = match.group("local") or match.group("bare")
        subscripts = match.group("subscripts") or ""
        if self.wrapped and subscripts and local in (self.varargs, self.varkw):
            first = _FIRST_SUBSCRIPT.match(subscripts)
            if first is not None:
                rest = subscripts[first.end():]
                key = first.group("single") if first.group("single") is not None else first.group("double")
                if local == self.varkw and key is not None and key.isidentifier():
                    return key + rest
                index = first.group("index")
                if local == self.varargs and index is not None and 0 <= int(index) < len(self.user):
                    return self.user[int(index)] + rest
        return local + subscripts

    def rename(self, text: str) -> str:
        """Every source in a guard or recompile reason, in the user's names."""
        if not self.wrapped:
            return strip_locals(text)
        return _SOURCE.sub(self._rename, text)

    def to_json(self) -> dict[str, Any]:
        return {"frame": list(self.frame), "varargs": self.varargs, "varkw": self.varkw,
                "user": list(self.user), "wrapped": self.wrapped}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> FrameArguments | None:
        if not data:
            return None
        return cls(frame=tuple(data.get("frame", ())), varargs=data.get("varargs"), varkw=data.get("varkw"),
                   user=tuple(data.get("user", ())), wrapped=bool(data.get("wrapped")))


PLAIN = FrameArguments(frame=(), varargs=None, varkw=None, user=(), wrapped=False)
