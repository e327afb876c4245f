"""The OpenAPI description says what the server does: named operations, the
event stream as text, errors as JSON with `details` always an object; and an
event stream's first block carries `retry:` with its first event."""

from __future__ import annotations

import pytest

from chit.jobs import Failed
from support.api import Api, assert_error

pytestmark = pytest.mark.anyio


async def spec(api: Api) -> dict:
    return (await api.http.get("/openapi.json")).json()


async def test_operations_are_named(api: Api) -> None:
    paths = (await spec(api))["paths"]
    ids = {
        f"{m.upper()} {p}": op["operationId"] for p, item in paths.items() for m, op in item.items()
    }
    assert ids["POST /jobs"] == "submit_job"
    assert ids["GET /jobs"] == "list_jobs"
    assert ids["GET /jobs/{job_id}"] == "get_job"
    assert ids["HEAD /jobs/{job_id}"] == "head_job"
    assert ids["GET /jobs/{job_id}/events"] == "stream_job_events"
    assert ids["PUT /limits/{kind}"] == "set_limits"
    assert ids["POST /queues/{queue}/pause"] == "pause_queue"
    assert all(
        "_" in i and not i.endswith(("_get", "_post", "_put", "_delete")) for i in ids.values()
    )
    assert len(set(ids.values())) == len(ids)


async def test_the_event_stream_is_text_and_errors_are_json_everywhere(api: Api) -> None:
    paths = (await spec(api))["paths"]
    events = paths["/jobs/{job_id}/events"]["get"]["responses"]["200"]["content"]
    assert list(events) == ["text/event-stream"]
    # Each event described (OpenAPI 3.2's itemSchema), the stream as a whole not:
    # a generated client hands back its text rather than parsing it as JSON.
    assert "schema" not in events["text/event-stream"]
    assert events["text/event-stream"]["itemSchema"]["required"] == ["event", "data"]
    metrics = paths["/metrics"]["get"]["responses"]
    assert list(metrics["200"]["content"]) == ["text/plain"]
    for path, item in paths.items():
        for method, op in item.items():
            for status, response in op["responses"].items():
                if status[0] in "45":
                    assert list(response["content"]) == ["application/json"], (path, method, status)


async def test_details_is_always_an_object(api: Api) -> None:
    answers = [
        await api.http.get("/jobs/" + "0" * 26),  # none to give
        await api.http.post("/jobs", json={"kind": "nope"}),  # known_kinds
        await api.http.post("/jobs", json={"kind": "echo", "payload": {}}),  # the model's errors
        await api.http.get("/jobs", params={"limit": 0}),  # a parameter's
        await api.http.put("/jobs"),  # routing's
        await api.http.post("/jobs", content=b"{", headers={"content-type": "application/json"}),
    ]
    shapes = [assert_error(a, a.status_code)["details"] for a in answers]
    assert all(isinstance(d, dict) for d in shapes), shapes
    assert shapes[0] == {} and shapes[4] == {} and shapes[5] == {}
    assert "known_kinds" in shapes[1]
    assert shapes[2]["errors"][0]["loc"] == ["message"]
    assert shapes[3]["errors"][0]["loc"] == ["query", "limit"]


async def test_the_first_block_of_a_stream_carries_retry_with_an_event(api: Api) -> None:
    job_id = await api.submit()
    [held] = api.store.claim("w", [api.job(job_id).queue], 1, 30)
    api.store.finish([Failed(job_id, held.lease_token, "ValueError: no")])
    text = (await api.http.get(f"/jobs/{job_id}/events")).text
    first = text.split("\n\n", 1)[0]
    assert first.startswith("retry: ") and "event: state" in first and "data: " in first
    assert text.count("retry: ") == 1
