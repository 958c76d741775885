"""Write docs/cli.md, the command line's reference, from the click commands' own help.

    python docs/make_cli_reference.py           # (re)write docs/cli.md
    python docs/make_cli_reference.py --check   # exit 1, with a diff, when docs/cli.md is stale

Each section is the command's ``--help`` as click renders it, at a fixed width and under a fixed
program name, so the text depends neither on the terminal (``COLUMNS``) nor on how guardscope was
started. ``tests/unit/test_cli_reference.py`` regenerates it in-process and fails when it differs.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # run as a file: make the repository root importable
    sys.path.insert(0, str(ROOT))

import click  # noqa: E402

from guardscope.cli import main as cli  # noqa: E402

REFERENCE = ROOT / "docs" / "cli.md"
COMMAND = "python docs/make_cli_reference.py"
PROGRAM = "guardscope"
# What click prints in any terminal of 80 columns or more: its help is at most max_content_width (80)
# less 2 wide. Fixed, so COLUMNS and the terminal do not matter.
WIDTH = 78


def _context(command: click.Command, name: str, parent: click.Context | None = None) -> click.Context:
    """The context ``guardscope [NAME] --help`` would render in, but at WIDTH columns whatever the terminal."""
    settings = {**command.context_settings, "terminal_width": WIDTH, "max_content_width": WIDTH}
    return click.Context(command, parent=parent, info_name=name, **settings)


def _section(title: str, help_text: str) -> str:
    return f"## `{title}`\n\n```text\n{help_text}\n```\n"


def render() -> str:
    """docs/cli.md's text: a header, then the group's help and each command's, in the order
    ``guardscope --help`` lists them."""
    group = _context(cli, PROGRAM)
    names = cli.list_commands(group)
    sections = [_section(PROGRAM, cli.get_help(group))]
    for name in names:
        command = cli.commands[name]
        sections.append(_section(f"{PROGRAM} {name}", command.get_help(_context(command, name, parent=group))))
    index = ", ".join(f"[`{name}`](#{PROGRAM}-{name})" for name in names)
    header = (f"# `{PROGRAM}` command-line reference\n\n"
              f"Generated from the commands' own `--help` by `{COMMAND}`; do not edit it by hand.\n"
              f"After a change to a command's options or help, run the script again (`{COMMAND} --check`\n"
              f"and `tests/unit/test_cli_reference.py` fail while this page is stale).\n\n"
              f"Commands: {index}.\n")
    return "\n".join([header, *sections])


def difference(current: str, generated: str) -> str:
    """'' when docs/cli.md is current, else what to run and a unified diff."""
    if current == generated:
        return ""
    diff = difflib.unified_diff(current.splitlines(keepends=True), generated.splitlines(keepends=True),
                                fromfile="docs/cli.md", tofile="docs/cli.md (generated)")
    return f"docs/cli.md is stale: run `{COMMAND}` and commit docs/cli.md.\n" + "".join(diff)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write docs/cli.md from the click commands' own help.")
    parser.add_argument("--check", action="store_true", help="Only check that docs/cli.md is current (exit 1 if not).")
    arguments = parser.parse_args(argv)
    generated = render()
    if arguments.check:
        current = REFERENCE.read_text(encoding="utf-8") if REFERENCE.is_file() else ""
        message = difference(current, generated)
        if message:
            sys.stderr.write(message)
            return 1
        print("docs/cli.md is current")
        return 0
    REFERENCE.write_text(generated, encoding="utf-8", newline="\n")
    print(f"wrote docs/cli.md ({len(cli.commands)} commands)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
