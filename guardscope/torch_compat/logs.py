"""What torch logs, captured in-process: the structured trace tlparse reads, and torch's own
terminal log lines and warnings.

* ``torch._logging._internal.trace_log`` / ``TorchLogsFormatter(trace=True)``: the structured
  trace that tlparse reads (``TORCH_TRACE``). Attaching our own handler captures it in-process.
* ``torch._logging._internal.log_registry`` / ``_is_torch_handler``: the loggers torch registers
  and the terminal handlers it put on them, which :func:`torch_logs_captured` swaps for a
  collector while ``emit-warmup`` tries its plans. The terminal handler's class depends on the
  release: a plain ``logging.StreamHandler`` on stderr in torch 2.9 to 2.13 (versions read:
  2.9.1, 2.10.0, 2.11.0, 2.12.1 and 2.13.0 have no ``_StderrHandler``),
  ``torch._logging._internal._StderrHandler`` (a ``logging.Handler`` that writes to the current
  ``sys.stderr``) in torch 2.14 (2.14.1 read).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import warnings
from typing import Any, Iterator

import torch

from ..text import first_line


# --- structured trace -------------------------------------------------------------------------


def trace_logger() -> logging.Logger:
    """The ``torch.__trace`` logger tlparse's input is written to."""
    from torch._logging import _internal

    return _internal.trace_log


def trace_formatter() -> logging.Formatter:
    """The formatter torch itself uses for ``TORCH_TRACE`` files, so tlparse can read ours."""
    from torch._logging import _internal

    return _internal.TorchLogsFormatter(trace=True)


# --- torch's own log lines ---------------------------------------------------------------------


@dataclasses.dataclass
class TorchLog:
    """What torch's loggers said while :func:`torch_logs_captured` held them: every line as torch
    formats it (for a file), and how many warnings and errors each distinct cause logged."""

    lines: list[str] = dataclasses.field(default_factory=list)
    # (level, cause) -> records: ("error", "GuardOnDataDependentSymNode: failed while attempting
    # to run meta for aten._transformer_encoder_layer_fwd.default")
    causes: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)

    def ranked_causes(self) -> tuple[tuple[str, str, int], ...]:
        """``(level, cause, records)`` per distinct cause, most frequent first."""
        return tuple(sorted(((level, cause, count) for (level, cause), count in self.causes.items()),
                            key=lambda item: (-item[2], item[0], item[1])))


def log_cause(record: logging.LogRecord) -> str:
    """One line naming why a torch record was logged: the exception it carries (its type, then
    the record's own first line), else the record's first line."""
    try:
        message = first_line(record.getMessage())[:200]
    except (TypeError, ValueError):  # a record whose arguments do not format
        message = first_line(record.msg)[:200]
    exc = record.exc_info[1] if record.exc_info else None
    return f"{type(exc).__name__}: {message}" if exc is not None else message


class _Collector(logging.Handler):
    def __init__(self, log: TorchLog, formatter: logging.Formatter | None) -> None:
        super().__init__(logging.DEBUG)
        self.log = log
        if formatter is not None:
            self.setFormatter(formatter)

    # Called inside a compiled model's eager parts too: Dynamo must not try to compile it.
    @torch.compiler.disable
    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.log.lines.append(self.format(record))
        except (TypeError, ValueError):  # as logging does: a record that does not format is reported, not raised
            self.handleError(record)
            return
        if record.levelno >= logging.WARNING:
            key = (record.levelname.lower(), log_cause(record))
            self.log.causes[key] = self.log.causes.get(key, 0) + 1


def terminal_handler_types() -> tuple[type, ...]:
    """The classes of the handlers torch prints to the terminal with: ``logging.StreamHandler``
    (torch 2.9 to 2.13), and ``torch._logging._internal._StderrHandler`` where torch has it (2.14)."""
    from torch._logging import _internal

    stderr = getattr(_internal, "_StderrHandler", None)
    return (logging.StreamHandler,) + ((stderr,) if isinstance(stderr, type) else ())


def _terminal_handlers() -> list[tuple[logging.Logger, logging.Handler]]:
    """The handlers torch put on its registered loggers (``torch``, ``torch._dynamo``,
    ``torch.fx.experimental.symbolic_shapes``...) that print to the terminal: those of exactly a
    :func:`terminal_handler_types` class that it made itself
    (``torch._logging._internal._is_torch_handler``), not its trace handler, a ``TORCH_LOGS_OUT``
    file (subclasses of ``StreamHandler``), or handlers a user added. Registered loggers do not
    propagate, so each record reaches one of these at most."""
    from torch._logging import _internal

    registry = getattr(_internal, "log_registry", None)
    names = registry.get_log_qnames() if registry is not None and hasattr(registry, "get_log_qnames") else {"torch"}
    ours = getattr(_internal, "_is_torch_handler", None)
    kinds = terminal_handler_types()
    found = []
    for name in sorted(names):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if type(handler) in kinds and (ours is None or ours(handler)):
                found.append((logger, handler))
    return found


def _in_torch(filename: str) -> bool:
    folder = os.path.dirname(os.path.abspath(torch.__file__))
    return os.path.abspath(filename).startswith(folder + os.sep)


@contextlib.contextmanager
def torch_logs_captured() -> Iterator[TorchLog]:
    """While held, what torch logs to the terminal (Dynamo's, symbolic shapes' and export's
    warnings and errors with their tracebacks, and what ``TORCH_LOGS`` asked for) and the Python
    warnings torch's own code raises (a prototype API's ``UserWarning``) are kept in the yielded
    :class:`TorchLog` instead, formatted as torch and Python would have printed them. Warnings
    filters still decide what is shown at all; other warnings (the user's, guardscope's) reach
    the terminal as before. torch's handlers are put back afterwards."""
    log = TorchLog()
    held = [(logger, handler, _Collector(log, handler.formatter)) for logger, handler in _terminal_handlers()]
    for logger, handler, collector in held:  # each in its place: a user's handlers keep their order
        logger.handlers[logger.handlers.index(handler)] = collector
    shown = warnings.showwarning

    @torch.compiler.disable  # a warning raised in a compiled model's eager parts: not a frame to compile
    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        if file is not None or not _in_torch(filename):
            shown(message, category, filename, lineno, file, line)
            return
        log.lines.append(warnings.formatwarning(message, category, filename, lineno, line).rstrip("\n"))
        key = ("warning", f"{category.__name__}: {first_line(message)[:200]}")
        log.causes[key] = log.causes.get(key, 0) + 1

    warnings.showwarning = show
    try:
        yield log
    finally:
        if warnings.showwarning is show:
            warnings.showwarning = shown
        for logger, handler, collector in held:
            if collector in logger.handlers:
                logger.handlers[logger.handlers.index(collector)] = handler
            else:
                logger.addHandler(handler)
