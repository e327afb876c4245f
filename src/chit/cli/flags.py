"""The flags many commands share: the common ones and `--url`/`--api-key`."""

from __future__ import annotations

import argparse
import os
from typing import Any


def common_flags(action: bool = False) -> argparse.ArgumentParser:
    """The flags every command takes. An action's copy (`chit limits set`) has
    no defaults: argparse would write them over the same flag given before the
    action (`chit limits --json set ...`)."""
    d: dict[str, Any] = {"default": argparse.SUPPRESS} if action else {}
    common = argparse.ArgumentParser(add_help=False)
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
