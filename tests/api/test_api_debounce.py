"""Debounce over `POST /jobs`, in-process on every store: the first submit of a
key is 202, the next ones 200 with `debounced: true` and the same job, which
takes their payload; what is refused is refused with its reason and stores nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from chit.jobs import JobFilter
from support.api import Api, assert_error

pytestmark = pytest.mark.anyio


def body(message: str, **more: object) -> dict:
    fields = {"debounce_key": "user:42", "debounce": 30} | more
    return {"kind": "echo", "payload": {"message": message}, **fields}


async def test_the_same_key_answers_the_same_job_with_the_last_payload(api: Api) -> None:
    first = await api.http.post("/jobs", json=body("one"))
    assert first.status_code == 202
    assert (first.json()["created"], first.json()["debounced"]) == (True, False)
    job_id = first.json()["job_id"]
    again = await api.http.post("/jobs", json=body("two", debounce=60))
    assert again.status_code == 200, again.text
    assert again.json()["job_id"] == job_id
    assert (again.json()["created"], again.json()["debounced"]) == (False, True)
    assert again.headers["location"] == f"/jobs/{job_id}"
    status = (await api.http.get(f"/jobs/{job_id}")).json()
    assert status["debounce_key"] == "user:42" and status["state"] == "queued"
    wait = (datetime.fromisoformat(status["run_at"]) - datetime.now(UTC)).total_seconds()
    assert 55 < wait <= 60
    assert api.job(job_id).payload["message"] == "two"
    other = await api.http.post("/jobs", json=body("three", debounce_key="user:43"))
    assert other.status_code == 202 and other.json()["job_id"] != job_id


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"debounce_key": None}, "debounce needs a debounce_key"),
        ({"debounce_key": None, "debounce": None, "debounce_max": 60}, "needs a debounce_key"),
        ({"debounce": None}, "needs debounce"),
        ({"debounce": 0}, "debounce"),
        ({"debounce": -1}, "debounce"),
        ({"debounce": "5"}, "debounce"),
        ({"debounce": True}, "debounce"),
        ({"debounce": 10**9}, "debounce"),
        ({"debounce_max": 0}, "debounce_max"),
        ({"debounce_max": 10**10}, "debounce_max"),
        ({"debounce_key": ""}, "debounce_key"),
        ({"debounce_key": "x" * 256}, "debounce_key"),
        ({"debounce_key": "ünï"}, "debounce_key"),
        ({"debounce_key": "a\nb"}, "debounce_key"),
        ({"unique_key": "u"}, "takes no unique_key"),
        ({"run_at": "2030-01-01T00:00:00Z"}, "takes no run_at"),
        ({"expires_in": 60}, "takes no expires_in"),
    ],
)
async def test_a_bad_debounce_is_422_and_stores_nothing(api: Api, fields: dict, says: str) -> None:
    answer = assert_error(await api.http.post("/jobs", json=body("x", **fields)), 422)
    assert says in answer["message"], answer
    assert api.store.list(JobFilter(), limit=10).jobs == []


async def test_an_idempotency_key_answers_its_request_before_any_debounce(api: Api) -> None:
    first = await api.http.post("/jobs", json=body("one"), headers={"Idempotency-Key": "k1"})
    job_id = first.json()["job_id"]
    other = await api.http.post("/jobs", json=body("two"), headers={"Idempotency-Key": "k2"})
    assert (other.json()["job_id"], other.json()["debounced"]) == (job_id, True)
    # The first request again: its job, as it is now, debounced into by nobody.
    again = await api.http.post("/jobs", json=body("one"), headers={"Idempotency-Key": "k1"})
    assert again.status_code == 200
    assert (again.json()["job_id"], again.json()["debounced"]) == (job_id, False)
    assert api.job(job_id).payload["message"] == "two"


async def test_a_debounce_max_below_debounce_bounds_the_first_start(api: Api) -> None:
    response = await api.http.post("/jobs", json=body("x", debounce=60, debounce_max=5))
    wait = (api.job(response.json()["job_id"]).run_at - datetime.now(UTC)).total_seconds()
    assert 3 < wait <= 5


async def test_a_key_held_by_another_kind_is_refused_with_the_holder(api: Api) -> None:
    held = (await api.http.post("/jobs", json=body("x"))).json()["job_id"]
    other = body("x") | {"kind": "big", "payload": {}}
    answer = assert_error(await api.http.post("/jobs", json=other), 422, "invalid_request")
    assert f"held by job {held} of kind 'echo'" in answer["message"]
    assert [j.id for j in api.store.list(JobFilter(), limit=10).jobs] == [held]
