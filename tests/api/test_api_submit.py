"""POST /jobs: the 202 protocol, idempotency, and every kind of bad input
refused with a 4xx and a message, leaving what is stored untouched."""

from __future__ import annotations

import json

import pytest

from chit.jobs import JobFilter, State
from support.api import Api, assert_error

pytestmark = pytest.mark.anyio


def stored(api: Api) -> list[tuple[str, str, int]]:
    """Everything a refused request must leave alone."""
    page = api.store.list(JobFilter(), limit=1000)
    return [(j.id, j.state.value, j.attempts) for j in page.jobs]


async def test_submit_answers_202_with_location_at_once(api: Api) -> None:
    response = await api.http.post(
        "/jobs", json={"kind": "echo", "payload": {"message": "hello"}, "priority": 3}
    )
    assert response.status_code == 202
    body = response.json()
    assert body["created"] is True
    assert response.headers["location"] == f"/jobs/{body['job_id']}" == body["status_url"]
    job = api.job(body["job_id"])
    assert (job.state, job.kind, job.priority) == (State.QUEUED, "echo", 3)
    assert job.payload["message"] == "hello" and job.payload["steps"] == 0  # the model's form
    assert job.max_attempts == 3  # the task's


async def test_same_idempotency_key_and_body_answers_the_same_job(api: Api) -> None:
    body = {"kind": "echo", "payload": {"message": "once"}}
    first = await api.http.post("/jobs", json=body, headers={"Idempotency-Key": "order-17"})
    again = await api.http.post("/jobs", json=body, headers={"Idempotency-Key": "order-17"})
    assert (first.status_code, again.status_code) == (202, 200)
    # Each answer mints its own events token, whose expiry is in whole seconds:
    # two answers either side of a second differ in it (a flake once).
    minted = ("events_token", "events_url")
    one, two = ({k: v for k, v in r.json().items() if k not in minted} for r in (first, again))
    assert two == one | {"created": False}
    assert again.json()["events_url"].startswith(f"/jobs/{one['job_id']}/events?token=")
    assert again.headers["location"] == first.headers["location"]
    assert len(stored(api)) == 1


async def test_same_idempotency_key_with_another_body_is_422(api: Api) -> None:
    headers = {"Idempotency-Key": "order-18"}
    first = await api.http.post(
        "/jobs", json={"kind": "echo", "payload": {"message": "a"}}, headers=headers
    )
    before = stored(api)
    other = await api.http.post(
        "/jobs", json={"kind": "echo", "payload": {"message": "b"}}, headers=headers
    )
    body = assert_error(other, 422, "idempotency_conflict")
    assert "order-18" in body["message"] and "different request" in body["message"]
    assert body["details"] == {"job_id": first.json()["job_id"]}
    assert stored(api) == before


async def test_unknown_kind_lists_the_known_ones(api: Api) -> None:
    body = assert_error(await api.http.post("/jobs", json={"kind": "nope"}), 422, "unknown_kind")
    assert body["details"] == {"known_kinds": ["big", "echo"]}
    assert "big, echo" in body["message"]
    assert stored(api) == []


async def test_invalid_payload_gives_the_model_field_errors(api: Api) -> None:
    response = await api.http.post(
        "/jobs", json={"kind": "echo", "payload": {"message": "", "seconds": -1}}
    )
    body = assert_error(response, 422, "invalid_payload")
    assert {tuple(e["loc"]) for e in body["details"]["errors"]} == {("message",), ("seconds",)}
    assert "message:" in body["message"] and "seconds:" in body["message"]
    assert stored(api) == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "kind"),
        ({"kind": ""}, "kind"),
        ({"kind": "echo", "priority": "soon"}, "priority"),
        ({"kind": "echo", "priority": 10**12}, "priority"),
        ({"kind": "echo", "max_attempts": 0}, "max_attempts"),
        ({"kind": "echo", "run_at": "tomorrow"}, "run_at"),
        ({"kind": "echo", "run_at": "2030-01-01T00:00:00"}, "run_at"),  # no timezone
        ({"kind": "echo", "run_at": "0001-01-01T00:00:00Z"}, "run_at"),
        ({"kind": "echo", "run_at": "9999-12-31T23:59:59-14:00"}, "run_at"),
        ({"kind": "echo", "surprise": 1}, "surprise"),
        ([1, 2], ""),
        ("just a string", ""),
    ],
)
async def test_malformed_submission_is_422_naming_the_field(
    api: Api, body: object, field: str
) -> None:
    error = assert_error(await api.http.post("/jobs", json=body), 422, "invalid_request")
    assert field in error["message"]
    assert stored(api) == []


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"", "invalid_json"),
        (b'{"kind": "echo",', "invalid_json"),
        (b'{"kind": "\xff\xfe"}', "invalid_utf8"),
        (b"\xef\xbb\xbf{}", "invalid_json"),  # a byte-order mark is not JSON
        (b'{"kind": "echo", "payload": {"x": NaN}}', "invalid_json"),
        (b'{"kind": "echo", "payload": {"x": Infinity}}', "invalid_json"),
        (b'{"kind": "echo", "payload": {"x": "\\ud800"}}', "invalid_json"),
        (b'{"kind": "echo", "payload": {"n": ' + b"9" * 5000 + b"}}", "invalid_json"),
        (b'{"kind": "echo", "payload": ' + b"[" * 100 + b"]" * 100 + b"}", "invalid_json"),
        (b"[" * 50_000, "invalid_json"),
        (b'{"a":' * 9_000 + b"1" + b"}" * 9_000, "invalid_json"),
    ],
)
async def test_bad_json_bodies_are_400_with_a_message(api: Api, content: bytes, code: str) -> None:
    response = await api.http.post(
        "/jobs", content=content, headers={"Content-Type": "application/json"}
    )
    assert_error(response, 400, code)
    assert stored(api) == []


async def test_body_over_the_cap_is_413(api: Api) -> None:
    limit = api.queue.settings.max_body_bytes
    payload = {"message": "x" * limit}
    response = await api.http.post("/jobs", json={"kind": "echo", "payload": payload})
    body = assert_error(response, 413, "body_too_large")
    assert "CHIT_MAX_BODY_BYTES" in body["message"]

    async def chunks():  # no Content-Length: counted as it streams
        for _ in range(limit // 1000 + 2):
            yield b" " * 1000

    streamed = await api.http.post(
        "/jobs", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert_error(streamed, 413, "body_too_large")
    assert stored(api) == []


async def test_payload_over_the_payload_cap_is_413(api: Api) -> None:
    api.queue.settings = api.queue.settings.replace(max_payload_bytes=100)
    response = await api.http.post(
        "/jobs", json={"kind": "echo", "payload": {"message": "y" * 200}}
    )
    assert_error(response, 413, "payload_too_large")
    assert stored(api) == []


async def test_a_body_that_is_not_json_is_415(api: Api) -> None:
    response = await api.http.post(
        "/jobs", content=b"kind=echo", headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert_error(response, 415, "unsupported_media_type")
    assert stored(api) == []


@pytest.mark.parametrize(
    "key",
    ["", "k" * 256, "tab\there", "caf\u00e9", "line\nbreak"],
    ids=["empty", "too-long", "tab", "non-ascii", "newline"],
)
async def test_odd_idempotency_keys_are_refused(api: Api, key: str) -> None:
    # Raw header bytes: httpx itself refuses some of these as str.
    request = api.http.build_request(
        "POST",
        "/jobs",
        json={"kind": "echo", "payload": {"message": "k"}},
        headers=[(b"Idempotency-Key", key.encode("latin-1"))],
    )
    response = await api.http.send(request)
    body = assert_error(response, 422, "invalid_request")
    assert "idempotency key" in body["message"]
    assert stored(api) == []


async def test_a_key_of_255_printable_characters_is_fine(api: Api) -> None:
    key = "K-" + "z" * 253
    response = await api.http.post(
        "/jobs",
        json={"kind": "echo", "payload": {"message": "k"}},
        headers={"Idempotency-Key": key},
    )
    assert response.status_code == 202
    assert api.job(response.json()["job_id"]).idempotency_key == key


async def test_run_at_delays_the_job(api: Api) -> None:
    response = await api.http.post(
        "/jobs",
        json={
            "kind": "echo",
            "payload": {"message": "later"},
            "run_at": "2100-01-01T00:00:00+01:00",
        },
    )
    job = api.job(response.json()["job_id"])
    assert job.run_at.isoformat() == "2099-12-31T23:00:00+00:00"


async def test_vendor_json_content_type_is_accepted(api: Api) -> None:
    response = await api.http.post(
        "/jobs",
        content=json.dumps({"kind": "echo", "payload": {"message": "v"}}).encode(),
        headers={"Content-Type": "application/vnd.chit+json; charset=utf-8"},
    )
    assert response.status_code == 202


async def test_two_idempotency_key_headers_are_refused(api: Api) -> None:
    request = api.http.build_request(
        "POST",
        "/jobs",
        json={"kind": "echo", "payload": {"message": "k"}},
        headers=[(b"Idempotency-Key", b"first"), (b"Idempotency-Key", b"second")],
    )
    body = assert_error(await api.http.send(request), 400, "bad_request")
    assert "Idempotency-Key" in body["message"]
    assert stored(api) == []


@pytest.mark.parametrize(
    "field",
    [{"priority": True}, {"priority": 1.5}, {"priority": "1"}, {"max_attempts": True},
     {"max_attempts": 2.5}, {"run_at": 0}, {"run_at": 4102444800.5}],
    ids=["priority-bool", "priority-float", "priority-text", "attempts-bool",
         "attempts-float", "run-at-zero", "run-at-seconds"],
)  # fmt: skip
async def test_loosely_typed_fields_are_refused(api: Api, field: dict) -> None:
    response = await api.http.post(
        "/jobs", json={"kind": "echo", "payload": {"message": "k"}} | field
    )
    assert_error(response, 422)
    assert stored(api) == []
