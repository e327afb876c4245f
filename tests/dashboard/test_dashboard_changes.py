"""The job page's Run now button and Edit form, and Cancel on a waiting job,
in-process on SQLite and PostgreSQL: what changes, what is refused with the
reason on the page (the form kept as typed), and that a refusal changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from html import unescape

import pytest

from chit.jobs import State
from support.dashboard import ADMIN_KEY, READ_KEY, Browser, hidden

pytestmark = pytest.mark.anyio


def delayed(dashboard: Browser, **fields: object) -> str:
    run_at = datetime.now(UTC) + timedelta(hours=1)
    return dashboard.queue.enqueue("work", {"message": "draft"}, run_at=run_at, **fields).id  # type: ignore[arg-type]


async def edit(dashboard: Browser, job_id: str, **fields: str):  # type: ignore[no-untyped-def]
    page = (await dashboard.http.get(f"/ui/jobs/{job_id}")).text
    form = {
        "csrf_token": hidden(page, "csrf_token"),
        "priority": hidden_value(page, "priority"),
        "run_at": hidden_value(page, "run_at"),
        "payload": unescape(
            page.split('name="payload"', 1)[1].split(">", 1)[1].split("</textarea>", 1)[0]
        ),
    }
    return await dashboard.http.post(f"/ui/jobs/{job_id}/edit", data=form | fields)


def hidden_value(page: str, name: str) -> str:
    return unescape(page.split(f'name="{name}" ', 1)[1].split('value="', 1)[1].split('"', 1)[0])


async def test_run_now_makes_a_delayed_job_due(dashboard: Browser) -> None:
    job_id = delayed(dashboard)
    await dashboard.sign_in(ADMIN_KEY)
    page = (await dashboard.http.get(f"/ui/jobs/{job_id}")).text
    assert "Run now</button>" in page and 'id="edit"' in page
    response = await dashboard.http.post(
        f"/ui/jobs/{job_id}/run-now", data={"csrf_token": hidden(page, "csrf_token")}
    )
    assert response.status_code == 303 and response.headers["location"].endswith("notice=run_now")
    after = (await dashboard.http.get(response.headers["location"])).text
    assert "Due now" in after and "Run now</button>" not in after
    job = dashboard.queue.get(job_id)
    assert job.run_at <= datetime.now(UTC)


async def test_the_edit_form_changes_what_differs(dashboard: Browser) -> None:
    job_id = delayed(dashboard)
    await dashboard.sign_in(ADMIN_KEY)
    unchanged = await edit(dashboard, job_id)
    assert unchanged.headers["location"].endswith("notice=unchanged")
    response = await edit(dashboard, job_id, priority="-7", payload='{"message": "final"}')
    assert response.status_code == 303 and response.headers["location"].endswith("notice=edited")
    job = dashboard.queue.get(job_id)
    assert (job.priority, job.payload["message"], job.state) == (-7, "final", State.QUEUED)
    sooner = datetime.now(UTC) + timedelta(minutes=5)
    await edit(dashboard, job_id, run_at=sooner.isoformat())
    assert abs((dashboard.queue.get(job_id).run_at - sooner).total_seconds()) < 0.01


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"priority": "high"}, "priority must be a whole number"),
        ({"priority": "99999999"}, "priority must be from"),
        ({"run_at": "next tuesday"}, "run at must be an ISO 8601 time"),
        ({"payload": "{not json"}, "the payload is not JSON"),
        ({"payload": '{"message": ""}'}, "message"),
        ({"payload": "[1, 2]"}, "work"),
    ],
)
async def test_a_bad_edit_shows_why_keeps_the_form_and_changes_nothing(
    dashboard: Browser, fields: dict[str, str], says: str
) -> None:
    job_id = delayed(dashboard)
    before = dashboard.queue.store.get(job_id)
    await dashboard.sign_in(ADMIN_KEY)
    response = await edit(dashboard, job_id, **fields)
    assert response.status_code == 422
    assert 'class="notice bad"' in response.text and says in unescape(response.text)
    typed = next(iter(fields.values()))
    assert typed in unescape(response.text)  # what was typed is still in the form
    assert dashboard.queue.store.get(job_id) == before


async def test_a_started_job_has_no_edit_and_a_late_post_is_refused(dashboard: Browser) -> None:
    job_id = delayed(dashboard)
    await dashboard.sign_in(ADMIN_KEY)
    page = (await dashboard.http.get(f"/ui/jobs/{job_id}")).text
    token = hidden(page, "csrf_token")
    dashboard.queue.run_now(job_id)
    [held] = dashboard.queue.store.claim("w", ["default"], 1, 30)
    assert held.id == job_id
    running = (await dashboard.http.get(f"/ui/jobs/{job_id}")).text
    assert 'id="edit"' not in running and "Run now</button>" not in running
    refused = await dashboard.http.post(f"/ui/jobs/{job_id}/run-now", data={"csrf_token": token})
    assert refused.status_code == 409
    assert "is running: only queued or waiting jobs can be changed" in refused.text


async def test_a_waiting_job_can_be_cancelled_from_its_page(dashboard: Browser) -> None:
    parent = delayed(dashboard)
    child = dashboard.queue.enqueue("work", {"message": "after"}, depends_on=[parent]).id
    await dashboard.sign_in(ADMIN_KEY)
    page = (await dashboard.http.get(f"/ui/jobs/{child}")).text
    assert "Cancel</button>" in page
    response = await dashboard.http.post(
        f"/ui/jobs/{child}/cancel", data={"csrf_token": hidden(page, "csrf_token")}
    )
    assert response.headers["location"].endswith("notice=cancelled")
    assert dashboard.queue.get(child).state is State.CANCELLED


async def test_a_read_key_sees_no_edit_and_cannot_post_one(dashboard: Browser) -> None:
    job_id = delayed(dashboard)
    before = dashboard.queue.store.get(job_id)
    await dashboard.sign_in(READ_KEY)
    page = (await dashboard.http.get(f"/ui/jobs/{job_id}")).text
    assert 'id="edit"' not in page and "Run now</button>" not in page
    token = hidden(page, "csrf_token")
    for action in ("run-now", "edit"):
        refused = await dashboard.http.post(
            f"/ui/jobs/{job_id}/{action}", data={"csrf_token": token, "priority": "1"}
        )
        assert refused.status_code == 403 and "read-only" in refused.text
    assert dashboard.queue.store.get(job_id) == before
