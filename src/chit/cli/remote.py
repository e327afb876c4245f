"""`chit submit --url URL` and `chit wait --url URL`: the same commands through
the HTTP API (`chit.Client`) instead of the database, with the same output and
exit codes (0 succeeded, 1 failed, cancelled or timed out). Errors the server
answers are raised as the matching chit exceptions, so the CLI's error handling
(exit 2 for bad input or an unknown job, 3 when the API or its database is
unreachable) applies unchanged."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

from chit.api.schemas import JobStatus
from chit.cli import output
from chit.cli.progress import WaitDisplay
from chit.client import Client


def submit_remote(
    url: str,
    api_key: str | None,
    kind: str,
    payload: Any,
    *,
    idempotency_key: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    run_at: datetime | None = None,
    concurrency_key: str | None = None,
    wait: bool = False,
    timeout: float | None = None,
    as_json: bool = False,
) -> int:
    with Client(url, api_key) as client:
        submitted = client.submit(
            kind,
            payload,
            idempotency_key=idempotency_key,
            queue=queue,
            priority=priority,
            run_at=run_at,
            max_attempts=max_attempts,
            concurrency_key=concurrency_key,
        )
        if not wait:
            if as_json:
                output.print_json({"job_id": submitted.job_id, "created": submitted.created})
            elif submitted.created:
                print(submitted.job_id)
            else:
                print(f"{submitted.job_id} (existing job, same key)")
            return 0
        if not as_json:
            print(submitted.job_id, file=sys.stderr)
        return _wait(client, submitted.job_id, timeout, as_json)


def wait_remote(
    url: str,
    api_key: str | None,
    job_id: str,
    *,
    timeout: float | None = None,
    as_json: bool = False,
) -> int:
    with Client(url, api_key) as client:
        return _wait(client, job_id, timeout, as_json)


def _wait(client: Client, job_id: str, timeout: float | None, as_json: bool) -> int:
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
