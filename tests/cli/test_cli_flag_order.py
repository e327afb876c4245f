"""A shared flag counts wherever it stands: before a command's action
(`chit limits --url URL clear KIND`) as after it. argparse writes an action's
defaults over what the command's own parser read, which once sent
`chit limits --url URL clear KIND` to the database, silently."""

from __future__ import annotations

import pytest

from chit.cli.main import build_parser
from support.cli import Cli, assert_refused, ok

DOWN = "http://127.0.0.1:9"  # nothing listens on the discard port

ACTIONS = [
    ["keys", "list"],
    ["limits", "clear", "k"],
    ["limits", "set", "k", "--concurrency", "2"],
    ["schedules", "pause", "s"],
    ["schedules", "add", "s", "--kind", "echo", "--every", "1m"],
]

SHARED = [
    ("--database-url", "sqlite:///elsewhere.db", "database_url"),
    ("--app", "some.module:queue", "app"),
    ("--log-level", "ERROR", "log_level"),
    ("--log-format", "json", "log_format"),
]


@pytest.mark.parametrize("args", ACTIONS, ids=" ".join)
@pytest.mark.parametrize(("flag", "value", "dest"), SHARED, ids=[s[0] for s in SHARED])
def test_a_shared_flag_before_the_action_is_kept(
    args: list[str], flag: str, value: str, dest: str
) -> None:
    command, *rest = args
    before = build_parser().parse_args([command, flag, value, *rest])
    after = build_parser().parse_args([*args, flag, value])
    assert getattr(before, dest) == getattr(after, dest) == value


@pytest.mark.parametrize("args", ACTIONS, ids=" ".join)
def test_json_before_the_action_is_kept_and_defaults_stay(args: list[str]) -> None:
    command, *rest = args
    assert build_parser().parse_args([command, "--json", *rest]).json is True
    plain = build_parser().parse_args(args)
    assert (plain.json, plain.log_level, plain.database_url) == (False, "INFO", None)


@pytest.mark.parametrize("args", [a for a in ACTIONS if a[0] != "keys"], ids=" ".join)
def test_url_before_the_action_goes_to_the_server(cli: Cli, args: list[str]) -> None:
    command, *rest = args
    assert_refused(cli(command, "--url", DOWN, *rest), 3, f"cannot reach the chit API at {DOWN}")


def test_a_flag_given_both_sides_takes_the_later(cli: Cli) -> None:
    argv = ["limits", "--log-level", "DEBUG", "clear", "k", "--log-level", "WARNING"]
    parsed = build_parser().parse_args(argv)
    assert parsed.log_level == "WARNING"
    assert ok(cli("keys", "--json", "list")).json() == ok(cli("keys", "list", "--json")).json()
