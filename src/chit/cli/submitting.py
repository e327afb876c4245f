"""`chit submit`, `chit status`, `chit workflow` and `chit wait`: a job from
its submission to its result, on the database or, with `--url`, through the
HTTP API (`chit.Client`) with the same output and exit codes (0 succeeded, 1
failed, cancelled or timed out). Errors the server answers are raised as the
matching chit exceptions, so the CLI's error handling (exit 2 for bad input or
an unknown job, 3 when the API or its database is unreachable) applies
unchanged. `chit submit`'s flags are `chit.JobRequest`'s fields (`job_request`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from chit import durations, fleet, retrying
from chit.api.schemas.jobs import JobStatus
from chit.cli import output
from chit.cli.flags import AddCommand, api_key, remote_flags, run_at
from chit.cli.loading import Setup
from chit.cli.progress import WaitDisplay
from chit.encoding import one_line
from chit.errors import InvalidRequest, JobNotFound
from chit.fleet import LiveWorker
from chit.jobs import Job, State
from chit.queue import Queue
from chit.requests import JobRequest

if TYPE_CHECKING:
    from chit.client import Client


def add_parsers(command: AddCommand) -> None:
    """`chit submit`, `chit status`, `chit workflow` and `chit wait`, in the
    order `chit --help` lists them (with main's others: see there)."""
    p = command("submit", submit, "submit a job: chit submit KIND JSON")
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
    p.add_argument(
        "--cost",
        metavar="N",
        help="what the job is expected to spend (a whole number, default 1), "
        "counted against its kind's cost_rate",
    )
    p.add_argument("--wait", action="store_true", help="wait for the result")
    p.add_argument(
        "--wait-timeout",
        type=float,
        metavar="SECONDS",
        help="with --wait: give up waiting after this long",
    )
    remote_flags(p)

    p = command("status", status, "show a job, every attempt and its steps")
    p.add_argument("id")

    p = command("workflow", workflow, "show a workflow: its jobs, states and edges")
    p.add_argument("id")
    remote_flags(p)

    p = command("wait", wait, "wait for a job to finish, with a progress bar")
    p.add_argument("id")
    p.add_argument("--timeout", type=float, help="give up after this many seconds")
    remote_flags(p)


def submit(args: argparse.Namespace, setup: Setup) -> int:
    request = job_request(args)
    if args.wait and args.timeout is not None and args.wait_timeout is None:
        # --timeout was the wait's until the job's took the name: say which it is.
        print(
            "chit: --timeout is the job's timeout; --wait waits with no limit"
            " (--wait-timeout SECONDS sets one)",
            file=sys.stderr,
        )
    if args.url:
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
        run_at=run_at(args),
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
        cost=_cost(args.cost),
    )


def _cost(text: str | None) -> int:
    if text is None:
        return 1
    try:
        return int(text)
    except ValueError:
        raise InvalidRequest(f"--cost must be a whole number, not {text!r}") from None


def _seconds(duration: str | None) -> float | None:
    return None if duration is None else durations.duration(duration)


def status(args: argparse.Namespace, setup: Setup) -> int:
    queue = setup.stored_queue()
    job = _job(queue, args.id)
    attempts = queue.store.attempts(job.id)
    steps = queue.store.steps(job.id)
    deps = queue.store.dependencies(job.id) if job.depends_on else []
    if args.json:
        history = {"attempts_history": output.to_json(attempts), "steps": output.to_json(steps)}
        states = [{"id": d.id, "kind": d.kind, "state": d.state.value} for d in deps]
        output.print_json(output.to_json(job) | history | {"dependency_states": states})
        return 0
    print(_describe(job, queue.store.live_workers()))
    if deps:
        print(f"\ndepends on (runs once every one has {job.run_on.value}):")
        print(output.table(["id", "kind", "state"], [(d.id, d.kind, d.state.value) for d in deps]))
        if job.state is State.WAITING and (unmet := retrying.unmet(job, deps)):
            print(retrying.waiting_on(unmet))
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
        if job.progress.message:
            lines.append(f"            {job.progress.message}")
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
    if job.cost != 1:
        lines.append(f"cost        {job.cost:,}")
    if (waits := job.waiting_for) is not None:
        what = f"signal {waits.signal!r}" if waits.signal is not None else "jobs "
        what += ", ".join(waits.jobs or ())
        until = "" if waits.until is None else f" until {output.when(waits.until)} UTC"
        lines.append(f"waits for   {what}{until}")
    if job.worker:
        lines.append(f"worker      {job.worker}")
    if job.state is State.SUCCEEDED:
        shown = "(large: chit wait --json)" if job.result_external else json.dumps(job.result)
        lines.append(f"result      {shown}")
    if job.error:
        lines.append("error       " + job.error.replace("\n", "\n            "))
    return "\n".join(lines)


def submit_remote(
    url: str,
    api_key: str | None,
    request: JobRequest,
    *,
    wait: bool = False,
    wait_timeout: float | None = None,
    as_json: bool = False,
) -> int:
    from chit.client import Client  # an extra: loaded for --url only

    with Client(url, api_key) as client:
        submitted = client.submit(**submit_options(request))
        if not wait:
            if as_json:
                output.print_json(
                    {
                        "job_id": submitted.job_id,
                        "created": submitted.created,
                        "debounced": submitted.debounced,
                    }
                )
            else:
                print(
                    output.submitted_line(submitted.job_id, submitted.created, submitted.debounced)
                )
            return 0
        if not as_json:
            print(submitted.job_id, file=sys.stderr)
        return _wait_through(client, submitted.job_id, wait_timeout, as_json)


def submit_options(request: JobRequest) -> dict[str, Any]:
    """`Client.submit`'s arguments for a request: every option but the tenant,
    which is the API key's (the CLI sends no trace context)."""
    options = {
        f.name: getattr(request, f.name)
        for f in dataclasses.fields(JobRequest)
        if f.name not in ("tenant", "traceparent")
    }
    if not request.depends_on:  # neither sent: the server's defaults
        options |= {"depends_on": None, "run_on": None}
    return options


def workflow_remote(url: str, api_key: str | None, workflow_id: str) -> list[output.WorkflowRow]:
    """`chit workflow ID --url URL`: the rows `chit workflow` prints."""
    from chit.client import Client  # an extra: loaded for --url only

    with Client(url, api_key) as client:
        view = client.get_workflow(workflow_id)
    return [
        output.WorkflowRow(j.id, j.ref, j.kind, j.state.value, j.depends_on, j.run_on)
        for j in view.jobs
    ]


def wait_remote(
    url: str,
    api_key: str | None,
    job_id: str,
    *,
    timeout: float | None = None,
    as_json: bool = False,
) -> int:
    from chit.client import Client  # an extra: loaded for --url only

    with Client(url, api_key) as client:
        return _wait_through(client, job_id, timeout, as_json)


def _wait_through(client: Client, job_id: str, timeout: float | None, as_json: bool) -> int:
    display = WaitDisplay(as_json)

    def show(status: JobStatus) -> None:
        display.update(status.state, status.progress.done, status.progress.total)

    try:
        status = client.wait(job_id, timeout=timeout, on_update=show)
    except TimeoutError:
        return display.timed_out(timeout)
    return display.finished(
        status.state, status.result, status.error, status.model_dump(mode="json")
    )
