"""Workflows over HTTP, in-process on SQLite and PostgreSQL (issue 14):
`POST /workflows` stores a graph all or nothing (202 + Location, the
Idempotency-Key honoured), `GET /workflows/{id}` lists its jobs and edges,
`POST /workflows/{id}/cancel`, dependencies on `POST /jobs` and in status
answers, `GET /workflows/{id}/events`; bad graphs refused with nothing stored;
tenants and scopes as for jobs."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import httpx
import pytest

import chit
from chit.client import Event, SSEParser
from chit.jobs import Failed, JobFilter, State, Succeeded
from support.api import (
    ACME_ADMIN,
    ACME_KEY,
    ACME_READER,
    GLOBEX_ADMIN,
    Api,
    assert_error,
    bearer,
    running_api,
    settings_for,
)
from support.api_app import register
from support.waiting import until

pytestmark = pytest.mark.anyio


def job(ref: str | None = None, *depends_on: str, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "echo", "payload": {"message": ref or "x"}, **fields}
    if ref is not None:
        body["ref"] = ref
    if depends_on:
        body["depends_on"] = list(depends_on)
    return body


def stored(api: Api) -> int:
    return len(api.store.list(JobFilter(), limit=1000).jobs)


async def post(api: Api, *jobs: dict[str, Any], key: str | None = None, **headers: str) -> Any:
    return await api.http.post(
        "/workflows", json={"jobs": list(jobs)}, headers=bearer(key) | headers
    )


async def test_a_graph_is_stored_and_read_back_with_its_edges(api: Api) -> None:
    response = await post(
        api, job("a"), job("b"), job("merge", "a", "b"), job(None, "merge", run_on="finished")
    )
    assert response.status_code == 202, response.text
    body = response.json()
    workflow_id = body["workflow_id"]
    assert response.headers["location"] == body["status_url"] == f"/workflows/{workflow_id}"
    ids = body["jobs"]
    assert set(ids) == {"a", "b", "merge"} and len(body["ids"]) == 4
    assert body["created"] is True

    view = (await api.http.get(f"/workflows/{workflow_id}")).json()
    assert view["id"] == workflow_id
    assert [(j["ref"], j["state"], j["depends_on"], j["run_on"]) for j in view["jobs"]] == [
        ("a", "queued", [], "succeeded"),
        ("b", "queued", [], "succeeded"),
        ("merge", "waiting", [ids["a"], ids["b"]], "succeeded"),
        (None, "waiting", [ids["merge"]], "finished"),
    ]
    assert view["states"] == {"queued": 2, "waiting": 2}
    status = (await api.http.get(f"/jobs/{ids['merge']}")).json()
    assert status["state"] == "waiting" and status["workflow_id"] == workflow_id
    assert status["depends_on"] == [ids["a"], ids["b"]]
    assert status["dependencies"] == {
        "total": 2,
        "succeeded": 0,
        "failed": 0,
        "cancelled": 0,
        "pending": 2,
    }
    assert (await api.http.get(f"/jobs/{ids['a']}")).json()["dependencies"] is None


async def test_depends_on_over_post_jobs(api: Api) -> None:
    first = await api.submit()
    response = await api.http.post(
        "/jobs", json={"kind": "echo", "payload": {"message": "m"}, "depends_on": [first]}
    )
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["workflow_id"] is not None
    later = api.job(body["job_id"])
    assert later.state is State.WAITING and later.depends_on == (first,)
    held = api.store.claim("w", [api.job(first).queue], 1, 30)[0]
    api.store.finish([Succeeded(first, held.lease_token, {"ok": 1})])
    assert api.job(body["job_id"]).state is State.QUEUED
    status = (await api.http.get(body["status_url"])).json()
    assert status["dependencies"]["succeeded"] == 1 and status["dependencies"]["pending"] == 0


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        ([job("a"), job("b", "nope")], "nope"),
        ([job("a", "a")], "a"),
        ([job("a", "b"), job("b", "a")], "cycle"),
        ([job("a"), job("a")], "duplicate ref 'a'"),
        ([job("a"), job("b", "a", run_on="always")], "run_on"),
        ([job("a"), job("b", "a", kind="no-such-kind")], "no-such-kind"),
        ([job("a"), {**job("b", "a"), "depends": ["a"]}], "depends"),
        ([job(None)], "a workflow needs at least one job with a ref or depends_on"),
        ([], "jobs"),
        ([job("a" * 201)], "ref"),
        ([job("a\nb")], "printable"),
    ],
)
async def test_a_bad_graph_is_refused_and_nothing_is_stored(
    api: Api, jobs: list[dict[str, Any]], message: str
) -> None:
    body = assert_error(await post(api, *jobs), 422)
    assert message in body["message"], body
    assert stored(api) == 0


async def test_a_self_dependency_says_so(api: Api) -> None:
    body = assert_error(await post(api, job("b"), job("a", "a")), 422, "invalid_request")
    assert "depends on itself" in body["message"] or "self" in body["message"], body
    assert stored(api) == 0


async def test_bad_depends_on_over_post_jobs_stores_nothing(api: Api) -> None:
    for depends_on, status in (
        (["01m8zzzzzzzzzzzzzzzzzzzzzz"], 422),
        ([""], 422),
        ("not-a-list", 422),
    ):
        response = await api.http.post(
            "/jobs", json={"kind": "echo", "payload": {"message": "m"}, "depends_on": depends_on}
        )
        assert_error(response, status)
    bad_run_on = await api.http.post(
        "/jobs", json={"kind": "echo", "payload": {"message": "m"}, "run_on": "sometimes"}
    )
    assert "'succeeded' or 'finished'" in assert_error(bad_run_on, 422)["message"]
    assert stored(api) == 0


def _many_edges() -> list[dict[str, Any]]:
    """100,001 edges in few bytes: 1,000 roots, and 101 jobs depending on all of them."""
    roots = [{"ref": f"r{n}", "kind": "echo", "payload": {"message": "x"}} for n in range(1000)]
    names = [f"r{n}" for n in range(1000)]
    fans = [
        {"ref": f"f{n}", "kind": "echo", "payload": {"message": "x"}, "depends_on": names}
        for n in range(100)
    ]
    last = {"kind": "echo", "payload": {"message": "x"}, "depends_on": names[:1]}
    return [*roots, *fans, last]


async def test_100001_edges_are_too_large_a_body_for_the_default_limits(api: Api) -> None:
    body = assert_error(await post(api, *_many_edges()), 413)
    assert "bytes" in body["message"]
    assert stored(api) == 0


async def test_100001_edges_are_refused_by_count_where_the_body_fits(database_url: str) -> None:
    settings = dataclasses.replace(settings_for(database_url), max_body_bytes=2 * 1024 * 1024)
    q = register(chit.Queue(settings=settings))
    try:
        async for api in running_api(q):
            response = await post(api, *_many_edges())
            body = assert_error(response, 422, "invalid_request")
            assert "at most 100,000 dependencies" in body["message"]
            assert "this one has 100,001" in body["message"]
            assert stored(api) == 0
    finally:
        q.close()


async def test_the_idempotency_key_answers_the_same_workflow(api: Api) -> None:
    key = {"Idempotency-Key": "wf-1"}
    first = await post(api, job("a"), job("b", "a"), **key)
    assert first.status_code == 202
    again = await post(api, job("a"), job("b", "a"), **key)
    assert again.status_code == 200, again.text
    assert again.json() | {"created": True} == first.json()
    assert again.json()["created"] is False
    assert stored(api) == 2

    other = await post(api, job("a"), job("b", "a", payload={"message": "else"}), **key)
    assert_error(other, 422, "idempotency_conflict")
    edges = await post(api, job("a"), job("b"), **key)
    assert_error(edges, 422, "idempotency_conflict")
    assert stored(api) == 2


async def test_a_workflow_whose_every_job_an_older_job_answers(api: Api) -> None:
    # Schemathesis found it: the one job matched a unique key held by a job of
    # no workflow, so no workflow was stored; the answer said so with a 500.
    holder = await api.http.post(
        "/jobs",
        json=job(unique_key="only-one"),
    )
    assert holder.status_code == 202, holder.text
    alone = await post(api, job("a", unique_key="only-one"))
    assert_error(alone, 422, "invalid_request")
    assert "no job of this workflow was stored" in alone.json()["message"]
    # A holder inside a workflow answers with that workflow.
    first = await post(api, job("b", unique_key="in-a-graph"), job("c", "b"))
    assert first.status_code == 202, first.text
    again = await post(api, job("b", unique_key="in-a-graph"))
    assert again.status_code == 200, again.text
    assert again.json()["workflow_id"] == first.json()["workflow_id"]
    assert again.json()["created"] is False
    assert stored(api) == 3


async def test_cancel_cancels_what_has_not_finished(api: Api) -> None:
    body = (await post(api, job("a"), job("b", "a"), job("c", "b"))).json()
    response = await api.http.post(f"/workflows/{body['workflow_id']}/cancel")
    assert response.status_code == 200, response.text
    assert response.json() == {"id": body["workflow_id"], "cancelled": 3}
    assert {api.job(i).state for i in body["ids"]} == {State.CANCELLED}
    view = (await api.http.get(body["status_url"])).json()
    assert view["states"] == {"cancelled": 3}
    again = await api.http.post(f"/workflows/{body['workflow_id']}/cancel")
    assert again.json()["cancelled"] == 0


async def test_retrying_a_job_its_failed_dependency_cancelled_is_409_naming_it(
    api: Api,
) -> None:
    ids = (await post(api, job("a", queue="r", max_attempts=1), job("b", "a"))).json()["jobs"]
    [held] = api.store.claim("w", ["r"], 1, 30)
    assert api.store.finish([Failed(held.id, held.lease_token, "boom")]) == [True]
    refused = await api.http.post(f"/jobs/{ids['b']}/retry")
    assert_error(refused, 409, "invalid_transition")
    assert f"retry {ids['a']} first" in refused.json()["message"]
    replayed = await api.http.post("/jobs/replay", json={"ids": [ids["b"]]})
    assert replayed.status_code == 409
    assert (await api.http.post(f"/jobs/{ids['a']}/retry")).json()["state"] == "queued"
    assert (await api.http.get(f"/jobs/{ids['b']}")).json()["state"] == "waiting"


async def test_an_unknown_workflow_is_404(api: Api) -> None:
    for response in (
        await api.http.get("/workflows/nope"),
        await api.http.post("/workflows/nope/cancel"),
        await api.http.get("/workflows/nope/events"),
    ):
        assert_error(response, 404, "workflow_not_found")


async def test_workflows_keep_to_their_tenant_and_scopes(keyed_api: Api) -> None:
    mine = await post(keyed_api, job("a"), job("b", "a"), key=ACME_KEY)
    assert mine.status_code == 202, mine.text
    body = mine.json()
    url = body["status_url"]
    ok = await keyed_api.http.get(url, headers=bearer(ACME_READER))
    assert ok.status_code == 200
    for response in (
        await keyed_api.http.get(url, headers=bearer(GLOBEX_ADMIN)),
        await keyed_api.http.post(f"{url}/cancel", headers=bearer(GLOBEX_ADMIN)),
        await keyed_api.http.get(f"{url}/events", headers=bearer(GLOBEX_ADMIN)),
    ):
        assert_error(response, 404, "workflow_not_found")
    assert_error(await keyed_api.http.post(f"{url}/cancel", headers=bearer(ACME_READER)), 403)
    assert_error(await post(keyed_api, job("a"), key=ACME_READER), 403)
    assert_error(await keyed_api.http.get(url), 401)

    # Another tenant's job is not a dependency: refused, nothing stored.
    before = len(keyed_api.store.list(JobFilter(), limit=100).jobs)
    foreign = await post(keyed_api, job("x", body["jobs"]["a"]), key=GLOBEX_ADMIN)
    assert_error(foreign, 422, "invalid_request")
    single = await keyed_api.http.post(
        "/jobs",
        json={"kind": "echo", "payload": {"message": "m"}, "depends_on": [body["jobs"]["a"]]},
        headers=bearer(GLOBEX_ADMIN),
    )
    assert_error(single, 422, "invalid_request")
    assert len(keyed_api.store.list(JobFilter(), limit=100).jobs) == before
    cancelled = await keyed_api.http.post(f"{url}/cancel", headers=bearer(ACME_ADMIN))
    assert cancelled.json()["cancelled"] == 2


def events_of(text: str) -> list[Event]:
    parser = SSEParser()
    return [e for line in [*text.splitlines(), ""] if (e := parser.feed(line))]


async def test_events_stream_every_jobs_changes_until_all_have_finished(api: Api) -> None:
    body = (await post(api, job("a", queue="wf-events"), job("b", "a", queue="wf-events"))).json()
    a, b = body["jobs"]["a"], body["jobs"]["b"]
    hub = api.app.state.chit.hub
    task = asyncio.create_task(api.http.get(f"{body['status_url']}/events"))
    try:
        await until(lambda: hub.listeners == 2, "the stream to watch both jobs")
        polls = hub.polls
        await until(lambda: hub.polls >= polls + 2, "the poller to read them")
        for expected in (a, b):
            [held] = api.store.claim("w", ["wf-events"], 1, 30)
            assert held.id == expected
            polls = hub.polls
            await until(lambda p=polls: hub.polls >= p + 2, "the poller to see it running")
            api.store.finish([Succeeded(held.id, held.lease_token, {"ok": 1})])
            if expected == a:  # once b has finished too, the stream ends
                polls = hub.polls
                await until(lambda p=polls: hub.polls >= p + 2, "the poller to see it finished")
        response: httpx.Response = await asyncio.wait_for(task, 10)
    finally:
        task.cancel()
    assert response.status_code == 200
    seen = [(e.event, e.job.id, e.job.state.value) for e in events_of(response.text) if e.job]
    assert seen[:2] == [("state", a, "queued"), ("state", b, "waiting")]
    assert seen[2:] == [
        ("state", a, "running"),
        ("state", a, "succeeded"),
        ("state", b, "queued"),
        ("state", b, "running"),
        ("state", b, "succeeded"),
    ]
    last = events_of(response.text)[-1].id
    done = await api.http.get(f"{body['status_url']}/events", headers={"Last-Event-ID": last})
    assert done.status_code == 204


async def test_a_malformed_idempotency_key_is_refused_as_on_post_jobs(api: Api) -> None:
    for key in ("k" * 256, "tab\tinside"):
        answer = await post(api, job("a"), **{"Idempotency-Key": key})
        assert_error(answer, 422, "invalid_request")
    assert stored(api) == 0
