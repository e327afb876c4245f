"""Flow control on the dashboard, in-process on SQLite and PostgreSQL with the
real store: the Limits panel (the code's value and an operator's), paused
badges, a held job's page, and what a tenant-bound session is not shown."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from chit.jobs import NewJob
from chit.limits import Limits
from support.dashboard import ADMIN_KEY, GLOBEX_ADMIN, ROOT_KEY, Browser

pytestmark = pytest.mark.anyio


def row(page: str, kind: str) -> str:
    match = re.search(rf'<tr data-limit-kind="{kind}">(.*?)</tr>', page, re.S)
    assert match, f"no Limits row for {kind}"
    return match.group(1)


def cell(page: str, kind: str, name: str) -> str:
    match = re.search(rf'data-limit="{name}">(.*?)</td>', row(page, kind), re.S)
    assert match, f"no {name} cell for {kind}"
    return " ".join(re.sub(r"<[^>]+>", " ", match.group(1)).split())


async def test_the_limits_panel_shows_the_codes_limits_and_an_operators_override(
    dashboard: Browser,
) -> None:
    store = dashboard.queue.store
    store.declare_limits(
        {
            "work": Limits.checked(concurrency=3, rate="10/s"),
            "report": Limits.checked(concurrency=5, key_concurrency=2, cost_rate="9000/m"),
        }
    )
    store.set_limits("report", Limits.checked(concurrency=2, key_rate="30/m"))
    store.set_limits("report", Limits.checked(key_cost_rate="500/m"))
    store.enqueue_many([NewJob("work", {"message": "x"}, queue="fc1") for _ in range(4)])
    assert len(store.claim("w1", ["fc1"], 2, 30)) == 2
    await dashboard.sign_in(ROOT_KEY)

    page = (await dashboard.http.get("/ui/")).text
    assert 'id="limits"' in page
    assert cell(page, "work", "concurrency") == "3"
    assert cell(page, "work", "rate") == "10/s"
    assert cell(page, "work", "key_concurrency") == "none"
    assert cell(page, "work", "source") == "code"
    assert cell(page, "work", "running") == "2" and cell(page, "work", "waiting") == "2"
    assert cell(page, "report", "concurrency") == "2 operator code: 5"
    assert cell(page, "report", "key_concurrency") == "2"  # the code's, not overridden
    assert cell(page, "report", "key_rate") == "30/m operator code: none"
    assert cell(page, "report", "source") == "operator"
    assert cell(page, "report", "cost_rate") == "9000/m"
    assert cell(page, "report", "key_cost_rate") == "500/m operator code: none"
    assert cell(page, "work", "cost_rate") == "none"
    header = page.split('class="limits"', 1)[1].split("</thead>", 1)[0]
    assert header.count("</th>") == 10  # kind, six limits, set by, running, waiting

    store.clear_limits("report")
    cleared = (await dashboard.http.get("/ui/")).text
    assert cell(cleared, "report", "concurrency") == "5"
    assert cell(cleared, "report", "source") == "code"


async def test_no_limit_and_no_pause_shows_no_panel(dashboard: Browser) -> None:
    await dashboard.sign_in(ROOT_KEY)
    page = (await dashboard.http.get("/ui/")).text
    assert 'id="limits"' not in page and 'id="paused"' not in page
    assert 'class="badge paused"' not in page


async def test_paused_queues_and_kinds_carry_a_badge_until_resumed(dashboard: Browser) -> None:
    store = dashboard.queue.store
    store.enqueue(NewJob("report", {}, queue="emails"))
    store.declare_limits({"report": Limits.checked(concurrency=4)})
    assert store.pause(queue="emails") and store.pause(kind="report")
    await dashboard.sign_in(ADMIN_KEY)  # pauses are every tenant's to see

    page = (await dashboard.http.get("/ui/")).text
    paused = page.split('id="paused"')[1].split("</section>")[0]
    assert re.search(
        r'data-paused-queue="emails">queue <a [^>]*>emails</a>\s*'
        r'<span class="badge paused">paused</span>',
        paused,
    )
    assert 'data-paused-kind="report"' in paused
    assert 'class="badge paused"' in row(page, "report")  # in the Limits panel
    by_kind = page.split("<h2>By kind</h2>")[1]
    assert re.search(r">report</a> <span class=\"badge paused\">paused</span></th>", by_kind)

    assert store.resume(queue="emails") and store.resume(kind="report")
    resumed = (await dashboard.http.get("/ui/")).text
    assert 'id="paused"' not in resumed and 'class="badge paused"' not in resumed


async def test_a_queued_jobs_page_says_what_holds_it_back(dashboard: Browser) -> None:
    store = dashboard.queue.store
    store.declare_limits({"work": Limits.checked(concurrency=1, rate="20/m")})
    running, held = (
        store.enqueue(NewJob("work", {"message": str(i)}, queue="fc2", concurrency_key="cust-7")).id
        for i in range(2)
    )
    later = store.enqueue(
        NewJob(
            "work", {"message": "later"}, queue="fc2", run_at=datetime.now(UTC) + timedelta(hours=1)
        )
    ).id
    [claimed] = store.claim("w1", ["fc2"], 5, 30)  # the limit lets one through
    assert claimed.id == running
    paused = store.enqueue(NewJob("report", {}, queue="emails")).id
    store.pause(queue="emails")
    await dashboard.sign_in(ROOT_KEY)

    page = (await dashboard.http.get(f"/ui/jobs/{held}")).text
    assert "waiting on a limit: concurrency 1, 1 running" in page
    assert '<dd class="mono" id="concurrency-key">cust-7</dd>' in page
    assert '<dd id="limits">concurrency 1, rate 20/m</dd>' in page
    for quiet in (running, later):  # running, or not due yet: nothing holds it
        other = (await dashboard.http.get(f"/ui/jobs/{quiet}")).text
        assert "data-held" not in other and "waiting on a limit" not in other
    on_pause = (await dashboard.http.get(f"/ui/jobs/{paused}")).text
    assert "waiting: queue emails is paused" in on_pause and 'id="limits"' not in on_pause

    store.pause(kind="work")
    both = (await dashboard.http.get(f"/ui/jobs/{held}")).text
    assert "waiting: kind work is paused" in both and "waiting on a limit" in both


async def test_a_concurrency_key_is_shown_escaped(dashboard: Browser) -> None:
    store = dashboard.queue.store
    job_id = store.enqueue(NewJob("work", {"message": "x"}, concurrency_key="<b>cust</b>")).id
    await dashboard.sign_in(ROOT_KEY)
    page = (await dashboard.http.get(f"/ui/jobs/{job_id}")).text
    assert "&lt;b&gt;cust&lt;/b&gt;" in page and "<b>cust</b>" not in page


async def test_a_tenant_bound_session_sees_the_limits_but_not_other_tenants_counts(
    dashboard: Browser,
) -> None:
    store = dashboard.queue.store
    store.declare_limits({"work": Limits.checked(concurrency=2)})
    store.enqueue_many(
        [NewJob("work", {"message": "g"}, queue="fc3", tenant="globex") for _ in range(3)]
    )
    assert len(store.claim("w1", ["fc3"], 5, 30)) == 2
    mine = store.enqueue(NewJob("work", {"message": "mine"}, queue="fc4")).id

    await dashboard.sign_in(ROOT_KEY)
    everyone = (await dashboard.http.get("/ui/")).text
    assert cell(everyone, "work", "running") == "2" and cell(everyone, "work", "waiting") == "2"

    await dashboard.sign_in(ADMIN_KEY)  # the default tenant only
    page = (await dashboard.http.get("/ui/")).text
    assert cell(page, "work", "concurrency") == "2"
    assert cell(page, "work", "running") == "0" and cell(page, "work", "waiting") == "1"
    assert "your running" in page and "your tenant's jobs" in page
    held = (await dashboard.http.get(f"/ui/jobs/{mine}")).text
    assert "waiting on a limit: concurrency 2, every slot taken" in held
    assert "2 running" not in held

    await dashboard.sign_in(GLOBEX_ADMIN)
    theirs = (await dashboard.http.get("/ui/")).text
    assert cell(theirs, "work", "running") == "2" and cell(theirs, "work", "waiting") == "1"


async def test_a_jobs_page_shows_its_expiry_unique_key_and_cost(dashboard: Browser) -> None:
    store = dashboard.queue.store
    job_id = store.enqueue(NewJob("work", {}, unique_key="sync:9", expires_in=600, cost=12000)).id
    await dashboard.sign_in(ROOT_KEY)
    page = (await dashboard.http.get(f"/ui/jobs/{job_id}")).text
    assert '<dd class="mono" id="unique-key">sync:9</dd>' in page
    assert 'id="expires"' in page and "cancelled if not started by then" in page
    assert '<dd id="cost">12,000 ' in page
    plain = store.enqueue(NewJob("work", {})).id
    assert 'id="cost"' not in (await dashboard.http.get(f"/ui/jobs/{plain}")).text


async def test_a_queued_job_no_live_worker_runs_says_so(dashboard: Browser) -> None:
    from chit.fleet import WorkerBeat

    store = dashboard.queue.store
    job_id = store.enqueue(NewJob("work", {"message": "x"}, queue="fc3")).id
    await dashboard.sign_in(ROOT_KEY)
    reason = "no worker running now has code for kind work"
    assert reason in (await dashboard.http.get(f"/ui/jobs/{job_id}")).text
    store.beat_worker(WorkerBeat("w-old", "h", 1, ("fc3",), ("report",), 4, 0), 60)
    assert reason in (await dashboard.http.get(f"/ui/jobs/{job_id}")).text
    store.beat_worker(WorkerBeat("w-new", "h", 2, ("fc3",), ("report", "work"), 4, 0), 60)
    assert reason not in (await dashboard.http.get(f"/ui/jobs/{job_id}")).text
