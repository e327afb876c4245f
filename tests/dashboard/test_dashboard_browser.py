"""The dashboard in a real headless Chromium (Debian's `chromium`, driven by
Playwright), against a real uvicorn server on a free loopback port and two
real `chit worker` processes sharing one SQLite file: sign in, read the
counts, retry a failed job and watch it succeed, replay a failure group,
watch a progress bar move by Server-Sent Events; see a limit, an operator's
override, a paused queue and a job held by its kind's limit; a schedule put
over HTTP, run by the workers, its runs on the Schedules page; and what a
stranger, another tenant and another site cannot do. Each page's screenshot is saved in
tests/dashboard/screenshots/."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from chit.jobs import NewJob
from chit.limits import Limits
from chit.settings import Settings
from chit.store import open_store
from support.browser import chromium_browser
from support.dashboard import ADMIN_KEY, GLOBEX_ADMIN, ROOT_KEY
from support.redis import redis_server
from support.stack import Server, server_with_workers
from support.waiting import wait_until

pytest.importorskip("playwright.sync_api")

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
SCREENSHOTS = HERE / "screenshots"
DOCS_SCREENSHOTS = ("overview", "job")
# Beyond support.browser's flags: none of Chromium's own background traffic.
QUIET = ("--disable-background-networking", "--disable-component-update", "--disable-sync")
KEYS = f"{ADMIN_KEY},globex:admin:{GLOBEX_ADMIN},*:admin:{ROOT_KEY}"


class Stack(Server):
    def submit(self, payload: dict[str, Any], kind: str = "work", **extra: Any) -> str:
        body = {"kind": kind, "payload": payload, **extra}
        response = self.http.post("/jobs", json=body)
        assert response.status_code == 202, response.text
        return str(response.json()["job_id"])


@pytest.fixture(scope="module", params=["sqlite", "redis"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The pages on the embedded default, and on Redis, whose reports are
    written in Lua rather than SQL (PostgreSQL's share the SQL store's)."""
    with ExitStack() as stack:
        url = stack.enter_context(redis_server()) if request.param == "redis" else None
        server = stack.enter_context(
            server_with_workers(
                tmp_path_factory.mktemp("dashboard"),
                "support.dashboard_app",
                key=ADMIN_KEY,
                keys=KEYS,
                worker_flags=("--concurrency", "4", "--lease", "3", "--grace", "2"),
                database_url=url,
            )
        )
        yield Stack(server.url, server.http, server.tmp, database_url=server.database_url)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    yield from chromium_browser(*QUIET)


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    context = chromium.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the confirmations
    yield page
    context.close()


def sign_in(page: Any, stack: Stack, key: str = ADMIN_KEY, path: str = "/ui/") -> None:
    page.goto(stack.url + path)
    page.wait_for_url("**/ui/login**")
    page.fill("#key", key)
    page.click("button[type=submit]")
    page.wait_for_url(f"**{path}")


def screenshot(page: Any, stack: Stack, name: str) -> None:
    """Saved in tests/dashboard/screenshots/ (Redis's as redis-NAME); with
    CHIT_UPDATE_SCREENSHOTS=1 the default store's overview and job page also
    replace the ones in docs/screenshots/."""
    SCREENSHOTS.mkdir(exist_ok=True)
    default = stack.database_url.startswith("sqlite:")
    path = SCREENSHOTS / f"{name if default else 'redis-' + name}.png"
    page.screenshot(path=str(path), full_page=True)
    wanted = default and name in DOCS_SCREENSHOTS
    if wanted and os.environ.get("CHIT_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(path, HERE.parents[1] / "docs" / "screenshots" / f"dashboard-{name}.png")


def card(page: Any, state: str) -> str:
    return str(page.inner_text(f'[data-count="{state}"] .value')).strip()


def test_sign_in_and_read_the_counts(page: Any, stack: Stack) -> None:
    outage = stack.tmp / "overview-outage"
    outage.touch()
    done = [stack.submit({"message": f"ok {i}"}) for i in range(5)]
    bad = stack.submit({"message": "poison", "fail_while_exists": str(outage), "permanent": True})
    for job_id in done:
        stack.until(job_id, lambda b: b["state"] == "succeeded")
    stack.until(bad, lambda b: b["state"] == "failed")

    page.goto(stack.url + "/ui/login")
    screenshot(page, stack, "login")
    sign_in(page, stack)
    assert int(card(page, "succeeded").rstrip("+").replace(",", "")) >= 5
    assert int(card(page, "failed").replace(",", "")) >= 1
    assert page.locator("svg.chart rect.ok").count() >= 1
    assert page.locator("svg.chart rect.bad").count() >= 1
    assert "work" in page.inner_text("table.counts")
    screenshot(page, stack, "overview")


def test_open_a_failed_job_retry_it_and_watch_it_succeed(page: Any, stack: Stack) -> None:
    outage = stack.tmp / "retry-outage"
    outage.touch()
    job_id = stack.submit({"message": "later", "fail_while_exists": str(outage)})
    stack.until(job_id, lambda b: b["state"] == "failed")

    sign_in(page, stack, path="/ui/jobs?state=failed")
    screenshot(page, stack, "jobs")
    page.click(f'a[href="/ui/jobs/{job_id}"]')
    page.wait_for_url(f"**/ui/jobs/{job_id}")
    assert "ConnectionError: upstream is down" in page.inner_text("pre.error")
    assert page.inner_text("#state [data-state]") == "failed"
    assert page.locator("table.attempts tbody tr").count() == 1
    screenshot(page, stack, "job-failed")

    outage.unlink()
    page.click("button:has-text('Retry')")  # the confirmation is accepted
    page.wait_for_selector("text=Queued again")
    # Live: the page follows the job by SSE, and reloads once it has finished.
    # A selector, not wait_for_function: a string predicate that has to poll is
    # eval'd in the page, which its Content Security Policy forbids.
    page.wait_for_selector("#state [data-state]:text-is('succeeded')")
    page.wait_for_selector("#result")
    assert '"message": "later"' in page.inner_text("#result")
    assert page.locator("table.attempts tbody tr").count() == 2
    screenshot(page, stack, "job")


def test_edit_a_delayed_job_and_run_it_now(page: Any, stack: Stack) -> None:
    run_at = datetime.now(UTC) + timedelta(hours=1)
    job_id = stack.submit({"message": "draft"}, run_at=run_at.isoformat())

    sign_in(page, stack, path=f"/ui/jobs/{job_id}")
    page.click("#edit summary")
    page.fill("textarea[name=payload]", '{"message": "final"}')
    page.fill("input[name=priority]", "-3")
    page.click("button:has-text('Save changes')")
    page.wait_for_selector("text=Changed.")
    assert "priority -3" in page.inner_text("#status")
    page.click("button:has-text('Run now')")  # the confirmation is accepted
    page.wait_for_selector("text=Due now")
    page.wait_for_selector("#state [data-state]:text-is('succeeded')")
    page.wait_for_selector("#result")
    assert '"message": "final"' in page.inner_text("#result")


def test_approve_a_waiting_job_with_the_signal_form(page: Any, stack: Stack) -> None:
    job_id = stack.submit({}, kind="approval")
    stack.until(job_id, lambda b: b["state"] == "waiting")

    sign_in(page, stack, path=f"/ui/jobs/{job_id}")
    assert "the signal approval" in page.inner_text("#waiting-for")
    page.fill("#signal textarea[name=data]", '{"by": "ana"}')
    page.click("button:has-text('Send signal')")  # the confirmation is accepted
    page.wait_for_selector("text=Signal sent")
    page.wait_for_selector("#state [data-state]:text-is('succeeded')")
    page.wait_for_selector("#result")
    assert '"by": "ana"' in page.inner_text("#result")


def test_replay_a_failure_group(page: Any, stack: Stack) -> None:
    outage = stack.tmp / "replay-outage"
    outage.touch()
    payload = {"message": "sync", "fail_while_exists": str(outage), "permanent": True}
    ids = [stack.submit(payload) for _ in range(3)]
    for job_id in ids:
        stack.until(job_id, lambda b: b["state"] == "failed")
    outage.unlink()

    sign_in(page, stack, path="/ui/failures")
    row = page.locator("table.failures tr", has_text="upstream rejected 'sync'")
    assert row.locator("td.num").inner_text().strip() == "3"
    screenshot(page, stack, "failures")
    row.locator("text=Replay these").click()
    page.wait_for_selector("text=Replay 3 failed jobs")
    screenshot(page, stack, "replay-confirm")
    page.click("button:has-text('Replay 3 jobs')")
    page.wait_for_selector("text=Replayed 3 jobs of kind work.")
    for job_id in ids:
        stack.until(job_id, lambda b: b["state"] == "succeeded")
    page.reload()
    assert page.locator("table.failures tr", has_text="upstream rejected 'sync'").count() == 0


def test_a_progress_bar_moves_by_server_sent_events(page: Any, stack: Stack) -> None:
    # Long enough to show several heartbeats' progress after a slow sign-in.
    job_id = stack.submit({"message": "long", "seconds": 12, "steps": 40})
    stack.until(job_id, lambda b: b["state"] == "running")
    sign_in(page, stack, path=f"/ui/jobs/{job_id}")
    page.evaluate("window.notReloaded = true")
    seen: list[float] = []
    deadline = time.monotonic() + 15
    while len(set(seen)) < 3 and time.monotonic() < deadline:
        value = page.evaluate(
            "() => { const b = document.getElementById('progress-bar');"
            " return b && !b.hidden ? b.value : null }"
        )
        if value is not None and page.evaluate("window.notReloaded === true"):
            seen.append(float(value))
        time.sleep(0.1)
    assert len(set(seen)) >= 3, seen  # moved at least twice, without a reload
    assert seen == sorted(seen)
    assert page.is_visible("#live")
    screenshot(page, stack, "job-progress")
    page.wait_for_selector("#result", timeout=15_000)  # reloaded when it finished


def test_a_jobs_output_appears_live_with_its_progress_message(page: Any, stack: Stack) -> None:
    """Tokens a running job emits are added to its page as they are written
    (EventSource, no reload), once each, with no Content Security Policy refusal."""
    console: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    job_id = stack.submit({"count": 40, "every": 0.25}, kind="stream")
    stack.until(job_id, lambda b: b["state"] == "running")
    sign_in(page, stack, path=f"/ui/jobs/{job_id}")
    page.evaluate("window.notReloaded = true")
    shown = int(page.evaluate("document.querySelectorAll('#output-list li').length"))
    wait_until(
        lambda: (
            int(page.evaluate("document.querySelectorAll('#output-list li').length")) >= shown + 3
        ),
        15,
        what="three more tokens on the page",
    )
    # The progress message comes with the next heartbeat (PROGRESS_INTERVAL), not
    # with each token: up to a second after the tokens.
    wait_until(
        lambda: "of 40" in page.inner_text("#progress-message"), 15, what="the progress message"
    )
    assert page.evaluate("window.notReloaded === true")
    screenshot(page, stack, "job-output")
    page.wait_for_selector("#result", timeout=20_000)  # reloaded when it finished
    seqs = page.evaluate(
        "Array.from(document.querySelectorAll('#output-list li')).map(li => li.dataset.seq)"
    )
    assert seqs == [str(n) for n in range(1, 41)]
    assert '{"token": "t39"}' in page.inner_text("#output-list")
    assert [m for m in console if "Content Security Policy" in m or "error" in m] == []


def test_limits_an_override_a_pause_and_a_job_held_by_its_limit(page: Any, stack: Stack) -> None:
    # The store the workers and the server share: an operator's changes, as
    # `chit limits set` and `chit pause` make them.
    store = open_store(Settings(database_url=stack.database_url))
    hold = stack.tmp / "partner-hold"
    hold.touch()
    try:
        # The workers declared `partner` (concurrency=1) before their first claim.
        wait_until(
            lambda: any(k.kind == "partner" for k in store.limits()), 10, what="declared limits"
        )
        store.set_limits("report", Limits.checked(concurrency=4, rate="100/m"))
        first = stack.submit({"message": "one", "hold_while_exists": str(hold)}, kind="partner")
        stack.until(first, lambda b: b["state"] == "running")
        # As `queue.enqueue(..., concurrency_key=...)` stores it.
        second = store.enqueue(
            NewJob("partner", {"message": "two"}, max_attempts=1, concurrency_key="cust-7")
        ).id
        # No worker claims "emails": the job stays queued whatever the pause does.
        store.pause(queue="emails")
        parked = stack.submit({"message": "mail"}, queue="emails")

        sign_in(page, stack, key=ROOT_KEY)
        partner = page.locator('tr[data-limit-kind="partner"]')
        assert partner.locator('[data-limit="concurrency"]').inner_text().strip() == "1"
        assert partner.locator('[data-limit="source"]').inner_text().strip() == "code"
        assert partner.locator('[data-limit="running"]').inner_text().strip() == "1"
        assert partner.locator('[data-limit="waiting"]').inner_text().strip() == "1"
        report = page.locator('tr[data-limit-kind="report"]')
        assert "operator" in report.locator('[data-limit="concurrency"]').inner_text()
        assert report.locator('[data-limit="rate"]').inner_text().startswith("100/m")
        assert page.is_visible('[data-paused-queue="emails"] .badge.paused')
        screenshot(page, stack, "overview-limits")

        page.goto(f"{stack.url}/ui/jobs/{second}")
        assert page.inner_text("[data-held]") == "waiting on a limit: concurrency 1, 1 running"
        assert page.inner_text("#concurrency-key") == "cust-7"
        screenshot(page, stack, "job-held")
        page.goto(f"{stack.url}/ui/jobs/{parked}")
        assert page.inner_text("[data-held]") == "waiting: queue emails is paused"

        hold.unlink()  # the first finishes, freeing the slot: the second runs
        stack.until(second, lambda b: b["state"] == "succeeded")
        page.goto(f"{stack.url}/ui/jobs/{second}")
        assert page.locator("[data-held]").count() == 0
        store.resume(queue="emails")
        page.goto(f"{stack.url}/ui/jobs/{parked}")
        assert page.locator("[data-held]").count() == 0  # nothing holds it now
        page.goto(f"{stack.url}/ui/")
        assert page.locator(".badge.paused").count() == 0
    finally:
        hold.unlink(missing_ok=True)
        store.resume(queue="emails")
        store.clear_limits("report")
        store.close()


def test_without_a_key_or_with_another_tenants_key_nothing_is_shown(
    page: Any, stack: Stack
) -> None:
    job_id = stack.submit({"message": "private"})
    stack.until(job_id, lambda b: b["state"] == "succeeded")
    for path in ("/ui/", "/ui/jobs", f"/ui/jobs/{job_id}", "/ui/failures"):
        page.goto(stack.url + path)
        assert "/ui/login" in page.url
        assert "private" not in page.content() and page.locator("table").count() == 0

    page.fill("#key", "not-a-key-0123456789")
    page.click("button[type=submit]")
    assert "not recognised" in page.inner_text(".notice.bad")

    sign_in(page, stack, key=GLOBEX_ADMIN)
    assert card(page, "succeeded") == "0"
    assert "No jobs yet." in page.content()
    page.goto(f"{stack.url}/ui/jobs")
    assert job_id not in page.content()
    response = page.goto(f"{stack.url}/ui/jobs/{job_id}")
    assert response.status == 404 and "private" not in page.content()


def test_a_form_posted_from_another_site_is_refused(page: Any, stack: Stack) -> None:
    outage = stack.tmp / "csrf-outage"
    outage.touch()
    job_id = stack.submit({"message": "keep", "fail_while_exists": str(outage)})
    stack.until(job_id, lambda b: b["state"] == "failed")
    outage.unlink()
    sign_in(page, stack)  # the browser has a session

    # A page on another site that posts to the dashboard as soon as it loads.
    evil = "http://attacker.invalid/"
    form = (
        f'<form id="f" method="post" action="{stack.url}/ui/jobs/{job_id}/retry">'
        '<input name="csrf_token" value="guessed"></form>'
        "<script>document.getElementById('f').submit()</script>"
    )
    page.route(evil, lambda route: route.fulfill(content_type="text/html", body=form))
    page.goto(evil)
    page.wait_for_url(f"{stack.url}/ui/**")
    assert "403" in page.inner_text("h1")
    assert stack.http.get(f"/jobs/{job_id}").json()["state"] == "failed"


def test_a_workflow_page_draws_the_graph_and_links_its_jobs(page: Any, stack: Stack) -> None:
    body = {
        "jobs": [
            {"ref": "a", "kind": "work", "payload": {"message": "a"}},
            {"ref": "b", "kind": "work", "payload": {"message": "b"}},
            {"ref": "merge", "kind": "work", "payload": {"message": "m"}, "depends_on": ["a", "b"]},
        ]
    }
    response = stack.http.post("/workflows", json=body)
    assert response.status_code == 202, response.text
    submitted = response.json()
    merge = submitted["jobs"]["merge"]
    stack.until(merge, lambda b: b["state"] == "succeeded")

    sign_in(page, stack, path=f"/ui/workflows/{submitted['workflow_id']}")
    assert page.locator("svg.workflow-graph g.node").count() == 3
    assert page.locator("svg.workflow-graph g.node.state-succeeded").count() == 3
    assert page.locator("svg.workflow-graph line").count() == 2
    screenshot(page, stack, "workflow")
    page.click(f'svg.workflow-graph a[href="/ui/jobs/{merge}"]')
    page.wait_for_url(f"**/ui/jobs/{merge}")
    assert submitted["jobs"]["a"] in page.inner_text("#depends-on")
    page.click(f'#workflow a[href="/ui/workflows/{submitted["workflow_id"]}"]')
    page.wait_for_url(f"**/ui/workflows/{submitted['workflow_id']}")


def test_a_wide_workflow_scrolls_in_its_box_and_breaks_no_content_security_policy(
    page: Any, stack: Stack
) -> None:
    """40 parallel jobs once made the page 6,813 px wide, and the box's inline
    style, which was to scroll it, was refused by the dashboard's own CSP."""
    parallel = [{"ref": f"p{i}", "kind": "work", "payload": {"message": "p"}} for i in range(40)]
    merge = {"ref": "merge", "kind": "work", "payload": {"message": "m"}}
    body = {"jobs": [*parallel, merge | {"depends_on": [p["ref"] for p in parallel]}]}
    response = stack.http.post("/workflows", json=body)
    assert response.status_code == 202, response.text
    workflow_id = response.json()["workflow_id"]
    console: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))

    sign_in(page, stack, path=f"/ui/workflows/{workflow_id}")
    assert page.locator("svg.workflow-graph g.node").count() == 41
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280, f"the page is {width} px wide"
    box = page.evaluate(
        "(() => { const b = document.getElementById('graph');"
        " return [b.scrollWidth, b.clientWidth, getComputedStyle(b).overflowX]; })()"
    )
    assert box[0] > box[1] and box[2] == "auto", box
    page.evaluate("document.getElementById('graph').scrollLeft = 100000")
    assert page.evaluate("document.getElementById('graph').scrollLeft") > 0
    screenshot(page, stack, "workflow-wide")
    assert [m for m in console if "Content Security Policy" in m or "error" in m] == []


def test_a_schedule_put_over_http_runs_on_the_workers_and_shows_its_runs(
    page: Any, stack: Stack
) -> None:
    body = {"kind": "report", "payload": {}, "every": "1s"}
    put = stack.http.put("/schedules/browser-tick", json=body, headers=_root())
    assert put.status_code == 200, put.text

    def runs() -> list[Any]:
        got = stack.http.get("/schedules/browser-tick", headers=_root()).json()["runs"]
        return [r for r in got if r["state"] == "succeeded"] if len(got) >= 2 else []

    try:
        wait_until(runs, 30, what="two slots run by the workers")
        sign_in(page, stack, ROOT_KEY, "/ui/schedules")
        row = page.locator('[data-schedule="browser-tick"]')
        assert "every 1s" in row.inner_text()
        assert row.locator(".badge.state-succeeded").count() >= 2
        screenshot(page, stack, "schedules")
        row.locator(".badge.state-succeeded").first.click()
        page.wait_for_url("**/ui/jobs/*")
        assert "schedule:browser-tick:" in page.inner_text("main")
    finally:  # the other tests share the server
        stack.http.delete("/schedules/browser-tick", headers=_root())


def _root() -> dict[str, str]:
    return {"Authorization": f"Bearer {ROOT_KEY}"}
