"""What the commands share: a :class:`GuardscopeError` as a one-paragraph message and exit status
2, and the arguments and options that more than one command declares, each declared once (the
help text, where two commands say it differently, is a parameter)."""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import click

from ..errors import GuardscopeError
from ..options import BACKENDS

Command = Callable[..., Any]
Decorator = Callable[[Command], Command]


def friendly_errors(command: Command) -> Command:
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except GuardscopeError as exc:
            click.secho(f"error: {exc}", fg="red", err=True)
            sys.exit(2)

    return wrapper


# --- arguments and options of several commands ------------------------------------------------------


def analysis_dir(command: Command) -> Command:
    """``DIR``: the analysis folder a command reads (and adds its files to)."""
    return click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=str))(command)


ANALYSED_CORPUS = ("The analysed corpus, when it is no longer where the analysis found it (the folder was copied "
                   "or moved without it). By default: the path catalog.json records relative to DIR, then the "
                   "absolute one in DIR/locations.json.")


def corpus_option(help: str = ANALYSED_CORPUS) -> Decorator:
    """``--corpus DIR``, for every command that reads the analysed corpus."""
    return click.option("--corpus", "corpus", default=None, type=click.Path(file_okay=False, path_type=str), help=help)


def backend_option(default: str | None, help: str) -> Decorator:
    """``--backend``, one of the torch.compile backends guardscope knows."""
    return click.option("--backend", type=click.Choice(BACKENDS), default=default, show_default=True, help=help)


def device_option(default: str | None, help: str) -> Decorator:
    """``--device``: where to compile or run (cpu, cuda, cuda:1...)."""
    return click.option("--device", default=default, show_default=True, help=help)


def mode_option(help: str) -> Decorator:
    """``--mode``: the torch.compile mode, the manifest's unless given."""
    return click.option("--mode", default=None, help=help)


def timeout_option(default: float, help: str) -> Decorator:
    """``--timeout SECONDS`` for the child processes a command starts."""
    return click.option("--timeout", type=float, default=default, show_default=True, help=help)


def artifact_option(choices: tuple[str, ...], help: str) -> Decorator:
    """``--artifact NAME``, repeatable: which of the analysis's plans a command works on."""
    return click.option("--artifact", "artifacts", multiple=True, type=click.Choice(choices), help=help)


def transform_option(help: str) -> Decorator:
    """``--transform SPEC``, repeatable: an input transform (:mod:`guardscope.fixes.transforms`)."""
    return click.option("--transform", "transforms", multiple=True, metavar="SPEC", help=help)


def json_option(help: str) -> Decorator:
    """``--json PATH``: also write the command's document to this path."""
    return click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=str), default=None,
                        help=help)


def exit_code_option(help: str) -> Decorator:
    """``--exit-code``: status 1 when the compared analyses differ (like 'git diff --exit-code')."""
    return click.option("--exit-code", is_flag=True, help=help)
