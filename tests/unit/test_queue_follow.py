"""`Queue.get`, `Queue.cancel` and `Queue.wait`: code that enqueued a job follows
it through the database, with a real worker running it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import chit
from chit.errors import JobNotFound
from chit.jobs import CancelResult, State
from chit.settings import Settings
from chit.worker import Worker


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[chit.Queue]:
    q = chit.Queue(
        settings=Settings(database_url=f"sqlite:///{tmp_path / 'q.db'}", result_inline_bytes=100)
    )
    started = threading.Event()
    go = threading.Event()

    @q.task("big")
    def big(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
        started.set()
        go.wait(30)  # until the test has seen it running
        return {"text": "x" * 1000}  # beyond result_inline_bytes: stored apart

    q.started, q.go = started, go  # type: ignore[attr-defined]
    yield q
    q.close()


def test_wait_returns_the_finished_job_with_its_result(queue: chit.Queue) -> None:
    job_id = queue.enqueue("big", {}).id
    worker = Worker(queue)
    thread = threading.Thread(target=worker.run_until_idle, daemon=True)
    thread.start()
    assert queue.started.wait(30)  # type: ignore[attr-defined]
    assert queue.get(job_id).state is State.RUNNING
    with pytest.raises(TimeoutError, match=f"job {job_id} is still running after 0.1 s"):
        queue.wait(job_id, timeout=0.1)
    queue.go.set()  # type: ignore[attr-defined]
    done = queue.wait(job_id, timeout=30)
    thread.join(30)
    assert done.state is State.SUCCEEDED
    assert done.result == {"text": "x" * 1000}  # loaded, though it lives apart
    assert queue.get(job_id).result == done.result


def test_cancel_a_queued_job_then_nothing_more(queue: chit.Queue) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    job_id = queue.enqueue("big", {}, run_at=later).id
    assert queue.cancel(job_id) is CancelResult.CANCELLED
    assert queue.wait(job_id, timeout=5).state is State.CANCELLED
    assert queue.cancel(job_id) is CancelResult.ALREADY_FINISHED


def test_an_unknown_or_other_tenants_job_is_not_found(queue: chit.Queue) -> None:
    job_id = queue.enqueue("big", {}, tenant="acme", run_at=datetime.now(UTC) + timedelta(1)).id
    for call in (queue.get, queue.cancel, queue.wait):
        with pytest.raises(JobNotFound):
            call("01nosuchjob")  # type: ignore[operator]
        with pytest.raises(JobNotFound):
            call(job_id, tenant="globex")  # type: ignore[operator]
    assert queue.get(job_id, tenant="acme").state is State.QUEUED
