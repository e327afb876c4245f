"""Schedules with real `chit worker` processes on both backends: a schedule
declared in code, every second, with three workers running the scheduler, gives
one job a slot for 8 seconds of slots (7 to 9), none twice, each enqueued
within 3 s of its slot (10 s would be late: ON_TIME_SECONDS)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

import chit
from chit.jobs import JobFilter
from chit.schedules import slot_text
from support import schedule_app
from support.jobs import app_queue
from support.processes import Procs
from support.waiting import wait_until

pytestmark = pytest.mark.slow

APP = "support.schedule_app:queue"
NAME = "every-second"


@pytest.fixture
def schedule_queue(db_url: str) -> Iterator[chit.Queue]:
    with app_queue(db_url, schedule_app.queue) as q:
        yield q


def _last_slot(q: chit.Queue) -> datetime | None:
    stored = q.store.get_schedule(NAME)
    return None if stored is None else stored.last_slot


@pytest.mark.timeout(120)
def test_every_second_with_three_workers_gives_one_job_a_slot(
    procs: Procs, schedule_queue: chit.Queue
) -> None:
    workers = procs.workers(3, "--concurrency", "2", app=APP)
    first = wait_until(lambda: _last_slot(schedule_queue), 30, what="the first slot's job")
    start = first + timedelta(seconds=1)  # every worker runs its scheduler from here
    end = start + timedelta(seconds=8)
    wait_until(
        lambda: (_last_slot(schedule_queue) or first) >= end - timedelta(seconds=1),
        30,
        what="8 seconds of slots",
    )
    schedule_queue.store.pause_schedule(NAME, True)
    for w in workers:
        assert w.alive(), w.stderr()[-3000:]

    jobs = schedule_queue.store.list(JobFilter(kind="tick"), limit=1000).jobs
    prefix = f"schedule:{NAME}:"
    slots = [j.idempotency_key.removeprefix(prefix) for j in jobs if j.idempotency_key]
    assert len(slots) == len(jobs)
    assert not [s for s, n in Counter(slots).items() if n > 1]  # no slot twice
    window = [
        j
        for j in jobs
        if slot_text(start) <= j.idempotency_key.removeprefix(prefix) < slot_text(end)  # type: ignore[union-attr]
    ]
    assert 7 <= len(window) <= 9, sorted(slots)
    for j in window:  # each enqueued in time, by whichever worker came first
        slot = datetime.fromisoformat(j.idempotency_key.removeprefix(prefix))  # type: ignore[union-attr]
        assert timedelta(0) <= j.created_at - slot < timedelta(seconds=3), (j.id, slot)
    assert all(j.payload == {"from": "code"} for j in jobs)
    # And they ran.
    wait_until(
        lambda: all(
            (got := schedule_queue.store.get(j.id)) is not None and got.state.value == "succeeded"
            for j in window
        ),
        30,
        what="the slots' jobs to run",
    )
