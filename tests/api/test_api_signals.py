"""`POST /jobs/{id}/signals/{name}` in-process, on SQLite and PostgreSQL: the
first signal is stored (201) and queues the job waiting for it; a repeat
answers the stored one (200); a finished job is 409, an unknown one 404, a
name or body out of bounds 422, and an error stores nothing. Status answers
show what a waiting job waits for."""

from __future__ import annotations

import pytest

from chit.errors import Suspend
from chit.jobs import Succeeded, Suspended
from support.api import Api, assert_error

pytestmark = pytest.mark.anyio


def suspend_for(api: Api, job_id: str, name: str) -> None:
    """Run the job as a worker would, its handler waiting for `name`."""
    [job] = api.store.claim("w", [api.job(job_id).queue], 1, 30)
    outcome = Suspended(job.id, job.lease_token, signal=name, timeout=3600)
    assert api.store.finish([outcome]) == [True]


async def test_a_signal_is_stored_once_and_queues_the_waiting_job(api: Api) -> None:
    job_id = await api.submit()
    suspend_for(api, job_id, "approval")
    status = (await api.http.get(f"/jobs/{job_id}")).json()
    assert status["state"] == "waiting"
    assert status["waiting_for"]["signal"] == "approval" and status["waiting_for"]["until"]

    response = await api.http.post(f"/jobs/{job_id}/signals/approval", json={"by": "ana"})
    assert response.status_code == 201, response.text
    assert response.json() == {
        "job_id": job_id,
        "name": "approval",
        "data": {"by": "ana"},
        "created": True,
    }
    status = (await api.http.get(f"/jobs/{job_id}")).json()
    assert status["state"] == "queued" and status["waiting_for"] is None

    again = await api.http.post(f"/jobs/{job_id}/signals/approval", json={"by": "bob"})
    assert again.status_code == 200
    assert again.json()["data"] == {"by": "ana"} and again.json()["created"] is False


@pytest.mark.parametrize(
    ("name", "body", "says"),
    [
        ("x" * 201, {}, "at most 200"),
        ("go", [1, 2], "JSON object"),
        ("go", "text", "JSON object"),
        ("go", {"big": "x" * 40_000}, "bytes"),
    ],
)
async def test_a_bad_signal_is_422_and_stores_nothing(
    api: Api, name: str, body: object, says: str
) -> None:
    job_id = await api.submit()
    response = await api.http.post(f"/jobs/{job_id}/signals/{name}", json=body)
    assert says in assert_error(response, 422, "invalid_signal")["message"]
    # Nothing stored: a good signal of the name is still the first.
    ok = await api.http.post(f"/jobs/{job_id}/signals/go", json={"n": 1})
    assert ok.status_code == 201


async def test_a_signal_to_a_finished_or_unknown_job(api: Api) -> None:
    job_id = await api.submit()
    [job] = api.store.claim("w", [api.job(job_id).queue], 1, 30)
    api.store.finish([Succeeded(job.id, job.lease_token, None)])
    assert_error(await api.http.post(f"/jobs/{job_id}/signals/go", json={}), 409)
    unknown = "01JZZZZZZZZZZZZZZZZZZZZZZZ"
    assert_error(await api.http.post(f"/jobs/{unknown}/signals/go", json={}), 404)
    assert_error(await api.http.post("/jobs/nope/signals/go", json={}), 404)
    bad = await api.http.post(
        f"/jobs/{job_id}/signals/go", content=b"{", headers={"content-type": "application/json"}
    )
    assert_error(bad, 400, "invalid_json")
    null = await api.http.post(
        f"/jobs/{job_id}/signals/go", content=b"null", headers={"content-type": "application/json"}
    )
    assert "JSON object" in assert_error(null, 422, "invalid_signal")["message"]


def test_suspend_is_not_an_exception() -> None:
    # A handler's `except Exception` must not swallow the end of its attempt.
    assert not issubclass(Suspend, Exception)
