"""Workers' beats and each queue's load (chit/fleet.py), on every backend:
what GET /queues and /metrics read for autoscalers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from chit.fleet import QueueCounts, WorkerBeat, fleet, queue_loads
from chit.jobs import NewJob
from chit.store.capabilities import FullStore


def beat(worker_id: str, busy: int = 0, queues: tuple[str, ...] = ("default",)) -> WorkerBeat:
    return WorkerBeat(worker_id, "host-a", 4242, queues, ("k", "m"), 8, busy)


def test_a_worker_beats_is_seen_and_forgotten_when_it_stops(store: FullStore) -> None:
    store.beat_worker(beat("w1", busy=3), stale_after=60)
    store.beat_worker(beat("w2", queues=("emails", "default")), stale_after=60)
    [one, two] = store.live_workers()
    assert one.beat == beat("w1", busy=3) and two.beat.queues == ("emails", "default")
    assert one.started_at <= one.seen_at <= datetime.now(UTC) + timedelta(seconds=1)
    store.beat_worker(beat("w1", busy=5), stale_after=60)  # a later beat updates it
    assert [w.beat.busy for w in store.live_workers()] == [5, 0]
    assert fleet(store.live_workers()) == fleet(store.live_workers())
    assert (f := fleet(store.live_workers())).count == 2 and (f.slots, f.busy) == (16, 5)
    store.forget_worker("w1")
    assert [w.beat.id for w in store.live_workers()] == ["w2"]
    store.forget_worker("never-was")  # nothing to forget: no error


def test_a_worker_that_stops_beating_is_left_out_then_deleted(store: FullStore) -> None:
    now = datetime.now(UTC)
    store.beat_worker(beat("dead"), stale_after=5, now=now)
    assert [w.beat.id for w in store.live_workers(now=now + timedelta(seconds=4))] == ["dead"]
    assert store.live_workers(now=now + timedelta(seconds=6)) == []
    # The next beat of any worker deletes it: it does not come back at an earlier time.
    store.beat_worker(beat("alive"), stale_after=5, now=now + timedelta(seconds=6))
    assert [w.beat.id for w in store.live_workers(now=now)] == ["alive"]


def test_queue_counts_split_ready_scheduled_and_running(store: FullStore) -> None:
    now = datetime.now(UTC)
    for n in range(3):
        store.enqueue(NewJob("k", {"n": n}, queue="a", run_at=now - timedelta(seconds=10 + n)))
    store.enqueue(NewJob("k", {}, queue="a", run_at=now + timedelta(hours=1)))
    store.enqueue(NewJob("k", {}, queue="b", tenant="t", run_at=now - timedelta(seconds=1)))
    [running] = store.claim("w", ["a"], 1, 30, now=now)
    assert running.payload == {"n": 2}  # due longest ago (12 s), so claimed first
    loads = {q.name: q for q in queue_loads(store.queue_counts(now=now), [], [])}
    a = loads["a"]
    assert (a.ready, a.scheduled, a.running) == (2, 1, 1)
    assert 10.9 < a.oldest_ready_seconds < 11.1  # the oldest left: due 11 s ago
    b = loads["b"]
    assert (b.ready, b.scheduled, b.running) == (1, 0, 0)
    only_t = queue_loads(store.queue_counts(tenant="t", now=now), [], [])
    assert [(q.name, q.ready) for q in only_t] == [("b", 1)]
    assert store.queue_counts(tenant="nobody", now=now) == []


def test_the_oldest_ready_job_of_a_queue_is_found_whatever_its_priority(
    store: FullStore,
) -> None:
    now = datetime.now(UTC)
    for priority, seconds, tenant in ((5, 20, ""), (0, 50, ""), (-3, 10, ""), (5, 45, "t")):
        at = now - timedelta(seconds=seconds)
        store.enqueue(NewJob("k", {}, priority=priority, run_at=at, tenant=tenant))
    [load] = queue_loads(store.queue_counts(now=now), [], [])
    assert load.ready == 4 and 49.9 < load.oldest_ready_seconds < 50.1
    [theirs] = queue_loads(store.queue_counts(tenant="t", now=now), [], [])
    assert theirs.ready == 1 and 44.9 < theirs.oldest_ready_seconds < 45.1


def test_loads_name_every_queue_watched_at_zero() -> None:
    """A queue a worker takes, a paused one and a known one are in the answer
    with no job in them: an autoscaler's path to them never breaks."""
    from chit.fleet import LiveWorker
    from chit.limits import Paused

    now = datetime.now(UTC)
    worker = LiveWorker(beat("w", queues=("mail",)), now, now)
    paused = [Paused("reports", None, now), Paused(None, "k", now)]
    loads = queue_loads(
        [QueueCounts("a", running=1), QueueCounts("a", ready=2)], paused, [worker], ["default"]
    )
    assert [(q.name, q.ready, q.running, q.paused) for q in loads] == [
        ("a", 2, 1, False),
        ("default", 0, 0, False),
        ("mail", 0, 0, False),
        ("reports", 0, 0, True),
    ]


def test_a_tenants_queue_counts_and_oldest_ready_among_others_jobs(store: FullStore) -> None:
    # Redis reads a tenant's counts from its groups (kind, key) and their ready
    # sets, not every job of the queue: every kind of job is here, of two tenants.
    now = datetime.now(UTC)
    for _ in range(5):  # another tenant's, due longer ago than any of t's
        store.enqueue(NewJob("a", {}, queue="q", tenant="u", run_at=now - timedelta(seconds=100)))
    ago = (("a", 0, "", 30), ("a", 5, "", 60), ("b", -1, "x", 20))
    for kind, priority, key, seconds in ago:
        at = now - timedelta(seconds=seconds)
        fields = {"priority": priority, "concurrency_key": key, "run_at": at}
        store.enqueue(NewJob(kind, {}, queue="q", tenant="t", **fields))  # type: ignore[arg-type]
    store.enqueue(NewJob("a", {}, queue="q", tenant="t", run_at=now + timedelta(seconds=2)))
    store.enqueue(NewJob("a", {}, queue="q", tenant="t", run_at=now + timedelta(hours=1)))
    store.enqueue(NewJob("c", {}, queue="q", tenant="t", run_at=now - timedelta(seconds=5)))
    [running] = store.claim("w", ["q"], 1, 30, now=now, kinds=["c"])
    assert running.kind == "c"
    later = now + timedelta(seconds=10)  # the job due in 2 s is due, and no claim moved it
    [theirs] = queue_loads(store.queue_counts(tenant="t", now=later), [], [])
    assert (theirs.ready, theirs.scheduled, theirs.running) == (4, 1, 1)
    assert 69.9 < theirs.oldest_ready_seconds < 70.1
    [everyone] = queue_loads(store.queue_counts(now=later), [], [])
    assert (everyone.ready, everyone.scheduled, everyone.running) == (9, 1, 1)
    oldest = store.oldest_queued(tenant="t", now=later)
    assert oldest is not None and oldest.kind == "a" and oldest.priority == 5
