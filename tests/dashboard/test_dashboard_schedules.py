"""The Schedules page, in-process on SQLite and PostgreSQL: each schedule with
its rule, next run, last slot and recent runs linked to their jobs; a key of one
tenant is told to sign in with a key of every tenant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chit.worker.scheduler import Scheduler
from support.dashboard import ADMIN_KEY, ROOT_KEY, Browser

pytestmark = pytest.mark.anyio


async def test_the_schedules_page_lists_schedules_with_their_recent_runs(
    dashboard: Browser,
) -> None:
    queue = dashboard.queue
    store = queue.store
    store.declare_schedule(queue.check_schedule("tick", "report", {}, every="1s"))
    store.declare_schedule(
        queue.check_schedule("nightly", "report", {}, cron="0 8 * * *", tz="Europe/Paris")
    )
    store.pause_schedule("nightly", True)
    now = datetime.now(UTC)
    scheduler = Scheduler(store, queue)
    for step in (2, 3, 4):
        scheduler.run_once(now + timedelta(seconds=step))
    tick = store.get_schedule("tick")
    assert tick is not None and tick.last_job_id is not None

    await dashboard.sign_in(ROOT_KEY)
    page = (await dashboard.http.get("/ui/schedules")).text
    assert 'aria-current="page">Schedules' in page
    assert 'data-schedule="tick"' in page and "every 1s" in page
    assert 'data-schedule="nightly"' in page and "0 8 * * * (Europe/Paris)" in page
    assert 'badge muted">paused' in page
    row = page.split('data-schedule="tick"')[1].split("</tr>")[0]
    assert row.count('class="badge state-queued"') == 3
    assert f'href="/ui/jobs/{tick.last_job_id}"' in row


async def test_a_key_of_one_tenant_is_told_schedules_need_every_tenant(dashboard: Browser) -> None:
    dashboard.queue.store.declare_schedule(
        dashboard.queue.check_schedule("tick", "report", {}, every="1s")
    )
    await dashboard.sign_in(ADMIN_KEY)
    page = (await dashboard.http.get("/ui/schedules")).text
    assert "sign in with a key of every tenant" in page and 'data-schedule="tick"' not in page


async def test_no_schedules_says_how_to_declare_one(dashboard: Browser) -> None:
    await dashboard.sign_in(ROOT_KEY)
    page = (await dashboard.http.get("/ui/schedules")).text
    assert "No schedules" in page and "chit schedules add" in page
