"""`chit up`, `chit worker`, `chit serve` and `chit migrate`: the processes
chit runs on a machine, and the schema they need."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Callable

from chit import logs
from chit.cli import output
from chit.cli.flags import AddCommand
from chit.cli.loading import Setup
from chit.cli.supervise import Child, Supervisor
from chit.errors import ConfigError, DatabaseRefused, StoreError
from chit.extras import needs
from chit.queue import Queue
from chit.worker import signals

log = logging.getLogger("chit.cli")


def add_parsers(command: AddCommand) -> None:
    """`chit up`, `chit worker` and `chit serve` (`chit migrate` comes last in
    `chit --help`: `add_migrate_parser`)."""
    p = command("up", up, "start the HTTP API and workers on one machine")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--demo", action="store_true", help="submit the app's demo jobs at start")
    _worker_flags(p)

    p.add_argument("--no-api", action="store_true", help="workers only, no HTTP API")
    p.add_argument("--host", help="API address (CHIT_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="API port (CHIT_PORT, default 8718)")

    p = command("worker", worker, "run a worker process until SIGTERM")
    _worker_flags(p)
    p.add_argument(
        "--django",
        metavar="SETTINGS[:BACKEND]",
        help="run a Django project's tasks (chit.contrib.django; backend default 'default')",
    )

    p = command("serve", serve, "run the HTTP API (jobs run in `chit worker`)")
    p.add_argument("--host", help="address to listen on (CHIT_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (CHIT_PORT, default 8718)")


def add_migrate_parser(command: AddCommand) -> None:
    command("migrate", migrate, "create or upgrade the database schema")


def _worker_flags(p: argparse.ArgumentParser) -> None:
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


def migrate(args: argparse.Namespace, setup: Setup) -> int:
    queue = setup.queue()
    version = queue.store.migrate()
    if args.json:
        output.print_json({"schema_version": version})
    else:
        print(f"schema version {version}: {_safe_url(queue.settings.database_url)}")
    return 0


def up(args: argparse.Namespace, setup: Setup) -> int:
    """Migrate, then run the API and worker processes until Ctrl-C."""
    if not args.no_api:
        # Before migrating: a missing extra leaves no database behind.
        with needs("api", "chit up needs the HTTP API (or pass --no-api)"):
            from chit.cli.serve import check_bind, check_port
    queue = setup.queue()
    queue.store.migrate()
    settings = queue.settings
    # The children read exactly these settings (the flags included), not this
    # process's environment alone.
    env = os.environ | settings.to_env()
    children = [
        Child(f"worker {n}", [sys.executable, "-m", "chit", "worker"], fatal=False)
        for n in range(1, args.workers + 1)
    ]
    if not args.no_api:
        check_bind(settings, queue, settings.host)
        check_port(settings.host, settings.port)
        children.append(Child("HTTP API", [sys.executable, "-m", "chit", "serve"], fatal=True))
    json_lines = settings.log_format == "json"

    def announce(text: str) -> None:
        print(logs.json_line("up.started", text) if json_lines else f"chit up: {text}", flush=True)

    announce(
        f"{args.workers} worker process(es) x {settings.concurrency} slots on "
        f"{_safe_url(settings.database_url)}; Ctrl-C stops everything"
    )
    if not args.no_api:
        base = f"http://{settings.host}:{settings.port}"
        announce(f"HTTP API on {base} (docs: {base}/docs)")
        announce(f"dashboard on {base}/ui/")
    supervisor = Supervisor(children, env, json_lines=json_lines)
    demo = (lambda: _submit_demo_jobs(settings.app, queue, announce)) if args.demo else None
    return supervisor.run(after_start=demo)


def _submit_demo_jobs(app: str | None, queue: Queue, announce: Callable[[str], None]) -> None:
    """Call the app module's `demo(queue)`, which submits a few jobs to watch."""
    module = sys.modules.get((app or "").partition(":")[0])
    demo = getattr(module, "demo", None)
    if not callable(demo):
        raise ConfigError(f"--demo: the app module {app!r} has no demo(queue) function")
    ids = demo(queue)
    announce(f"submitted {len(ids)} demo jobs; watch them with `chit list`")


def worker(args: argparse.Namespace, setup: Setup) -> int:
    # First: a SIGTERM while the app loads (or Django sets up) would otherwise
    # end the process with -15 instead of a clean exit.
    with signals.caught_early() as stop:
        return _worker(args, setup, stop)


def _worker(args: argparse.Namespace, setup: Setup, stop: threading.Event) -> int:
    from chit.worker import Worker

    if getattr(args, "django", None):
        with needs("django", "chit worker --django needs Django"):
            from chit.contrib.django.worker import django_queue

        queue = django_queue(args.django)
        queue.configure(**setup.flags)
    else:
        queue = setup.queue()
    if not queue.tasks:
        print(
            "chit: warning: no tasks registered, so this worker claims no job (it still "
            "rescues expired leases); pass --app module:queue (or CHIT_APP)",
            file=sys.stderr,
        )
    if not _wait_for_server(queue, stop) or stop.is_set():
        before = signals.early()
        log.info("%s before the worker started: exiting", before.name if before else "a signal")
        return 0
    return Worker(queue).run()


def _wait_for_server(queue: Queue, stop: threading.Event) -> bool:
    """A worker started before its PostgreSQL server is up waits for it rather
    than exiting into a supervisor's restart loop; False if told to stop
    meanwhile. (A SQLite file that cannot be opened, a database that does not
    exist and credentials the server refuses will not get better: they fail at
    once.)"""
    if queue.settings.database_url.startswith("sqlite:"):
        return True
    delay = 1.0
    while True:
        try:
            queue.store.schema_version()
            return True
        except StoreError as e:
            if isinstance(e, DatabaseRefused):
                raise
            log.warning("database unavailable, retrying in %.0fs: %s", delay, e)
            if stop.wait(delay):
                return False
            delay = min(delay * 2, 30.0)


def serve(args: argparse.Namespace, setup: Setup) -> int:
    with needs("api", "chit serve needs the HTTP API"):
        from chit.cli.serve import serve as run_server

    queue = setup.queue()
    return run_server(queue.settings, queue, log_level=args.log_level)


def _safe_url(url: str) -> str:
    """The database URL without a password."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}@{host}"
    return url
