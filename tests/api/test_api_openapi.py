"""The OpenAPI description says what the server does: named operations, the
event stream as text, errors as JSON with `details` always an object; and an
event stream's first block carries `retry:` with its first event."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, create_model

import chit
from chit.api import create_app
from chit.jobs import Failed
from chit.settings import Settings
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


def _refs(node: object) -> list[str]:
    if isinstance(node, dict):
        return [r for v in node.values() for r in _refs(v)] + (
            [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        )
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_payload_models_are_named_by_kind_and_every_reference_resolves(tmp_path: Path) -> None:
    """A task model called ErrorOut leaves chit's error schema alone, two called
    Request get one each, and a kind a component name cannot hold is renamed."""

    class ErrorOut(BaseModel):
        code: int

    def request(field: str) -> type[BaseModel]:
        return create_model("Request", **{field: (str, ...)})  # type: ignore[call-overload]

    class Line(BaseModel):
        sku: str

    class Order(BaseModel):
        lines: list[Line]

    queue = chit.Queue(settings=Settings(database_url=f"sqlite:///{tmp_path / 'q.db'}"))
    for kind, model in [
        ("oops", ErrorOut),
        ("send_mail", request("to")),
        ("send_sms", request("number")),
        ("orders.place", Order),
        ("orders place", None),
        ("orders_place", None),
    ]:
        queue.task(kind, payload=model)(lambda job, body: None)
    spec = create_app(queue).openapi()
    schemas = spec["components"]["schemas"]

    assert schemas["ErrorOut"]["required"] == ["error", "message"]  # chit's own
    assert schemas["Payload_oops"]["properties"] == {"code": {"title": "Code", "type": "integer"}}
    assert list(schemas["Payload_send_mail"]["properties"]) == ["to"]
    assert list(schemas["Payload_send_sms"]["properties"]) == ["number"]
    assert "Payload_orders.place_Line" in schemas
    assert {"Submit_orders_place", "Submit_orders_place_2"} <= set(schemas)
    assert all(schemas[name]["title"] == name for name in schemas if name.startswith("Submit_"))
    body = spec["paths"]["/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["discriminator"]["mapping"]["send_sms"] == "#/components/schemas/Submit_send_sms"
    assert len(body["oneOf"]) == 6
    assert schemas["SubmitWorkflow"]["properties"]["jobs"]["items"] == body
    for ref in _refs(spec):
        assert ref.startswith("#/components/schemas/") and ref.rsplit("/", 1)[1] in schemas, ref

    operations = [op for item in spec["paths"].values() for op in item.values()]
    assert all(len(op["tags"]) == 1 for op in operations)
    assert {t["name"] for t in spec["tags"]} == {op["tags"][0] for op in operations}
    assert spec["paths"]["/workflows"]["post"]["tags"] == ["workflows"]


async def test_the_reference_lists_each_kind_and_its_body(api: Api) -> None:
    page = (await api.http.get("/docs")).text
    body = page.split("<code>/jobs</code> Submit a job", 1)[1].split("<h3", 1)[0]
    assert "object or object" not in body
    assert "<td><code>echo</code></td><td><a href='#schema-Submit_echo'>Submit_echo</a>" in body
    assert "id='schema-Payload_echo'" in page
