"""The `chit` command: the parser, assembled from the command modules, and
error handling. Each module (processes, keys, submitting, operating, flow,
schedules) adds its commands' parsers (`add_parsers`) and runs them, on the
database or, with `--url`, through the HTTP API."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import chit
from chit import logs
from chit.cli import processes
from chit.cli.flags import Command, Parser, common_flags
from chit.cli.loading import Setup
from chit.errors import ChitError, ConfigError, InvalidRequest, JobNotFound, StoreError


def build_parser(worker_only: bool = False) -> argparse.ArgumentParser:
    """Every command's parser; `worker_only`: `chit worker`'s alone, for its
    start, without the other command modules, which import the HTTP API's
    schemas (some 0.1 s of a worker's 0.4 s start on a 2-core machine)."""
    common, action_common = common_flags(), common_flags(action=True)

    parser = Parser(
        prog="chit",
        description="Durable background jobs: a job table you can query, workers under leases.",
        epilog="Exit codes: 0 ok; 1 the job failed, was cancelled or a wait timed out; "
        "2 bad input or unknown job; 3 the database could not be used.",
    )
    parser.add_argument("--version", action="version", version=f"chit {chit.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Command, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help, description=help)
        p.set_defaults(handler=handler)
        return p

    # Each module adds its commands; in this order `chit --help` lists them.
    processes.add_parsers(command)
    if worker_only:
        return parser
    from chit.cli import flow, keys, operating, schedules, streams, submitting

    keys.add_parsers(command, action_common)
    submitting.add_parsers(command)
    streams.add_parsers(command)
    operating.add_parsers(command)
    flow.add_parsers(command, action_common)
    schedules.add_parsers(command, action_common)
    processes.add_migrate_parser(command)
    return parser


EXIT_BAD_INPUT = 2
EXIT_STORE = 3


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(worker_only=argv[:1] == ["worker"])
    args = parser.parse_args(argv)
    logs.configure(args.log_level, args.log_format or "text")
    # One line per HTTP request would drown the progress `wait --url` prints.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        setup = Setup.from_args(args)
        if setup.settings.log_format != (args.log_format or "text"):  # CHIT_LOG_FORMAT
            logs.configure(args.log_level, setup.settings.log_format)
        return int(args.handler(args, setup))
    except (InvalidRequest, JobNotFound, ConfigError, ValueError) as e:
        print(f"chit: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except StoreError as e:
        print(f"chit: error: {e}", file=sys.stderr)
        return EXIT_STORE
    except ChitError as e:
        print(f"chit: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
