"""Event-stream tokens: a browser's EventSource cannot send Authorization, so a
caller who may read a job gets a short-lived token for that job's stream
alone (with the submit answer, or from POST /jobs/{id}/events-token), and
GET /jobs/{id}/events?token= needs no key. Another job's, an expired or an
altered token is refused with a clear error."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

import chit
from chit.api.tokens import SECRET_NAME, EventTokens
from chit.client import SSEParser
from chit.jobs import Failed
from support.api import (
    ACME_ADMIN,
    ACME_KEY,
    ACME_READER,
    ACME_SUBMITTER,
    GLOBEX_ADMIN,
    Api,
    assert_error,
    bearer,
)

pytestmark = pytest.mark.anyio


async def submitted(api: Api, key: str) -> dict:
    answer = await api.http.post(
        "/jobs", json={"kind": "echo", "payload": {"message": "hi"}}, headers=bearer(key)
    )
    assert answer.status_code == 202, answer.text
    return dict(answer.json())


def finish(api: Api, job_id: str) -> None:
    api.store.cancel(job_id)  # a finished job's stream ends after its terminal event


def states(text: str) -> list[str]:
    parser = SSEParser()
    events = [e for line in [*text.splitlines(), ""] if (e := parser.feed(line))]
    return [e.event for e in events]


async def test_the_submit_answer_carries_a_token_that_streams_the_job_without_a_key(
    keyed_api: Api,
) -> None:
    body = await submitted(keyed_api, ACME_KEY)
    job_id = body["job_id"]
    assert body["events_url"] == f"/jobs/{job_id}/events?token={body['events_token']}"
    assert ACME_KEY not in body["events_url"]
    finish(keyed_api, job_id)

    answer = await keyed_api.http.get(body["events_url"])
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert states(answer.text) == ["state"]
    assert '"cancelled"' in answer.text


async def test_a_fresh_token_for_a_job_the_key_may_read(keyed_api: Api) -> None:
    job_id = (await submitted(keyed_api, ACME_KEY))["job_id"]
    finish(keyed_api, job_id)
    answer = await keyed_api.http.post(f"/jobs/{job_id}/events-token", headers=bearer(ACME_READER))
    assert answer.status_code == 200, answer.text
    fresh = answer.json()
    assert fresh["job_id"] == job_id
    expires = datetime.fromisoformat(fresh["expires_at"]).timestamp()
    assert 290 < expires - time.time() <= 300  # CHIT_EVENTS_TOKEN_SECONDS' default

    streamed = await keyed_api.http.get(fresh["events_url"])
    assert streamed.status_code == 200, streamed.text
    assert states(streamed.text) == ["state"]


async def test_a_submit_only_key_gets_no_token_and_cannot_ask_for_one(keyed_api: Api) -> None:
    body = await submitted(keyed_api, ACME_SUBMITTER)
    assert body["events_token"] is None and body["events_url"] is None
    answer = await keyed_api.http.post(
        f"/jobs/{body['job_id']}/events-token", headers=bearer(ACME_SUBMITTER)
    )
    assert_error(answer, 403, "forbidden")


async def test_another_tenants_key_gets_no_token_for_the_job(keyed_api: Api) -> None:
    job_id = (await submitted(keyed_api, ACME_KEY))["job_id"]
    answer = await keyed_api.http.post(f"/jobs/{job_id}/events-token", headers=bearer(GLOBEX_ADMIN))
    assert_error(answer, 404, "job_not_found")
    assert_error(await keyed_api.http.post("/jobs/nope/events-token"), 401, "unauthorized")


async def test_a_token_for_another_job_is_403(keyed_api: Api) -> None:
    first = await submitted(keyed_api, ACME_KEY)
    second = (await submitted(keyed_api, ACME_KEY))["job_id"]
    answer = await keyed_api.http.get(
        f"/jobs/{second}/events", params={"token": first["events_token"]}
    )
    body = assert_error(answer, 403, "forbidden")
    assert first["job_id"] in body["message"]


async def test_an_altered_or_made_up_token_is_401(keyed_api: Api) -> None:
    body = await submitted(keyed_api, ACME_KEY)
    job_id, token = body["job_id"], body["events_token"]
    payload, signature = token.split(".")
    altered = ("A" if signature[0] != "A" else "B") + signature[1:]
    for bad in (f"{payload}.{altered}", payload, "", "x" * 200, f"{token}x", "é.é"):
        answer = await keyed_api.http.get(f"/jobs/{job_id}/events", params={"token": bad})
        message = assert_error(answer, 401, "unauthorized")["message"]
        assert "not one this server signed" in message
    too_long = await keyed_api.http.get(f"/jobs/{job_id}/events", params={"token": "x" * 513})
    assert_error(too_long, 422)


async def test_a_token_of_another_server_is_401(keyed_api: Api, tmp_path) -> None:
    body = await submitted(keyed_api, ACME_KEY)
    other = chit.Queue(settings=chit.Settings(database_url=f"sqlite:///{tmp_path / 'other.db'}"))
    try:
        foreign, _ = EventTokens(other.store, 300).issue(body["job_id"], "acme")
    finally:
        other.close()
    answer = await keyed_api.http.get(f"/jobs/{body['job_id']}/events", params={"token": foreign})
    assert_error(answer, 401, "unauthorized")


async def test_an_expired_token_is_401_and_says_how_to_get_another(keyed_api: Api) -> None:
    job_id = (await submitted(keyed_api, ACME_KEY))["job_id"]
    tokens = EventTokens(keyed_api.queue.store, 300)
    old, _ = tokens.issue(job_id, "acme", now=time.time() - 301)
    answer = await keyed_api.http.get(f"/jobs/{job_id}/events", params={"token": old})
    message = assert_error(answer, 401, "unauthorized")["message"]
    assert "expired" in message and "events-token" in message


async def test_a_token_reads_as_a_read_key_no_traceback(keyed_api: Api) -> None:
    body = await submitted(keyed_api, ACME_KEY)
    job_id = body["job_id"]
    [claimed] = keyed_api.store.claim("w", ["default"], 1, 30)
    assert claimed.id == job_id
    trace = 'ValueError: bad\n\nTraceback (most recent call last):\n  File "/srv/app.py"\n'
    keyed_api.store.finish([Failed(job_id, claimed.lease_token, trace)])
    streamed = await keyed_api.http.get(body["events_url"])
    assert streamed.status_code == 200, streamed.text
    assert "/srv/app.py" not in streamed.text
    admin = await keyed_api.http.get(f"/jobs/{job_id}", headers=bearer(ACME_ADMIN))
    assert "/srv/app.py" in admin.text  # the traceback is there: the token did not see it


async def test_the_secret_is_made_once_and_shared(keyed_api: Api) -> None:
    store = keyed_api.queue.store
    await submitted(keyed_api, ACME_KEY)
    first = store.server_secret(SECRET_NAME, "00" * 32)
    assert first != "00" * 32 and len(bytes.fromhex(first)) == 32
    assert store.server_secret(SECRET_NAME, "11" * 32) == first
