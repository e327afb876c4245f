"""POST /jobs `expires_at`, `expires_in` and `unique_key` (DESIGN.md "Time"):
stored and shown by GET /jobs/{id}; bad values are a 422 that stores nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chit import bounds
from chit.jobs import JobFilter
from support.api import Api, assert_error

pytestmark = pytest.mark.anyio

BODY = {"kind": "echo", "payload": {"message": "t"}}


async def test_expires_in_and_expires_at_are_stored_and_shown(api: Api) -> None:
    response = await api.http.post("/jobs", json=BODY | {"expires_in": 90})
    assert response.status_code == 202
    job = api.job(response.json()["job_id"])
    assert job.expires_at is not None
    assert abs((job.expires_at - job.created_at).total_seconds() - 90) < 0.01
    shown = (await api.http.get(f"/jobs/{job.id}")).json()
    assert datetime.fromisoformat(shown["expires_at"]) == job.expires_at
    at = datetime.now(UTC) + timedelta(hours=2)
    response = await api.http.post("/jobs", json=BODY | {"expires_at": at.isoformat()})
    assert response.status_code == 202
    stored = api.job(response.json()["job_id"]).expires_at
    assert stored is not None and abs((stored - at).total_seconds()) < 0.01
    plain = (await api.http.post("/jobs", json=BODY)).json()["job_id"]
    assert (await api.http.get(f"/jobs/{plain}")).json()["expires_at"] is None


@pytest.mark.parametrize(
    "fields",
    [
        {"expires_in": 0},
        {"expires_in": -5},
        {"expires_in": True},
        {"expires_in": "60"},
        {"expires_in": bounds.EXPIRES_IN_MAX + 1},
        {"expires_at": "2001-01-01T00:00:00Z"},
        {"expires_at": 1700000000},
        {"expires_at": "tomorrow"},
        {"expires_at": "2999-01-01T00:00:00Z", "expires_in": 60},
        {"expires_at": "2999-01-01T00:00:00Z", "run_at": "2999-06-01T00:00:00Z"},
    ],
    ids=["zero", "negative", "bool", "text", "over-max", "past", "number", "words", "both",
         "before-run-at"],
)  # fmt: skip
async def test_a_bad_expiry_is_422_naming_the_field_and_stores_nothing(
    api: Api, fields: dict[str, object]
) -> None:
    response = await api.http.post("/jobs", json=BODY | fields)
    error = assert_error(response, 422, "invalid_request")
    assert "expires" in error["message"]
    assert api.store.list(JobFilter(), limit=10).jobs == []


async def test_a_unique_key_answers_the_active_job_until_it_has_finished(api: Api) -> None:
    first = await api.http.post("/jobs", json=BODY | {"unique_key": "sync:7"})
    assert first.status_code == 202 and first.json()["created"] is True
    job_id = first.json()["job_id"]
    other = BODY | {"payload": {"message": "another"}, "unique_key": "sync:7"}
    again = await api.http.post("/jobs", json=other)
    assert again.status_code == 200
    assert (again.json()["job_id"], again.json()["created"]) == (job_id, False)
    assert (await api.http.get(f"/jobs/{job_id}")).json()["unique_key"] == "sync:7"
    assert api.store.cancel(job_id).value == "cancelled"
    after = await api.http.post("/jobs", json=BODY | {"unique_key": "sync:7"})
    assert after.status_code == 202 and after.json()["job_id"] != job_id


@pytest.mark.parametrize(
    "key",
    ["", "x" * (bounds.UNIQUE_KEY_MAX + 1), "a\nb", "clé", 7, None, True],
    ids=["empty", "too-long", "newline", "non-ascii", "number", "null-is-fine", "bool"],
)
async def test_a_bad_unique_key_is_422_and_stores_nothing(api: Api, key: object) -> None:
    response = await api.http.post("/jobs", json=BODY | {"unique_key": key})
    if key is None:
        assert response.status_code == 202
        return
    error = assert_error(response, 422, "invalid_request")
    assert "unique_key" in error["message"]
    assert api.store.list(JobFilter(), limit=10).jobs == []


async def test_workflow_jobs_take_an_expiry_and_a_unique_key(api: Api) -> None:
    jobs = [
        BODY | {"ref": "a", "expires_in": 60},
        BODY | {"depends_on": ["a"], "unique_key": "merge:1"},
    ]
    response = await api.http.post("/workflows", json={"jobs": jobs})
    assert response.status_code == 202, response.text
    first, second = (api.job(i) for i in response.json()["ids"])
    assert first.expires_at is not None and second.unique_key == "merge:1"
    bad = await api.http.post("/workflows", json={"jobs": [BODY | {"ref": "a", "expires_in": -1}]})
    assert_error(bad, 422, "invalid_request")
    assert len(api.store.list(JobFilter(), limit=10).jobs) == 2


async def test_the_client_sends_expiry_and_unique_key(api: Api) -> None:
    import httpx

    from chit.client import AsyncClient

    transport = httpx.ASGITransport(app=api.app)
    async with AsyncClient("http://test", transport=transport) as client:
        at = datetime.now(UTC) + timedelta(hours=1)
        first = await client.submit("echo", {"message": "c"}, expires_at=at, unique_key="c")
        again = await client.submit("echo", {"message": "d"}, expires_in=5, unique_key="c")
        assert first.created and (again.job_id, again.created) == (first.job_id, False)
        status = await client.get(first.job_id)
        assert status.unique_key == "c"
        assert (
            status.expires_at is not None and abs((status.expires_at - at).total_seconds()) < 0.01
        )
