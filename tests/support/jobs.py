"""Reading jobs back: from a store, over HTTP, and from the files handlers write."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

import chit
from chit.jobs import Job, JobFilter
from chit.settings import Settings
from support.waiting import wait_until


def get(q: chit.Queue, job_id: str) -> Job:
    job = q.store.get(job_id)
    assert job is not None, job_id
    return job


def all_jobs(q: chit.Queue) -> list[Job]:
    """Every job in the store, page by page."""
    jobs: list[Job] = []
    cursor = None
    while True:
        page = q.store.list(JobFilter(), 1000, cursor)
        jobs += page.jobs
        cursor = page.next_cursor
        if cursor is None:
            return jobs


def wait_terminal(q: chit.Queue, job_id: str, timeout: float) -> Job:
    return wait_until(
        lambda: (job := get(q, job_id)).state.terminal and job,
        timeout,
        what=f"job {job_id} to finish",
    )


def poll_job(
    http: httpx.Client,
    job_id: str,
    done: Callable[[dict[str, Any]], bool],
    timeout: float = 15,
) -> dict[str, Any]:
    """GET /jobs/{id} until `done(body)`; fails the test with the last body."""
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = http.get(f"/jobs/{job_id}").json()
        if done(body):
            return body
        assert time.monotonic() < deadline, f"gave up waiting; last status {body}"
        time.sleep(0.05)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@contextmanager
def app_queue(db_url: str, app: chit.Queue | None = None) -> Iterator[chit.Queue]:
    """A test app's tasks (the end-to-end app's by default) on `db_url`
    (migrated), to enqueue and to read jobs."""
    if app is None:
        from support import e2e_app

        app = e2e_app.queue
    q = chit.Queue(settings=Settings(database_url=db_url))
    q.tasks.update(app.tasks)
    q.store.migrate()
    try:
        yield q
    finally:
        q.close()
