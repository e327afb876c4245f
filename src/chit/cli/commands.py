"""What each `chit` command does. Each takes the parsed arguments and returns an exit code."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from chit import durations, fleet, logs
from chit.cli import output
from chit.cli.flags import api_key
from chit.cli.loading import Setup
from chit.cli.progress import WaitDisplay
from chit.cli.supervise import Child, Supervisor
from chit.encoding import one_line
from chit.errors import ConfigError, InvalidRequest, JobNotFound, StoreError
from chit.extras import needs
from chit.fleet import LiveWorker
from chit.jobs import CancelResult, Job, JobFilter, ReplaySelector, State
from chit.queue import Queue
from chit.requests import JobRequest

log = logging.getLogger("chit.cli")


def migrate(args: argparse.Namespace, setup: Setup) -> int:
    queue = setup.queue()
    version = queue.store.migrate()
    if args.json:
        output.print_json({"schema_version": version})
    else:
        print(f"schema version {version}: {_safe_url(queue.settings.database_url)}")
    return 0


def worker(args: argparse.Namespace, setup: Setup) -> int:
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
    _wait_for_server(queue)
    return Worker(queue).run()


def _wait_for_server(queue: Queue) -> None:
    """A worker started before its PostgreSQL server is up waits for it rather
    than exiting into a supervisor's restart loop. (A SQLite file that cannot
    be opened will not get better: that fails at once.)"""
    if queue.settings.database_url.startswith("sqlite:"):
        return
    delay = 1.0
    while True:
        try:
            queue.store.schema_version()
            return
        except StoreError as e:
            log.warning("database unavailable, retrying in %.0fs: %s", delay, e)
            time.sleep(delay)
            delay = min(delay * 2, 30.0)


def serve(args: argparse.Namespace, setup: Setup) -> int:
    with needs("api", "chit serve needs the HTTP API"):
        from chit.cli.serve import serve as run_server

    queue = setup.queue()
    return run_server(queue.settings, queue, log_level=args.log_level)


def keys(args: argparse.Namespace, setup: Setup) -> int:
    from chit.cli import keys as key_commands

    queue = setup.queue()
    store = queue.store
    if args.keys_command == "create":
        return key_commands.keys_create(
            store,
            tenant=args.tenant,
            scopes=args.scopes,
            name=args.name,
            as_json=args.json,
            env_keys=bool(queue.settings.api_keys),
        )
    if args.keys_command == "list":
        return key_commands.keys_list(store, include_revoked=args.all, as_json=args.json)
    return key_commands.keys_revoke(store, args.key_id, as_json=args.json)


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
    demo = (lambda: _submit_demo_jobs(settings.app, queue)) if args.demo else None
    return supervisor.run(after_start=demo)


def _submit_demo_jobs(app: str | None, queue: Queue) -> None:
    """Call the app module's `demo(queue)`, which submits a few jobs to watch."""
    module = sys.modules.get((app or "").partition(":")[0])
    demo = getattr(module, "demo", None)
    if not callable(demo):
        raise ConfigError(f"--demo: the app module {app!r} has no demo(queue) function")
    ids = demo(queue)
    print(f"chit up: submitted {len(ids)} demo jobs; watch them with `chit list`", flush=True)


def submit(args: argparse.Namespace, setup: Setup) -> int:
    request = job_request(args)
    if args.url:
        from chit.cli.remote import submit_remote

        return submit_remote(
            args.url,
            api_key(args),
            request,
            wait=args.wait,
            wait_timeout=args.wait_timeout,
            as_json=args.json,
        )
    queue = setup.queue()
    [result] = queue.enqueue_many([request])
    if not args.wait:
        if args.json:
            answer = {"job_id": result.id, "created": result.created}
            output.print_json(answer | {"debounced": result.debounced})
        else:
            print(output.submitted_line(result.id, result.created, result.debounced))
        return 0
    if not args.json:
        print(result.id, file=sys.stderr)
    return _wait(queue, result.id, args.wait_timeout, args.json)


def job_request(args: argparse.Namespace) -> JobRequest:
    """`chit submit`'s flags as the job's options, with --url or without."""
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as e:
        raise InvalidRequest(f"payload is not valid JSON: {e}") from None
    return JobRequest(
        args.kind,
        payload,
        idempotency_key=args.idempotency_key,
        run_at=_run_at(args),
        priority=args.priority,
        queue=args.queue,
        max_attempts=args.max_attempts,
        concurrency_key=args.concurrency_key,
        timeout=_seconds(args.timeout),
        ref=args.ref,
        depends_on=args.depends_on,
        run_on=args.run_on,
        expires_in=_seconds(args.expires_in),
        unique_key=args.unique_key,
        debounce_key=args.debounce_key,
        debounce=_seconds(args.debounce),
        debounce_max=_seconds(args.debounce_max),
    )


def _seconds(duration: str | None) -> float | None:
    return None if duration is None else durations.duration(duration)


def status(args: argparse.Namespace, setup: Setup) -> int:
    queue = setup.stored_queue()
    job = _job(queue, args.id)
    attempts = queue.store.attempts(job.id)
    steps = queue.store.steps(job.id)
    if args.json:
        history = {"attempts_history": output.to_json(attempts), "steps": output.to_json(steps)}
        output.print_json(output.to_json(job) | history)
        return 0
    print(_describe(job, queue.store.live_workers()))
    if attempts:
        print("\nattempts:")
        rows = [
            (
                a.attempt,
                a.worker,
                output.when(a.started_at),
                output.when(a.finished_at),
                a.outcome or "running",
                (a.error or "").split("\n", 1)[0][:80],
            )
            for a in attempts
        ]
        print(output.table(["#", "worker", "started", "finished", "outcome", "error"], rows))
    if steps:
        print("\nsteps:")
        step_rows = [
            (s.name, s.attempt, output.when(s.created_at), one_line(s.result, 60)) for s in steps
        ]
        print(output.table(["step", "attempt", "stored", "result"], step_rows))
    return 0


def workflow(args: argparse.Namespace, setup: Setup) -> int:
    if args.url:
        from chit.cli.remote import workflow_remote

        jobs = workflow_remote(args.url, api_key(args), args.id)
    else:
        view = setup.stored_queue().workflow(args.id)
        jobs = [
            output.WorkflowRow(j.id, j.ref, j.kind, j.state.value, list(j.depends_on), j.run_on)
            for j in view.jobs
        ]
    if args.json:
        output.print_json({"id": args.id, "jobs": jobs})
        return 0
    print(output.workflow_table(args.id, jobs))
    return 0


def wait(args: argparse.Namespace, setup: Setup) -> int:
    if args.url:
        from chit.cli.remote import wait_remote

        return wait_remote(
            args.url, api_key(args), args.id, timeout=args.timeout, as_json=args.json
        )
    queue = setup.stored_queue()
    return _wait(queue, args.id, args.timeout, args.json)


def _wait(queue: Queue, job_id: str, timeout: float | None, as_json: bool) -> int:
    deadline = None if timeout is None else time.monotonic() + timeout
    display = WaitDisplay(as_json)
    delay = 0.1
    while True:
        job = _job(queue, job_id)
        display.update(job.state, job.progress.done, job.progress.total)
        if job.state.terminal:
            break
        if deadline is not None and time.monotonic() >= deadline:
            return display.timed_out(timeout)
        time.sleep(delay)
        delay = min(delay * 1.5, 1.0)
    if job.result_external:
        _, result = queue.store.get_result(job.id)
        job = dataclasses.replace(job, result=result)
    return display.finished(job.state, job.result, job.error, job)


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
    count = queue.store.replay(selector)
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
        args.id, run_at=_run_at(args), priority=args.priority, payload=payload
    )
    return _changed(args, job)


def run_now(args: argparse.Namespace, setup: Setup) -> int:
    return _changed(args, setup.stored_queue().run_now(args.id))


def _changed(args: argparse.Namespace, job: Job) -> int:
    if args.json:
        output.print_json(output.to_json(job))
    else:
        due = output.when(job.run_at)
        print(f"{job.id} {job.state.value}: priority {job.priority}, due {due} UTC")
    return 0


def _run_at(args: argparse.Namespace) -> datetime | None:
    if args.delay is not None:
        return datetime.now(UTC) + timedelta(seconds=durations.duration(args.delay))
    if args.run_at is not None:
        return durations.moment(args.run_at)
    return None


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
    from chit.api.schemas.limits import LimitsOut
    from chit.cli import flow

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


def _job(queue: Queue, job_id: str) -> Job:
    job = queue.store.get(job_id)
    if job is None:
        raise JobNotFound(job_id)
    return job


def _describe(job: Job, workers: Sequence[LiveWorker] = ()) -> str:
    lines = [
        f"id          {job.id}",
        f"kind        {job.kind} (queue {job.queue}, priority {job.priority})",
        *([f"key         {job.concurrency_key}"] if job.concurrency_key else []),
        f"state       {job.state.value}" + ("  STALE: lease expired" if job.stale else ""),
        f"attempts    {job.attempts}/{job.max_attempts}",
    ]
    if job.progress.done is not None:
        lines.append(f"progress    {output.progress_bar(job.progress.done, job.progress.total)}")
    lines += [
        f"created     {output.when(job.created_at)}",
        f"run at      {output.when(job.run_at)}",
        f"finished    {output.when(job.finished_at)}",
    ]
    if job.expires_at is not None:
        lines.append(f"expires     {output.when(job.expires_at)}")
    if job.unique_key is not None:
        lines.append(f"unique key  {job.unique_key}")
    due = job.state is State.QUEUED and job.run_at <= datetime.now(UTC)
    if due and fleet.unrun([job.kind], workers):
        lines.append(f"held        {fleet.NO_WORKER.format(kind=job.kind)}")
    if job.debounce_key is not None:
        lines.append(f"debounce    {job.debounce_key}")
    if job.worker:
        lines.append(f"worker      {job.worker}")
    if job.state is State.SUCCEEDED:
        shown = "(large: chit wait --json)" if job.result_external else json.dumps(job.result)
        lines.append(f"result      {shown}")
    if job.error:
        lines.append("error       " + job.error.replace("\n", "\n            "))
    return "\n".join(lines)


def _safe_url(url: str) -> str:
    """The database URL without a password."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}@{host}"
    return url
