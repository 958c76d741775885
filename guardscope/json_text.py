"""The one JSON style of every file guardscope writes (:func:`dumps`): stable, indented,
newline-terminated, and a list of more than a few ints on one line — an analysis of millions of
calls lists them all, and the indented encoder is pure Python (~1 us an int). :func:`as_read`
gives a document as reading it back would, its long int lists kept as the objects they are."""

from __future__ import annotations

import json
import re
from array import array
from typing import Any

# Lists of more ints than this are written on one line (a topology's samples: millions at scale).
_INLINE_INTS = 32
# Lists of more ints than this are formatted by Arrow (:func:`ints_text`), this many at a time.
_ARROW_INTS = 4096
_ARROW_STEP = 1 << 20


def ints_text(values: Any, separator: str = ", ") -> str:
    """A list of ints as compact JSON (``[1, 2, 3]``). A long one (an analysis's members: millions
    at scale) is formatted by Arrow's cast to strings, a million at a time: ~4x faster than
    Python's ``str`` an int, and no list of them all."""
    if len(values) <= _ARROW_INTS:
        return "[" + separator.join(map(str, values)) + "]"
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        numbers = np.asarray(values, dtype=np.int64)  # an array('q') is not copied
    except OverflowError:  # an int beyond 64 bits
        return "[" + separator.join(map(str, values)) + "]"
    parts = []
    for start in range(0, len(numbers), _ARROW_STEP):
        strings = pc.cast(pa.array(numbers[start:start + _ARROW_STEP]), pa.string())
        whole = pa.ListArray.from_arrays(pa.array([0, len(strings)], pa.int32()), strings)
        parts.append(pc.binary_join(whole, separator)[0].as_py())
    return "[" + separator.join(parts) + "]"


class _LongInts:
    """A document's long lists of ints swapped for placeholder strings (and back): the indented
    encoder is pure Python (~1 us an int), and an analysis of millions of calls lists them all."""

    def __init__(self) -> None:
        self.lists: list[Any] = []
        self.nonce = f"\0guardscope-ints-{id(self)}-"

    def out(self, value: Any) -> Any:
        if type(value) is array:  # the analysis's members, 8-byte ints
            if len(value) <= _INLINE_INTS:
                return value.tolist()
            return self._held(value)
        if type(value) is dict:
            return {key: self.out(item) for key, item in value.items()}
        if type(value) in (list, tuple):
            if len(value) > _INLINE_INTS and set(map(type, value)) == {int}:
                return self._held(value)
            return [self.out(item) for item in value]
        return value

    def _held(self, value: Any) -> str:
        self.lists.append(value)
        return f"{self.nonce}{len(self.lists) - 1}"

    def back(self, value: Any) -> Any:
        if type(value) is str and value.startswith(self.nonce):
            return self.lists[int(value[len(self.nonce):])]
        if type(value) is dict:
            return {key: self.back(item) for key, item in value.items()}
        if type(value) is list:
            return [self.back(item) for item in value]
        return value


def dumps(data: Any) -> str:
    """The one JSON style of every file guardscope writes: stable, indented, newline-terminated;
    a list of more than a few ints on one line."""
    held = _LongInts()
    text = json.dumps(held.out(data), indent=2, ensure_ascii=False, allow_nan=False)
    if held.lists:
        text = re.sub(f'"{re.escape(json.dumps(held.nonce)[1:-1])}([0-9]+)"',
                      lambda match: ints_text(held.lists[int(match.group(1))]), text)
    return text + "\n"


def as_read(data: Any) -> Any:
    """``data`` as reading its :func:`dumps` back gives it (tuples as lists, keys as strings),
    but for its long lists of ints, which stay the objects they are: an analysis hands the catalog
    it wrote to the report without parsing millions of members back into Python ints."""
    held = _LongInts()
    return held.back(json.loads(json.dumps(held.out(data), ensure_ascii=False, allow_nan=False)))
