"""The store contract (chit/store/base.py), checked on every backend.

Each test runs on every backend of conftest.py; what the contract does not
return is read through the backend's inspection. Times that matter
are passed as `now`, so nothing here sleeps to let a lease run out.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

import chit
from chit.encoding import canonical
from chit.errors import StoreError
from chit.jobs import (
    AttemptOutcome,
    Beat,
    Cancelled,
    CancelResult,
    ClaimedJob,
    Failed,
    JobFilter,
    NewApiKey,
    NewJob,
    Progress,
    Released,
    ReplaySelector,
    State,
    Succeeded,
    Suspended,
)
from chit.settings import Settings
from chit.store import open_store
from chit.store.base import Store
from chit.store.capabilities import FullStore
from support.store_backends import needs

if TYPE_CHECKING:
    from collections.abc import Iterator

    from support.store_backends import Backend
    from support.store_inspection import StoreInspection

LEASE = 30.0


def utcnow() -> datetime:
    return datetime.now(UTC)


def later(seconds: float) -> datetime:
    """A time `seconds` from now by this machine's clock (the database's, in these tests)."""
    return utcnow() + timedelta(seconds=seconds)


def new(kind: str = "k", payload: object = None, **fields: object) -> NewJob:
    return NewJob(kind, {"n": 1} if payload is None else payload, **fields)  # type: ignore[arg-type]


def claim_one(store: Store, worker: str = "w1", **kwargs: object) -> ClaimedJob:
    kwargs.setdefault("lease_seconds", LEASE)
    claimed = store.claim(worker, ["default"], 1, **kwargs)  # type: ignore[arg-type]
    assert len(claimed) == 1, claimed
    return claimed[0]


def enqueue_and_claim(store: Store, **fields: object) -> ClaimedJob:
    job_id = store.enqueue(new(**fields)).id
    claimed = claim_one(store)
    assert claimed.id == job_id
    return claimed


def close_to(a: datetime | None, b: datetime, tolerance: float = 0.01) -> bool:
    """Equal up to SQLite's millisecond resolution."""
    return a is not None and abs((a - b).total_seconds()) <= tolerance


# Submitting


def test_enqueue_then_get_round_trips_every_field(store: Store) -> None:
    run_at = later(-5).replace(microsecond=123000)
    before = utcnow() - timedelta(seconds=1)
    job = new(
        "report",
        {"region": "eu", "n": [1, 2.5, None], "ü": True},
        queue="reports",
        priority=-3,
        max_attempts=7,
        run_at=run_at,
        idempotency_key="key-1",
        tenant="acme",
        request_hash="hash-1",
    )
    enqueued = store.enqueue(job)
    assert enqueued.created

    got = store.get(enqueued.id)
    assert got is not None
    assert (got.id, got.kind, got.queue, got.priority) == (enqueued.id, "report", "reports", -3)
    assert got.payload == {"region": "eu", "n": [1, 2.5, None], "ü": True}
    assert (got.state, got.attempts, got.max_attempts) == (State.QUEUED, 0, 7)
    assert (got.tenant, got.idempotency_key) == ("acme", "key-1")
    assert close_to(got.run_at, run_at, 0.001)
    assert before <= got.created_at <= utcnow() + timedelta(seconds=1)
    assert got.created_at.tzinfo is not None and got.created_at.utcoffset() == timedelta(0)
    assert got.updated_at == got.created_at
    assert got.lease_expires_at is None and got.worker is None and not got.stale
    assert (got.result, got.error, got.checkpoint) == (None, None, None)
    assert got.progress == Progress(None, None)
    assert got.started_at is None and got.finished_at is None


def test_enqueue_without_run_at_is_due_now(store: Store) -> None:
    job_id = store.enqueue(new()).id
    got = store.get(job_id)
    assert got is not None
    assert close_to(got.run_at, got.created_at)
    assert store.claim("w1", ["default"], 1, LEASE)[0].id == job_id


def test_one_job_alone_is_stored_as_the_same_job_in_a_batch(store: Store) -> None:
    """A store may insert one job without keys its own way (PostgreSQL: its
    values, not a JSON document): every field reads back as a batch stores it."""
    text = 'tab\t quote" é 😀'
    payload = {"n": [1, 2.5, None], text: {"deep": True}}
    fields = dict(
        queue="other", priority=-3, max_attempts=2, tenant=text, concurrency_key="k1",
        timeout=2.5, expires_in=600.0, traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01",
        cost=3, payload_json=canonical(payload),
    )  # fmt: skip
    at = later(3600).replace(microsecond=0)
    shapes = {
        "due": dict(fields),
        "later": dict(fields, run_at=at, expires_in=None, expires_at=later(7200)),
    }
    for shape in shapes.values():
        alone = store.get(store.enqueue(new(text, payload, **shape)).id)
        batch = store.enqueue_many([new(text, payload, **shape), new()])
        batched = store.get(batch[0].id)
        assert alone is not None and batched is not None
        for name in (
            "kind", "queue", "priority", "payload", "state", "attempts", "max_attempts",
            "tenant", "idempotency_key", "concurrency_key", "timeout", "cost", "unique_key",
            "debounce_key", "workflow_id", "depends_on", "started_at", "finished_at",
        ):  # fmt: skip
            assert getattr(alone, name) == getattr(batched, name), name
        assert alone.state == State.QUEUED and alone.cost == 3 and alone.timeout == 2.5
        assert close_to(alone.updated_at, alone.created_at, 0.001)
        assert alone.expires_at is not None and batched.expires_at is not None
        assert close_to(alone.expires_at, batched.expires_at, 5)
        if "run_at" in shape:
            assert alone.run_at == batched.run_at == at
        else:
            assert close_to(alone.run_at, alone.created_at, 0.001)
            assert close_to(alone.expires_at, alone.created_at + timedelta(seconds=600), 0.01)


def test_get_of_an_unknown_job_or_another_tenants_job_is_none(store: Store) -> None:
    job_id = store.enqueue(new(tenant="acme")).id
    assert store.get("0" * 26) is None
    assert store.get(job_id, tenant="other") is None
    assert store.get(job_id, tenant="acme") is not None
    assert store.get_result(job_id, tenant="other") == (False, None)


def test_idempotency_key_returns_the_same_job_with_created_false_and_stored_hash(
    store: Store,
) -> None:
    first = store.enqueue(new(idempotency_key="k1", request_hash="h1"))
    again = store.enqueue(new(payload={"other": True}, idempotency_key="k1", request_hash="h2"))
    assert first.created and not again.created
    assert again.id == first.id
    assert again.request_hash == "h1"
    stored = store.get(first.id)
    assert stored is not None and stored.payload == {"n": 1}
    assert len(store.list(JobFilter()).jobs) == 1


def test_idempotency_keys_are_per_tenant(store: Store) -> None:
    a = store.enqueue(new(idempotency_key="k", tenant="a"))
    b = store.enqueue(new(idempotency_key="k", tenant="b"))
    assert a.created and b.created and a.id != b.id


def test_enqueue_many_returns_results_in_input_order(store: Store) -> None:
    results = store.enqueue_many([new(payload={"i": i}) for i in range(20)])
    assert all(r.created for r in results)
    assert [store.get(r.id).payload for r in results] == [{"i": i} for i in range(20)]  # type: ignore[union-attr]
    # Ids are time-ordered: the batch keeps its order in the id space too.
    assert [r.id for r in results] == sorted(r.id for r in results)


def test_enqueue_many_dedupes_idempotency_keys_inside_the_batch_and_against_stored_jobs(
    store: Store,
) -> None:
    stored = store.enqueue(new(idempotency_key="old", request_hash="h-old"))
    results = store.enqueue_many(
        [
            new(payload={"i": 0}, idempotency_key="dup", request_hash="h0"),
            new(payload={"i": 1}),
            new(payload={"i": 2}, idempotency_key="dup", request_hash="h2"),
            new(payload={"i": 3}, idempotency_key="old", request_hash="h3"),
        ]
    )
    assert [r.created for r in results] == [True, True, False, False]
    assert results[2].id == results[0].id and results[2].request_hash == "h0"
    assert results[3].id == stored.id and results[3].request_hash == "h-old"
    assert store.get(results[0].id).payload == {"i": 0}  # type: ignore[union-attr]
    assert len(store.list(JobFilter()).jobs) == 3


def test_enqueue_many_is_one_transaction(store: Store) -> None:
    with pytest.raises(StoreError):
        store.enqueue_many([new(), new(max_attempts=0)])  # violates CHECK (max_attempts > 0)
    assert store.list(JobFilter()).jobs == []
    assert store.enqueue_many([]) == []


# A store may load a large batch another way (PostgreSQL copies the jobs without
# an idempotency key in): the contract is the same.
LARGE = 300


@pytest.mark.parametrize("size", [1, LARGE])
def test_each_created_job_comes_back_with_its_stored_created_at(store: Store, size: int) -> None:
    """The database's clock, as `get` reads it (Django's enqueued_at): no
    second read. A job a key matched was created before: None."""
    kept = store.enqueue(new(idempotency_key="kept"))
    plain = [new(payload={"i": i}) for i in range(size)]
    *created, matched = store.enqueue_many([*plain, new(idempotency_key="kept")])
    first, second = store.enqueue_many([new(ref="a"), new(ref="b", depends_on=("a",))])
    assert matched.id == kept.id and matched.created_at is None
    for result in [kept, *created, first, second]:
        job = store.get(result.id)
        assert job is not None and result.created and result.created_at == job.created_at


def test_a_large_enqueue_many_keeps_order_keys_and_every_field(store: Store) -> None:
    stored = store.enqueue(new(idempotency_key="old", request_hash="h-old"))
    at = later(3600).replace(microsecond=0)
    jobs = [new(payload={"i": i}) for i in range(LARGE)]
    jobs[10] = new(payload={"i": 10}, idempotency_key="dup", request_hash="h10")
    jobs[20] = new(payload={"i": 20}, idempotency_key="dup", request_hash="h20")
    jobs[30] = new(payload={"i": 30}, idempotency_key="old", request_hash="h30")
    text = 'tab\t newline\n return\r backslash\\ quote" é 😀'
    jobs[40] = new(
        kind=text,
        payload={"i": 40, text: [text, 1.5, None, True, {"deep": {}}]},
        queue="other",
        priority=-3,
        max_attempts=2,
        run_at=at,
        tenant=text,
    )
    odd_payload = {"i": 50, text: [text, 1.5, None, True, {"deep": {}}]}
    jobs[50] = new(payload=odd_payload, payload_json=canonical(odd_payload))  # as Queue gives it
    results = store.enqueue_many(jobs)
    assert [r.created for r in results] == [n not in (20, 30) for n in range(LARGE)]
    assert results[20].id == results[10].id and results[20].request_hash == "h10"
    assert results[30].id == stored.id and results[30].request_hash == "h-old"
    created = [r.id for r in results if r.created]
    assert created == sorted(created) and len(set(created)) == LARGE - 2
    got = {job.id: job for job in store.get_many(created)}
    assert [got[r.id].payload for r in results if r.created] == [
        jobs[n].payload for n in range(LARGE) if n not in (20, 30)
    ]
    odd = got[results[40].id]
    assert (odd.kind, odd.queue, odd.priority, odd.max_attempts, odd.tenant) == (
        text, "other", -3, 2, text,
    )  # fmt: skip
    assert odd.run_at == at and odd.state == State.QUEUED and odd.attempts == 0
    plain = got[results[0].id]
    assert (plain.kind, plain.queue, plain.priority, plain.max_attempts, plain.tenant) == (
        "k", "default", 0, 5, "",
    )  # fmt: skip
    assert close_to(plain.run_at, plain.created_at) and close_to(plain.created_at, utcnow(), 60)
    assert close_to(got[results[10].id].created_at, plain.created_at, 5)
    assert len(store.list(JobFilter(), limit=1000).jobs) == LARGE - 1
    claimed = store.claim("w1", ["default"], LARGE, LEASE)
    assert len(claimed) == LARGE - 2


@pytest.mark.parametrize("where", [1, LARGE - 1], ids=["early", "last"])
def test_a_job_that_fails_validation_as_the_store_reads_it_stores_none(
    store: Store, where: int
) -> None:
    """Queue.enqueue_many checks each job as the store reads it, so PostgreSQL
    copies the first in while later ones are checked: an invalid one raises, its
    own error, and the transaction stores nothing."""
    queue = chit.Queue()
    queue.task("k")(lambda job, body: None)
    queue.use_store(store)
    requests = [chit.JobRequest("k", {"i": i}) for i in range(LARGE)]
    requests[7] = chit.JobRequest("k", {"i": 7}, idempotency_key="seven")
    good = requests[where]
    requests[where] = chit.JobRequest("k", {"n": float("nan")})
    with pytest.raises(chit.InvalidPayload, match="not JSON"):
        queue.enqueue_many(requests)
    assert store.list(JobFilter()).jobs == []
    requests[where] = good
    assert len({r.id for r in queue.enqueue_many(requests)}) == LARGE  # nothing left half done


@pytest.mark.parametrize("bad", [0, LARGE - 1], ids=["first", "last"])
@pytest.mark.parametrize("key", [None, "k"], ids=["plain", "keyed"])
def test_a_large_enqueue_many_is_one_transaction(store: Store, bad: int, key: str | None) -> None:
    jobs = [new(payload={"i": i}) for i in range(LARGE)]
    jobs[bad] = new(max_attempts=0, idempotency_key=key)  # violates CHECK (max_attempts > 0)
    with pytest.raises(StoreError):
        store.enqueue_many(jobs)
    assert store.list(JobFilter()).jobs == []


# Claiming


def test_claim_order_is_priority_then_run_at_then_id(store: Store) -> None:
    base = later(-60).replace(microsecond=0)
    ids = {}
    for name, priority, offset in [
        ("late-urgent", 0, 30),
        ("early-lazy", 5, 0),
        ("early-urgent", 0, 10),
        ("negative", -1, 40),
        ("tie-a", 2, 20),
        ("tie-b", 2, 20),
    ]:
        ids[store.enqueue(new(priority=priority, run_at=base + timedelta(seconds=offset))).id] = (
            name
        )
    claimed = store.claim("w1", ["default"], 10, LEASE)
    assert [ids[c.id] for c in claimed] == [
        "negative",
        "early-urgent",
        "late-urgent",
        "tie-a",
        "tie-b",
        "early-lazy",
    ]


def test_claim_order_holds_one_job_at_a_time(store: Store) -> None:
    base = later(-60).replace(microsecond=0)
    low = store.enqueue(new(priority=1, run_at=base)).id
    high_late = store.enqueue(new(priority=0, run_at=base + timedelta(seconds=5))).id
    high_early = store.enqueue(new(priority=0, run_at=base)).id
    assert [claim_one(store).id for _ in range(3)] == [high_early, high_late, low]


def test_a_job_whose_run_at_is_in_the_future_is_not_claimed_until_due(store: Store) -> None:
    due_at = later(3600).replace(microsecond=0)
    job_id = store.enqueue(new(run_at=due_at)).id
    assert store.claim("w1", ["default"], 1, LEASE) == []
    assert store.claim("w1", ["default"], 1, LEASE, now=due_at - timedelta(seconds=1)) == []
    claimed = store.claim("w1", ["default"], 1, LEASE, now=due_at)
    assert [c.id for c in claimed] == [job_id]


def test_claim_takes_only_the_given_queues_in_queue_order(store: Store) -> None:
    a = store.enqueue(new(queue="a", priority=9)).id
    b = store.enqueue(new(queue="b", priority=0)).id
    store.enqueue(new(queue="c"))
    claimed = store.claim("w1", ["a", "b"], 10, LEASE)
    assert [c.id for c in claimed] == [a, b]
    assert [c.queue for c in claimed] == ["a", "b"]
    assert store.claim("w1", ["a", "b"], 10, LEASE) == []
    assert store.claim("w1", [], 10, LEASE) == []


def test_claim_stops_at_the_limit_across_queues(store: Store) -> None:
    store.enqueue_many([new(queue="a") for _ in range(3)] + [new(queue="b") for _ in range(3)])
    assert len(store.claim("w1", ["a", "b"], 2, LEASE)) == 2
    claimed = store.claim("w1", ["a", "b"], 2, LEASE)
    assert [c.queue for c in claimed] == ["a", "b"]
    assert len(store.claim("w1", ["a", "b"], 100, LEASE)) == 2
    assert store.claim("w1", ["a", "b"], 0, LEASE) == []


def test_claim_counts_an_attempt_sets_a_lease_and_opens_an_attempt_record(store: Store) -> None:
    job_id = store.enqueue(new(max_attempts=3)).id
    now = later(1).replace(microsecond=0)
    claimed = claim_one(store, worker="host:1", lease_seconds=45, now=now)
    assert (claimed.id, claimed.kind, claimed.payload) == (job_id, "k", {"n": 1})
    assert (claimed.attempt, claimed.max_attempts) == (1, 3)
    assert claimed.lease_token
    job = store.get(job_id)
    assert job is not None
    assert (job.state, job.attempts, job.worker) == (State.RUNNING, 1, "host:1")
    assert close_to(job.lease_expires_at, now + timedelta(seconds=45))
    assert close_to(job.started_at, now)
    [attempt] = store.attempts(job_id)
    assert (attempt.attempt, attempt.worker, attempt.outcome, attempt.finished_at) == (
        1,
        "host:1",
        None,
        None,
    )
    assert close_to(attempt.started_at, now)


def test_a_claim_on_the_database_clock_opens_the_attempt_at_the_jobs_start(
    store: Store,
) -> None:
    """One instant for both: the job's started_at and its attempt's, though the
    claim writes them in two statements on SQLite (a Django TaskResult's
    last_attempted_at is the attempt's)."""
    job_ids = [r.id for r in store.enqueue_many([new() for _ in range(50)])]
    while store.claim("w", ["default"], 1, 30):  # 50 claims, each its own instant
        pass
    for job_id in job_ids:
        job = store.get(job_id)
        [attempt] = store.attempts(job_id)
        assert job is not None and attempt.started_at == job.started_at


def test_every_claim_gets_a_new_lease_token(store: Store) -> None:
    tokens = set()
    job = enqueue_and_claim(store)
    for _ in range(5):
        tokens.add(job.lease_token)
        store.finish([Released(job.id, job.lease_token)])
        job = claim_one(store)
    assert len(tokens) == 5


def test_invariant1_concurrent_claimers_never_get_the_same_job(backend: Backend) -> None:
    backend.open().enqueue_many([new(payload={"i": i}) for i in range(500)])
    stores = [backend.open() for _ in range(4)]
    got: list[list[str]] = [[] for _ in stores]
    start = threading.Barrier(len(stores))

    def claimer(index: int) -> None:
        start.wait()
        empty = 0
        while empty < 3:
            batch = stores[index].claim(f"w{index}", ["default"], 7, LEASE)
            got[index].extend(c.id for c in batch)
            empty = 0 if batch else empty + 1

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [job_id for ids in got for job_id in ids]
    assert len(every) == 500
    assert len(set(every)) == 500, [k for k, n in Counter(every).items() if n > 1][:5]
    stats = stores[0].stats()
    assert stats.by_state["running"] == 500 and stats.by_state["queued"] == 0


# Leases and rescue


def test_invariant2_a_running_job_has_a_lease_and_is_stale_once_it_expires(store: Store) -> None:
    store.enqueue(new(run_at=later(-3600)))
    past = later(-120)
    job = claim_one(store, lease_seconds=60, now=past)  # the lease ended a minute ago
    got = store.get(job.id)
    assert got is not None and got.state is State.RUNNING
    assert close_to(got.lease_expires_at, past + timedelta(seconds=60))
    assert got.stale
    assert store.stats().stale_running == 1
    assert store.list(JobFilter()).jobs[0].stale

    fresh = enqueue_and_claim(store)
    assert not store.get(fresh.id).stale  # type: ignore[union-attr]
    assert store.stats(now=later(LEASE + 1)).stale_running == 2


def test_invariant2_rescue_requeues_an_expired_job_that_has_attempts_left(store: Store) -> None:
    job = enqueue_and_claim(store, max_attempts=2)
    assert store.rescue_expired(now=later(LEASE - 5)).requeued == 0
    at = later(LEASE + 1)
    report = store.rescue_expired(now=at)
    assert (report.requeued, report.failed, report.cancelled) == (1, 0, 0)
    got = store.get(job.id)
    assert got is not None
    assert (got.state, got.attempts, got.lease_expires_at) == (State.QUEUED, 1, None)
    assert got.error == "worker lost: lease expired after 1 attempts"
    assert close_to(got.run_at, at)
    [attempt] = store.attempts(job.id)
    assert attempt.outcome is AttemptOutcome.LEASE_EXPIRED and attempt.error
    assert claim_one(store, now=at).attempt == 2


def test_invariant2_rescue_fails_with_the_exact_error_when_attempts_are_used_up(
    store: Store,
) -> None:
    job = enqueue_and_claim(store, max_attempts=2)
    at = later(LEASE + 1)
    store.rescue_expired(now=at)
    claim_one(store, now=at)
    report = store.rescue_expired(now=at + timedelta(seconds=LEASE + 1))
    assert (report.requeued, report.failed, report.cancelled) == (0, 1, 0)
    got = store.get(job.id)
    assert got is not None and got.state is State.FAILED
    assert got.error == "worker lost: lease expired after 2 attempts"
    assert got.finished_at is not None and got.attempts == 2
    assert [a.outcome for a in store.attempts(job.id)] == [AttemptOutcome.LEASE_EXPIRED] * 2


def test_invariant2_rescue_cancels_a_job_whose_cancellation_was_requested(store: Store) -> None:
    job = enqueue_and_claim(store)
    assert store.cancel(job.id) is CancelResult.REQUESTED
    report = store.rescue_expired(now=later(LEASE + 1))
    assert (report.requeued, report.failed, report.cancelled) == (0, 0, 1)
    got = store.get(job.id)
    assert got is not None and got.state is State.CANCELLED and got.finished_at is not None


def test_rescue_leaves_live_leases_and_other_states_alone(store: Store) -> None:
    live = enqueue_and_claim(store)
    store.enqueue(new())
    report = store.rescue_expired()
    assert (report.requeued, report.failed, report.cancelled) == (0, 0, 0)
    assert store.get(live.id).state is State.RUNNING  # type: ignore[union-attr]
    assert store.stats().by_state["queued"] == 1


def test_a_stray_open_attempt_is_closed_at_the_next_claim_instead_of_blocking_it(
    backend: Backend,
) -> None:
    store = backend.open()
    job = enqueue_and_claim(store, max_attempts=5)
    at = later(LEASE + 1)
    store.rescue_expired(now=at)
    # As a failure between the job's rescue and its attempt's closing would leave it.
    backend.inspect.leave_open_attempt(job.id, 1, "lost", utcnow())
    again = claim_one(store, worker="w2", now=at)
    assert (again.id, again.attempt) == (job.id, 2)
    history = store.attempts(job.id)
    assert [(a.worker, a.outcome) for a in history] == [
        ("w1", AttemptOutcome.LEASE_EXPIRED),
        ("lost", AttemptOutcome.LEASE_EXPIRED),
        ("w2", None),
    ]
    assert store.finish([Succeeded(again.id, again.lease_token, "ok")]) == [True]


# Fencing


def test_invariant3_a_rescued_workers_token_can_no_longer_write_anything(store: Store) -> None:
    old = enqueue_and_claim(store, max_attempts=3)
    assert store.heartbeat([Beat(old.id, old.lease_token, Progress(1, 10))], LEASE).held
    at = later(LEASE + 1)
    store.rescue_expired(now=at)
    new_claim = claim_one(store, worker="w2", now=at)
    assert new_claim.id == old.id and new_claim.lease_token != old.lease_token
    before = store.get(old.id)

    beat = store.heartbeat([Beat(old.id, old.lease_token, Progress(9, 10))], LEASE, now=at)
    assert beat.held == frozenset()
    assert not store.checkpoint(old.id, old.lease_token, {"stale": True}, Progress(9, 10), LEASE)
    for outcome in [
        Succeeded(old.id, old.lease_token, "stale result"),
        Failed(old.id, old.lease_token, "stale error"),
        Failed(old.id, old.lease_token, "stale error", retry_in=1),
        Released(old.id, old.lease_token),
        Cancelled(old.id, old.lease_token),
    ]:
        assert store.finish([outcome]) == [False]
    after = store.get(old.id)
    assert after == before
    assert after is not None and (after.state, after.worker) == (State.RUNNING, "w2")
    # The new holder is unaffected and can finish.
    assert store.finish([Succeeded(new_claim.id, new_claim.lease_token, "ok")]) == [True]
    outcomes = [a.outcome for a in store.attempts(old.id)]
    assert outcomes == [AttemptOutcome.LEASE_EXPIRED, AttemptOutcome.SUCCEEDED]


def test_invariant3_a_finished_job_fences_out_its_own_token(store: Store) -> None:
    job = enqueue_and_claim(store)
    assert store.finish([Succeeded(job.id, job.lease_token, 1)]) == [True]
    assert store.finish([Succeeded(job.id, job.lease_token, 2)]) == [False]
    assert store.finish([Failed(job.id, job.lease_token, "late")]) == [False]
    assert store.heartbeat([Beat(job.id, job.lease_token)], LEASE).held == frozenset()
    got = store.get(job.id)
    assert got is not None and (got.state, got.result, got.error) == (State.SUCCEEDED, 1, None)


def test_a_batch_of_successes_fences_each_and_keeps_its_result_and_progress(
    store: Store,
) -> None:
    """Several successes in one call (SQLite writes them in one statement): each
    fenced by its own token, each result stored as given, its last progress
    with it, its attempt record closed."""
    store.enqueue_many([new(payload={"i": i}) for i in range(4)])
    a, b, c, d = store.claim("w1", ["default"], 4, LEASE)
    result = {"n": 1.5, "big": 2**62, "text": 'é\u2028"quoted"', "none": None}
    applied = store.finish(
        [
            Succeeded(a.id, a.lease_token, result, Progress(3, 4, "merged")),
            Succeeded(b.id, "not-the-token", "stale"),
            Succeeded(c.id, c.lease_token, None),
            Succeeded(d.id, d.lease_token, "large " * 20_000),  # out of the row
        ]
    )
    assert applied == [True, False, True, True]
    jobs = {j.id: j for j in (store.get(x.id) for x in (a, b, c, d)) if j is not None}
    assert (jobs[a.id].state, jobs[a.id].result) == (State.SUCCEEDED, result)
    assert jobs[a.id].progress == Progress(3, 4, "merged")
    assert (jobs[b.id].state, jobs[b.id].result) == (State.RUNNING, None)
    assert (jobs[c.id].state, store.get_result(c.id)) == (State.SUCCEEDED, (True, None))
    assert store.get_result(d.id) == (True, "large " * 20_000)
    for job in (a, c, d):
        assert [x.outcome for x in store.attempts(job.id)] == [AttemptOutcome.SUCCEEDED]
    assert [x.outcome for x in store.attempts(b.id)] == [None]  # still open


def test_finish_records_a_batch_and_reports_each_item_in_input_order(store: Store) -> None:
    store.enqueue_many([new(payload={"i": i}) for i in range(5)])
    a, b, c, d, e = store.claim("w1", ["default"], 5, LEASE)
    applied = store.finish(
        [
            Failed(c.id, c.lease_token, "boom"),
            Succeeded(a.id, "not-the-token", "x"),
            Succeeded(b.id, b.lease_token, "large " * 20_000),  # out of the row
            Released(d.id, d.lease_token),
            Cancelled(e.id, e.lease_token),
            Succeeded(a.id, a.lease_token, "second try, same batch"),
        ]
    )
    assert applied == [True, False, True, True, True, True]
    states = {j.id: j.state for j in store.list(JobFilter()).jobs}
    assert states == {
        a.id: State.SUCCEEDED,
        b.id: State.SUCCEEDED,
        c.id: State.FAILED,
        d.id: State.QUEUED,
        e.id: State.CANCELLED,
    }
    assert store.get(a.id).result == "second try, same batch"  # type: ignore[union-attr]
    assert store.get(b.id).result_external  # type: ignore[union-attr]
    assert store.get_result(b.id) == (True, "large " * 20_000)
    assert store.finish([]) == []


def test_finish_and_claim_records_the_outcomes_and_claims_in_one_call(store: Store) -> None:
    store.enqueue_many([new(payload={"i": i}) for i in range(6)])
    a, b = store.claim("w1", ["default"], 2, LEASE)
    applied, claimed = store.finish_and_claim(
        [Succeeded(a.id, a.lease_token, {"ok": 1}), Succeeded(b.id, "stale-token", None)],
        "w1",
        ["default"],
        3,
        LEASE,
    )
    assert applied == [True, False]
    assert [c.payload for c in claimed] == [{"i": 2}, {"i": 3}, {"i": 4}]
    assert all(c.attempt == 1 and c.lease_token for c in claimed)
    assert store.get(a.id).result == {"ok": 1}  # type: ignore[union-attr]
    assert store.get(b.id).state is State.RUNNING  # type: ignore[union-attr]
    for job in claimed:
        assert store.get(job.id).state is State.RUNNING  # type: ignore[union-attr]
        assert store.attempts(job.id)[-1].finished_at is None
    assert store.attempts(a.id)[-1].outcome is AttemptOutcome.SUCCEEDED


def test_finish_and_claim_with_outcomes_of_every_kind_and_a_large_result(store: Store) -> None:
    store.enqueue_many([new(payload={"i": i}) for i in range(6)])
    a, b, c, d = store.claim("w1", ["default"], 4, LEASE)
    applied, claimed = store.finish_and_claim(
        [
            Succeeded(a.id, a.lease_token, "large " * 20_000),
            Failed(b.id, b.lease_token, "boom"),
            Cancelled(c.id, c.lease_token),
            Succeeded(d.id, d.lease_token, 1),
            Succeeded(d.id, d.lease_token, 2),  # the same job again: fenced out
        ],
        "w1",
        ["default"],
        10,
        LEASE,
    )
    assert applied == [True, True, True, True, False]
    assert sorted(j.payload["i"] for j in claimed) == [4, 5]
    assert store.get_result(a.id) == (True, "large " * 20_000)
    assert store.get(b.id).state is State.FAILED  # type: ignore[union-attr]
    assert store.get(c.id).state is State.CANCELLED  # type: ignore[union-attr]
    assert store.get(d.id).result == 1  # type: ignore[union-attr]


def test_finish_and_claim_with_nothing_to_claim_or_nothing_to_finish(store: Store) -> None:
    store.enqueue(new())
    assert store.finish_and_claim([], "w1", ["default"], 0, LEASE) == ([], [])
    (job,) = store.finish_and_claim([], "w1", ["default"], 5, LEASE)[1]
    applied, claimed = store.finish_and_claim(
        [Succeeded(job.id, job.lease_token, None)], "w1", ["default"], 0, LEASE
    )
    assert (applied, claimed) == ([True], [])
    assert store.finish_and_claim([], "w1", ["default"], 5, LEASE) == ([], [])


def test_finish_and_claim_can_take_back_a_job_it_queued_for_a_retry_now(store: Store) -> None:
    store.enqueue(new())
    job = claim_one(store)
    applied, claimed = store.finish_and_claim(
        [Failed(job.id, job.lease_token, "again", retry_in=0.0)], "w1", ["default"], 1, LEASE
    )
    assert applied == [True]
    assert [(c.id, c.attempt) for c in claimed] == [(job.id, 2)]
    attempts = store.attempts(job.id)
    assert [a.outcome for a in attempts] == [AttemptOutcome.RETRIED, None]


# Outcomes


def test_invariant4_a_failed_job_always_has_its_error(store: Store) -> None:
    job = enqueue_and_claim(store)
    error = "Traceback (most recent call last):\n  ...\nValueError: bad input"
    assert store.finish([Failed(job.id, job.lease_token, error)]) == [True]
    got = store.get(job.id)
    assert got is not None
    assert (got.state, got.error, got.lease_expires_at) == (State.FAILED, error, None)
    assert got.finished_at is not None


def test_fail_with_retry_in_queues_the_job_again_after_the_delay(store: Store) -> None:
    job = enqueue_and_claim(store, max_attempts=3)
    at = later(0).replace(microsecond=0)
    assert store.finish([Failed(job.id, job.lease_token, "flaky", retry_in=90)], now=at) == [True]
    got = store.get(job.id)
    assert got is not None
    assert (got.state, got.attempts, got.error, got.finished_at) == (
        State.QUEUED,
        1,
        "flaky",
        None,
    )
    assert close_to(got.run_at, at + timedelta(seconds=90))
    assert store.claim("w1", ["default"], 1, LEASE, now=at + timedelta(seconds=89)) == []
    assert claim_one(store, now=at + timedelta(seconds=90)).attempt == 2


def test_a_retry_asked_for_after_the_last_attempt_fails_the_job(store: Store) -> None:
    job = enqueue_and_claim(store, max_attempts=1)
    assert store.finish([Failed(job.id, job.lease_token, "flaky", retry_in=5)]) == [True]
    got = store.get(job.id)
    assert got is not None
    assert (got.state, got.attempts, got.error) == (State.FAILED, 1, "flaky")
    assert got.finished_at is not None
    assert store.attempts(job.id)[-1].outcome is AttemptOutcome.FAILED


def test_success_writes_the_handlers_last_progress_with_the_result(store: Store) -> None:
    job = enqueue_and_claim(store)
    store.heartbeat([Beat(job.id, job.lease_token, Progress(3, 10))], LEASE)
    other = store.enqueue(new()).id
    held = claim_one(store)
    assert held.id == other
    outcomes = [
        Succeeded(job.id, job.lease_token, "done", Progress(10, 10)),
        Succeeded(held.id, held.lease_token, "kept"),
    ]
    assert store.finish(outcomes) == [True, True]
    assert store.get(job.id).progress == Progress(10, 10)  # type: ignore[union-attr]
    assert store.get(other).progress == Progress(None, None)  # type: ignore[union-attr]


def test_succeeded_stores_the_result_and_clears_the_lease(store: Store) -> None:
    job = enqueue_and_claim(store)
    assert store.finish([Succeeded(job.id, job.lease_token, {"rows": [1, 2]})]) == [True]
    got = store.get(job.id)
    assert got is not None
    assert (got.state, got.result) == (State.SUCCEEDED, {"rows": [1, 2]})
    assert not got.result_external
    assert got.lease_expires_at is None and got.finished_at is not None
    assert store.get_result(job.id) == (True, {"rows": [1, 2]})


def test_a_large_result_lives_in_the_results_table(backend: Backend) -> None:
    store = backend.open(result_inline_bytes=1000)
    big = {"text": "x" * 5000, "n": list(range(50))}
    store.enqueue(new())
    job = claim_one(store)
    assert store.finish([Succeeded(job.id, job.lease_token, big)]) == [True]
    got = store.get(job.id)
    assert got is not None and got.state is State.SUCCEEDED
    assert got.result_external and got.result is None
    assert store.get_result(job.id) == (True, big)
    assert backend.inspect.external_results(job.id) == 1
    assert backend.inspect.inline_result(job.id) is None
    assert store.get_result("0" * 26) == (False, None)


def test_invariant5_heartbeat_writes_progress_and_renews_the_lease_in_one_call(
    store: Store,
) -> None:
    a = enqueue_and_claim(store)
    b = enqueue_and_claim(store)
    at = later(20)
    result = store.heartbeat(
        [Beat(a.id, a.lease_token, Progress(3, 10)), Beat(b.id, b.lease_token)], LEASE, now=at
    )
    assert result.held == {a.id, b.id} and result.cancel_requested == frozenset()
    got_a, got_b = store.get(a.id), store.get(b.id)
    assert got_a is not None and got_b is not None
    assert got_a.progress == Progress(3, 10)
    assert got_b.progress == Progress(None, None)  # no progress given: none written
    assert close_to(got_a.lease_expires_at, at + timedelta(seconds=LEASE))
    assert close_to(got_b.lease_expires_at, at + timedelta(seconds=LEASE))
    # Renewed: a rescue at the old expiry leaves them alone.
    assert store.rescue_expired(now=later(LEASE + 1)).requeued == 0
    # Progress given without a total, then kept when a later beat gives none.
    store.heartbeat([Beat(a.id, a.lease_token, Progress(4, None))], LEASE)
    store.heartbeat([Beat(a.id, a.lease_token)], LEASE)
    assert store.get(a.id).progress == Progress(4, None)  # type: ignore[union-attr]
    assert store.heartbeat([], LEASE).held == frozenset()


def test_invariant5_a_fenced_heartbeat_writes_no_progress_and_renews_nothing(
    store: Store,
) -> None:
    job = enqueue_and_claim(store)
    before = store.get(job.id)
    result = store.heartbeat([Beat(job.id, "stolen-token", Progress(90, 100))], 3600)
    assert result.held == frozenset()
    assert store.get(job.id) == before


def test_invariant6_a_released_job_does_not_use_up_an_attempt(store: Store) -> None:
    job = enqueue_and_claim(store, max_attempts=1)
    at = later(1)
    assert store.finish([Released(job.id, job.lease_token)], now=at) == [True]
    got = store.get(job.id)
    assert got is not None
    assert (got.state, got.attempts, got.lease_expires_at) == (State.QUEUED, 0, None)
    assert close_to(got.run_at, at)
    again = claim_one(store, now=at)
    assert again.attempt == 1 and again.max_attempts == 1


def test_invariant6_hand_backs_after_the_third_use_up_attempts_and_end_failed(
    store: Store,
) -> None:
    job_id = store.enqueue(new(max_attempts=2)).id
    for _ in range(3):  # free: the attempt is not counted
        c = claim_one(store)
        assert c.attempt == 1
        assert store.finish([Released(job_id, c.lease_token)]) == [True]
    c = claim_one(store)
    assert store.finish([Released(job_id, c.lease_token)]) == [True]
    got = store.get(job_id)
    assert got is not None
    assert (got.state, got.attempts) == (State.QUEUED, 1)  # the fourth counted
    c = claim_one(store)
    assert c.attempt == 2
    assert store.finish([Released(job_id, c.lease_token)]) == [True]
    got = store.get(job_id)
    assert got is not None
    error = "handed back 5 times without finishing"
    assert (got.state, got.attempts, got.error) == (State.FAILED, 2, error)
    assert got.finished_at is not None and got.lease_expires_at is None
    history = store.attempts(job_id)
    assert [a.outcome for a in history] == [AttemptOutcome.RELEASED] * 4 + [AttemptOutcome.FAILED]
    assert [a.error for a in history] == [None] * 4 + [error]


def test_a_replayed_job_has_its_free_hand_backs_again(store: Store) -> None:
    job_id = store.enqueue(new(max_attempts=1)).id
    for _ in range(4):
        c = claim_one(store)
        store.finish([Released(job_id, c.lease_token)])
    assert store.get(job_id).state is State.FAILED  # type: ignore[union-attr]
    assert store.retry(job_id)
    c = claim_one(store)
    store.finish([Released(job_id, c.lease_token)])
    got = store.get(job_id)
    assert got is not None
    assert (got.state, got.attempts) == (State.QUEUED, 0)


def test_attempt_history_records_every_outcome_with_worker_and_error(store: Store) -> None:
    job_id = store.enqueue(new(max_attempts=5)).id

    def claim(worker: str, at: datetime) -> ClaimedJob:
        claimed = store.claim(worker, ["default"], 1, LEASE, now=at)
        assert [c.id for c in claimed] == [job_id]
        return claimed[0]

    t = later(1)
    c = claim("w-retry", t)
    store.finish([Failed(job_id, c.lease_token, "first\ntrace", retry_in=0)], now=t)
    c = claim("w-release", t)
    store.finish([Released(job_id, c.lease_token)], now=t)
    claim("w-lost", t)
    t += timedelta(seconds=LEASE + 1)
    store.rescue_expired(now=t)
    c = claim("w-fail", t)
    store.finish([Failed(job_id, c.lease_token, "final")], now=t)
    store.retry(job_id)
    c = claim("w-cancel", later(2))
    store.cancel(job_id)
    store.finish([Cancelled(job_id, c.lease_token)])
    store.retry(job_id)
    c = claim("w-ok", later(3))
    store.finish([Succeeded(job_id, c.lease_token, "done")])

    history = [(a.attempt, a.worker, a.outcome, a.error) for a in store.attempts(job_id)]
    lost, lost_error = history[2], history[2][3]
    assert history == [
        (1, "w-retry", AttemptOutcome.RETRIED, "first\ntrace"),
        (2, "w-release", AttemptOutcome.RELEASED, None),
        (2, "w-lost", AttemptOutcome.LEASE_EXPIRED, lost_error),
        (3, "w-fail", AttemptOutcome.FAILED, "final"),
        (1, "w-cancel", AttemptOutcome.CANCELLED, None),
        (1, "w-ok", AttemptOutcome.SUCCEEDED, None),
    ]
    assert lost == (2, "w-lost", AttemptOutcome.LEASE_EXPIRED, lost_error) and lost_error
    attempts = store.attempts(job_id)
    assert all(a.finished_at is not None for a in attempts)
    assert store.attempts("0" * 26) == []


def test_checkpoint_persists_and_a_reclaimed_job_resumes_from_it(store: Store) -> None:
    job = enqueue_and_claim(store)
    assert job.checkpoint is None
    at = later(10)
    assert store.checkpoint(job.id, job.lease_token, {"page": 7}, Progress(7, 20), LEASE, now=at)
    got = store.get(job.id)
    assert got is not None
    assert got.checkpoint == {"page": 7} and got.progress == Progress(7, 20)
    assert close_to(got.lease_expires_at, at + timedelta(seconds=LEASE))
    assert store.checkpoint(job.id, job.lease_token, {"page": 8}, None, LEASE)
    assert store.get(job.id).progress == Progress(7, 20)  # type: ignore[union-attr]

    t = later(LEASE * 3)
    store.rescue_expired(now=t)
    again = claim_one(store, now=t)
    assert (again.checkpoint, again.progress, again.attempt) == ({"page": 8}, Progress(7, 20), 2)


# Cancelling


def test_cancel_of_a_queued_job_cancels_it_at_once(store: Store) -> None:
    job_id = store.enqueue(new()).id
    assert store.cancel(job_id) is CancelResult.CANCELLED
    got = store.get(job_id)
    assert got is not None and got.state is State.CANCELLED and got.finished_at is not None
    assert store.claim("w1", ["default"], 1, LEASE) == []
    assert store.cancel(job_id) is CancelResult.ALREADY_FINISHED


def test_cancel_of_a_running_job_is_requested_and_seen_at_the_next_heartbeat(
    store: Store,
) -> None:
    job = enqueue_and_claim(store)
    other = enqueue_and_claim(store)
    assert store.cancel(job.id) is CancelResult.REQUESTED
    got = store.get(job.id)
    assert got is not None and got.state is State.RUNNING and got.cancel_requested
    beats = [Beat(job.id, job.lease_token), Beat(other.id, other.lease_token)]
    result = store.heartbeat(beats, LEASE)
    assert result.held == {job.id, other.id}
    assert result.cancel_requested == {job.id}
    assert store.cancel(job.id) is CancelResult.REQUESTED
    assert store.finish([Cancelled(job.id, job.lease_token)]) == [True]
    assert store.get(job.id).state is State.CANCELLED  # type: ignore[union-attr]
    assert store.attempts(job.id)[-1].outcome is AttemptOutcome.CANCELLED


@pytest.mark.parametrize(
    "outcome",
    ["failed", "failed-with-retry", "released"],
)
def test_a_job_whose_cancellation_was_requested_ends_cancelled_on_fail_or_release(
    store: Store, outcome: str
) -> None:
    job = enqueue_and_claim(store)
    store.cancel(job.id)
    record = {
        "failed": Failed(job.id, job.lease_token, "stopped"),
        "failed-with-retry": Failed(job.id, job.lease_token, "stopped", retry_in=5),
        "released": Released(job.id, job.lease_token),
    }[outcome]
    assert store.finish([record]) == [True]
    got = store.get(job.id)
    assert got is not None and got.state is State.CANCELLED and got.finished_at is not None
    assert store.attempts(job.id)[-1].outcome is AttemptOutcome.CANCELLED
    assert store.claim("w1", ["default"], 1, LEASE) == []


def test_cancel_of_a_finished_or_unknown_job_changes_nothing(store: Store) -> None:
    job = enqueue_and_claim(store, tenant="t")
    store.finish([Succeeded(job.id, job.lease_token)])
    before = store.get(job.id)
    assert store.cancel(job.id) is CancelResult.ALREADY_FINISHED
    assert store.get(job.id) == before
    assert store.cancel("0" * 26) is CancelResult.NOT_FOUND
    queued = store.enqueue(new(tenant="t")).id
    assert store.cancel(queued, tenant="other") is CancelResult.NOT_FOUND
    assert store.get(queued).state is State.QUEUED  # type: ignore[union-attr]


# Operating: retry, replay, failures, stats, prune


def _fail(store: Store, kind: str, error: str, **fields: object) -> str:
    job_id = store.enqueue(new(kind, **fields)).id
    claimed = store.claim("w1", ["default"], 1, LEASE)
    assert [c.id for c in claimed] == [job_id]
    assert store.finish([Failed(job_id, claimed[0].lease_token, error)]) == [True]
    return job_id


def test_retry_puts_a_failed_or_cancelled_job_back_with_attempts_zero(store: Store) -> None:
    failed = _fail(store, "k", "boom", max_attempts=1)
    cancelled = store.enqueue(new()).id
    store.cancel(cancelled)
    for job_id in (failed, cancelled):
        assert store.retry(job_id)
        got = store.get(job_id)
        assert got is not None
        assert (got.state, got.attempts, got.error, got.finished_at) == (
            State.QUEUED,
            0,
            None,
            None,
        )
        assert not got.cancel_requested
    claimed = {c.id: c for c in store.claim("w1", ["default"], 5, LEASE)}
    assert set(claimed) == {failed, cancelled}
    assert claimed[failed].attempt == 1
    # History is kept.
    outcomes = [a.outcome for a in store.attempts(failed)]
    assert outcomes == [AttemptOutcome.FAILED, None]


def test_retry_of_a_job_in_any_other_state_is_refused(store: Store) -> None:
    running = enqueue_and_claim(store)
    done = enqueue_and_claim(store)
    store.finish([Succeeded(done.id, done.lease_token)])
    failed = _fail(store, "k", "x", tenant="t")
    queued = store.enqueue(new()).id
    for job_id in (queued, running.id, done.id, "0" * 26):
        before = store.get(job_id)
        assert not store.retry(job_id)
        assert store.get(job_id) == before
    assert not store.retry(failed, tenant="other")
    assert store.retry(failed, tenant="t")


def test_replay_by_ids_kind_error_prefix_and_since_counts_and_leaves_others_alone(
    store: Store,
) -> None:
    a1 = _fail(store, "a", "Timeout: upstream\ntrace")
    a2 = _fail(store, "a", "KeyError: x")
    b1 = _fail(store, "b", "Timeout: db")
    cancelled = store.enqueue(new("a")).id
    store.cancel(cancelled)
    done = enqueue_and_claim(store, kind="a")
    store.finish([Succeeded(done.id, done.lease_token)])

    def states() -> dict[str, State]:
        return {j.id: j.state for j in store.list(JobFilter()).jobs}

    assert store.replay(ReplaySelector(kind="a", error_prefix="Timeout")) == 1
    assert states()[a1] is State.QUEUED and states()[a2] is State.FAILED
    assert states()[b1] is State.FAILED and states()[cancelled] is State.CANCELLED
    assert store.replay(ReplaySelector(error_prefix="Timeout")) == 1  # b1; a1 is queued now
    assert states()[b1] is State.QUEUED

    # By ids: failed or cancelled; other states are left alone and not counted.
    assert store.replay(ReplaySelector(ids=(a2, cancelled, done.id, "0" * 26))) == 2
    assert states()[a2] is State.QUEUED and states()[cancelled] is State.QUEUED
    assert states()[done.id] is State.SUCCEEDED
    got = store.get(a2)
    assert got is not None and got.attempts == 0 and got.error is None

    # By since (finished at or after) and by kind.
    assert len(store.claim("w1", ["default"], 10, LEASE)) == 4  # out of _fail's way
    old = _fail(store, "c", "old")
    time.sleep(0.01)  # SQLite keeps milliseconds: step past the last write's
    cutoff = later(0)
    time.sleep(0.01)
    recent = _fail(store, "c", "new")
    assert store.replay(ReplaySelector(kind="c", since=cutoff)) == 1
    assert states()[recent] is State.QUEUED and states()[old] is State.FAILED
    assert store.replay(ReplaySelector(kind="nothing-matches")) == 0
    assert store.replay(ReplaySelector()) == 1  # every failed job: `old`
    assert states()[old] is State.QUEUED


def test_replay_respects_the_tenant(store: Store) -> None:
    mine = _fail(store, "k", "e", tenant="me")
    theirs = _fail(store, "k", "e", tenant="them")
    assert store.replay(ReplaySelector(kind="k", tenant="me")) == 1
    assert store.replay(ReplaySelector(ids=(theirs,), tenant="me")) == 0
    assert store.get(mine).state is State.QUEUED  # type: ignore[union-attr]
    assert store.get(theirs).state is State.FAILED  # type: ignore[union-attr]


def test_failures_are_grouped_by_kind_and_first_line_with_counts_and_times(
    store: Store,
) -> None:
    first = _fail(store, "sync", "Timeout: upstream\n  File a.py")
    _fail(store, "sync", "Timeout: upstream\n  File b.py")
    last = _fail(store, "sync", "Timeout: upstream")
    other = _fail(store, "sync", "KeyError: 'id'")
    mail = _fail(store, "mail", "Timeout: upstream", tenant="t2")
    store.enqueue(new("sync"))  # not failed: not counted

    groups = store.failures()
    assert [(g.kind, g.error, g.count) for g in groups][:1] == [("sync", "Timeout: upstream", 3)]
    assert sorted((g.kind, g.error, g.count) for g in groups) == [
        ("mail", "Timeout: upstream", 1),
        ("sync", "KeyError: 'id'", 1),
        ("sync", "Timeout: upstream", 3),
    ]
    top = groups[0]
    jobs = {j.id: j for j in store.list(JobFilter()).jobs}
    assert top.first_seen == jobs[first].finished_at
    assert top.last_seen == jobs[last].finished_at
    assert top.latest_id == last
    assert top.first_seen <= top.last_seen
    assert [(g.kind, g.latest_id) for g in store.failures(tenant="t2")] == [("mail", mail)]
    assert other


def test_stats_count_states_kinds_last_hour_lag_and_stale(store: Store) -> None:
    running = enqueue_and_claim(store, kind="b")
    done = enqueue_and_claim(store, kind="a")
    store.finish([Succeeded(done.id, done.lease_token)])
    _fail(store, "b", "x")
    store.enqueue_many([new("a"), new("a"), new("b", run_at=later(3600))])
    store.enqueue(new("a", tenant="other"))

    now = later(5)
    stats = store.stats(now=now)
    assert stats.by_state == {
        "waiting": 0,
        "queued": 4,
        "running": 1,
        "succeeded": 1,
        "failed": 1,
        "cancelled": 0,
    }
    assert stats.by_kind == {
        "a": {"queued": 3, "succeeded": 1},
        "b": {"queued": 1, "running": 1, "failed": 1},
    }
    assert (stats.succeeded_last_hour, stats.failed_last_hour) == (1, 1)
    assert stats.failure_rate == 0.5
    assert stats.oldest_queued_age is not None and 4.9 <= stats.oldest_queued_age < 15
    assert stats.stale_running == 0
    assert store.stats(now=later(LEASE + 1)).stale_running == 1
    assert store.stats(now=later(7200)).succeeded_last_hour == 0
    assert store.stats(tenant="other").by_state["queued"] == 1
    assert running

    empty = store.stats(tenant="nobody")
    assert sum(empty.by_state.values()) == 0 and empty.oldest_queued_age is None


def test_prune_deletes_only_terminal_jobs_older_than_the_cutoff_with_their_history(
    backend: Backend,
) -> None:
    store = backend.open(result_inline_bytes=10)
    ok = enqueue_and_claim(store)
    store.finish([Succeeded(ok.id, ok.lease_token, "a result longer than ten bytes")])
    failed = _fail(store, "k", "x")
    cancelled = store.enqueue(new()).id
    store.cancel(cancelled)
    running = enqueue_and_claim(store)
    queued = store.enqueue(new()).id

    assert store.prune(3600) == 0  # all finished just now
    assert store.prune(60, now=later(3600)) == 3
    remaining = {j.id for j in store.list(JobFilter()).jobs}
    assert remaining == {queued, running.id}
    for job_id in (ok.id, failed, cancelled):
        assert store.get(job_id) is None
        assert store.attempts(job_id) == []
    assert backend.inspect.external_results() == 0
    assert len(store.attempts(running.id)) == 1


def test_prune_works_through_a_backlog_in_short_batches(
    store: Store, inspect: StoreInspection, monkeypatch: pytest.MonkeyPatch
) -> None:
    inspect.prune_in_batches_of(2, monkeypatch)
    for _ in range(5):
        job = enqueue_and_claim(store)
        store.finish([Succeeded(job.id, job.lease_token)])
    kept = store.enqueue(new()).id
    assert store.prune(60, now=later(3600)) == 5
    assert [j.id for j in store.list(JobFilter()).jobs] == [kept]


# Listing


def test_list_filters_by_state_kind_queue_tenant_and_since(store: Store) -> None:
    c = enqueue_and_claim(store, kind="a", tenant="t").id
    a = store.enqueue(new("a")).id
    b = store.enqueue(new("b", queue="q2")).id
    time.sleep(0.01)  # SQLite keeps milliseconds: step past the last write's
    cutoff = later(0)
    time.sleep(0.01)
    d = store.enqueue(new("b")).id

    def ids(**where: object) -> list[str]:
        return [j.id for j in store.list(JobFilter(**where)).jobs]  # type: ignore[arg-type]

    assert ids() == [d, b, a, c]  # newest first
    assert ids(state=State.QUEUED) == [d, b, a]
    assert ids(state=State.RUNNING) == [c]
    assert ids(kind="a") == [a, c]
    assert ids(queue="q2") == [b]
    assert ids(tenant="t") == [c]
    assert ids(tenant="") == [d, b, a]
    assert ids(since=cutoff) == [d]
    assert ids(kind="b", state=State.QUEUED, queue="default") == [d]
    assert ids(kind="nothing") == []


def test_list_keyset_pagination_walks_every_page_once(store: Store) -> None:
    ids = [r.id for r in store.enqueue_many([new(payload={"i": i}) for i in range(23)])]
    store.enqueue_many([new("other") for _ in range(4)])
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = store.list(JobFilter(kind="k"), limit=5, cursor=cursor)
        pages += 1
        seen.extend(j.id for j in page.jobs)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert pages == 5
    assert seen == list(reversed(ids))
    exact = store.list(JobFilter(kind="other"), limit=4)
    assert len(exact.jobs) == 4 and exact.next_cursor is None


def test_list_and_search_walk_hundreds_of_jobs_in_every_state_newest_first(store: Store) -> None:
    # More jobs than a store reads at a time (Redis: 200 ids a set), spread
    # over the states in runs, so that the newest of one state come between
    # the others' and a read ends inside a run.
    ids = [r.id for r in store.enqueue_many([new(payload={"i": i}) for i in range(900)])]
    claimed = {j.id: j for j in store.claim("w1", ["default"], 900, LEASE)}
    for n, job_id in enumerate(ids):
        job = claimed[job_id]
        if n % 7 in (1, 2):
            continue  # running
        if n % 7 == 3:
            store.finish([Failed(job.id, job.lease_token, "boom")])
        elif n % 7 == 4:
            store.cancel(job.id)
            store.finish([Succeeded(job.id, job.lease_token)])  # cancelled, as requested
        else:
            store.finish([Succeeded(job.id, job.lease_token)])
    queued = [r.id for r in store.enqueue_many([new("q") for _ in range(300)])]
    newest_first = (ids + queued)[::-1]
    assert [j.id for j in store.list(JobFilter(), limit=1200).jobs] == newest_first
    seen: list[str] = []
    cursor = None
    while True:
        page = store.list(JobFilter(), limit=233, cursor=cursor)
        seen.extend(j.id for j in page.jobs)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == newest_first
    assert [j.id for j in store.list(JobFilter(kind="q"), limit=1000).jobs] == queued[::-1]
    assert store.list(JobFilter(kind="none"), limit=5).jobs == []
    prefix = ids[450][:12]  # the same millisecond's ids share their first 10 digits
    found = [j.id for j in store.search(prefix, limit=2000)]
    assert set(found) == {i for i in ids + queued if i.startswith(prefix)}


def test_list_by_kind_queue_or_tenant_pages_through_jobs_in_every_state(store: Store) -> None:
    """Newest first whatever their state, one page at a time: PostgreSQL finds
    finished, waiting, queued and running jobs of a kind, queue or tenant by
    different indexes and merges them (it left waiting ones out)."""
    S = State
    states = [S.SUCCEEDED, S.QUEUED, S.RUNNING, S.WAITING, S.FAILED, S.QUEUED, S.CANCELLED]
    states += [S.RUNNING, S.WAITING]
    newest_first: list[str] = []
    for state in states:
        store.enqueue(new("b", queue="q2", tenant="u"))  # not listed, between the others
        if state is S.WAITING:  # for a signal
            job = enqueue_and_claim(store, kind="a", tenant="t")
            job_id = job.id
            assert store.finish([Suspended(job.id, job.lease_token, "go", None, None)]) == [True]
        elif state in (S.QUEUED, S.CANCELLED):
            job_id = store.enqueue(new("a", tenant="t", run_at=later(3600))).id
            if state is S.CANCELLED:
                assert store.cancel(job_id) is CancelResult.CANCELLED
        else:
            job = enqueue_and_claim(store, kind="a", tenant="t")
            job_id = job.id
            if state is S.SUCCEEDED:
                store.finish([Succeeded(job.id, job.lease_token)])
            elif state is S.FAILED:
                store.finish([Failed(job.id, job.lease_token, "boom")])
        newest_first.insert(0, job_id)
    [other] = store.claim("w1", ["q2"], 1, LEASE)
    store.finish([Succeeded(other.id, other.lease_token)])  # a finished job not listed
    for where in (
        JobFilter(kind="a"),
        JobFilter(queue="default"),
        JobFilter(tenant="t"),
        JobFilter(kind="a", queue="default", tenant="t"),
    ):
        for limit in (1, 3, 7, 50):
            seen: list[str] = []
            cursor = None
            while True:
                page = store.list(where, limit=limit, cursor=cursor)
                seen.extend(j.id for j in page.jobs)
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
            assert seen == newest_first, (where, limit)
    assert [j.state for j in store.list(JobFilter(kind="a")).jobs] == states[::-1]


# Waking idle workers


def test_wait_for_jobs_returns_early_after_an_enqueue_from_another_store(
    backend: Backend,
) -> None:
    waiter, submitter = backend.open(), backend.open()
    waiter.wait_for_jobs(["default"], 0.01)  # a first call sets up whatever it listens with

    def submit() -> None:
        time.sleep(0.3)
        submitter.enqueue(new())

    thread = threading.Thread(target=submit)
    started = time.monotonic()
    thread.start()
    waiter.wait_for_jobs(["default"], 5)
    elapsed = time.monotonic() - started
    thread.join()
    assert elapsed < 2, f"wait_for_jobs took {elapsed:.2f} s; an enqueue should wake it"


def test_wait_for_jobs_returns_once_the_worker_is_told_to_stop(store: Store) -> None:
    """An idle worker told to stop (SIGTERM) is not held for its whole wait:
    Django's worker tests expect it gone within half a second."""
    store.wait_for_jobs(["default"], 0.01)  # a first call sets up whatever it listens with
    stop, waiting, returned = threading.Event(), threading.Event(), threading.Event()

    def wait() -> None:
        waiting.set()
        store.wait_for_jobs(["default"], 3600, stop)
        returned.set()

    threading.Thread(target=wait, daemon=True).start()
    assert waiting.wait(30)
    stop.set()
    assert returned.wait(30)  # an hour without `stop`


def test_wait_for_jobs_without_new_work_waits_out_its_timeout(store: Store) -> None:
    started = time.monotonic()
    store.wait_for_jobs(["default"], 0.2)
    assert 0.15 <= time.monotonic() - started < 2


def test_an_error_with_a_nul_character_is_still_recorded(store: Store) -> None:
    job = enqueue_and_claim(store)
    assert store.finish([Failed(job.id, job.lease_token, "bad\x00byte\nline 2")]) == [True]
    got = store.get(job.id)
    assert got is not None and got.state is State.FAILED
    assert got.error is not None and got.error.startswith("bad") and got.error.endswith("line 2")


# The HTTP API's reads and keys


def test_get_many_reads_every_existing_job_in_one_call(store: Store) -> None:
    ids = [r.id for r in store.enqueue_many([new(payload={"i": i}) for i in range(5)])]
    running = claim_one(store)
    got = {j.id: j for j in store.get_many([*ids, "0" * 26])}
    assert set(got) == set(ids)
    assert got[running.id].state is State.RUNNING
    assert got[ids[4]] == store.get(ids[4])
    assert store.get_many([]) == []


def test_attempt_stats_count_outcomes_and_bucket_durations(store: Store) -> None:
    t = later(1).replace(microsecond=0)
    store.enqueue_many([new("a"), new("a"), new("a"), new("b", tenant="t")])
    claimed = store.claim("w1", ["default"], 4, LEASE, now=t)
    # Sorted: tenants take turns in a claim (flow control), so b's job comes second.
    a1, a2, a3, b1 = sorted(claimed, key=lambda j: (j.kind, j.id))
    store.finish([Succeeded(a1.id, a1.lease_token)], now=t + timedelta(seconds=0.5))
    store.finish([Succeeded(a2.id, a2.lease_token)], now=t + timedelta(seconds=3))
    store.finish([Failed(b1.id, b1.lease_token, "x")], now=t + timedelta(seconds=20))

    stats = {(s.kind, s.outcome): s for s in store.attempt_stats([1.0, 5.0])}
    assert set(stats) == {("a", "succeeded"), ("a", None), ("b", "failed")}
    ok = stats[("a", "succeeded")]
    assert (ok.count, ok.buckets) == (2, (1, 1, 0))
    assert abs(ok.duration_sum - 3.5) < 0.01
    still_running = stats[("a", None)]
    assert (still_running.count, still_running.buckets) == (1, (0, 0, 0))
    failed = stats[("b", "failed")]
    assert (failed.count, failed.buckets) == (1, (0, 0, 1))
    assert [(s.kind, s.count) for s in store.attempt_stats([1.0], tenant="t")] == [("b", 1)]
    assert a3


def test_attempt_stats_count_every_hand_back_and_forget_a_pruned_jobs(store: Store) -> None:
    # Redis kept one duration an attempt number: a job's hand-backs (which
    # keep the number) counted once, and its prune left the others' seconds.
    t = later(1).replace(microsecond=0)
    a = store.enqueue(new("k")).id
    for start, end in ((0, 10), (10, 30)):
        [c] = store.claim("w1", ["default"], 1, LEASE, now=t + timedelta(seconds=start))
        store.finish([Released(a, c.lease_token)], now=t + timedelta(seconds=end))
    [c] = store.claim("w1", ["default"], 1, LEASE, now=t + timedelta(seconds=30))
    store.finish([Succeeded(a, c.lease_token)], now=t + timedelta(seconds=31))
    released = {(s.kind, s.outcome): s for s in store.attempt_stats([5.0])}[("k", "released")]
    assert (released.count, released.buckets) == (2, (0, 2))
    assert abs(released.duration_sum - 30.0) < 0.01
    b = store.enqueue(new("k")).id  # kept, one hand-back of 1 s
    [c] = store.claim("w1", ["default"], 1, LEASE, now=t + timedelta(seconds=31))
    assert c.id == b
    store.finish([Released(b, c.lease_token)], now=t + timedelta(seconds=32))
    assert store.prune(60, now=t + timedelta(hours=1)) == 1
    released = {(s.kind, s.outcome): s for s in store.attempt_stats([5.0])}[("k", "released")]
    assert released.count == 1
    assert abs(released.duration_sum - 1.0) < 0.01, released.duration_sum


def test_api_keys_are_stored_found_by_hash_listed_and_revoked(store: Store) -> None:
    first = store.create_api_key(
        NewApiKey(id="key1", key_hash="h1", tenant="*", scopes=("read", "admin"), name="ops")
    )
    assert (first.id, first.name, first.tenant, first.scopes) == (
        "key1",
        "ops",
        "*",
        ("read", "admin"),
    )
    assert first.created_at.utcoffset() == timedelta(0) and first.revoked_at is None
    second = store.create_api_key(
        NewApiKey(id="key2", key_hash="h2", tenant="t", scopes=("submit",))
    )
    assert store.find_api_key("h1") == first
    assert store.find_api_key("nope") is None
    assert [k.id for k in store.list_api_keys()] == ["key1", "key2"]

    assert store.revoke_api_key("key1")
    assert not store.revoke_api_key("key1")
    assert not store.revoke_api_key("unknown")
    assert store.find_api_key("h1") is None
    assert store.list_api_keys() == [second]
    revoked = store.list_api_keys(include_revoked=True)
    assert [k.id for k in revoked] == ["key1", "key2"] and revoked[0].revoked_at is not None


# The dashboard


def test_count_jobs_by_state_and_kind_capped_and_per_tenant(store: Store) -> None:
    running = enqueue_and_claim(store, kind="zeta")
    _fail(store, "b", "boom")
    store.enqueue_many([new("a") for _ in range(5)] + [new("b"), new("a", tenant="t2")])

    def counts(**kwargs: object) -> dict[tuple[str, str], tuple[int, bool]]:
        return {
            (c.state.value, c.kind): (c.count, c.capped)
            for c in store.count_jobs(**kwargs)  # type: ignore[arg-type]
        }

    assert counts() == {
        ("queued", "a"): (6, False),
        ("queued", "b"): (1, False),
        ("running", "zeta"): (1, False),
        ("failed", "b"): (1, False),
    }
    # Capped at 3: "3 or more", never a full count.
    assert counts(cap=3)[("queued", "a")] == (3, True)
    assert counts(cap=3)[("queued", "b")] == (1, False)
    assert counts(tenant="t2") == {("queued", "a"): (1, False)}
    assert counts(tenant="nobody") == {}
    assert running


def test_finished_per_minute_counts_the_last_hours_outcomes_per_kind(store: Store) -> None:
    for kind in ("a", "a", "b"):
        done = enqueue_and_claim(store, kind=kind)
        store.finish([Succeeded(done.id, done.lease_token)])
    _fail(store, "a", "boom")
    _fail(store, "a", "boom", tenant="t2")
    enqueue_and_claim(store, kind="c")  # running: not counted

    def totals(**kwargs: object) -> dict[tuple[str, str], int]:
        out: Counter[tuple[str, str]] = Counter()
        for m in store.finished_per_minute(**kwargs):  # type: ignore[arg-type]
            assert m.minute.second == 0 and m.minute.microsecond == 0
            assert m.minute.utcoffset() == timedelta(0)
            assert utcnow() - timedelta(minutes=2) < m.minute <= utcnow()
            out[(m.kind, m.state.value)] += m.count
        return dict(out)

    assert totals() == {("a", "succeeded"): 2, ("b", "succeeded"): 1, ("a", "failed"): 2}
    assert totals(tenant="t2") == {("a", "failed"): 1}
    assert totals(now=later(3601)) == {}


def test_oldest_queued_is_the_job_due_longest(store: Store) -> None:
    assert store.oldest_queued() is None
    store.enqueue(new("later", run_at=later(3600)))
    assert store.oldest_queued() is None  # not due yet
    first = store.enqueue(new("a", run_at=later(-30))).id
    store.enqueue(new("b", queue="other", run_at=later(-10)))
    mine = store.enqueue(new("c", tenant="t2", run_at=later(-5))).id
    oldest = store.oldest_queued()
    assert oldest is not None and oldest.id == first
    assert store.oldest_queued(tenant="t2").id == mine  # type: ignore[union-attr]
    assert store.oldest_queued(now=later(3700)).id == first  # type: ignore[union-attr]


def test_oldest_queued_breaks_a_tie_of_due_times_by_id_across_queues(store: Store) -> None:
    # Redis took the first of the tied jobs its set of queues happened to give.
    due = later(-300)
    first = store.enqueue(new("a", queue="q0", run_at=due)).id
    for n in range(1, 20):
        store.enqueue(new("b", queue=f"q{n}", run_at=due))
    oldest = store.oldest_queued()
    assert oldest is not None and oldest.id == first


def test_oldest_queued_looks_past_the_order_claims_take_by_priority(store: Store) -> None:
    # Claims take jobs by priority first: the job due longest may come in the
    # middle of that order, and a tenant's behind another tenant's.
    store.enqueue(new("a", priority=5, run_at=later(-20)))
    oldest = store.enqueue(new("b", priority=0, run_at=later(-50))).id
    store.enqueue(new("c", priority=-3, run_at=later(-10)))
    store.enqueue(new("d", priority=0, tenant="t2", run_at=later(-40)))
    theirs = store.enqueue(new("e", priority=5, tenant="t2", run_at=later(-45))).id
    assert store.oldest_queued().id == oldest  # type: ignore[union-attr]
    assert store.oldest_queued(tenant="t2").id == theirs  # type: ignore[union-attr]
    stats = store.stats()
    assert stats.oldest_queued_age is not None and 49 < stats.oldest_queued_age < 60
    assert stats.by_state["queued"] == 5 and stats.by_kind["d"] == {"queued": 1}


def test_oldest_queued_counts_a_delayed_job_come_due_before_any_claim(store: Store) -> None:
    # A delayed job (or a retry's backoff) that has come due is waiting as
    # much as a ready one, whether or not a claim has looked at its queue since.
    delayed = store.enqueue(new("a", run_at=later(10))).id
    store.enqueue(new("b", run_at=later(20)))
    theirs = store.enqueue(new("c", tenant="t2", run_at=later(15))).id
    at = later(60)
    assert store.oldest_queued(now=at).id == delayed  # type: ignore[union-attr]
    assert store.oldest_queued(tenant="t2", now=at).id == theirs  # type: ignore[union-attr]
    stats = store.stats(now=at)
    assert stats.oldest_queued_age is not None and 45 < stats.oldest_queued_age < 55
    assert store.oldest_queued(now=later(5)) is None


def test_stale_jobs_are_running_jobs_past_their_lease(store: Store) -> None:
    held = enqueue_and_claim(store)
    other = enqueue_and_claim(store, tenant="t2")
    assert store.stale_jobs() == []
    stale = store.stale_jobs(now=later(LEASE + 1))
    assert {j.id for j in stale} == {held.id, other.id}
    assert [j.id for j in store.stale_jobs(tenant="t2", now=later(LEASE + 1))] == [other.id]
    assert len(store.stale_jobs(limit=1, now=later(LEASE + 1))) == 1


def test_search_finds_an_id_by_its_prefix_and_a_job_by_its_idempotency_key(
    store: Store,
) -> None:
    keyed = store.enqueue(new(idempotency_key="order-42")).id
    theirs = store.enqueue(new(idempotency_key="order-42", tenant="t2")).id
    plain = store.enqueue(new()).id

    assert [j.id for j in store.search(plain)] == [plain]
    assert [j.id for j in store.search(plain.upper())] == [plain]
    assert plain in [j.id for j in store.search(plain[:20])]
    assert [j.id for j in store.search("order-42")] == [theirs, keyed]
    assert [j.id for j in store.search("order-42", tenant="t2")] == [theirs]
    assert store.search(plain, tenant="t2") == []
    assert store.search("order-4") == []  # keys match whole
    assert store.search("  ") == [] and store.search("no such thing!") == []
    assert len(store.search(plain[:1], limit=2)) == 2


def test_a_tenants_search_by_id_prefix_is_not_crowded_out_by_others_jobs(store: Store) -> None:
    # The limit counts the tenant's own jobs: newer ones of another tenant in
    # the same range of ids take none of it.
    mine = store.enqueue(new(tenant="t1")).id
    others = [store.enqueue(new(tenant="t2")).id for _ in range(3)]
    prefix = mine[:4]  # 2^28 ms of ids: days
    assert all(o.startswith(prefix) for o in others)
    assert [j.id for j in store.search(prefix, tenant="t1", limit=2)] == [mine]
    assert [j.id for j in store.search(prefix, tenant="t2", limit=2)] == others[:0:-1]


def test_replay_failure_group_replays_exactly_one_group(store: Store) -> None:
    one = _fail(store, "sync", "Timeout: upstream\n  File a.py")
    two = _fail(store, "sync", "Timeout: upstream")
    longer = _fail(store, "sync", "Timeout: upstream slow")  # another group
    other_kind = _fail(store, "mail", "Timeout: upstream")
    theirs = _fail(store, "sync", "Timeout: upstream", tenant="t2")

    assert store.replay_failure_group("sync", "Timeout: upstream", tenant="") == 2
    assert {j.id for j in store.list(JobFilter(state=State.QUEUED)).jobs} == {one, two}
    for job_id in (longer, other_kind, theirs):
        assert store.get(job_id).state is State.FAILED  # type: ignore[union-attr]
    assert store.replay_failure_group("sync", "Timeout: upstream") == 1  # theirs
    assert store.replay_failure_group("sync", "Timeout: upstream") == 0


@pytest.fixture
def one_free_hand_back(backend: Backend) -> Iterator[Store]:
    """A store opened as the worker opens it, with CHIT_FREE_HAND_BACKS=1."""
    settings = Settings.from_env({"CHIT_DATABASE_URL": backend.database_url}).replace(
        free_hand_backs=1
    )
    store = open_store(settings)
    yield store
    store.close()


@needs(FullStore)
def test_the_free_hand_backs_are_a_setting(one_free_hand_back: Store) -> None:
    store = one_free_hand_back
    job_id = store.enqueue(new(max_attempts=1)).id
    c = claim_one(store)
    assert store.finish([Released(job_id, c.lease_token)]) == [True]
    assert store.get(job_id).state is State.QUEUED  # type: ignore[union-attr]
    c = claim_one(store)  # the second hand-back uses up the only attempt
    assert store.finish([Released(job_id, c.lease_token)]) == [True]
    got = store.get(job_id)
    assert got is not None
    assert (got.state, got.error) == (State.FAILED, "handed back 2 times without finishing")
