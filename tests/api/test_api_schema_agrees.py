"""Where schemathesis (`--checks all`, tests/api/test_api_schemathesis_cli.py)
found the OpenAPI description and the server disagreeing, each side now says
the same, tested here one case at a time on both backends: a time's year as
written, a number given as a time, JSON Schema's integers (3.0 is 3), rates
of 1 to 1,000,000, a replay of ids or of filters (not both, not neither), a
cursor, an Idempotency-Key, text with a control character, a null payload."""

from __future__ import annotations

import re

import pytest

from chit import bounds
from support.api import Api, assert_error

pytestmark = pytest.mark.anyio


def schema_of(api: Api) -> dict:
    return dict(api.app.openapi())


def body_of(spec: dict, path: str, method: str) -> dict:
    """A route's JSON body schema, its reference to a component followed."""
    return resolved(
        spec, spec["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    )


def resolved(spec: dict, node: dict) -> dict:
    ref = node.get("$ref")
    return node if ref is None else spec["components"]["schemas"][ref.rsplit("/", 1)[1]]


async def test_a_number_given_as_a_time_is_refused(api: Api) -> None:
    assert_error(await api.http.get("/jobs", params={"since": "0.5"}), 422)
    assert_error(await api.http.get("/jobs", params={"since": "1700000000"}), 422)
    ok = await api.http.get("/jobs", params={"since": "2026-01-01T00:00:00Z"})
    assert ok.status_code == 200, ok.text


async def test_the_year_as_written_is_what_counts_whatever_the_offset(api: Api) -> None:
    # 1970-01-01T00:30+05:00 is 1969 in UTC: the schema's pattern reads 1970.
    assert re.match(bounds.YEAR_PATTERN, "1970-01-01T00:30:00+05:00")
    for since in ("1970-01-01T00:30:00+05:00", "9998-12-31T23:00:00-05:00"):
        answer = await api.http.get("/jobs", params={"since": since})
        assert answer.status_code == 200, answer.text
    for since in ("1969-12-31T23:00:00-05:00", "9999-01-01T00:00:00Z"):
        assert not re.match(bounds.YEAR_PATTERN, since)
        assert_error(await api.http.get("/jobs", params={"since": since}), 422)


async def test_an_integer_written_with_a_zero_fraction_is_that_integer(api: Api) -> None:
    body = {"kind": "echo", "payload": {"message": "m", "steps": 2.0}, "max_attempts": 2.0}
    answer = await api.http.post("/jobs", json=body | {"priority": 3.0})
    assert answer.status_code == 202, answer.text
    job = api.job(answer.json()["job_id"])
    assert (job.max_attempts, job.priority, job.payload["steps"]) == (2, 3, 2)
    for bad in ({"priority": 1.5}, {"priority": True}, {"max_attempts": "2"}):
        assert_error(await api.http.post("/jobs", json=body | bad), 422)
    limits = await api.http.put("/limits/echo", json={"concurrency": 3.0})
    assert limits.status_code == 200, limits.text
    assert limits.json()["concurrency"] == 3


@pytest.mark.parametrize(("rate", "ok"), [("0/h", False), ("1000001/s", False),
                                          ("01000000/h", True), (" 5 / m ", True)])  # fmt: skip
async def test_a_rate_allows_1_to_a_million_as_its_pattern_says(
    api: Api, rate: str, ok: bool
) -> None:
    body = body_of(schema_of(api), "/limits/{kind}", "put")
    [pattern] = {
        v["properties"]["rate"]["pattern"] for v in body["anyOf"] if "rate" in v["properties"]
    }
    assert bool(re.fullmatch(pattern, rate)) is ok
    answer = await api.http.put("/limits/echo", json={"rate": rate})
    assert answer.status_code == (200 if ok else 422), answer.text
    assert_error(await api.http.put("/limits/echo", json={}), 422)


async def test_a_replay_names_ids_or_filters_and_the_schema_says_which(api: Api) -> None:
    schema = schema_of(api)["paths"]["/jobs/replay"]["post"]["requestBody"]
    ids, filters = schema["content"]["application/json"]["schema"]["oneOf"]
    assert ids["required"] == ["ids"] and filters["properties"]["ids"] == {"type": "null"}
    for bad in ({}, {"ids": [], "kind": "echo"}, {"kind": None}, {"ids": ["nope"]}):
        assert_error(await api.http.post("/jobs/replay", json=bad), 422)
    for good in ({"ids": []}, {"kind": "echo", "ids": None}, {"since": "2026-01-01T00:00:00Z"}):
        answer = await api.http.post("/jobs/replay", json=good)
        assert answer.status_code == 200, answer.text


async def test_cursor_and_idempotency_key_patterns_are_in_the_schema(api: Api) -> None:
    paths = schema_of(api)["paths"]
    [cursor] = [p for p in paths["/jobs"]["get"]["parameters"] if p["name"] == "cursor"]
    assert re.fullmatch(cursor["schema"]["pattern"], "01m8y6gy5hytb2zxjm6rfzs5qp")
    assert not re.fullmatch(cursor["schema"]["pattern"], "0" * 30)
    assert_error(await api.http.get("/jobs", params={"cursor": "0" * 30}), 422, "invalid_cursor")
    [key] = paths["/jobs"]["post"]["parameters"]
    assert key["schema"]["pattern"] == bounds.IDEMPOTENCY_KEY_PATTERN
    assert re.fullmatch(bounds.IDEMPOTENCY_KEY_PATTERN, "a key")
    assert not re.fullmatch(bounds.IDEMPOTENCY_KEY_PATTERN, " a")
    assert not re.fullmatch(bounds.IDEMPOTENCY_KEY_PATTERN, "k" * 256)


async def test_a_control_character_in_a_ref_is_refused_other_text_is_not(api: Api) -> None:
    body = {"kind": "echo", "payload": {"message": "m"}}
    assert_error(await api.http.post("/jobs", json=body | {"ref": "a\u0017b"}), 422)
    for ref in ("¼ Ø", "a\u00a0b", "名前"):  # isprintable() refused the second
        answer = await api.http.post("/jobs", json=body | {"ref": ref})
        assert answer.status_code == 202, answer.text


async def test_a_null_payload_of_a_task_without_a_model_is_an_empty_one(api: Api) -> None:
    answer = await api.http.post("/jobs", json={"kind": "big", "payload": None})
    assert answer.status_code == 202, answer.text
    spec = schema_of(api)
    variants = [resolved(spec, v) for v in body_of(spec, "/jobs", "post")["oneOf"]]
    [big] = [v for v in variants if v["properties"]["kind"]["const"] == "big"]
    assert big["properties"]["payload"]["type"] == ["object", "null"]
