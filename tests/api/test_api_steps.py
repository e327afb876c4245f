"""`GET /jobs/{id}/steps`: a job's durable steps over HTTP (issue 14), on both
backends; another tenant's job is a 404 like its status, and a job without
steps answers an empty list."""

from __future__ import annotations

from datetime import datetime

import pytest

from chit import JobContext
from support.api import ACME_KEY, ACME_READER, GLOBEX_ADMIN, Api, assert_error, bearer

pytestmark = pytest.mark.anyio


async def test_steps_of_a_job_in_the_order_stored(api: Api) -> None:
    job_id = await api.submit()
    assert (await api.http.get(f"/jobs/{job_id}/steps")).json() == {"steps": []}
    [held] = api.store.claim("test-worker", [api.job(job_id).queue], 1, 30)
    ctx = JobContext.of(held, api.store, 30)
    ctx.step("fetch", lambda: {"rows": [1, 2]})
    ctx.step("merge", lambda: "done")

    response = await api.http.get(f"/jobs/{job_id}/steps")
    assert response.status_code == 200
    steps = response.json()["steps"]
    assert [(s["name"], s["attempt"], s["result"]) for s in steps] == [
        ("fetch", 1, {"rows": [1, 2]}),
        ("merge", 1, "done"),
    ]
    assert datetime.fromisoformat(steps[0]["created_at"]).tzinfo is not None


async def test_steps_of_an_unknown_or_another_tenants_job_are_404(keyed_api: Api) -> None:
    job_id = await keyed_api.submit(ACME_KEY)
    mine = await keyed_api.http.get(f"/jobs/{job_id}/steps", headers=bearer(ACME_READER))
    assert mine.status_code == 200 and mine.json() == {"steps": []}
    other = await keyed_api.http.get(f"/jobs/{job_id}/steps", headers=bearer(GLOBEX_ADMIN))
    assert_error(other, 404, "job_not_found")
    unknown = await keyed_api.http.get(
        "/jobs/01m8zzzzzzzzzzzzzzzzzzzzzz/steps", headers=bearer(ACME_READER)
    )
    assert_error(unknown, 404, "job_not_found")
    assert_error(await keyed_api.http.get(f"/jobs/{job_id}/steps"), 401)
