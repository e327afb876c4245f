"""`PATCH /jobs/{id}` and `POST /jobs/{id}/run-now` in-process, on every store:
what changes, what is refused, and that a refusal changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chit.jobs import ClaimedJob, Succeeded
from support.api import Api, assert_error

pytestmark = pytest.mark.anyio


def claim(api: Api, job_id: str) -> ClaimedJob:
    [job] = api.store.claim("test-worker", [api.job(job_id).queue], 1, 30)
    assert job.id == job_id
    return job


def later(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


async def test_an_edit_changes_what_it_gives_and_answers_the_status(api: Api) -> None:
    job_id = await api.submit(run_at=later(3600).isoformat(), priority=4)
    sooner = later(600)
    response = await api.http.patch(
        f"/jobs/{job_id}",
        json={"run_at": sooner.isoformat(), "payload": {"message": "changed", "steps": 2}},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == job_id and body["state"] == "queued"
    assert abs((datetime.fromisoformat(body["run_at"]) - sooner).total_seconds()) < 0.01
    job = api.job(job_id)
    assert job.priority == 4  # not given: kept
    # Stored as the model wrote it, defaults filled in, as at submit.
    assert job.payload == {
        "message": "changed",
        "seconds": 0.0,
        "steps": 2,
        "fail_times": 0,
        "permanent": False,
        "fail_while_exists": None,
    }
    response = await api.http.patch(f"/jobs/{job_id}", json={"priority": -2})
    assert (response.status_code, api.job(job_id).priority) == (200, -2)


async def test_run_now_makes_a_delayed_job_due(api: Api) -> None:
    job_id = await api.submit(run_at=later(3600).isoformat())
    assert api.store.claim("w", [api.job(job_id).queue], 1, 30) == []
    response = await api.http.post(f"/jobs/{job_id}/run-now")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert datetime.fromisoformat(response.json()["run_at"]) <= later(1)
    claim(api, job_id)


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        ({}, "invalid_request", "say what to change"),
        ({"priority": None, "run_at": None}, "invalid_request", "say what to change"),
        ({"priority": True}, "invalid_request", "priority"),
        ({"priority": 1.5}, "invalid_request", "priority"),
        ({"priority": 10**7}, "invalid_request", "priority"),
        ({"run_at": "tomorrow"}, "invalid_request", "run_at"),
        ({"run_at": "2026-01-01T00:00:00"}, "invalid_request", "run_at"),
        ({"run_at": "99999-01-01T00:00:00Z"}, "invalid_request", "run_at"),
        ({"payload": {"message": ""}}, "invalid_payload", "message"),
        ({"payload": "text"}, "invalid_payload", ""),
        ({"kind": "big"}, "invalid_request", "kind"),
        ({"state": "succeeded"}, "invalid_request", "state"),
    ],
)
async def test_a_bad_edit_is_422_and_changes_nothing(
    api: Api, body: dict, code: str, says: str
) -> None:
    job_id = await api.submit(run_at=later(3600).isoformat())
    before = api.job(job_id)
    answer = assert_error(await api.http.patch(f"/jobs/{job_id}", json=body), 422, code)
    assert says in answer["message"]
    assert api.job(job_id) == before


async def test_a_body_that_is_not_json_or_too_large_is_refused(api: Api) -> None:
    job_id = await api.submit()
    before = api.job(job_id)
    not_json = await api.http.patch(
        f"/jobs/{job_id}", content=b"{", headers={"Content-Type": "application/json"}
    )
    assert_error(not_json, 400)
    as_text = await api.http.patch(
        f"/jobs/{job_id}", content=b"priority=1", headers={"Content-Type": "text/plain"}
    )
    assert_error(as_text, 415, "unsupported_media_type")
    huge = {"payload": {"message": "x" * 100_000}}
    assert_error(await api.http.patch(f"/jobs/{job_id}", json=huge), 413)
    assert api.job(job_id) == before


async def test_an_edit_after_its_expiry_is_refused(api: Api) -> None:
    job_id = await api.submit(expires_in=600)
    body = {"run_at": later(3600).isoformat()}
    answer = assert_error(await api.http.patch(f"/jobs/{job_id}", json=body), 422)
    assert "expire before it is due" in answer["message"]


async def test_a_started_or_finished_job_is_409_and_unknown_is_404(api: Api) -> None:
    job_id = await api.submit()
    held = claim(api, job_id)
    for call in (
        api.http.patch(f"/jobs/{job_id}", json={"priority": 1}),
        api.http.post(f"/jobs/{job_id}/run-now"),
    ):
        answer = assert_error(await call, 409, "invalid_transition")
        assert "is running: only queued or waiting jobs can be changed" in answer["message"]
    api.store.finish([Succeeded(job_id, held.lease_token, {"ok": True})])
    assert_error(await api.http.post(f"/jobs/{job_id}/run-now"), 409, "invalid_transition")
    for unknown in ("0" * 26, "not-an-id", "x" * 300):
        assert_error(await api.http.post(f"/jobs/{unknown}/run-now"), 404, "job_not_found")
        patch = api.http.patch(f"/jobs/{unknown}", json={"priority": 1})
        assert_error(await patch, 404, "job_not_found")


async def test_a_waiting_job_can_be_edited_and_run_now(api: Api) -> None:
    parent = await api.submit()
    child = await api.submit(depends_on=[parent], run_at=later(3600).isoformat())
    assert api.job(child).state.value == "waiting"
    response = await api.http.patch(f"/jobs/{child}", json={"priority": 9})
    assert (response.status_code, response.json()["state"]) == (200, "waiting")
    response = await api.http.post(f"/jobs/{child}/run-now")
    assert (response.status_code, response.json()["state"]) == (200, "waiting")
    held = claim(api, parent)
    api.store.finish([Succeeded(parent, held.lease_token)])
    claim(api, child)  # due at once when its dependency let it go
