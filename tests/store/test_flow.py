"""Flow control in the store (store/flow.py): limits, pauses and fair turns,
checked on both backends through the claim itself. Times that matter are
passed as `now`, so no test waits for a window or a lease to pass."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from chit.jobs import Claimed, NewJob, Succeeded
from chit.limits import Limits, Rate
from chit.store.capabilities import FullStore

LEASE = 30.0


def t0() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=1)


def jobs(kind: str, n: int, **fields: object) -> list[NewJob]:
    return [NewJob(kind, {"i": i}, **fields) for i in range(n)]  # type: ignore[arg-type]


def claim(store: FullStore, n: int, now: datetime, worker: str = "w1") -> Claimed:
    return store.claim(worker, ["default"], n, LEASE, now=now)


def test_a_concurrency_limit_holds_across_claims_until_an_outcome_frees_a_slot(
    store: FullStore,
) -> None:
    store.declare_limits({"k": Limits(concurrency=2)})
    store.enqueue_many(jobs("k", 5))
    now = t0()
    first = claim(store, 10, now, "w1")
    assert len(first) == 2
    assert claim(store, 10, now, "w2") == []
    store.finish([Succeeded(first[0].id, first[0].lease_token)], now=now)
    assert len(claim(store, 10, now, "w2")) == 1
    assert claim(store, 10, now, "w3") == []


def test_an_expired_lease_frees_its_slot_before_any_rescue(store: FullStore) -> None:
    store.declare_limits({"k": Limits(concurrency=2)})
    store.enqueue_many(jobs("k", 4))
    now = t0()
    assert len(claim(store, 10, now)) == 2
    assert claim(store, 10, now + timedelta(seconds=LEASE - 1)) == []
    assert len(claim(store, 10, now + timedelta(seconds=LEASE + 1), "w2")) == 2


def test_a_rate_limit_is_a_sliding_window_of_starts(store: FullStore) -> None:
    store.declare_limits({"k": Limits(rate=Rate(3, 1.0))})
    store.enqueue_many(jobs("k", 10))
    now = t0()
    done = claim(store, 10, now)
    assert len(done) == 3
    store.finish([Succeeded(j.id, j.lease_token) for j in done], now=now)
    # Finished or not, a start counts for the window.
    assert claim(store, 10, now + timedelta(seconds=0.5)) == []
    assert len(claim(store, 10, now + timedelta(seconds=1.01))) == 3


def test_a_key_limit_bounds_each_key_and_jobs_without_a_key_run_free(store: FullStore) -> None:
    store.declare_limits({"k": Limits(key_concurrency=1)})
    for key in ("a", "a", "b", "b"):
        store.enqueue(NewJob("k", {}, concurrency_key=key))
    store.enqueue_many(jobs("k", 2))
    got = claim(store, 10, t0())
    keys = Counter(store.get(j.id).concurrency_key for j in got)  # type: ignore[union-attr]
    assert keys == {"a": 1, "b": 1, "": 2}


def test_an_operators_limit_wins_until_cleared(store: FullStore) -> None:
    store.declare_limits({"k": Limits(concurrency=1, rate=Rate(100, 60.0))})
    shown = store.set_limits("k", Limits(concurrency=3))
    assert shown.effective == Limits(concurrency=3, rate=Rate(100, 60.0))
    assert shown.declared == Limits(concurrency=1, rate=Rate(100, 60.0))
    store.enqueue_many(jobs("k", 6))
    now = t0()
    assert len(claim(store, 10, now)) == 3
    assert store.clear_limits("k") is True
    assert store.clear_limits("k") is False
    [k] = store.limits(now=now)
    assert k.effective == Limits(concurrency=1, rate=Rate(100, 60.0))
    assert (k.running, k.waiting) == (3, 3)
    assert claim(store, 10, now) == []


def test_a_later_worker_that_declares_no_limit_ends_the_codes_limit(store: FullStore) -> None:
    store.declare_limits({"k": Limits(concurrency=1)})
    store.declare_limits({"k": Limits()})
    assert store.limits() == []


def test_a_paused_queue_or_kind_keeps_its_jobs_queued(store: FullStore) -> None:
    store.enqueue_many(jobs("a", 2) + jobs("b", 2))
    now = t0()
    assert store.pause(queue="default") is True
    assert store.pause(queue="default") is False
    assert claim(store, 10, now) == []
    assert [p.queue for p in store.pauses()] == ["default"]
    assert store.resume(queue="default") is True
    store.pause(kind="a")
    got = claim(store, 10, now)
    assert {j.kind for j in got} == {"b"}
    store.resume(kind="a")
    assert {j.kind for j in claim(store, 10, now)} == {"a"}
    with pytest.raises(ValueError):
        store.pause(queue="default", kind="a")


def test_tenants_take_turns_whatever_one_tenants_backlog(store: FullStore) -> None:
    store.enqueue_many(jobs("k", 300, tenant="big"))
    store.enqueue_many(jobs("k", 3, tenant="small"))
    got = claim(store, 6, t0())
    tenants = Counter(store.get(j.id).tenant for j in got)  # type: ignore[union-attr]
    assert tenants == {"big": 3, "small": 3}


def test_priority_still_wins_within_a_tenant(store: FullStore) -> None:
    store.enqueue_many(jobs("k", 3, tenant="a", priority=5))
    store.enqueue_many(jobs("k", 1, tenant="a", priority=0))
    store.enqueue_many(jobs("other", 1, tenant="b"))
    got = claim(store, 2, t0())
    first_of_a = next(store.get(j.id) for j in got if j.kind == "k")
    assert first_of_a is not None and first_of_a.priority == 0


def test_a_full_kind_holds_back_no_other_kind(store: FullStore) -> None:
    store.declare_limits({"slow": Limits(concurrency=1)})
    store.enqueue_many(jobs("slow", 200, priority=-1))
    now = t0()
    assert [j.kind for j in claim(store, 5, now)] == ["slow"]
    store.enqueue_many(jobs("fast", 3))
    got = claim(store, 5, now, "w2")
    assert [j.kind for j in got] == ["fast"] * 3


def test_a_kinds_limit_holds_across_the_queues_of_one_claim(store: FullStore) -> None:
    store.declare_limits({"k": Limits(concurrency=3)})
    store.enqueue_many(jobs("k", 4, queue="q1") + jobs("k", 4, queue="q2"))
    got = store.claim("w1", ["q1", "q2"], 10, LEASE, now=t0())
    assert len(got) == 3


def test_a_key_limit_holds_across_tenants(store: FullStore) -> None:
    store.declare_limits({"k": Limits(key_concurrency=2)})
    for tenant in ("a", "b", "c"):
        store.enqueue_many(jobs("k", 2, tenant=tenant, concurrency_key="shared"))
    got = claim(store, 10, t0())
    assert len(got) == 2


def test_a_key_rate_counts_each_keys_starts(store: FullStore) -> None:
    store.declare_limits({"k": Limits(key_rate=Rate(2, 60.0))})
    store.enqueue_many(jobs("k", 5, concurrency_key="x") + jobs("k", 5, concurrency_key="y"))
    now = t0()
    first = claim(store, 10, now)
    assert Counter(store.get(j.id).concurrency_key for j in first) == {"x": 2, "y": 2}  # type: ignore[union-attr]
    store.finish([Succeeded(j.id, j.lease_token) for j in first], now=now)
    assert claim(store, 10, now + timedelta(seconds=30)) == []
    assert len(claim(store, 10, now + timedelta(seconds=61))) == 4


def test_one_job_claims_take_tenants_in_turn(store: FullStore) -> None:
    store.enqueue_many(jobs("k", 20, tenant="big"))
    store.enqueue_many(jobs("k", 2, tenant="small"))
    now = t0()
    tenants = [store.get(claim(store, 1, now)[0].id).tenant for _ in range(4)]  # type: ignore[union-attr]
    assert sorted(tenants) == ["big", "big", "small", "small"]


def test_a_throttled_claim_says_when_to_look_again(store: FullStore) -> None:
    store.declare_limits({"k": Limits(rate=Rate(2, 60.0))})
    store.enqueue_many(jobs("k", 3))
    now = t0()
    first = claim(store, 10, now)
    assert len(first) == 2
    assert first.look_again_at == float("-inf")  # it took all it could
    before = time.monotonic()
    held = claim(store, 10, now + timedelta(seconds=59.95))
    after = time.monotonic()
    assert held == []
    # The oldest start leaves the window 0.05 s later: sooner than the usual poll.
    # Read against the claim's own span, so a busy machine's slow claim cannot fail it.
    assert before + 0.04 <= held.look_again_at <= after + 0.06
    last = claim(store, 10, now + timedelta(seconds=60.01))
    assert len(last) == 1
    assert last.look_again_at == float("-inf")


def test_a_kinds_waiting_jobs_count_a_delayed_one_come_due_before_any_claim(
    store: FullStore,
) -> None:
    store.set_limits("k", Limits(concurrency=1))
    at = t0()
    store.enqueue_many(jobs("k", 2, run_at=at + timedelta(seconds=10)))
    store.enqueue_many(jobs("k", 1))
    store.enqueue_many(jobs("k", 1, run_at=at + timedelta(seconds=3600)))
    [k] = store.limits(now=at + timedelta(seconds=60))
    assert (k.running, k.waiting) == (0, 3)
