"""Pure wording shared by the terminal, the HTML report and ``guardscope diff``: how samples,
seconds, guard texts, dimensions and errors are written. No torch, no files.
"""

from __future__ import annotations

import re
from array import array
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


# What a dim of a library object's tensor is, in the words its users use: a transformers cache
# layer's keys and values are [batch, heads, cached tokens, head size]; a PyG batch's ``ptr`` has
# one entry per graph and one more, its ``batch`` one per node.
_ROLES: tuple[tuple[re.Pattern[str], dict[str, str]], ...] = (
    (re.compile(r".*\.layers\[\d+\]\.(?:keys|values)$"),
     {"0": "batch size", "1": "heads", "2": "cache length", "3": "head size"}),
    (re.compile(r".*\.ptr$"), {"0": "number of graphs + 1"}),
    (re.compile(r".*\.batch$"), {"0": "number of nodes"}),
    (re.compile(r".*\.edge_index$"), {"1": "number of edges"}),
)


def dim_words(dim: str) -> str:
    """``x.size()[0]`` -> ``x dim 0``; ``x.stride()[1]`` -> ``x stride 1``; a dim a library gives
    a meaning gets it first: ``cache length (cache.layers[0].keys dim 2)``."""
    match = _DIM_TEXT.match(dim)
    if not match:
        return dim
    which = "dim" if match.group("which") == "size" else "stride"
    words = f"{match.group('input')} {which} {match.group('axis')}"
    if which == "dim":
        for pattern, roles in _ROLES:
            if pattern.match(match.group("input")) and match.group("axis") in roles:
                return f"{roles[match.group('axis')]} ({words})"
    return words


# A bool attribute a library gives a meaning: a transformers cache layer that is not initialized
# holds no tokens yet, which is generate()'s prefill call; an initialized one, a decode step.
_FLAG_ROLES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"(?P<cache>.*)\.layers\[\d+\]\.is_initialized$"),
     "decode step: {cache} holds tokens ({path} is True)", "prefill: {cache} is empty ({path} is False)"),
)


def flag_words(path: str, value: bool) -> str:
    """A topology fact from a guard on a bool attribute: ``prefill: cache is empty
    (cache.layers[0].is_initialized is False)``, else ``x.flag is True``."""
    for pattern, true, false in _FLAG_ROLES:
        match = pattern.match(path)
        if match:
            return (true if value else false).format(path=path, **match.groupdict())
    return f"{path} is {value}"


def value_words(path: str, value: str) -> str:
    """A topology fact from a guard that bakes a Python scalar into the graph as a constant
    (``temperature == 0.5``): ``temperature is 0.5``."""
    return f"{path} is {value}"


def any_float_words(path: str) -> str:
    """A topology fact from the implicit guard of a float Dynamo did not specialise
    (``not math.isnan(temperature)``): the graph takes any value of it."""
    return f"{path} is any float but NaN"


TORCH_LOG_CAUSES_SHOWN = 5  # distinct causes of torch's log lines a terminal lists, the most frequent first


def torch_log_lines(causes: Iterable[tuple[str, str, int]], log_file: Any, during: str) -> list[str]:
    """What the terminal says, after ``torch``, of the warnings and errors torch logged during a
    command, whose lines went to ``log_file``: one line per distinct cause (``(level, cause,
    records)``, most frequent first), ``logged 4 errors while emit-warmup tried its plans:
    GuardOnDataDependentSymNode: failed while ... (full log: out/emit-warmup.log)``; a line for
    the causes past :data:`TORCH_LOG_CAUSES_SHOWN`; and, when torch logged only what
    ``TORCH_LOGS`` asked for, where those lines went."""
    causes = list(causes)
    if log_file is None:
        return []
    where = f"(full log: {log_file})"
    lines = [f"logged {count} {level}{'' if count == 1 else 's'} while {during}: {cause} {where}"
             for level, cause, count in causes[:TORCH_LOG_CAUSES_SHOWN]]
    hidden = causes[TORCH_LOG_CAUSES_SHOWN:]
    if hidden:
        lines.append(f"logged {sum(c for _, _, c in hidden)} more warnings and errors of {len(hidden)} "
                     f"other causes {where}")
    return lines or [f"logged lines TORCH_LOGS asked for while {during} {where}"]


def sample_runs(samples: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted sample indices as runs of consecutive indices: [1, 2, 3, 5] -> [(1, 3), (5, 5)]."""
    import numpy as np  # a topology of an analysis of millions of calls lists millions

    if isinstance(samples, (array, np.ndarray)):  # a topology's members: viewed, not copied
        indices = np.asarray(samples, dtype=np.int64)
    else:
        indices = np.fromiter(samples, dtype=np.int64)
    if len(indices) > 1 and not (indices[1:] > indices[:-1]).all():  # members come sorted: no sort then
        indices = np.unique(indices)
    if not len(indices):
        return []
    breaks = np.flatnonzero(np.diff(indices) != 1)
    starts = np.concatenate([indices[:1], indices[breaks + 1]]).tolist()
    ends = np.concatenate([indices[breaks], indices[-1:]]).tolist()
    return list(zip(starts, ends))


def format_samples(samples: Iterable[int], limit: int = SAMPLE_RANGES_SHOWN) -> str:
    """``1–3, 5, 7–9`` for at most ``limit`` runs, then ``… and N more``."""
    return format_runs(sample_runs(samples), limit)


def format_runs(runs: list[tuple[int, int]], limit: int = SAMPLE_RANGES_SHOWN) -> str:
    """:func:`format_samples` of samples already as :func:`sample_runs`."""
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


# Dynamo's report of the model's own error met while it ran the model on fake tensors: "...
# RuntimeError when making fake tensor call ... call_function conv2d(...): got RuntimeError('Input
# type (float) and bias type (double) should be the same')".
_FAKE_TENSOR_CALL = re.compile(r"\): got (?P<type>\w+)\((?P<quote>['\"])(?P<message>.*?)(?P=quote)\)")


def error_line(text: Any) -> str:
    """The line that says why a sample raised: its error's first line, or, when that is Dynamo's
    "RuntimeError when making fake tensor call", the model's own error inside it
    (``RuntimeError: Input type (float) and bias type (double) should be the same, raised while
    Dynamo traced the model``)."""
    line = first_line(text)
    if "fake tensor call" in line and (match := _FAKE_TENSOR_CALL.search(str(text))):
        return f"{match['type']}: {match['message']}, raised while Dynamo traced the model"
    return line


def compile_failure_cause(skipped: dict[str, Any]) -> str:
    """Why a compile failed that made Dynamo skip its frame (an entry of catalog.json's
    ``skipped_frames``): the user's exception when the model raised while Dynamo traced it
    (``ValueError: three rows, raised at model.py:7 while Dynamo traced it``), else torch's
    reason (``Unsupported: ...``)."""
    where = f" at {skipped['location']}" if skipped.get("location") else ""
    if skipped.get("error"):
        return f"{first_line(skipped['error'])}, raised{where} while Dynamo traced it"
    return f"{skipped['fail_type']}: {skipped['reason']}" + (f" (at {skipped['location']})" if where else "")


def message_line(exc: BaseException, limit: int | None = None) -> str:
    """The first line of an exception's message (its type name when it has none), cut to
    ``limit`` characters when given."""
    line = first_line(exc) or type(exc).__name__
    return line[:limit] if limit else line


def exception_line(exc: BaseException, limit: int | None = None) -> str:
    """``Type: first line of the message``, cut to ``limit`` characters when given."""
    line = f"{type(exc).__name__}: {first_line(exc)}" if first_line(exc) else type(exc).__name__
    return line[:limit] if limit else line


def error_text(exc: BaseException, limit: int = 4000) -> str:
    """``Type: message``, the whole message (torch's explanations run to several lines), at most
    ``limit`` characters, with source paths cut to their last two components and object
    addresses masked (outputs must not depend on the machine)."""
    return normalize_reason(f"{type(exc).__name__}: {str(exc).strip()}")[:limit]


# --- durations and bench wording (the terminal table and the report share them) ---------------


def format_duration(seconds: float | None) -> str:
    """Set-up and compile times: ``58.40 s``, ``488.12 ms``, ``0 s``."""
    if seconds is None:
        return "—"
    if seconds == 0:
        return "0 s"
    return f"{seconds:.2f} s" if seconds >= 1 else format_ms(seconds * 1e3)


def format_ms(milliseconds: float | None) -> str:
    """Request latencies, two decimals in one unit so columns compare: ``5.00 ms``, ``14.20 s``."""
    if milliseconds is None:
        return "—"
    return f"{milliseconds:.2f} ms" if milliseconds < 1000 else f"{milliseconds / 1e3:.2f} s"


def format_tick(value: float) -> str:
    """An axis tick of a time chart: ``2 s``, ``150 ms``, ``40 µs`` (no trailing zeros)."""
    value = float(f"{value:.6g}")
    if value >= 1:
        return f"{value:g} s"
    if value >= 1e-3:
        return f"{value * 1e3:g} ms"
    return f"{value * 1e6:g} µs"


def format_ratio(value: float) -> str:
    """``957.8x``, ``1.4x``, ``0.04x``: tenths from 1 up, two significant digits below. A plan's
    worst request can be a small fraction of eager's (eager's worst on a CPU, say, is a slow
    first call), and one decimal printed 0.04 as ``0.0x``."""
    return f"{value:.1f}x" if value >= 1 else f"{value:.2g}x"


def missed_targets(row: dict[str, Any]) -> list[str]:
    """The targets a row does not meet (or cannot be shown to meet), in words."""
    words = []
    for key, target in (row["targets"] or {}).items():
        if target["met"]:
            continue
        value, limit = target["value"], target["limit"]
        words.append({
            "recompiles": f"{value} recompiles (at most {limit})",
            "failed_requests": f"{value} failed requests",
            "speedup": (f"speedup {value:.2f}x{' paired' if target.get('basis') == 'paired' else ''} "
                        f"(at least {limit:g}x)" if value is not None
                        else "speedup unknown (no eager row)"),
            "setup_seconds": f"set-up {value:.1f} s (at most {limit:g} s)" if value is not None else "set-up unknown",
            "worst_ratio": (f"worst request {format_ratio(value)} eager's worst (at most {limit:g}x)"
                            if value is not None else f"worst request unknown ({target.get('unknown') or 'no eager row'})"),
        }[key])
    return words


def generation_lines(generation: dict[str, Any]) -> list[str]:
    """The generation figures of a row in words: TTFT, time per output token, compiling
    requests, the worst request."""
    ttft, tpot = generation["ttft"] or {}, generation["tpot"] or {}
    lines = [(f"generation: {generation['requests']} requests ({generation['calls']} forward calls); "
              f"time to first token {format_ms(ttft.get('mean_ms'))} mean, {format_ms(ttft.get('max_ms'))} max; "
              f"time per output token {format_ms(tpot.get('mean_ms'))} mean, {format_ms(tpot.get('p99_ms'))} p99")]
    if generation["compiling_requests"]:
        longest = generation["longest_compile_request"]
        lines.append(f"{generation['compiling_requests']} requests compiled, "
                     f"{format_duration(generation['compile_calls_seconds'])} in their compiling calls; "
                     f"the most in request {longest['request']!r}: {format_duration(longest['compile_seconds'])}")
    worst = generation["worst_request"]
    lines.append(f"worst request {worst['request']!r}: {format_duration(worst['seconds'])} over {worst['calls']} calls"
                 + (f", {worst['graphs']} compiled" if worst["graphs"] else ""))
    return lines


def production_lines(production: dict[str, Any]) -> list[str]:
    """What production lives through under its recompile limits (a catalog's ``production``), in
    words: the limit and where it came from, then one line per frame that reaches it (the sample
    there, and its request and step for tagged traffic; the calls that lose their graph, and what
    happens to them), or the margin of each frame that does not."""
    head = (f"recompile_limit {production['recompile_limit']} ({production['source']}"
            + ("" if production["accumulated_recompile_limit"] >= production["recompile_limit"]
               else f", accumulated {production['accumulated_recompile_limit']}") + ")")
    lines = []
    for frame in production["frames"]:
        where = frame["reached_at"]
        if where is None:
            lines.append(f"{head}: {frame['label']} needs {counted(frame['graphs_needed'], 'graph')}, "
                         f"{frame['margin']} under the limit")
            continue
        at = f"sample {where['sample']}" + (f" (request {where['request']} step {where['step']})"
                                           if "request" in where else "")
        # A frame's calls past its limit all fail (the first frame under fullgraph) or all run eagerly.
        if frame["failed"]:
            lost = (f"; {counted(frame['failed'], 'sample')} ({frame['share']:.1%} of traffic) would FAIL with "
                    "FailOnRecompileLimitHit")
        elif frame["eager"]:
            lost = (f"; {counted(frame['eager'], 'sample')} ({frame['share']:.1%} of traffic) would run it without a "
                    "compiled graph, for the life of the process")
        else:
            lost = ""
        lines.append(f"{head}: {frame['label']} reaches the limit at {at} ({frame['graphs_needed']} graphs "
                     f"needed){lost}")
    if not production["exact"]:
        lines.append("later frames are approximate: some of their graphs were compiled for calls whose first "
                     "frame production runs eagerly, and would not exist there")
    after_eager = production.get("eager_state_samples") or []
    if after_eager:
        lines.append(f"{counted(len(after_eager), 'decode step')} follow an eager step of their request: their KV "
                     "caches were extended by eager code and carry its layout, not the compiled forward's (the "
                     f"warmup rebuilds caches through the compiled forward; first, sample {after_eager[0]})")
    return lines


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """``1 sample``, ``1,234 samples``; ``plural`` where it is not ``noun + "s"`` (topologies)."""
    return f"{number:,} " + (noun if number == 1 else plural or noun + "s")


# --- a guard expression read in words (operator guards: torch printed only the expression) ---

_ATOM = r"(?:ceil\([^()]*\)|[\w.'\[\]]+(?: (?:dim|stride) \d+)?)"
_TIDY: tuple[tuple[re.Pattern[str], Any], ...] = (
    (re.compile(r"L\['(\w+)'\]"), r"\1"),
    (re.compile(r"([\w.'\[\]]+)\.(size|stride)\(\)\[(\d+)\]"), lambda m: f"{m[1]} {'dim' if m[2] == 'size' else 'stride'} {m[3]}"),
    (re.compile(r"\(\(-(\d+)\) \+ ([^()]+)\)"), r"(\2 - \1)"),  # ((-1) + x) -> (x - 1)
    (re.compile(r"1 \+ \(\(([^()]+) - 1\) // (\d+)\)"), r"ceil(\1 / \2)"),  # 1 + (x - 1) // s
    (re.compile(rf"\(({_ATOM})\)"), r"\1"),  # (atom) -> atom
)
_COMPARISONS = (" <= ", " >= ", " == ", " != ", " < ", " > ")


def _split_top(text: str, operators: tuple[str, ...]) -> list[tuple[str, str]]:
    """``text`` cut at each of ``operators`` outside parentheses: [(piece, operator after it)...]."""
    pieces, depth, start, position = [], 0, 0, 0
    while position < len(text):
        char = text[position]
        depth += {"(": 1, ")": -1}.get(char, 0)
        found = next((op for op in operators if depth == 0 and text.startswith(op, position)), None)
        if found:
            pieces.append((text[start:position].strip(), found.strip()))
            position += len(found)
            start = position
            continue
        position += 1
    pieces.append((text[start:].strip(), ""))
    return pieces


def _read_comparison(text: str) -> str | None:
    parts = _split_top(text, _COMPARISONS)
    if len(parts) == 3 and parts[0][1] == parts[1][1] == "<=" and parts[0][0].lstrip("-").isdigit():
        return f"{_unwrapped(parts[1][0])} is between {parts[0][0]} and {parts[2][0]}"
    if len(parts) != 2:
        return None
    (left, operator), (right, _) = parts
    left, right = _unwrapped(left), _unwrapped(right)
    modulo = _split_top(left, (" % ",))
    if len(modulo) == 2 and right == "0" and operator in ("==", "!="):
        value, divisor = _unwrapped(modulo[0][0]), _unwrapped(modulo[1][0])
        return f"{value} is {'not ' if operator == '!=' else ''}a multiple of {divisor}"
    if left.lstrip("-").isdigit() and not right.lstrip("-").isdigit():  # 1 <= x -> x >= 1
        left, right = right, left
        operator = {"<=": ">=", ">=": "<=", "<": ">", ">": "<"}.get(operator, operator)
    words = {"<=": "is at most", ">=": "is at least", "<": "is less than", ">": "is more than",
             "==": "equals", "!=": "differs from"}[operator]
    return f"{left} {words} {right}"


def _unwrapped(text: str) -> str:
    """``(a + b)`` -> ``a + b`` when the parentheses enclose the whole text."""
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        for position, char in enumerate(text):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0 and position < len(text) - 1:
                return text
        text = text[1:-1].strip()
    return text


def guard_reading(guard: str | None) -> str | None:
    """A guard expression as Dynamo prints it (``((1 + (((-1) + L['sample'].size()[2]) // 2)) % 4)
    != 0``) read in words: ``ceil(sample dim 2 / 2) is not a multiple of 4``. Sizes become their
    dims, ``1 + (x - 1) // s`` (the size after a stride-``s`` step) ``ceil(x / s)``; None when the
    expression has no comparison this reads."""
    if not guard:
        return None
    text = _unwrapped(" ".join(guard.split()))
    for _ in range(8):  # nested forms unwrap one level a pass
        before = text
        for pattern, replacement in _TIDY:
            text = pattern.sub(replacement, text)
        if text == before:
            break
    if _split_top(text, (" and ", " or "))[1:]:
        return None  # a compound condition: no single reading
    return _read_comparison(text)
