"""POST /jobs `timeout`: stored with the job and shown by GET /jobs/{id}; a
value that is not a positive number of seconds (up to 30 days) is a 422 that
stores nothing."""

from __future__ import annotations

import pytest

from chit import bounds
from chit.jobs import JobFilter
from support.api import Api, assert_error

pytestmark = pytest.mark.anyio


async def test_a_timeout_is_stored_and_shown(api: Api) -> None:
    response = await api.http.post(
        "/jobs", json={"kind": "echo", "payload": {"message": "t"}, "timeout": 2.5}
    )
    assert response.status_code == 202
    job_id = response.json()["job_id"]
    assert api.job(job_id).timeout == 2.5
    assert (await api.http.get(f"/jobs/{job_id}")).json()["timeout"] == 2.5


@pytest.mark.parametrize(
    "timeout",
    [0, -1, True, "30", 0.0, bounds.TIMEOUT_MAX + 1, 1e300, [2], {"s": 2}],
    ids=["zero", "negative", "bool", "text", "zero-again", "over-30-days", "absurd", "list",
         "object"],
)  # fmt: skip
async def test_a_bad_timeout_is_422_naming_the_field_and_stores_nothing(
    api: Api, timeout: object
) -> None:
    response = await api.http.post(
        "/jobs", json={"kind": "echo", "payload": {"message": "t"}, "timeout": timeout}
    )
    error = assert_error(response, 422, "invalid_request")
    assert "timeout" in error["message"]
    assert api.store.list(JobFilter(), limit=10).jobs == []


async def test_a_timeout_of_nan_is_refused(api: Api) -> None:
    response = await api.http.post(
        "/jobs",
        content=b'{"kind": "echo", "payload": {"message": "t"}, "timeout": NaN}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code in (400, 422)
    assert api.store.list(JobFilter(), limit=10).jobs == []
