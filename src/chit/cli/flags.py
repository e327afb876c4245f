"""What the command modules share: the common flags, `--url`/`--api-key`,
`--delay`/`--run-at`, and the way each module adds its commands (`AddCommand`,
which `chit.cli.main` hands to every module's `add_parsers`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, Protocol

from chit import durations
from chit.cli.loading import Setup

# A command's handler: the parsed arguments to an exit code.
Command = Callable[[argparse.Namespace, Setup], int]


class Parser(argparse.ArgumentParser):
    """argparse with chit's errors: one line naming the command and what was
    wrong (an unknown flag by name), pointing at its --help, in place of the
    usage block argparse prints first. Every command's parser is one (argparse
    makes subcommands' parsers of their parent's class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # A command's parser sees all the words after its name, so a word left
        # over is one it does not know: refused here, where the command is known,
        # not by `chit` itself ("chit: error: unrecognized arguments").
        words = list(sys.argv[1:] if args is None else args)
        first = words[0].split("=", 1)[0] if words else ""
        known = any(option.startswith(first) for option in self._option_string_actions)
        if self._subparsers is not None and first.startswith("-") and not known:
            # Before the command: argparse would only say the command is missing.
            self.error(f"unrecognized arguments: {words[0]}")
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


class AddCommand(Protocol):
    """Adds `chit NAME` (with the common flags) run by `handler`; `help` is its
    line in `chit --help` and its description."""

    def __call__(self, name: str, handler: Command, help: str) -> argparse.ArgumentParser: ...


def common_flags(action: bool = False) -> Parser:
    """The flags every command takes. An action's copy (`chit limits set`) has
    no defaults: argparse would write them over the same flag given before the
    action (`chit limits --json set ...`)."""
    d: dict[str, Any] = {"default": argparse.SUPPRESS} if action else {}
    common = Parser(add_help=False)
    common.add_argument(
        "--database-url", help="database URL (CHIT_DATABASE_URL; default sqlite:///chit.db)", **d
    )
    common.add_argument("--app", help="module:queue that registers the handlers (CHIT_APP)", **d)
    common.add_argument("--json", action="store_true", help="print JSON for scripts", **d)
    common.add_argument(
        "--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], **({"default": "INFO"} | d)
    )
    common.add_argument(
        "--log-format",
        choices=["text", "json"],
        help="text (default) or json: one JSON object a line (CHIT_LOG_FORMAT)",
        **d,
    )
    return common


def remote_flags(p: argparse.ArgumentParser, action: bool = False) -> None:
    """`--url` and `--api-key`; on an action, without defaults (as `common_flags`)."""
    d: dict[str, Any] = {"default": argparse.SUPPRESS} if action else {}
    p.add_argument("--url", help="go through the HTTP API at this URL, not the database", **d)
    p.add_argument("--api-key", help="with --url: the API key (CHIT_API_KEY)", **d)


def api_key(args: argparse.Namespace) -> str | None:
    """The key `--url` sends: `--api-key`, else CHIT_API_KEY, else none."""
    return args.api_key or os.environ.get("CHIT_API_KEY") or None


def run_at(args: argparse.Namespace) -> datetime | None:
    """`--delay` or `--run-at` as a time; None when neither is given."""
    if args.delay is not None:
        return datetime.now(UTC) + timedelta(seconds=durations.duration(args.delay))
    if args.run_at is not None:
        return durations.moment(args.run_at)
    return None
