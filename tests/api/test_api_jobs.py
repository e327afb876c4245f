"""Reading and operating on jobs in-process: status with Retry-After and ETag,
stale leases, large results, listing with cursors, retry, cancel, replay,
failures, stats, metrics, health. Jobs are moved by store calls, as a worker
would, so each state is reached exactly."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from chit.jobs import ClaimedJob, Failed, Progress, State, Succeeded
from support.api import Api, assert_error, break_the_sqlite_file

pytestmark = pytest.mark.anyio


def claim(api: Api, job_id: str, lease: float = 30) -> ClaimedJob:
    """Claim that one job: `Api.submit` gives each job a queue of its own."""
    [job] = api.store.claim("test-worker", [api.job(job_id).queue], 1, lease)
    assert job.id == job_id
    return job


async def test_status_of_a_queued_job(api: Api) -> None:
    job_id = await api.submit(payload={"message": "status"})
    response = await api.http.get(f"/jobs/{job_id}")
    assert response.status_code == 200
    body = response.json()
    assert body["id"] == job_id
    assert (body["state"], body["attempts"], body["max_attempts"]) == ("queued", 0, 3)
    assert body["progress"] == {"done": None, "total": None, "message": None}
    assert body["stale"] is False and body["result"] is None and body["error"] is None
    for field in ("run_at", "created_at", "updated_at"):
        assert datetime.fromisoformat(body[field]).tzinfo is not None
    assert response.headers["retry-after"] == "1"
    assert response.headers["cache-control"] == "no-cache"


async def test_retry_after_is_the_time_until_a_delayed_job_runs(api: Api) -> None:
    later = datetime.now(UTC) + timedelta(seconds=90)
    job_id = await api.submit(run_at=later.isoformat())
    seconds = int((await api.http.get(f"/jobs/{job_id}")).headers["retry-after"])
    assert 85 <= seconds <= 90


async def test_running_job_shows_progress_and_a_short_retry_after(api: Api) -> None:
    job_id = await api.submit()
    held = claim(api, job_id)
    api.store.checkpoint(job_id, held.lease_token, {"at": 3}, Progress(3, 10), 30)
    response = await api.http.get(f"/jobs/{job_id}")
    body = response.json()
    assert (body["state"], body["attempts"], body["progress"]) == (
        "running",
        1,
        {"done": 3, "total": 10, "message": None},
    )
    assert response.headers["retry-after"] == "1"


async def test_a_running_job_past_its_lease_is_stale(api: Api) -> None:
    job_id = await api.submit()
    claim(api, job_id, lease=0.001)
    await asyncio.sleep(0.01)  # times have millisecond resolution
    body = (await api.http.get(f"/jobs/{job_id}")).json()
    assert (body["state"], body["stale"]) == ("running", True)


async def test_etag_makes_an_unchanged_poll_a_304(api: Api) -> None:
    job_id = await api.submit()
    first = await api.http.get(f"/jobs/{job_id}")
    etag = first.headers["etag"]
    again = await api.http.get(f"/jobs/{job_id}", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == etag and again.headers["retry-after"] == "1"
    listed = await api.http.get(f"/jobs/{job_id}", headers={"If-None-Match": f'"x", W/{etag}'})
    assert listed.status_code == 304
    claim(api, job_id)
    changed = await api.http.get(f"/jobs/{job_id}", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag


async def test_terminal_job_has_no_retry_after_and_inlines_a_small_result(api: Api) -> None:
    job_id = await api.submit()
    held = claim(api, job_id)
    api.store.finish([Succeeded(job_id, held.lease_token, {"answer": 42})])
    response = await api.http.get(f"/jobs/{job_id}")
    body = response.json()
    assert (body["state"], body["result"], body["result_url"]) == (
        "succeeded",
        {"answer": 42},
        None,
    )
    assert "retry-after" not in response.headers
    assert (await api.http.get(f"/jobs/{job_id}/result")).json() == {"answer": 42}


async def test_a_large_result_is_not_inlined(api: Api) -> None:
    job_id = await api.submit(kind="big", payload={})
    held = claim(api, job_id)
    large = {"blob": "z" * 5000}  # over result_inline_bytes (1 KiB in these tests)
    api.store.finish([Succeeded(job_id, held.lease_token, large)])
    body = (await api.http.get(f"/jobs/{job_id}")).json()
    assert body["result"] is None
    assert body["result_url"] == f"/jobs/{job_id}/result"
    assert (await api.http.get(body["result_url"])).json() == large


async def test_result_of_an_unfinished_job_is_409(api: Api) -> None:
    job_id = await api.submit()
    body = assert_error(await api.http.get(f"/jobs/{job_id}/result"), 409, "invalid_transition")
    assert "queued" in body["message"]


@pytest.mark.parametrize(
    "path",
    [
        "/jobs/{unknown}",
        "/jobs/{unknown}/result",
        "/jobs/{unknown}/events",
        "/jobs/not-an-id",
        "/jobs/" + "x" * 5000,
    ],
)
async def test_unknown_jobs_are_404_with_a_message(api: Api, path: str) -> None:
    unknown = "0" * 26
    body = assert_error(await api.http.get(path.format(unknown=unknown)), 404, "job_not_found")
    assert "no job with id" in body["message"]


@pytest.mark.parametrize("action", ["retry", "cancel"])
async def test_operating_on_an_unknown_job_is_404(api: Api, action: str) -> None:
    assert_error(await api.http.post(f"/jobs/{'0' * 26}/{action}"), 404, "job_not_found")


async def test_list_newest_first_with_filters_and_a_keyset_cursor(api: Api) -> None:
    ids = [await api.submit(payload={"message": f"m{i}"}) for i in range(5)]
    big = await api.submit(kind="big", payload={})
    page = (await api.http.get("/jobs", params={"limit": 2})).json()
    assert [j["id"] for j in page["jobs"]] == [big, ids[4]]
    seen = [j["id"] for j in page["jobs"]]
    while page["next_cursor"]:
        page = (
            await api.http.get("/jobs", params={"limit": 2, "cursor": page["next_cursor"]})
        ).json()
        seen += [j["id"] for j in page["jobs"]]
    assert seen == [big, *reversed(ids)]
    echo = (await api.http.get("/jobs", params={"kind": "echo"})).json()["jobs"]
    assert {j["id"] for j in echo} == set(ids)
    claim(api, ids[0])
    running = (await api.http.get("/jobs", params={"state": "running"})).json()["jobs"]
    assert [j["id"] for j in running] == [ids[0]]
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert (await api.http.get("/jobs", params={"since": future})).json()["jobs"] == []


@pytest.mark.parametrize(
    "params",
    [
        {"limit": 0},
        {"limit": -5},
        {"limit": 10**9},
        {"limit": "many"},
        {"cursor": "zzz"},
        {"cursor": "' OR 1=1 --"},
        {"cursor": "0" * 500},
        {"state": "sleeping"},
        {"since": "yesterday"},
        {"since": "2026-01-01T00:00:00"},
        {"kind": "k" * 500},
    ],
)
async def test_bad_list_parameters_are_422_with_a_message(
    api: Api, params: dict[str, object]
) -> None:
    await api.submit()
    response = await api.http.get("/jobs", params=params)
    body = assert_error(response, 422)
    assert body["error"] in ("invalid_request", "invalid_cursor")


async def test_retry_of_a_failed_job_queues_it_again_with_attempts_reset(api: Api) -> None:
    job_id = await api.submit()
    held = claim(api, job_id)
    api.store.finish([Failed(job_id, held.lease_token, "ValueError: bad\n\ntraceback")])
    response = await api.http.post(f"/jobs/{job_id}/retry")
    assert response.status_code == 200
    body = response.json()
    assert (body["state"], body["attempts"], body["error"]) == ("queued", 0, None)


async def test_retry_of_a_queued_job_is_409(api: Api) -> None:
    job_id = await api.submit()
    body = assert_error(await api.http.post(f"/jobs/{job_id}/retry"), 409, "invalid_transition")
    assert "only failed or cancelled jobs" in body["message"]
    assert api.job(job_id).state is State.QUEUED


async def test_cancel_queued_at_once_running_on_request_finished_409(api: Api) -> None:
    queued = await api.submit()
    response = await api.http.post(f"/jobs/{queued}/cancel")
    assert (response.status_code, response.json()["state"]) == (200, "cancelled")

    running = await api.submit()
    claim(api, running)
    response = await api.http.post(f"/jobs/{running}/cancel")
    assert response.status_code == 202
    assert (response.json()["state"], response.json()["cancel_requested"]) == ("running", True)

    body = assert_error(await api.http.post(f"/jobs/{queued}/cancel"), 409, "invalid_transition")
    assert "already cancelled" in body["message"]


async def test_replay_by_ids_and_by_filters(api: Api) -> None:
    failed = []
    for message in ("a", "b", "c"):
        job_id = await api.submit(payload={"message": message})
        held = claim(api, job_id)
        error = "TimeoutError: slow" if message != "c" else "KeyError: x"
        api.store.finish([Failed(job_id, held.lease_token, error)])
        failed.append(job_id)
    by_id = await api.http.post("/jobs/replay", json={"ids": [failed[0]]})
    assert by_id.json() == {"replayed": 1}
    by_prefix = await api.http.post("/jobs/replay", json={"error_prefix": "TimeoutError"})
    assert by_prefix.json() == {"replayed": 1}  # failed[1]; failed[0] is queued now
    everything = await api.http.post("/jobs/replay", json={"since": "1970-01-01T00:00:00Z"})
    assert everything.json() == {"replayed": 1}
    assert [api.job(i).state for i in failed] == [State.QUEUED] * 3


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"ids": ["0" * 26], "kind": "echo"},
        {"ids": ["not an id"]},
        {"ids": ["0" * 26] * 1001},
        {"since": "last week"},
        {"kind": "echo", "extra": True},
    ],
)
async def test_bad_replay_requests_are_422_and_replay_nothing(
    api: Api, body: dict[str, object]
) -> None:
    job_id = await api.submit()
    held = claim(api, job_id)
    api.store.finish([Failed(job_id, held.lease_token, "boom")])
    assert_error(await api.http.post("/jobs/replay", json=body), 422)
    assert api.job(job_id).state is State.FAILED


async def test_failures_group_by_kind_and_first_line(api: Api) -> None:
    for _ in range(2):
        job_id = await api.submit()
        held = claim(api, job_id)
        api.store.finish([Failed(job_id, held.lease_token, "ConnectionError: down\n\ntrace")])
    groups = (await api.http.get("/failures")).json()["groups"]
    assert [(g["kind"], g["error"], g["count"]) for g in groups] == [
        ("echo", "ConnectionError: down", 2)
    ]
    assert groups[0]["latest_id"] == job_id


async def test_stats_counts_and_failure_rate(api: Api) -> None:
    ok_id, bad_id, _ = [await api.submit() for _ in range(3)]
    api.store.finish([Succeeded(ok_id, claim(api, ok_id).lease_token, 1)])
    api.store.finish([Failed(bad_id, claim(api, bad_id).lease_token, "nope")])
    stats = (await api.http.get("/stats")).json()
    assert stats["by_state"] == {
        "waiting": 0,
        "queued": 1,
        "running": 0,
        "succeeded": 1,
        "failed": 1,
        "cancelled": 0,
    }
    assert stats["by_kind"] == {"echo": {"queued": 1, "succeeded": 1, "failed": 1}}
    assert stats["failure_rate"] == 0.5
    assert stats["queue_lag_seconds"] >= 0


async def test_metrics_are_prometheus_text_from_the_database(api: Api) -> None:
    ok_id = await api.submit()
    bad_id = await api.submit()
    api.store.finish([Succeeded(ok_id, claim(api, ok_id).lease_token, 1)])
    api.store.finish([Failed(bad_id, claim(api, bad_id).lease_token, "nope", retry_in=60)])
    response = await api.http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for line in (
        'chit_jobs{kind="echo",state="succeeded"} 1.0',
        'chit_jobs{kind="echo",state="queued"} 1.0',
        'chit_claims_total{kind="echo"} 2.0',
        'chit_completions_total{kind="echo"} 1.0',
        'chit_failures_total{kind="echo"} 1.0',
        'chit_attempt_duration_seconds_count{kind="echo",outcome="succeeded"} 1.0',
        'chit_attempt_duration_seconds_bucket{kind="echo",le="+Inf",outcome="retried"} 1.0',
        "chit_stale_running_jobs 0.0",
        "chit_api_event_listeners 0.0",
    ):
        assert line in text, line
    assert "chit_queue_lag_seconds" in text


async def test_health_and_readiness(api: Api) -> None:
    assert (await api.http.get("/healthz")).json() == {"status": "ok"}
    ready = (await api.http.get("/readyz")).json()
    assert ready["status"] == "ready" and ready["schema_version"] >= 2


async def test_readiness_is_503_when_the_sqlite_file_is_unusable(api: Api, tmp_path) -> None:
    break_the_sqlite_file(api, tmp_path)
    body = assert_error(await api.http.get("/readyz"), 503, "store_unavailable")
    assert "try again" in body["message"]
    assert (await api.http.get("/healthz")).status_code == 200


async def test_unknown_routes_and_methods_answer_json(api: Api) -> None:
    assert_error(await api.http.get("/nowhere"), 404, "not_found")
    assert_error(await api.http.delete("/jobs"), 405, "method_not_allowed")


async def test_readiness_is_503_while_another_process_holds_the_write_lock(
    api: Api, tmp_path
) -> None:
    if not api.queue.settings.database_url.startswith("sqlite"):
        pytest.skip("SQLite's one write lock; PostgreSQL has no store-wide one")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); sys.stdin.read()",
            str(tmp_path / "chit.db"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        body = assert_error(await api.http.get("/readyz"), 503, "writes_blocked")
        assert "write lock" in body["message"]
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
        assert holder.stdout is not None
        holder.stdout.close()
    assert (await api.http.get("/readyz")).status_code == 200
