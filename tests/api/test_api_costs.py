"""Budgets over HTTP (DESIGN.md, "Long AI tasks"): a job's `cost`, refused
with a message when it is not a whole number in range or more than its kind
may spend in a whole window; `cost_rate` and `key_cost_rate` set and cleared
on /limits like the other limits. A refusal stores nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import chit
from chit.jobs import JobFilter
from support.api import Api, assert_error, settings_for
from support.api_app import register

pytestmark = pytest.mark.anyio


@pytest.fixture
def queue(database_url: str) -> Iterator[chit.Queue]:
    """The API's app, and kind `budget`: 1,000 cost a minute, 100 per key."""
    q = register(chit.Queue(settings=settings_for(database_url)))
    q.task("budget", cost_rate="1000/m", key_cost_rate="100/m")(lambda job, body: None)
    yield q
    q.close()


def stored(api: Api) -> int:
    return len(api.store.list(JobFilter(), limit=1000).jobs)


async def test_a_cost_within_the_kinds_budget_is_taken(api: Api) -> None:
    costly = await api.submit(kind="budget", cost=1000)
    status = (await api.http.get(f"/jobs/{costly}")).json()
    assert status["cost"] == 1000
    plain = (await api.http.get(f"/jobs/{await api.submit()}")).json()
    assert plain["cost"] == 1
    await api.submit(kind="budget", cost=100, concurrency_key="customer-1")
    await api.submit(kind="echo", cost=10**12)  # no budget: only bounded
    await api.submit(kind="budget", cost=7.0)  # JSON's 7.0 is 7
    assert stored(api) == 5


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"cost": 0}, "greater than or equal to 1"),
        ({"cost": -5}, "greater than or equal to 1"),
        ({"cost": 1.5}, "integer"),
        ({"cost": "10"}, "integer"),
        ({"cost": True}, "integer"),
        ({"cost": None}, "integer"),
        ({"cost": 10**12 + 1}, "less than or equal to"),
        ({"cost": 1001}, "could never start"),
        ({"cost": 101, "concurrency_key": "customer-1"}, "could never start"),
    ],
)
async def test_a_bad_cost_is_422_and_stores_nothing(
    api: Api, fields: dict[str, Any], says: str
) -> None:
    body = {"kind": "budget", "payload": {}, **fields}
    answer = assert_error(await api.http.post("/jobs", json=body), 422)
    assert says in str(answer), answer
    assert stored(api) == 0


async def test_cost_rates_are_set_shown_and_cleared_on_limits(api: Api) -> None:
    entry = (await api.http.put("/limits/budget", json={"cost_rate": "90000/m"})).json()
    assert (entry["cost_rate"], entry["override"]["cost_rate"]) == ("90000/m", "90000/m")
    entry = (await api.http.put("/limits/budget", json={"key_cost_rate": "5/s"})).json()
    assert (entry["cost_rate"], entry["key_cost_rate"]) == ("90000/m", "5/s")
    listed = (await api.http.get("/limits")).json()["limits"]
    assert [(k["kind"], k["cost_rate"]) for k in listed] == [("budget", "90000/m")]
    assert (await api.http.delete("/limits/budget")).status_code == 200
    assert api.store.limits() == []


@pytest.mark.parametrize(
    "value", ["0/m", "abc", "10/d", "-3/s", "1000000000001/s", 5, "90000 per minute"]
)
async def test_a_bad_cost_rate_is_422_and_stores_nothing(api: Api, value: Any) -> None:
    response = await api.http.put("/limits/budget", json={"cost_rate": value})
    assert_error(response, 422)
    assert api.store.limits() == []
