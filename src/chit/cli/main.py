"""The `chit` command: argument parsing and error handling; the work is in commands.py."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

import chit
from chit import logs
from chit.bounds import CLI_PAGE_MAX, PAGE_SIZE
from chit.cli import commands, flow, schedules
from chit.cli.flags import common_flags, remote_flags
from chit.cli.loading import Setup
from chit.errors import ChitError, ConfigError, InvalidRequest, JobNotFound, StoreError
from chit.jobs import State

Command = Callable[[argparse.Namespace, Setup], int]


def build_parser() -> argparse.ArgumentParser:
    common, action_common = common_flags(), common_flags(action=True)

    parser = argparse.ArgumentParser(
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

    def worker_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--concurrency", type=int, help="jobs run at once (CHIT_CONCURRENCY)")
        p.add_argument(
            "--prefetch", type=int, help="jobs claimed ahead while jobs are short (CHIT_PREFETCH)"
        )
        p.add_argument("--queues", help="comma-separated queues, first first (CHIT_QUEUES)")
        p.add_argument("--lease", type=float, help="lease seconds (CHIT_LEASE_SECONDS)")
        p.add_argument(
            "--grace", type=float, help="seconds to finish jobs on SIGTERM (CHIT_GRACE_SECONDS)"
        )
        p.add_argument(
            "--poll-interval", type=float, help="longest idle wait, seconds (CHIT_POLL_INTERVAL)"
        )
        p.add_argument(
            "--pool",
            help="where sync handlers run: thread (default) or process, which a timeout "
            "really stops (CHIT_POOL)",
        )
        p.add_argument(
            "--max-jobs-per-child",
            type=int,
            help="--pool process: replace a child after N jobs; 0 never (CHIT_MAX_JOBS_PER_CHILD)",
        )
        p.add_argument(
            "--max-memory-per-child",
            type=int,
            metavar="MB",
            help="--pool process: replace a child once its memory passes MB; 0 never "
            "(CHIT_MAX_MEMORY_PER_CHILD)",
        )

    p = command("up", commands.up, "start the HTTP API and workers on one machine")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--demo", action="store_true", help="submit the app's demo jobs at start")
    worker_flags(p)

    p.add_argument("--no-api", action="store_true", help="workers only, no HTTP API")
    p.add_argument("--host", help="API address (CHIT_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="API port (CHIT_PORT, default 8718)")

    p = command("worker", commands.worker, "run a worker process until SIGTERM")
    worker_flags(p)
    p.add_argument(
        "--django",
        metavar="SETTINGS[:BACKEND]",
        help="run a Django project's tasks (chit.contrib.django; backend default 'default')",
    )

    p = command("serve", commands.serve, "run the HTTP API (jobs run in `chit worker`)")
    p.add_argument("--host", help="address to listen on (CHIT_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (CHIT_PORT, default 8718)")

    p = command("keys", commands.keys, "API keys: chit keys create|list|revoke")
    keys = p.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    k = keys.add_parser("create", parents=[action_common], help="create a key; printed once")
    k.add_argument("--tenant", default="", help="the tenant whose jobs it sees ('*': all)")
    k.add_argument("--scopes", default="submit+read", help="submit, read, admin, joined by +")
    k.add_argument("--name", default="", help="a label for people")
    k = keys.add_parser("list", parents=[action_common], help="list keys (never their text)")
    k.add_argument("--all", action="store_true", help="include revoked keys")
    k = keys.add_parser("revoke", parents=[action_common], help="revoke a key by id")
    k.add_argument("key_id")

    p = command("submit", commands.submit, "submit a job: chit submit KIND JSON")
    p.add_argument("kind")
    p.add_argument("payload", metavar="JSON", help='the payload, e.g. \'{"region": "emea"}\'')
    p.add_argument("--idempotency-key", help="submitting the same key again returns the same job")
    p.add_argument("--queue", help="queue name (default: the task's)")
    p.add_argument("--priority", type=int, help="smaller runs first (default: the task's)")
    p.add_argument("--max-attempts", type=int, help="default: the task's or CHIT_MAX_ATTEMPTS")
    p.add_argument("--delay", help="run after this long, e.g. 30s, 5m")
    p.add_argument("--run-at", help="run at this ISO 8601 time")
    p.add_argument(
        "--concurrency-key",
        help="jobs of one key are limited together (the task's key_concurrency, key_rate)",
    )
    p.add_argument(
        "--timeout",
        metavar="DURATION",
        help="an attempt still running after this long (e.g. 90s, 10m) fails 'timed out' "
        "(default: the task's)",
    )
    p.add_argument(
        "--depends-on",
        action="append",
        default=[],
        metavar="ID",
        help="wait for this job to succeed first (repeatable)",
    )
    p.add_argument("--ref", help="with --depends-on: this job's name in the workflow it joins")
    p.add_argument(
        "--run-on",
        choices=["succeeded", "finished"],
        default="succeeded",
        help="with --depends-on: 'finished' runs once they have ended, whatever the outcome",
    )
    p.add_argument(
        "--expires-in",
        metavar="DURATION",
        help="not started within this long (e.g. 30s, 5m), the job ends cancelled",
    )
    p.add_argument(
        "--unique-key",
        help="while a job with this key is waiting, queued or running, return it instead",
    )
    p.add_argument(
        "--debounce-key",
        help="while this key's job has not started, replace its payload and move its start",
    )
    p.add_argument(
        "--debounce",
        metavar="DURATION",
        help="with --debounce-key: start this long after the last submit (e.g. 5s)",
    )
    p.add_argument(
        "--debounce-max",
        metavar="DURATION",
        help="never start later than this long after the first (default 10 x --debounce)",
    )
    p.add_argument("--wait", action="store_true", help="wait for the result")
    p.add_argument(
        "--wait-timeout",
        type=float,
        metavar="SECONDS",
        help="with --wait: give up waiting after this long",
    )
    remote_flags(p)

    p = command("status", commands.status, "show a job, every attempt and its steps")
    p.add_argument("id")

    p = command("workflow", commands.workflow, "show a workflow: its jobs, states and edges")
    p.add_argument("id")
    remote_flags(p)

    p = command("wait", commands.wait, "wait for a job to finish, with a progress bar")
    p.add_argument("id")
    p.add_argument("--timeout", type=float, help="give up after this many seconds")
    remote_flags(p)

    p = command("list", commands.list_jobs, "list jobs, newest first")
    p.add_argument("--state", choices=[s.value for s in State])
    p.add_argument("--kind")
    p.add_argument("--queue")
    p.add_argument(
        "--limit",
        type=_limit,
        default=PAGE_SIZE,
        help=f"1 to {CLI_PAGE_MAX} (default {PAGE_SIZE})",
    )
    p.add_argument("--cursor", help="next_cursor from the previous page")

    command(
        "failures", commands.failures, "failed jobs grouped by kind and first line of the error"
    )

    p = command("replay", commands.replay, "queue failed jobs again, attempts reset to 0")
    p.add_argument("ids", nargs="*", metavar="ID", help="jobs to replay (failed or cancelled)")
    p.add_argument("--kind", help="every failed job of this kind")
    p.add_argument("--error", help="every failed job whose error starts with this")
    p.add_argument("--since", help="failed since: a duration (1h) or an ISO 8601 time")
    p.add_argument("--all", action="store_true", help="every failed job")

    p = command("cancel", commands.cancel, "cancel a queued job, or ask a running one to stop")
    p.add_argument("id")

    p = command(
        "update", commands.update, "change a queued or waiting job: its start, priority, payload"
    )
    p.add_argument("id")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--delay", help="run after this long from now, e.g. 30s, 5m")
    when.add_argument("--run-at", help="run at this ISO 8601 time")
    p.add_argument("--priority", type=int, help="smaller runs first")
    p.add_argument("--payload", metavar="JSON", help="a new payload, checked as at submit")

    p = command("run-now", commands.run_now, "make a delayed job due at once")
    p.add_argument("id")

    p = command("prune", commands.prune, "delete finished jobs older than a duration")
    p.add_argument("--older-than", default="7d", help="e.g. 12h, 7d (default 7d)")

    command(
        "stats",
        commands.stats,
        "counts by state and kind, last hour's failure rate, limits and pauses",
    )

    p = command(
        "limits",
        flow.limits,
        "limits per kind, with running and waiting jobs: chit limits [set|clear]",
    )
    limits = p.add_subparsers(dest="limits_command", metavar="ACTION")
    k = limits.add_parser(
        "set",
        parents=[action_common],
        help="override a kind's limits (the flags given) until cleared",
    )
    k.add_argument("kind")
    # Not dest "concurrency": that is the worker's flag, which Setup reads into Settings.
    k.add_argument(
        "--concurrency",
        dest="limit_concurrency",
        metavar="N",
        help="at most N of the kind running across all workers",
    )
    k.add_argument(
        "--rate",
        dest="limit_rate",
        metavar="N/s",
        help="at most N starts per period: N/s, N/m or N/h",
    )
    k.add_argument(
        "--key-concurrency",
        dest="limit_key_concurrency",
        metavar="M",
        help="at most M running per concurrency key",
    )
    k.add_argument(
        "--key-rate",
        dest="limit_key_rate",
        metavar="N/m",
        help="at most N starts per period per concurrency key",
    )
    k = limits.add_parser(
        "clear", parents=[action_common], help="drop the operator's limits: the code's apply again"
    )
    k.add_argument("kind")
    remote_flags(p)
    for action in limits.choices.values():
        remote_flags(action, action=True)

    for name, handler, verb in (
        (
            "pause",
            flow.pause,
            "claim no job of a queue (or --kind) until resumed; running ones finish",
        ),
        ("resume", flow.resume, "claim a paused queue's (or --kind's) jobs again"),
    ):
        p = command(name, handler, verb)
        p.add_argument("queue", nargs="?", metavar="QUEUE")
        p.add_argument("--kind", help=f"{name} a kind, in every queue")
        remote_flags(p)
    schedules.add_parsers(command, action_common)
    command("migrate", commands.migrate, "create or upgrade the database schema")
    return parser


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:  # argparse would say "invalid _limit value"
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= CLI_PAGE_MAX:
        raise argparse.ArgumentTypeError(f"must be between 1 and {CLI_PAGE_MAX}")
    return value


EXIT_BAD_INPUT = 2
EXIT_STORE = 3


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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
