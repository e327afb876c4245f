"""What a job's error shows to whom: `read` keys get the first line and the
type, never the traceback (it names the server's paths and code); `admin` keys
get it whole; the dashboard always does. While a job is not failed, an earlier
attempt's error is `last_error`, never the job's `error`."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from chit.client import Event, SSEParser
from chit.jobs import ClaimedJob, Failed
from support.api import (
    ACME_ADMIN,
    ACME_KEY,
    ACME_READER,
    ROOT_KEY,
    Api,
    bearer,
    stream_started,
)
from support.waiting import until

pytestmark = pytest.mark.anyio

TRACE = (
    "KeyError: 'sku-17'\n\nTraceback (most recent call last):\n"
    '  File "/srv/app/secret_module.py", line 12, in handle\n'
    "KeyError: 'sku-17'\n"
)


def events_of(response: httpx.Response) -> list[Event]:
    parser = SSEParser()
    return [e for line in [*response.text.splitlines(), ""] if (e := parser.feed(line))]


async def listen(api: Api, job_id: str, key: str) -> asyncio.Task:
    """A stream, once it watches the job and has read it since."""
    with stream_started(api, job_id) as started:
        url = f"/jobs/{job_id}/events"
        task = asyncio.create_task(api.http.get(url, headers=bearer(key)))
        await until(lambda: started() or task.done(), "the stream to watch the job")
    return task


def claim(api: Api, job_id: str) -> ClaimedJob:
    [job] = api.store.claim("w", [api.job(job_id).queue], 1, 30)
    return job


async def status(api: Api, job_id: str, key: str) -> dict:
    response = await api.http.get(f"/jobs/{job_id}", headers=bearer(key))
    assert response.status_code == 200, response.text
    return response.json()


def shown(body: dict) -> tuple:
    return body["state"], body["error"], body["error_type"], body["last_error"]


async def test_read_keys_get_the_first_line_admin_keys_the_traceback(keyed_api: Api) -> None:
    api = keyed_api
    job_id = await api.submit(ACME_KEY)
    first = claim(api, job_id)
    api.store.finish([Failed(job_id, first.lease_token, TRACE, retry_in=0)])

    # Queued for a retry, then attempt 2 running: attempt 1's error is last_error only.
    for key in (ACME_READER, ACME_KEY):
        assert shown(await status(api, job_id, key)) == ("queued", None, None, "KeyError: 'sku-17'")
    second = claim(api, job_id)
    reader = await status(api, job_id, ACME_READER)
    assert shown(reader) == ("running", None, None, "KeyError: 'sku-17'")
    admin = await status(api, job_id, ACME_ADMIN)
    assert (admin["error"], admin["last_error"]) == (None, TRACE)

    api.store.finish([Failed(job_id, second.lease_token, TRACE)])
    assert shown(await status(api, job_id, ACME_READER)) == (
        "failed",
        "KeyError: 'sku-17'",
        "KeyError",
        None,
    )
    assert shown(await status(api, job_id, ROOT_KEY)) == ("failed", TRACE, "KeyError", None)

    listed = await api.http.get("/jobs", headers=bearer(ACME_READER))
    assert "secret_module" not in listed.text and "KeyError: 'sku-17'" in listed.text
    listed = await api.http.get("/jobs", headers=bearer(ACME_ADMIN))
    assert "secret_module" in listed.text


async def test_the_event_stream_gives_read_keys_no_traceback(keyed_api: Api) -> None:
    api = keyed_api
    job_id = await api.submit(ACME_KEY)
    held = claim(api, job_id)
    api.store.finish([Failed(job_id, held.lease_token, TRACE)])
    reader = await api.http.get(f"/jobs/{job_id}/events", headers=bearer(ACME_READER))
    assert reader.status_code == 200 and "KeyError: 'sku-17'" in reader.text
    assert "secret_module" not in reader.text and "Traceback" not in reader.text
    admin = await api.http.get(f"/jobs/{job_id}/events", headers=bearer(ACME_ADMIN))
    assert "secret_module" in admin.text


async def test_a_stream_of_attempt_two_labels_attempt_ones_error(keyed_api: Api) -> None:
    api = keyed_api
    job_id = await api.submit(ACME_KEY)
    first = claim(api, job_id)
    api.store.finish([Failed(job_id, first.lease_token, TRACE, retry_in=0)])
    second = claim(api, job_id)
    task = await listen(api, job_id, ACME_READER)
    api.store.finish([Failed(job_id, second.lease_token, "ValueError: two\n\nTraceback")])
    running, failed = [e.job for e in events_of(await asyncio.wait_for(task, 10)) if e.job]
    assert running is not None and failed is not None
    assert (running.state.value, running.error, running.last_error) == (
        "running",
        None,
        "KeyError: 'sku-17'",
    )
    assert (failed.state.value, failed.error, failed.last_error) == (
        "failed",
        "ValueError: two",
        None,
    )
