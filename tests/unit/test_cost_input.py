"""Budgets' input refused before anything is stored: a job's `cost` on
enqueue (and in a batch), a task's `cost_rate` and `key_cost_rate`, and
`job.report_cost` in a handler."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import chit
from chit.bounds import COST_MAX
from chit.errors import ConfigError
from chit.jobs import Succeeded
from chit.limits import LimitError, Limits, Rate
from chit.settings import Settings
from support.refusals import refused_both_ways, stored

BAD_COSTS = {
    "zero": 0,
    "negative": -1,
    "fraction": 2.5,
    "bool": True,
    "text": "10",
    "nan": float("nan"),
    "inf": float("inf"),
    "over-the-bound": COST_MAX + 1,
    "none": None,
}


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[chit.Queue]:
    q = chit.Queue(settings=Settings(database_url=f"sqlite:///{tmp_path / 'q.db'}"))
    q.task("t")(lambda job, body: None)
    q.task("budget", cost_rate="1000/m", key_cost_rate="100/m")(lambda job, body: None)
    yield q
    q.close()


@pytest.mark.parametrize("cost", BAD_COSTS.values(), ids=BAD_COSTS.keys())
def test_a_bad_cost_is_refused_and_nothing_is_stored(queue: chit.Queue, cost: object) -> None:
    refused_both_ways(queue, {"cost": cost}, "cost must be a whole number from 1 to")
    assert stored(queue) == []


def test_a_cost_the_kind_could_never_start_within_is_refused(queue: chit.Queue) -> None:
    with pytest.raises(chit.InvalidRequest, match=r"cost 1,001 is more than kind 'budget'"):
        queue.enqueue("budget", cost=1001)
    with pytest.raises(chit.InvalidRequest, match=r"\(100\): the job could never start"):
        queue.enqueue("budget", cost=101, concurrency_key="customer-1")
    assert stored(queue) == []
    # Within the budget, or a key's budget for a job without a key: taken.
    queue.enqueue("budget", cost=1000)
    queue.enqueue("budget", cost=101)
    queue.enqueue("budget", cost=100, concurrency_key="customer-1")
    queue.enqueue("t", cost=COST_MAX)  # a kind without a budget: only the bound
    queue.enqueue("budget", cost=7.0)  # type: ignore[arg-type]  # a whole float is whole
    assert len(stored(queue)) == 5


def test_the_same_idempotency_key_with_another_cost_is_a_conflict(queue: chit.Queue) -> None:
    queue.enqueue("budget", idempotency_key="k", cost=10)
    assert queue.enqueue("budget", idempotency_key="k", cost=10).created is False
    with pytest.raises(chit.IdempotencyConflict):
        queue.enqueue("budget", idempotency_key="k", cost=20)


BAD_COST_RATES = {
    "zero": ("0/m", "not 0"),
    "a day": ("10/d", "is not N/s, N/m or N/h"),
    "words": ("90000 per minute", "is not N/s"),
    "over-the-bound": (f"{COST_MAX + 1}/s", "1 to 1,000,000,000,000 cost per period"),
    "a number": (5, "a rate is text like"),
}


@pytest.mark.parametrize("value, says", BAD_COST_RATES.values(), ids=BAD_COST_RATES.keys())
def test_a_bad_cost_rate_is_refused_when_registered(value: object, says: str) -> None:
    for name in ("cost_rate", "key_cost_rate"):
        with pytest.raises(ConfigError, match=f"task 'x': cost_rate: .*{says}"):
            chit.Queue().task("x", **{name: value})  # type: ignore[arg-type]


def test_a_cost_rate_may_go_past_a_rates_bound() -> None:
    limits = Limits.checked(cost_rate="90000000/m")
    assert limits.cost_rate == Rate(90_000_000, 60.0)
    with pytest.raises(LimitError, match="1 to 1,000,000 starts per period"):
        Limits.checked(rate="90000000/m")


def running(queue: chit.Queue) -> chit.JobContext:
    """The context of a `budget` job claimed from the queue's store."""
    job_id = queue.enqueue("budget", cost=50).id
    [claimed] = queue.store.claim("w", ["default"], 1, 30)
    assert claimed.id == job_id
    return chit.JobContext.of(claimed, queue.store, 30)


@pytest.mark.parametrize("cost", [-1, 2.5, "3", True, None, float("nan"), COST_MAX + 1])
def test_report_cost_refuses_what_is_no_cost_and_writes_nothing(
    queue: chit.Queue, cost: object
) -> None:
    job = running(queue)
    with pytest.raises(ValueError, match="report_cost takes a whole number from 0 to"):
        job.report_cost(cost)  # type: ignore[arg-type]
    assert job.lease_lost is False


def test_report_cost_fenced_out_marks_the_lease_lost(queue: chit.Queue) -> None:
    job = running(queue)
    assert job.report_cost(0) is True and job.lease_lost is False
    assert job.report_cost(COST_MAX) is True
    queue.store.finish([Succeeded(job.id, job.lease_token)])
    assert job.report_cost(5) is False and job.lease_lost is True
