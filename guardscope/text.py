"""Pure wording shared by the terminal, the HTML report and ``guardscope diff``: how samples,
seconds, guard texts, dimensions and errors are written. No torch, no files.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

SAMPLE_RANGES_SHOWN = 200  # a member list shows this many runs, then "and N more"

_OBJECT_ID = re.compile(r"(___check_(?:type|obj)_id\([^,]+,\s*)\d+(\))")
# "some/long/path/pkg/model.py:58" and 'File "/abs/pkg/model.py"' -> "pkg/model.py": torch
# shortens paths relative to its own install folder, so the prefix depends on the machine.
_SOURCE_PATH = re.compile(r"[^\s#():\"']*?([^\s/#():\"']+/[^\s/#():\"']+\.py)(?=:\d+|\")")
_DIM_TEXT = re.compile(r"^(?P<input>.+)\.(?P<which>size|stride)\(\)\[(?P<axis>\d+)\]$")


def normalize_reason(text: str) -> str:
    """Make a reason machine-independent: object ids (memory addresses) become ``<id>`` and
    source paths keep their last two components."""
    return _SOURCE_PATH.sub(r"\1", _OBJECT_ID.sub(r"\1<id>\2", text))


def short_location(filename: Any, line: Any = None) -> str | None:
    """``/site-packages/torch_geometric/utils/loop.py`` + 650 -> ``utils/loop.py:650``: the last
    two path components, so locations do not depend on the machine."""
    if not isinstance(filename, str) or not filename:
        return None
    parts = [p for p in filename.replace("\\", "/").split("/") if p]
    where = "/".join(parts[-2:])
    return f"{where}:{line}" if isinstance(line, int) else where


def guard_text(failure: dict) -> str:
    """A failure's raw text without its leading ``0/1: `` (the graph it failed against, shown
    apart)."""
    raw = failure.get("raw") or failure.get("guard") or ""
    prefix = f"{failure.get('against')}: "
    return raw[len(prefix):] if failure.get("against") and raw.startswith(prefix) else raw


def dim_words(dim: str) -> str:
    """``x.size()[0]`` -> ``x dim 0``; ``x.stride()[1]`` -> ``x stride 1``."""
    match = _DIM_TEXT.match(dim)
    if not match:
        return dim
    which = "dim" if match.group("which") == "size" else "stride"
    return f"{match.group('input')} {which} {match.group('axis')}"


def sample_runs(samples: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted sample indices as runs of consecutive indices: [1, 2, 3, 5] -> [(1, 3), (5, 5)]."""
    runs: list[tuple[int, int]] = []
    for index in sorted(set(samples)):
        if runs and index == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], index)
        else:
            runs.append((index, index))
    return runs


def format_samples(samples: Iterable[int], limit: int = SAMPLE_RANGES_SHOWN) -> str:
    """``1–3, 5, 7–9`` for at most ``limit`` runs, then ``… and N more``."""
    runs = sample_runs(samples)
    shown = runs[:limit]
    text = ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in shown)
    hidden = sum(b - a + 1 for a, b in runs[limit:])
    if hidden:
        text += f" … and {hidden:,} more"
    return text or "none"


def format_seconds(value: float | None) -> str:
    """A duration for a reader: ``n/a``, ``123 s``, ``1.23 s``, ``12.3 ms``, ``45 µs``."""
    if value is None:
        return "n/a"
    if value >= 100:
        return f"{value:.0f} s"
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"


def first_line(text: Any) -> str:
    """The first line of a message, whole (a terminal line; files keep the rest)."""
    return (str(text or "").strip().splitlines() or [""])[0]


def exception_line(exc: BaseException, limit: int | None = None) -> str:
    """``Type: first line of the message``, cut to ``limit`` characters when given."""
    line = f"{type(exc).__name__}: {first_line(exc)}" if first_line(exc) else type(exc).__name__
    return line[:limit] if limit else line


def error_text(exc: BaseException, limit: int = 4000) -> str:
    """``Type: message``, the whole message (torch's explanations run to several lines), at most
    ``limit`` characters, with source paths cut to their last two components and object
    addresses masked (outputs must not depend on the machine)."""
    return normalize_reason(f"{type(exc).__name__}: {str(exc).strip()}")[:limit]
