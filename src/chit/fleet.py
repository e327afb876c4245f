"""Workers as the store knows them, and each queue's load: what an autoscaler
reads (DESIGN.md "Autoscaling signals": `GET /queues`, `/metrics`).

Workers register themselves: each worker's upkeep writes a beat, a clean stop
deletes it, and a worker whose beat is older than its `stale_after` (it died)
is left out of every answer and deleted by the next beat of any worker. The
load of a queue is read from the jobs by the store (`QueueCounts`); the rest,
written once here, puts counts, pauses and workers together."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from chit.limits import Paused


@dataclass(frozen=True, slots=True)
class WorkerBeat:
    """What a worker says of itself: its queues and kinds, its slots (the
    handlers it runs at once) and how many are busy now."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    kinds: tuple[str, ...]
    slots: int
    busy: int


@dataclass(frozen=True, slots=True)
class LiveWorker:
    beat: WorkerBeat
    started_at: datetime
    seen_at: datetime


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """One queue's jobs as the store counts them: `ready` can start now,
    `scheduled` are due later (a delay, a retry's backoff), `running` hold a
    lease; the oldest ready one has waited `oldest_ready_seconds` (0: none)."""

    queue: str
    ready: int = 0
    scheduled: int = 0
    running: int = 0
    oldest_ready_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class QueueLoad:
    name: str
    ready: int
    scheduled: int
    running: int
    oldest_ready_seconds: float
    paused: bool


@dataclass(frozen=True, slots=True)
class Fleet:
    """The live workers: how many, their slots, and how many slots are busy."""

    count: int
    slots: int
    busy: int


def queue_loads(
    counts: Sequence[QueueCounts],
    pauses: Sequence[Paused],
    workers: Sequence[LiveWorker],
    known: Iterable[str] = (),
) -> list[QueueLoad]:
    """Every queue that holds jobs, that a live worker takes, that is paused, or
    that is `known` (the app's tasks' queues): a queue an autoscaler watches is
    in the answer, at zero, before its first job, so a path to it never breaks."""
    by_queue: dict[str, QueueCounts] = {}
    for c in counts:  # a store may count queued and running jobs apart: add them up
        was = by_queue.get(c.queue, QueueCounts(c.queue))
        oldest = max(was.oldest_ready_seconds, c.oldest_ready_seconds)
        by_queue[c.queue] = QueueCounts(
            c.queue, was.ready + c.ready, was.scheduled + c.scheduled,
            was.running + c.running, oldest,
        )  # fmt: skip
    paused = {p.queue for p in pauses if p.queue is not None and p.kind is None}
    names = set(by_queue) | paused | set(known)
    for w in workers:
        names |= set(w.beat.queues)
    loads = []
    for name in sorted(names):
        c = by_queue.get(name, QueueCounts(name))
        oldest = round(c.oldest_ready_seconds, 3)
        loads.append(QueueLoad(name, c.ready, c.scheduled, c.running, oldest, name in paused))
    return loads


def unrun(kinds: Iterable[str], workers: Sequence[LiveWorker]) -> list[str]:
    """Of `kinds`, those no live worker has code for: their jobs wait until one
    that does starts (workers claim only their own kinds)."""
    run = {kind for w in workers for kind in w.beat.kinds}
    return sorted(set(kinds) - run)


NO_WORKER = "waiting: no worker running now has code for kind {kind}"


def fleet(workers: Sequence[LiveWorker]) -> Fleet:
    return Fleet(
        count=len(workers),
        slots=sum(w.beat.slots for w in workers),
        busy=sum(w.beat.busy for w in workers),
    )
