"""The command that compares two analyses: ``diff``."""

from __future__ import annotations

import sys

import click

from ..model import GUARD_TEXT, IGNORABLE
from .common import exit_code_option, friendly_errors, json_option


@click.command()
@click.argument("old", type=click.Path(path_type=str))
@click.argument("new", type=click.Path(path_type=str))
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Also write the diff as a self-contained HTML page to this path.")
@json_option(help="Also write the diff as JSON to this path (every entry, nothing cut).")
@click.option("--ignore", "ignore", multiple=True, metavar="FIELD",
              type=click.Choice(["guard-text", *IGNORABLE]),
              help="Leave this guard-failure field out of the comparison; repeatable. 'guard-text' = "
              "guard and raw, whose printing differs between backends and torch versions.")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True,
              help="Entries shown per list in the terminal (0: all).")
@exit_code_option(help="Exit with status 1 when the analyses differ (like 'git diff --exit-code'); with "
                  "--ignore guard-text, wording alone (facts or guard texts only one side has) does not count.")
@friendly_errors
def diff(old: str, new: str, html_path: str | None, json_path: str | None, ignore: tuple[str, ...],
         limit: int, exit_code: bool) -> None:
    """Show what changed between two analyses: OLD (the baseline) and NEW.

    Each is an analysis folder (from 'guardscope analyze CORPUS --out DIR') or its catalog.json.
    Lists compiles added, removed or failing other guards, failure counts by kind, topologies
    new, vanished or changed (matched by their members, then facts, then graphs, not their
    ids), samples that moved between topologies, and dimension changes. A topology with the same
    members and graphs but other facts is 'reworded': a wording difference, not a production
    one. Context (torch version, backend, compile options) is shown but does not make the
    analyses differ. Nothing is replayed.

    \b
    Examples:
      guardscope diff before/ after/                          # e.g. before and after a torch upgrade
      guardscope diff eager/catalog.json inductor/ --ignore guard-text
      guardscope diff before/ after/ --html diff.html --json diff.json
      guardscope diff before/ after/ --exit-code > /dev/null  # in CI: status 1 when they differ
    """
    from .. import pipeline

    fields = tuple(sorted({f for name in ignore for f in (GUARD_TEXT if name == "guard-text" else (name,))}))
    result = pipeline.diff_analyses(old, new, ignore=fields, html=html_path, json_path=json_path)
    click.echo("\n".join(result.summary_lines(limit=limit)))
    written = [p for p in (html_path, json_path) if p]
    if written:
        click.echo(f"wrote       {', '.join(written)}")
    if exit_code and result.differs:
        sys.exit(1)
