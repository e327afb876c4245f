"""What each page shows and does, in-process on SQLite and PostgreSQL; and the
per-kind rates that `/stats` and `/metrics` give for alerting."""

from __future__ import annotations

from pathlib import Path

import pytest

from chit import JobContext, JobRequest
from chit.dashboard import graph, routes
from chit.jobs import Failed, NewJob, RunOn, State, WorkflowJob
from support.dashboard import ADMIN_KEY, Browser, finished, hidden

pytestmark = pytest.mark.anyio


async def test_overview_counts_by_state_and_kind_with_capped_counts(
    dashboard: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3):
        finished(dashboard.queue, kind="report", result={"rows": 1})
    finished(dashboard.queue, error="KeyError: x")
    dashboard.queue.store.enqueue_many([NewJob("work", {"message": "x"}) for _ in range(4)])
    await dashboard.sign_in(ADMIN_KEY)

    page = (await dashboard.http.get("/ui/")).text
    assert '<span class="label">succeeded</span>\n    <span class="value">3</span>' in page
    assert '<span class="label">queued</span>\n    <span class="value">4</span>' in page
    assert "<svg" in page and "3 succeeded, 1 failed" in page  # the chart's label
    assert 'href="/ui/jobs?kind=report&amp;state=succeeded">3</a>' in page
    assert "queue lag" in page and "/ui/jobs/" in page  # the oldest queued job's link

    monkeypatch.setattr(routes, "COUNT_CAP", 2)
    capped = (await dashboard.http.get("/ui/")).text
    assert '<span class="value">2+</span>' in capped
    assert "Counts stop at 2 per kind and state" in capped


async def test_stale_running_jobs_are_highlighted(dashboard: Browser) -> None:
    store = dashboard.queue.store
    job_id = store.enqueue(NewJob("work", {"message": "x"}, queue="lost")).id
    store.claim("gone-worker", ["lost"], 1, 0.001)
    await dashboard.sign_in(ADMIN_KEY)
    page = (await dashboard.http.get("/ui/")).text
    assert 'id="stale"' in page and "gone-worker" in page and job_id in page
    assert 'class="card alert"' in page
    job_page = (await dashboard.http.get(f"/ui/jobs/{job_id}")).text
    assert 'class="badge stale"' in job_page


async def test_jobs_filters_search_and_keyset_pages(
    dashboard: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(routes, "PAGE_SIZE", 2)
    ids = [finished(dashboard.queue, kind="report", result={}) for _ in range(3)]
    failed = finished(dashboard.queue, error="KeyError: x", key="order-7")
    await dashboard.sign_in(ADMIN_KEY)

    first = (await dashboard.http.get("/ui/jobs?kind=report")).text
    assert ids[2] in first and ids[1] in first and ids[0] not in first and failed not in first
    older = first.split('rel="next" href="')[1].split('"')[0].replace("&amp;", "&")
    assert "cursor=" in older and "kind=report" in older
    second = (await dashboard.http.get(older)).text
    assert ids[0] in second and ids[1] not in second and 'rel="next"' not in second

    by_state = (await dashboard.http.get("/ui/jobs?state=failed")).text
    assert failed in by_state and ids[0] not in by_state
    by_key = (await dashboard.http.get("/ui/jobs?q=order-7")).text
    assert f"/ui/jobs/{failed}" in by_key and f"/ui/jobs/{ids[0]}" not in by_key
    by_prefix = (await dashboard.http.get(f"/ui/jobs?q={failed[:22].upper()}")).text
    assert f"/ui/jobs/{failed}" in by_prefix
    nothing = (await dashboard.http.get("/ui/jobs?q=order-7&state=succeeded")).text
    assert "No job has that id" in nothing


async def test_a_job_page_shows_payload_result_attempts_and_acts(dashboard: Browser) -> None:
    failed = finished(dashboard.queue, error="ConnectionError: upstream is down\nTraceback …")
    big = finished(dashboard.queue, kind="report", result={"blob": "x" * 100_000})
    await dashboard.sign_in(ADMIN_KEY)

    page = (await dashboard.http.get(f"/ui/jobs/{failed}")).text
    assert "ConnectionError: upstream is down" in page and "test-worker" in page
    assert "&#34;message&#34;: &#34;x&#34;" in page  # the payload, escaped
    assert "data-confirm=" in page and "Retry</button>" in page
    token = hidden(page, "csrf_token")
    retried = await dashboard.http.post(f"/ui/jobs/{failed}/retry", data={"csrf_token": token})
    assert retried.status_code == 303
    after = (await dashboard.http.get(retried.headers["location"])).text
    assert "Queued again" in after and "Cancel</button>" in after
    cancelled = await dashboard.http.post(f"/ui/jobs/{failed}/cancel", data={"csrf_token": token})
    assert "notice=cancelled" in cancelled.headers["location"]
    assert dashboard.queue.store.get(failed).state is State.CANCELLED  # type: ignore[union-attr]

    large = (await dashboard.http.get(f"/ui/jobs/{big}")).text
    assert "The result is large" in large and "x" * 1000 not in large
    result = await dashboard.http.get(f"/ui/jobs/{big}/result")
    assert result.status_code == 200 and len(result.json()["blob"]) == 100_000
    assert (await dashboard.http.get("/ui/jobs/not-a-job-id")).status_code == 404


async def test_a_dependent_of_a_failed_job_is_not_retried_and_a_waiting_job_says_why(
    dashboard: Browser,
) -> None:
    store = dashboard.queue.store
    first, then = (
        r.id
        for r in store.enqueue_many(
            [
                NewJob("work", {"message": "a"}, queue="dep", ref="a", max_attempts=1),
                NewJob("work", {"message": "b"}, queue="dep", ref="b", depends_on=("a",)),
            ]
        )
    )
    [claimed] = store.claim("w", ["dep"], 1, 30)
    assert store.finish([Failed(first, claimed.lease_token, "boom")]) == [True]
    await dashboard.sign_in(ADMIN_KEY)
    token = hidden((await dashboard.http.get(f"/ui/jobs/{then}")).text, "csrf_token")

    refused = await dashboard.http.post(f"/ui/jobs/{then}/retry", data={"csrf_token": token})
    assert refused.status_code == 409
    assert f"retry {first} first" in refused.text
    assert store.get(then).state is State.CANCELLED  # type: ignore[union-attr]

    retried = await dashboard.http.post(f"/ui/jobs/{first}/retry", data={"csrf_token": token})
    assert retried.status_code == 303
    waiting = (await dashboard.http.get(f"/ui/jobs/{then}")).text
    assert f"waiting on dependencies: {first} (work, queued)" in waiting


async def test_a_job_page_shows_its_steps(dashboard: Browser) -> None:
    store = dashboard.queue.store
    job_id = store.enqueue(NewJob("work", {"message": "x"}, queue="stepping")).id
    [held] = store.claim("test-worker", ["stepping"], 1, 30)
    ctx = JobContext.of(held, store, 30)
    ctx.step("fetch <page>", lambda: {"rows": 3, "text": "y" * 200})
    plain = finished(dashboard.queue)
    await dashboard.sign_in(ADMIN_KEY)

    page = (await dashboard.http.get(f"/ui/jobs/{job_id}")).text
    steps = page.split('<section class="panel" id="steps">', 1)[1].split("</section>", 1)[0]
    assert "fetch &lt;page&gt;" in steps  # the name, escaped
    assert '<td class="num">1</td>' in steps  # the attempt that stored it
    assert "&#34;rows&#34;: 3" in steps and "y" * 200 in steps  # the whole result, folded
    assert "\u2026</summary>" in steps  # its one-line summary, cut
    assert 'id="steps"' not in (await dashboard.http.get(f"/ui/jobs/{plain}")).text


async def test_a_workflow_page_draws_the_graph_and_job_pages_link_it(
    dashboard: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = dashboard.queue
    wf = q.enqueue_workflow(
        [
            JobRequest("work", {"message": "a"}, ref="a"),
            JobRequest("work", {"message": "b"}, ref="b"),
            JobRequest("work", {"message": "m"}, ref="merge<1>", depends_on=["a", "b"]),
        ]
    )
    await dashboard.sign_in(ADMIN_KEY)
    page = (await dashboard.http.get(f"/ui/workflows/{wf.id}")).text
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="workflow-graph"' in page
    assert 'aria-label="3 jobs in 2 layers"' in page
    assert page.count("<line ") == 2  # a -> merge, b -> merge
    assert page.count('class="node state-queued"') == 2
    assert page.count('class="node state-waiting"') == 1
    assert "merge&lt;1&gt; \u00b7 work" in page  # the ref, escaped
    assert f'href="/ui/jobs/{wf.jobs["a"]}"' in page

    merge = (await dashboard.http.get(f"/ui/jobs/{wf.jobs['merge<1>']}")).text
    assert f'href="/ui/workflows/{wf.id}"' in merge
    depends = merge.split('id="depends-on"', 1)[1].split("</dd>", 1)[0]
    assert wf.jobs["a"] in depends and wf.jobs["b"] in depends and "2 pending" in depends
    root = (await dashboard.http.get(f"/ui/jobs/{wf.jobs['a']}")).text
    assert wf.jobs["merge<1>"] in root.split('id="dependents"', 1)[1].split("</dd>", 1)[0]

    monkeypatch.setattr(graph, "NODE_LIMIT", 2)  # beyond it: grouped
    grouped = (await dashboard.http.get(f"/ui/workflows/{wf.id}")).text
    assert "drawn grouped by depth, kind and state" in grouped
    assert "work \u00d72" in grouped and grouped.count("<line ") == 1
    assert (await dashboard.http.get("/ui/workflows/nope")).status_code == 404


async def test_failures_are_grouped_and_a_group_is_replayed_after_confirmation(
    dashboard: Browser,
) -> None:
    group = [finished(dashboard.queue, error=f"Timeout: upstream\n  line {i}") for i in range(3)]
    other = finished(dashboard.queue, error="Timeout: upstream slow")
    await dashboard.sign_in(ADMIN_KEY)

    page = (await dashboard.http.get("/ui/failures")).text
    assert "Timeout: upstream slow" in page and ">3</td>" in page
    link = page.split('href="/ui/failures/replay?')[1].split('"')[0].replace("&amp;", "&")
    confirm = (await dashboard.http.get(f"/ui/failures/replay?{link}")).text
    assert "Replay 3 jobs" in confirm
    response = await dashboard.http.post(
        "/ui/failures/replay",
        data={
            "csrf_token": hidden(confirm, "csrf_token"),
            "kind": hidden(confirm, "kind"),
            "error": hidden(confirm, "error"),
        },
    )
    assert response.status_code == 303
    done = (await dashboard.http.get(response.headers["location"])).text
    assert "Replayed 3 jobs of kind work." in done
    store = dashboard.queue.store
    assert {store.get(j).state for j in group} == {State.QUEUED}  # type: ignore[union-attr]
    assert store.get(other).state is State.FAILED  # type: ignore[union-attr]


async def test_stats_metrics_and_pages_give_the_last_hours_failure_rate_per_kind(
    dashboard: Browser,
) -> None:
    for _ in range(4):
        finished(dashboard.queue, kind="report", result={})
    finished(dashboard.queue, kind="report", error="KeyError: x")
    finished(dashboard.queue, error="KeyError: y")
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}

    stats = (await dashboard.http.get("/stats", headers=headers)).json()
    assert stats["last_hour_by_kind"] == {
        "report": {"succeeded": 4, "failed": 1, "failure_rate": 0.2},
        "work": {"succeeded": 0, "failed": 1, "failure_rate": 1.0},
    }
    assert stats["failure_rate"] == 2 / 6
    metrics = (await dashboard.http.get("/metrics", headers=headers)).text
    assert 'chit_jobs_failed_last_hour{kind="report"} 1.0' in metrics
    assert 'chit_jobs_succeeded_last_hour{kind="report"} 4.0' in metrics
    assert 'chit_jobs_failure_rate_last_hour{kind="report"} 0.2' in metrics
    assert 'chit_jobs_failure_rate_last_hour{kind="work"} 1.0' in metrics
    assert "Inf" not in metrics.replace('le="+Inf"', "")
    assert "failure_ratio" not in metrics
    await dashboard.sign_in(ADMIN_KEY)
    overview = (await dashboard.http.get("/ui/")).text
    assert "failure rate" in overview and "20.0 %" in overview and "100.0 %" in overview
    assert "failed / succeeded" not in overview
    failures = (await dashboard.http.get("/ui/failures")).text
    assert "report: 1 failed, 4 succeeded (failure rate 20.0 %)" in failures


@pytest.mark.parametrize(
    "query",
    [{"kind": "a\x00b"}, {"queue": "a\x00b"}, {"q": "a\x00b"}, {"cursor": "a\x00b"}],
    ids=["kind", "queue", "q", "cursor"],
)
async def test_a_nul_in_a_jobs_filter_is_422_on_both_backends(
    dashboard: Browser, query: dict[str, str]
) -> None:
    await dashboard.sign_in(ADMIN_KEY)
    response = await dashboard.http.get("/ui/jobs", params=query)
    assert response.status_code == 422, response.text
    assert "NUL" in response.text and "postgres" not in response.text.lower()


async def test_a_nul_in_a_replayed_group_is_422_and_replays_nothing(dashboard: Browser) -> None:
    failed = finished(dashboard.queue, error="Timeout: upstream")
    await dashboard.sign_in(ADMIN_KEY)
    token = await dashboard.csrf("/ui/failures")
    for form in (
        {"kind": "work\x00", "error": "Timeout: upstream"},
        {"kind": "work", "error": "a\x00"},
    ):
        response = await dashboard.http.post(
            "/ui/failures/replay", data={"csrf_token": token, **form}
        )
        assert response.status_code == 422, response.text
        assert "postgres" not in response.text.lower()
    assert dashboard.queue.store.get(failed).state is State.FAILED  # type: ignore[union-attr]


def test_no_template_or_drawing_has_an_inline_style() -> None:
    """The dashboard's Content-Security-Policy (style-src 'self') refuses every
    inline style: a page's look is classes in static/dashboard.css."""
    templates = Path(routes.__file__).parent / "templates"
    found = [p.name for p in templates.glob("*.html") if "style=" in p.read_text()]
    assert found == []
    job = WorkflowJob("01j0", "a", "work", State.QUEUED, (), RunOn.SUCCEEDED)
    assert "style" not in graph.svg([job], "/ui/jobs/")
