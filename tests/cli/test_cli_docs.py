"""Every `chit` command has help text and is documented in README.md (as in
sqlite-utils' tests/test_docs.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from chit.cli.main import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def subcommands() -> dict[str, tuple[str | None, argparse.ArgumentParser]]:
    """Each command name with its one-line help and its parser."""
    parser = build_parser()
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {choice.dest: choice.help for choice in action._choices_actions}
    return {name: (helps.get(name), sub) for name, sub in action.choices.items()}


COMMANDS = sorted(subcommands())


def test_the_commands_design_md_names_exist() -> None:
    assert set(COMMANDS) >= {
        "up",
        "worker",
        "submit",
        "status",
        "wait",
        "list",
        "failures",
        "replay",
        "cancel",
        "prune",
        "stats",
        "migrate",
    }


@pytest.mark.parametrize("name", COMMANDS)
def test_command_has_help_text(name: str) -> None:
    help_text, parser = subcommands()[name]
    assert help_text and len(help_text) > 10, f"`chit {name}` has no help in `chit --help`"
    assert parser.description, f"`chit {name} --help` has no description"
    text = parser.format_help()
    assert text.startswith(f"usage: chit {name}")
    assert "--json" in text


def test_top_level_help_lists_every_command() -> None:
    text = build_parser().format_help()
    for name in COMMANDS:
        assert f"    {name} " in text, name


@pytest.mark.parametrize("name", COMMANDS)
def test_command_is_documented_in_the_readme(name: str) -> None:
    assert f"chit {name}" in README.read_text(), f"README.md does not mention `chit {name}`"
