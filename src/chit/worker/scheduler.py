"""The scheduler a worker's maintenance loop runs (DESIGN.md, "Time"): no
leader, no process of its own. Each tick enqueues the due slots of the
schedules whose kinds this worker has tasks for, each job keyed
`schedule:{name}:{slot}`, and moves each schedule's next slot on.

Exactly once: every worker computes the same slots from the same rule, and a
slot's key makes it one job however many workers enqueue it, at the same moment
or one after the other (a worker that enqueued and died before moving the
schedule on leaves the slot due; the next tick's enqueue of it matches the key).
The schedule moves on guarded by the next slot the tick read, so of two workers
one writes it. What a policy skips is never enqueued by anyone: the plan is the
same function of (rule, next slot, time) everywhere.

Cheap: an idle tick is one indexed look at the earliest next slot; a busy one
reads the due schedules only (at most DUE_BATCH a tick), never the whole table, and
enqueues all their slots in one transaction and moves them on in one statement.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from chit.errors import InvalidRequest
from chit.jobs import NewJob
from chit.queue import JobRequest, Queue
from chit.schedules import Move, Schedule, plan, slot_key, slot_text
from chit.store import FullStore

log = logging.getLogger("chit.worker")

# Schedules one tick handles at most; more due: the next tick follows at once.
# A tick costs about 0.4 ms a due schedule (plan, validate, insert its job): 50
# keep each tick under 50 ms (bench/schedules.py), so rescue never waits long.
DUE_BATCH = 50
# The longest a worker goes without looking: a schedule added or resumed through
# the CLI or the API is seen within this.
POLL_SECONDS = 1.0
# Woken this long after a slot, so the database's clock has reached it.
_WAKE_LATE = 0.005


@dataclass(frozen=True)
class Tick:
    """What one tick did, and how long until the next should run."""

    enqueued: int  # new jobs (slots another worker enqueued first not counted)
    schedules: int  # due schedules handled
    wait: float  # seconds


class Scheduler:
    def __init__(self, store: FullStore, queue: Queue) -> None:
        self.store = store
        self.queue = queue

    def run_once(self, now: datetime | None = None) -> Tick:
        """Enqueue every due slot of this worker's kinds at `now` (the database's
        time unless a test gives one)."""
        kinds = sorted(self.queue.tasks)
        if not kinds:
            return Tick(0, 0, POLL_SECONDS)
        clock, next_at = self.store.schedule_clock(kinds, now)
        if next_at is None or next_at > clock:
            return Tick(0, 0, self._wait(clock, next_at))
        due = self.store.due_schedules(kinds, DUE_BATCH, clock)
        enqueued = self._fire(due, clock)
        if len(due) >= DUE_BATCH:
            return Tick(enqueued, len(due), 0.0)
        clock_after, next_at = self.store.schedule_clock(kinds, now)
        return Tick(enqueued, len(due), self._wait(clock_after, next_at))

    def _fire(self, due: list[tuple[Schedule, datetime]], now: datetime) -> int:
        """Enqueue the due schedules' planned slots in one transaction, then move
        them all on in one statement; how many jobs are new. (One transaction
        for the tick: 167 due schedules took 1.1 s on PostgreSQL with one each.)"""
        jobs: list[NewJob] = []
        owners: list[int] = []  # for each job, its schedule's index in `due`
        plans = []
        for n, (schedule, seen) in enumerate(due):
            p = plan(schedule.rule, seen, now, schedule.catch_up)
            plans.append(p)
            try:
                made = [self._job(schedule, slot) for slot in p.slots]
            except InvalidRequest as e:
                # The task changed under the schedule (its model refuses the payload):
                # the slots are skipped, not retried every tick.
                log.error(
                    "schedule %r: slots up to %s not enqueued: %s",
                    schedule.name,
                    slot_text(p.slots[-1]),
                    e,
                )
                continue
            jobs += made
            owners += [n] * len(made)
        results = self.store.enqueue_many(jobs) if jobs else []
        last_job = {owner: r.id for owner, r in zip(owners, results, strict=True)}
        self.store.advance_schedules(
            [
                Move(
                    schedule.name,
                    seen,
                    p.next_at,
                    p.slots[-1] if p.slots else None,
                    last_job.get(n),
                )
                for n, ((schedule, seen), p) in enumerate(zip(due, plans, strict=True))
            ]
        )
        return sum(r.created for r in results)

    def _job(self, schedule: Schedule, slot: datetime) -> NewJob:
        key = slot_key(schedule.name, slot)
        return self.queue.prepare(JobRequest(schedule.kind, schedule.payload, idempotency_key=key))

    @staticmethod
    def _wait(clock: datetime, next_at: datetime | None) -> float:
        if next_at is None:
            return POLL_SECONDS
        return max(0.0, min(POLL_SECONDS, (next_at - clock).total_seconds() + _WAKE_LATE))
