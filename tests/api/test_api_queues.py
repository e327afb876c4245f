"""`GET /queues` and the same figures in `/metrics`, in-process on every store:
each queue's ready, scheduled and running jobs, the oldest ready job's wait,
pauses, and the live workers (DESIGN.md "Autoscaling signals")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chit.fleet import WorkerBeat
from support.api import ACME_KEY, ACME_SUBMITTER, ROOT_KEY, Api, assert_error, bearer

pytestmark = pytest.mark.anyio


async def test_each_queue_and_the_workers(api: Api) -> None:
    now = datetime.now(UTC)
    for _ in range(2):
        await api.submit(queue="mail", run_at=(now - timedelta(seconds=30)).isoformat())
    await api.submit(queue="mail", run_at=(now + timedelta(hours=1)).isoformat())
    running = await api.submit(queue="mail")
    [held] = api.store.claim("w", ["mail"], 1, 30)
    assert held.id != running  # the oldest ready one went first
    api.store.pause(queue="reports")
    api.store.beat_worker(WorkerBeat("w1", "h", 1, ("mail",), ("echo",), 4, 1), 60)
    api.store.beat_worker(WorkerBeat("w2", "h", 2, ("default",), ("echo",), 8, 0), 60)

    response = await api.http.get("/queues")
    assert response.status_code == 200
    body = response.json()
    queues = {q["name"]: q for q in body["queues"]}
    assert set(queues) == {"default", "mail", "reports"}  # default: always, at zero
    mail = queues["mail"]
    assert (mail["ready"], mail["scheduled"], mail["running"], mail["paused"]) == (2, 1, 1, False)
    assert 25 < mail["oldest_ready_seconds"] < 60
    assert queues["reports"] == {
        "name": "reports",
        "ready": 0,
        "scheduled": 0,
        "running": 0,
        "oldest_ready_seconds": 0.0,
        "paused": True,
    }
    assert body["workers"] == {"count": 2, "slots": 12, "busy": 1}

    metrics = (await api.http.get("/metrics")).text
    for line in (
        'chit_queue_ready{queue="mail"} 2.0',
        'chit_queue_scheduled{queue="mail"} 1.0',
        'chit_queue_running{queue="mail"} 1.0',
        'chit_queue_ready{queue="default"} 0.0',
        "chit_workers 2.0",
        "chit_worker_slots 12.0",
        "chit_worker_slots_busy 1.0",
    ):
        assert line in metrics, line
    assert 'chit_queue_oldest_ready_seconds{queue="mail"} ' in metrics


async def test_a_tenant_counts_its_own_jobs_and_needs_read_scope(keyed_api: Api) -> None:
    await keyed_api.submit(ACME_KEY, queue="mail")
    await keyed_api.submit(ROOT_KEY, queue="mail")
    await keyed_api.submit(ROOT_KEY, queue="mail")
    acme = (await keyed_api.http.get("/queues", headers=bearer(ACME_KEY))).json()
    every = (await keyed_api.http.get("/queues", headers=bearer(ROOT_KEY))).json()
    ready = {q["name"]: q["ready"] for q in acme["queues"]}
    assert ready["mail"] == 1
    assert {q["name"]: q["ready"] for q in every["queues"]}["mail"] == 3
    keyed_api.store.pause(queue="secret-queue")
    keyed_api.store.pause(queue="mail")
    keyed_api.store.beat_worker(WorkerBeat("w", "h", 1, ("hidden-queue",), (), 4, 0), 60)
    acme = (await keyed_api.http.get("/queues", headers=bearer(ACME_KEY))).json()
    # The queues of its own jobs and the app's, no other: their pauses shown.
    assert {q["name"]: q["paused"] for q in acme["queues"]} == {"default": False, "mail": True}
    assert acme["workers"]["count"] == 1
    every = (await keyed_api.http.get("/queues", headers=bearer(ROOT_KEY))).json()
    names = {q["name"] for q in every["queues"]}
    assert {"secret-queue", "hidden-queue", "mail", "default"} <= names
    assert_error(await keyed_api.http.get("/queues"), 401, "unauthorized")
    assert_error(await keyed_api.http.get("/queues", headers=bearer(ACME_SUBMITTER)), 403)


async def test_a_stale_or_stopped_worker_is_not_counted(api: Api) -> None:
    api.store.beat_worker(WorkerBeat("gone", "h", 1, ("default",), (), 4, 0), 60)
    api.store.beat_worker(
        WorkerBeat("dead", "h", 2, ("default",), (), 4, 0),
        5,
        datetime.now(UTC) - timedelta(seconds=6),
    )
    assert (await api.http.get("/queues")).json()["workers"]["count"] == 1
    api.store.forget_worker("gone")
    assert (await api.http.get("/queues")).json()["workers"] == {"count": 0, "slots": 0, "busy": 0}
