"""What the other features leave in a database, for the `features-on` step: the
same no-op jobs as `process1`, run while the store holds an operator's limits
on other kinds, 1,000 schedules, 10,000 jobs waiting on a dependency, unique
and expiring jobs of other kinds, and jobs of several tenants. None of it is
the no-op jobs' business, so a store whose plain jobs pay only for what they
use runs them as fast as on an empty database.

Written with chit's public calls only, so a --baseline chit runs it too. The
other kinds' jobs sit in a queue the bench's workers do not take ("parked"):
they stay as the features left them while the no-op jobs run.
"""

from __future__ import annotations

from typing import Any

import chit
from chit.limits import Limits, Rate
from chit.schedules import Rule, Schedule

OTHER_KINDS = ("partner_call", "render", "digest")
PARKED = "parked"
SCHEDULES = 1_000
WAITING = 10_000
UNIQUE = 1_000
EXPIRING = 1_000
TENANTS = 5
PER_TENANT = 1_000


def leave_behind(queue: chit.Queue) -> dict[str, int]:
    """Fill the queue's store as the features would; how many of each."""
    for kind in OTHER_KINDS:
        if kind not in queue.tasks:
            queue.task(kind)(_never_run)
    store: Any = queue.store
    for kind in OTHER_KINDS:
        store.set_limits(kind, Limits(concurrency=4, rate=Rate(50, 1.0), key_concurrency=1))
    for n in range(SCHEDULES):
        rule = Rule(cron=f"{n % 60} {n % 24} * * *", tz="Europe/Paris")
        store.declare_schedule(Schedule(f"digest-{n}", "digest", {"n": n}, rule))

    def parked(kind: str, **options: Any) -> chit.JobRequest:
        return chit.JobRequest(kind, {}, queue=PARKED, **options)

    gate = queue.enqueue("render", {}, queue=PARKED).id
    queue.enqueue_many([parked("render", depends_on=[gate]) for _ in range(WAITING)])
    queue.enqueue_many([parked("partner_call", unique_key=f"u{n}") for n in range(UNIQUE)])
    queue.enqueue_many([parked("partner_call", expires_in=3600) for _ in range(EXPIRING)])
    for t in range(TENANTS):
        queue.enqueue_many(
            [
                parked("render", tenant=f"tenant-{t}", concurrency_key=f"c{n % 10}")
                for n in range(PER_TENANT)
            ]
        )
    return {
        "limited_kinds": len(OTHER_KINDS),
        "schedules": SCHEDULES,
        "waiting": WAITING,
        "unique": UNIQUE,
        "expiring": EXPIRING,
        "tenant_jobs": TENANTS * PER_TENANT,
    }


def _never_run(job: chit.JobContext, body: dict[str, Any]) -> None:
    raise chit.PermanentError("the features-on step's parked jobs are never run")
