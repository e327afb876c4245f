"""The job page's signal form (issue 25), in-process on SQLite and PostgreSQL:
shown for a job waiting for a signal (to a key that may submit), it stores the
signal and queues the job; bad JSON is refused with the reason on the page, the
form kept as typed, nothing stored; a form sent without the page's token is
refused."""

from __future__ import annotations

from html import unescape

import pytest

from chit.jobs import State, Suspended
from support.dashboard import ADMIN_KEY, READ_KEY, Browser, hidden

pytestmark = pytest.mark.anyio


def waiting(dashboard: Browser) -> str:
    job_id = dashboard.queue.enqueue("approval", {}).id
    [job] = dashboard.queue.store.claim("w", ["default"], 1, 30)
    outcome = Suspended(job.id, job.lease_token, signal="approval", timeout=3600)
    assert dashboard.queue.store.finish([outcome]) == [True]
    return job_id


async def test_the_signal_form_queues_the_waiting_job(dashboard: Browser) -> None:
    job_id = waiting(dashboard)
    await dashboard.sign_in(ADMIN_KEY)
    page = (await dashboard.http.get(f"/ui/jobs/{job_id}")).text
    assert 'id="waiting-for"' in page and 'id="signal"' in page
    form = {"csrf_token": hidden(page, "csrf_token"), "name": "approval"}

    refused = await dashboard.http.post(
        f"/ui/jobs/{job_id}/signal", data=form | {"data": '{"by": '}
    )
    assert refused.status_code == 422
    assert "not JSON" in refused.text and '{"by": ' in unescape(refused.text)  # kept as typed
    assert dashboard.queue.get(job_id).state is State.WAITING

    sent = await dashboard.http.post(
        f"/ui/jobs/{job_id}/signal", data=form | {"data": '{"by": "ana"}'}
    )
    assert sent.status_code == 303 and sent.headers["location"].endswith("notice=signalled")
    assert dashboard.queue.get(job_id).state is State.QUEUED
    again = await dashboard.http.post(f"/ui/jobs/{job_id}/signal", data=form | {"data": "{}"})
    assert again.headers["location"].endswith("notice=signal_kept")
    assert dashboard.queue.store.received(job_id, "approval").data == {"by": "ana"}


async def test_the_form_needs_the_pages_token_and_a_key_that_may_submit(
    dashboard: Browser,
) -> None:
    job_id = waiting(dashboard)
    await dashboard.sign_in(READ_KEY)
    page = (await dashboard.http.get(f"/ui/jobs/{job_id}")).text
    assert 'id="waiting-for"' in page and 'id="signal"' not in page
    token = hidden(page, "csrf_token")
    data = {"csrf_token": token, "name": "approval", "data": "{}"}
    assert (await dashboard.http.post(f"/ui/jobs/{job_id}/signal", data=data)).status_code == 403
    await dashboard.sign_in(ADMIN_KEY)
    forged = {"csrf_token": "forged", "name": "approval", "data": "{}"}
    assert (await dashboard.http.post(f"/ui/jobs/{job_id}/signal", data=forged)).status_code == 403
    assert dashboard.queue.get(job_id).state is State.WAITING
    assert not dashboard.queue.store.received(job_id, "approval").found
