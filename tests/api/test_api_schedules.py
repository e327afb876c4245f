"""Schedules over HTTP on both backends: GET /schedules, GET/PUT/DELETE
/schedules/{name}, pause and resume; bad input answers 422 and stores nothing;
only keys of every tenant read them and only admin ones write."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chit.worker.scheduler import Scheduler
from support.api import ACME_ADMIN, ACME_KEY, ROOT_KEY, Api, assert_error, bearer

pytestmark = pytest.mark.anyio

NIGHTLY = {"kind": "echo", "payload": {"message": "hi"}, "cron": "0 8 * * *", "tz": "Europe/Paris"}


async def test_put_get_list_pause_resume_delete(api: Api) -> None:
    put = await api.http.put("/schedules/nightly", json=NIGHTLY)
    assert put.status_code == 200, put.text
    body = put.json()
    assert (body["name"], body["rule"], body["catch_up"], body["source"]) == (
        "nightly",
        "0 8 * * * (Europe/Paris)",
        "latest",
        "operator",
    )
    assert body["payload"]["message"] == "hi" and body["paused"] is False
    assert body["runs"] == [] and body["last_slot"] is None

    every = await api.http.put(
        "/schedules/tick", json={"kind": "echo", "every": "1s", "payload": {"message": "t"}}
    )
    assert every.status_code == 200, every.text
    Scheduler(api.store, api.queue).run_once(datetime.now(UTC) + timedelta(seconds=2))

    listed = (await api.http.get("/schedules")).json()["schedules"]
    assert [s["name"] for s in listed] == ["nightly", "tick"]
    tick = (await api.http.get("/schedules/tick")).json()
    assert tick["every"] == 1 and tick["last_job_state"] == "queued"
    [run] = tick["runs"]
    assert run["job_id"] == tick["last_job_id"] and run["state"] == "queued"
    assert api.job(run["job_id"]).idempotency_key == f"schedule:tick:{run['slot']}"

    paused = (await api.http.post("/schedules/tick/pause")).json()
    assert paused["paused"] is True
    resumed = (await api.http.post("/schedules/tick/resume")).json()
    assert resumed["paused"] is False
    again = await api.http.put(
        "/schedules/tick",
        json={"kind": "echo", "every": 1, "payload": {"message": "t"}, "paused": True},
    )
    assert again.json()["paused"] is True

    deleted = await api.http.delete("/schedules/tick")
    assert deleted.json() == {"name": "tick", "removed": True}
    assert_error(await api.http.delete("/schedules/tick"), 404, "schedule_not_found")
    assert_error(await api.http.get("/schedules/tick"), 404, "schedule_not_found")
    assert_error(await api.http.post("/schedules/tick/pause"), 404, "schedule_not_found")


@pytest.mark.parametrize(
    ("name", "body", "phrase"),
    [
        ("s", {"kind": "echo", "cron": "61 * * * *"}, "does not parse"),
        ("s", {"kind": "echo", "cron": "0 8 * *"}, "expected 5 fields"),
        ("s", {"kind": "echo", "every": "0s"}, "at least 1s"),
        ("s", {"kind": "echo", "every": 0}, "at least 1s"),
        ("s", {"kind": "echo"}, "exactly one"),
        ("s", {"kind": "echo", "cron": "* * * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
        ("s", {"kind": "echo", "every": "1m", "catch_up": "maybe"}, "catch_up must be"),
        ("s", {"kind": "nope", "every": "1m"}, "nope"),
        ("s", {"kind": "echo", "every": "1m", "payload": {"message": 3}}, "message"),
        ("s", {"kind": "echo", "every": "1m", "extra": 1}, "extra"),
        # The path's name is checked as the OpenAPI description says.
        ("x" * 201, {"kind": "echo", "every": "1m"}, "at most 200 characters"),
        ("a b", {"kind": "echo", "every": "1m"}, "should match pattern"),
    ],
)
async def test_bad_schedules_are_422_and_nothing_is_stored(
    api: Api, name: str, body: dict[str, Any], phrase: str
) -> None:
    response = await api.http.put(f"/schedules/{name}", json=body)
    error = assert_error(response, 422)
    assert phrase in error["message"] or phrase in response.text, error
    assert api.store.list_schedules() == []


async def test_a_name_holds_no_slash_so_put_on_pause_is_405(api: Api) -> None:
    response = await api.http.put("/schedules/tick/pause", json={"kind": "echo", "every": "1m"})
    assert response.status_code == 405, response.text
    assert response.headers["allow"] == "POST"
    assert api.store.list_schedules() == []


async def test_only_keys_of_every_tenant_read_and_admin_ones_write(keyed_api: Api) -> None:
    http = keyed_api.http
    for key in (ACME_KEY, ACME_ADMIN):
        assert_error(await http.get("/schedules", headers=bearer(key)), 403, "forbidden")
        put = await http.put("/schedules/s", json=NIGHTLY, headers=bearer(key))
        assert_error(put, 403, "forbidden")
    assert keyed_api.store.list_schedules() == []
    put = await http.put("/schedules/s", json=NIGHTLY, headers=bearer(ROOT_KEY))
    assert put.status_code == 200, put.text
    assert (await http.get("/schedules/s", headers=bearer(ROOT_KEY))).status_code == 200
