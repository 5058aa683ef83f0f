"""Every ``fedstrata`` command the README and the docs show is one the CLI accepts.

Each command line in a fenced block is parsed by the real command tree (sub-commands,
options, their types and counts) without running it, so a renamed option or command
fails here instead of in a reader's terminal. Whether the command does what the text
says is the business of the tests of that command.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

# typer >= 0.26 parses with its own copy of click: its errors, not the click package's
from typer._click.exceptions import UsageError

from fedstrata.cli import app

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)


def shown_commands() -> list[tuple[str, str]]:
    """(page, command line) of every ``fedstrata ...`` invocation in a fenced block."""
    out = []
    for page in PAGES:
        for block in FENCE.findall(page.read_text(encoding="utf-8")):
            for line in block.replace("\\\n", " ").splitlines():
                for part in re.split(r"&&|;|\|", line.split(" #")[0]):
                    part = part.strip().removeprefix("$ ")
                    if part.startswith("fedstrata "):
                        out.append((page.name, part))
    return out


def parse(line: str) -> None:
    """Parse ``line`` with the CLI's command tree; raise the CLI's UsageError if it refuses."""
    args = shlex.split(line)[1:]
    command = typer.main.get_command(app)
    ctx = command.make_context("fedstrata", args)
    while hasattr(command, "resolve_command"):  # a group: parse the sub-command it names
        rest = [*ctx._protected_args, *ctx.args]  # what the group passes on
        name, command, rest = command.resolve_command(ctx, rest)
        ctx = command.make_context(name, rest, parent=ctx)


COMMANDS = shown_commands()


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 15
    assert {"README.md", "scenarios.md", "sweeps.md"} <= {page for page, _ in COMMANDS}


@pytest.mark.parametrize(("page", "line"), COMMANDS, ids=[f"{p}:{c}"[:80] for p, c in COMMANDS])
def test_a_shown_command_parses(page, line):
    parse(line)


@pytest.mark.parametrize(
    "line",
    [
        "fedstrata run scenarios/paper-flat.yaml --no-such-option",
        "fedstrata sweep scenarios/paper-flat.yaml --repeats many",
        "fedstrata no-such-command",
        "fedstrata broker no-such-sub",
    ],
)
def test_a_stale_command_is_refused(line):
    with pytest.raises(UsageError):
        parse(line)
