"""Budgets in the store (DESIGN.md, "Long AI tasks": cost-weighted rates): a
kind's cost_rate and key_cost_rate bound the sum of the cost of the attempts
started in any window; `report_cost` replaces an attempt's estimate. Times
are passed as `now`, so no test waits for a window to pass."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from chit.jobs import Claimed, JobFilter, NewJob, Succeeded
from chit.limits import Limits, Rate
from chit.store.capabilities import FullStore

LEASE = 30.0


def t0() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=1)


def claim(store: FullStore, n: int, now: datetime, worker: str = "w1") -> Claimed:
    return store.claim(worker, ["default"], n, LEASE, now=now)


def costed(store: FullStore, *costs: int, key: str = "") -> list[str]:
    """Jobs of kind k with these costs, claimed in this order (by priority)."""
    new = [
        NewJob("k", {"i": n}, priority=n, cost=None if c == 1 else c, concurrency_key=key)
        for n, c in enumerate(costs)
    ]
    return [e.id for e in store.enqueue_many(new)]


def test_a_jobs_status_shows_its_cost(store: FullStore) -> None:
    plain, costly = costed(store, 1, 12_000)
    assert [store.get(plain).cost, store.get(costly).cost] == [1, 12_000]  # type: ignore[union-attr]
    listed = {j.id: j.cost for j in store.list(JobFilter()).jobs}
    assert listed == {plain: 1, costly: 12_000}


def test_a_cost_rate_bounds_the_cost_started_in_a_sliding_window(store: FullStore) -> None:
    store.declare_limits({"k": Limits(cost_rate=Rate(10, 1.0))})
    ids = costed(store, 4, 4, 4, 1)
    now = t0()
    first = claim(store, 10, now)
    # 8 spent, the third (4) does not fit; the cheap fourth does not jump it.
    assert [j.id for j in first] == ids[:2]
    store.finish([Succeeded(j.id, j.lease_token) for j in first], now=now)
    assert claim(store, 10, now + timedelta(seconds=0.5)) == []
    later = claim(store, 10, now + timedelta(seconds=1.01))
    assert [j.id for j in later] == ids[2:]


def test_report_cost_replaces_the_estimate_for_later_claims(store: FullStore) -> None:
    store.declare_limits({"k": Limits(cost_rate=Rate(10, 60.0))})
    ids = costed(store, 8, 5)
    now = t0()
    [first] = claim(store, 10, now)
    assert first.id == ids[0]
    assert claim(store, 10, now) == []  # 8 + 5 > 10
    assert store.report_cost(first.id, "not-the-token", 1) is False  # fenced
    assert claim(store, 10, now) == []
    assert store.report_cost(first.id, first.lease_token, 1) is True
    [second] = claim(store, 10, now)  # 1 + 5 <= 10
    assert second.id == ids[1]
    # Reported higher than estimated: the window is fuller than the estimate said.
    assert store.report_cost(second.id, second.lease_token, 9) is True
    costed(store, 1)
    assert claim(store, 10, now) == []  # 1 + 9 spent
    store.finish([Succeeded(first.id, first.lease_token)], now=now)
    assert store.report_cost(first.id, first.lease_token, 0) is False  # finished: not held


def test_a_key_cost_rate_bounds_each_key(store: FullStore) -> None:
    store.declare_limits({"k": Limits(key_cost_rate=Rate(6, 60.0))})
    a = costed(store, 3, 3, 3, key="a")
    b = costed(store, 5, 5, key="b")
    free = costed(store, 50)  # no key: no key's budget binds it
    got = {j.id for j in claim(store, 10, t0())}
    assert got == {*a[:2], b[0], *free}


def test_a_kind_with_a_spent_budget_holds_back_no_other_kind(store: FullStore) -> None:
    store.declare_limits({"k": Limits(cost_rate=Rate(5, 60.0))})
    costed(store, 5, 5)
    store.enqueue_many([NewJob("other", {}) for _ in range(3)])
    now = t0()
    assert len(claim(store, 10, now)) == 4
    held = claim(store, 10, now)
    assert held == []


def test_a_job_costlier_than_the_whole_budget_starts_into_an_empty_window(
    store: FullStore,
) -> None:
    # Enqueued before an operator lowered the limit: it waits for an empty
    # window rather than for ever, and holds back the cheaper jobs behind it.
    store.declare_limits({"k": Limits(cost_rate=Rate(100, 60.0))})
    ids = costed(store, 1, 50, 1)
    store.set_limits("k", Limits(cost_rate=Rate(10, 60.0)))
    now = t0()
    assert [j.id for j in claim(store, 10, now)] == ids[:1]
    assert claim(store, 10, now + timedelta(seconds=30)) == []
    assert [j.id for j in claim(store, 10, now + timedelta(seconds=61))] == ids[1:2]
    assert claim(store, 10, now + timedelta(seconds=62)) == []


def test_operators_set_and_clear_cost_rates_like_the_other_limits(store: FullStore) -> None:
    store.declare_limits({"k": Limits(rate=Rate(100, 60.0), cost_rate=Rate(90_000, 60.0))})
    shown = store.set_limits("k", Limits(cost_rate=Rate(500, 1.0), key_cost_rate=Rate(7, 3600.0)))
    assert shown.effective == Limits(
        rate=Rate(100, 60.0), cost_rate=Rate(500, 1.0), key_cost_rate=Rate(7, 3600.0)
    )
    assert shown.effective.as_dict()["cost_rate"] == "500/s"
    assert store.clear_limits("k") is True
    [k] = store.limits()
    assert k.effective == Limits(rate=Rate(100, 60.0), cost_rate=Rate(90_000, 60.0))


def test_a_kind_without_a_budget_ignores_costs(store: FullStore) -> None:
    ids = costed(store, 1_000_000, 5)
    [job] = claim(store, 1, t0())
    assert job.id == ids[0]
    assert store.report_cost(job.id, job.lease_token, 7) is True
