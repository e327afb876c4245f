"""`chit list`, `failures`, `replay`, `cancel`, `update`, `run-now`, `signal`,
`prune` and `stats`: reading the job table and acting on it, on the database
(`signal` through the HTTP API too, with --url)."""

from __future__ import annotations

import argparse
import json

from chit import durations, fleet
from chit.api.schemas.limits import LimitsOut
from chit.bounds import CLI_PAGE_MAX, PAGE_SIZE
from chit.cli import flow, output
from chit.cli.flags import AddCommand, api_key, remote_flags, run_at
from chit.cli.loading import Setup
from chit.errors import InvalidRequest, JobNotFound
from chit.jobs import CancelResult, Job, JobFilter, ReplaySelector, State


def add_parsers(command: AddCommand) -> None:
    p = command("list", list_jobs, "list jobs, newest first")
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

    command("failures", failures, "failed jobs grouped by kind and first line of the error")

    p = command("replay", replay, "queue failed jobs again, attempts reset to 0")
    p.add_argument("ids", nargs="*", metavar="ID", help="jobs to replay (failed or cancelled)")
    p.add_argument("--kind", help="every failed job of this kind")
    p.add_argument("--error", help="every failed job whose error starts with this")
    p.add_argument("--since", help="failed since: a duration (1h) or an ISO 8601 time")
    p.add_argument("--all", action="store_true", help="every failed job")

    p = command("cancel", cancel, "cancel a queued job, or ask a running one to stop")
    p.add_argument("id")

    p = command("update", update, "change a queued or waiting job: its start, priority, payload")
    p.add_argument("id")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--delay", help="run after this long from now, e.g. 30s, 5m")
    when.add_argument("--run-at", help="run at this ISO 8601 time")
    p.add_argument("--priority", type=int, help="smaller runs first")
    p.add_argument("--payload", metavar="JSON", help="a new payload, checked as at submit")

    p = command("run-now", run_now, "make a delayed job due at once")
    p.add_argument("id")

    p = command("signal", signal, "send a job a signal its handler's wait_for(NAME) returns")
    p.add_argument("id")
    p.add_argument("name")
    p.add_argument(
        "data", metavar="JSON", nargs="?", default="{}", help="a JSON object (default {})"
    )
    remote_flags(p)

    p = command("prune", prune, "delete finished jobs older than a duration")
    p.add_argument("--older-than", default="7d", help="e.g. 12h, 7d (default 7d)")

    command(
        "stats",
        stats,
        "counts by state and kind, last hour's failure rate, limits and pauses",
    )


def list_jobs(args: argparse.Namespace, setup: Setup) -> int:
    queue = setup.stored_queue()
    page = queue.store.list(
        JobFilter(state=args.state, kind=args.kind, queue=args.queue), args.limit, args.cursor
    )
    if args.json:
        output.print_json({"jobs": page.jobs, "next_cursor": page.next_cursor})
        return 0
    rows = [
        (
            j.id,
            j.kind,
            j.state.value + (" (stale)" if j.stale else ""),
            f"{j.attempts}/{j.max_attempts}",
            output.progress_bar(j.progress.done, j.progress.total, 10),
            output.when(j.created_at),
            (j.error or "").split("\n", 1)[0][:60],
        )
        for j in page.jobs
    ]
    print(output.table(["id", "kind", "state", "tries", "progress", "created", "error"], rows))
    if page.next_cursor:
        print(f"\nmore: chit list --cursor {page.next_cursor}")
    return 0


def failures(args: argparse.Namespace, setup: Setup) -> int:
    queue = setup.stored_queue()
    groups = queue.store.failures()
    if args.json:
        output.print_json({"failures": groups})
        return 0
    if not groups:
        print("no failed jobs")
        return 0
    rows = [
        (g.count, g.kind, g.error[:70], output.when(g.first_seen), output.when(g.last_seen))
        for g in groups
    ]
    print(output.table(["count", "kind", "error", "first seen", "last seen"], rows))
    print("\nreplay a group: chit replay --kind KIND --error 'ERROR PREFIX'")
    return 0


def replay(args: argparse.Namespace, setup: Setup) -> int:
    queue = setup.stored_queue()
    if not (args.ids or args.kind or args.error or args.since or args.all):
        raise InvalidRequest(
            "say what to replay: job ids, or --kind/--error/--since, or --all for every failed job"
        )
    selector = ReplaySelector(
        ids=tuple(args.ids),
        kind=args.kind,
        error_prefix=args.error,
        since=None if args.since is None else durations.moment(args.since),
    )
    count = queue.replay(selector)
    if args.json:
        output.print_json({"replayed": count})
    else:
        print(f"replayed {count} job{'s' if count != 1 else ''}")
    return 0


def cancel(args: argparse.Namespace, setup: Setup) -> int:
    queue = setup.stored_queue()
    result = queue.store.cancel(args.id)
    if result is CancelResult.NOT_FOUND:
        raise JobNotFound(args.id)
    if args.json:
        output.print_json({"job_id": args.id, "result": result})
    else:
        print(
            {
                CancelResult.CANCELLED: f"{args.id} cancelled",
                CancelResult.REQUESTED: f"{args.id} is running: cancellation requested; "
                "the worker stops it at its next heartbeat",
                CancelResult.ALREADY_FINISHED: f"{args.id} had already finished; nothing changed",
            }[result]
        )
    return 0


def update(args: argparse.Namespace, setup: Setup) -> int:
    payload = None
    if args.payload is not None:
        try:
            payload = json.loads(args.payload)
        except json.JSONDecodeError as e:
            raise InvalidRequest(f"--payload is not valid JSON: {e}") from None
    job = setup.stored_queue().update(
        args.id, run_at=run_at(args), priority=args.priority, payload=payload
    )
    return _changed(args, job)


def run_now(args: argparse.Namespace, setup: Setup) -> int:
    return _changed(args, setup.stored_queue().run_now(args.id))


def signal(args: argparse.Namespace, setup: Setup) -> int:
    try:
        data = json.loads(args.data)
    except json.JSONDecodeError as e:
        raise InvalidRequest(f"the signal's data is not valid JSON: {e}") from None
    if args.url:
        from chit.client import Client

        with Client(args.url, api_key(args)) as client:
            sent = client.signal(args.id, args.name, data)
        job_id, name, stored, created = sent.job_id, sent.name, sent.data, sent.created
    else:
        got = setup.stored_queue().signal(args.id, args.name, data)
        job_id, name, stored, created = got.job_id, got.name, got.data, got.created
    if args.json:
        output.print_json({"job_id": job_id, "name": name, "data": stored, "created": created})
    elif created:
        print(f"{job_id}: signal {name!r} stored")
    else:
        print(f"{job_id}: signal {name!r} was sent before; kept: {json.dumps(stored)}")
    return 0


def _changed(args: argparse.Namespace, job: Job) -> int:
    if args.json:
        output.print_json(output.to_json(job))
    else:
        due = output.when(job.run_at)
        print(f"{job.id} {job.state.value}: priority {job.priority}, due {due} UTC")
    return 0


def prune(args: argparse.Namespace, setup: Setup) -> int:
    queue = setup.stored_queue()
    seconds = durations.duration(args.older_than)
    count = queue.store.prune(seconds)
    if args.json:
        output.print_json({"pruned": count})
    else:
        print(
            f"deleted {count} finished job{'s' if count != 1 else ''} older than {args.older_than}"
        )
    return 0


def stats(args: argparse.Namespace, setup: Setup) -> int:
    queue = setup.stored_queue()
    s = queue.store.stats()
    kinds, pauses = queue.store.limits(), queue.store.pauses()
    summary = {
        "by_state": s.by_state,
        "by_kind": s.by_kind,
        "failed_last_hour": s.failed_last_hour,
        "succeeded_last_hour": s.succeeded_last_hour,
        "failure_rate": s.failure_rate,
        "oldest_queued_age_seconds": s.oldest_queued_age,
        "stale_running": s.stale_running,
        **LimitsOut.of(kinds, pauses).model_dump(mode="json"),
    }
    if args.json:
        output.print_json(summary)
        return 0
    states = [st.value for st in State]
    print(output.table(["state", "jobs"], [(st, s.by_state.get(st, 0)) for st in states]))
    if s.by_kind:
        rows = [(k, *(v.get(st, 0) for st in states)) for k, v in sorted(s.by_kind.items())]
        print()
        print(output.table(["kind", *states], rows))
    rate = "-" if s.failure_rate is None else f"{s.failure_rate:.1%}"
    lag = "-" if s.oldest_queued_age is None else f"{s.oldest_queued_age:.1f}s"
    print(
        f"\nlast hour: {s.succeeded_last_hour} succeeded, {s.failed_last_hour} failed "
        f"(failure rate {rate}); queue lag {lag}; stale running jobs {s.stale_running}"
    )
    if kinds:
        print()
        print(flow.limits_table(kinds))
    if pauses:
        print()
        print(flow.paused_lines(pauses))
    queued = [kind for kind, states in s.by_kind.items() if states.get("queued")]
    for kind in fleet.unrun(queued, queue.store.live_workers()):
        print(f"\n{fleet.NO_WORKER.format(kind=kind)} ({s.by_kind[kind]['queued']:,} queued)")
    return 0


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:  # argparse would say "invalid _limit value"
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= CLI_PAGE_MAX:
        raise argparse.ArgumentTypeError(f"must be between 1 and {CLI_PAGE_MAX}")
    return value
