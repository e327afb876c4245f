"""Flow control over HTTP: jobs' concurrency keys, GET/PUT/DELETE /limits, the
pause and resume routes of queues and kinds, and the limits in /stats and
/metrics; every bad value, path and key refused with a message, nothing stored."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from prometheus_client.parser import text_string_to_metric_families

from chit.jobs import JobFilter
from chit.limits import Limits
from support.api import (
    ACME_ADMIN,
    ACME_KEY,
    ADMIN_KEY,
    GLOBEX_ADMIN,
    ROOT_KEY,
    Api,
    assert_error,
    bearer,
)

pytestmark = pytest.mark.anyio

NO_LIMITS = {"concurrency": None, "rate": None, "key_concurrency": None, "key_rate": None}
NO_LIMITS |= {"cost_rate": None, "key_cost_rate": None}


def flow(api: Api) -> tuple[Any, Any]:
    """The limits and pauses stored: what a refused request must leave alone."""
    limits = [(k.kind, k.declared, k.override) for k in api.store.limits()]
    pauses = [(p.queue, p.kind, p.paused_at) for p in api.store.pauses()]
    return limits, pauses


def jobs(api: Api) -> list[tuple[str, str]]:
    return [(j.id, j.concurrency_key) for j in api.store.list(JobFilter(), limit=1000).jobs]


# Jobs' concurrency keys


async def test_a_submitted_concurrency_key_reaches_the_job_and_its_json(api: Api) -> None:
    keyed = await api.submit(concurrency_key="customer-42", queue="keys")
    plain = await api.submit(queue="keys")
    longest = await api.submit(concurrency_key="k" * 200, queue="keys")
    assert api.job(keyed).concurrency_key == "customer-42"
    assert api.job(plain).concurrency_key == ""
    assert api.job(longest).concurrency_key == "k" * 200
    assert (await api.http.get(f"/jobs/{keyed}")).json()["concurrency_key"] == "customer-42"
    assert (await api.http.get(f"/jobs/{plain}")).json()["concurrency_key"] is None
    listed = (await api.http.get("/jobs", params={"queue": "keys"})).json()["jobs"]
    assert {j["id"]: j["concurrency_key"] for j in listed} == {
        keyed: "customer-42",
        plain: None,
        longest: "k" * 200,
    }


async def test_null_concurrency_key_is_none(api: Api) -> None:
    job_id = await api.submit(concurrency_key=None)
    assert api.job(job_id).concurrency_key == ""


async def test_the_concurrency_key_is_part_of_an_idempotent_request(api: Api) -> None:
    body = {"kind": "echo", "payload": {"message": "m"}, "concurrency_key": "a"}
    headers = {"Idempotency-Key": "with-a-key"}
    first = await api.http.post("/jobs", json=body, headers=headers)
    again = await api.http.post("/jobs", json=body, headers=headers)
    assert (first.status_code, again.status_code) == (202, 200)
    before = jobs(api)
    other = await api.http.post("/jobs", json=body | {"concurrency_key": "b"}, headers=headers)
    assert_error(other, 422, "idempotency_conflict")
    assert jobs(api) == before


@pytest.mark.parametrize(
    "key",
    ["", "k" * 201, 42, True, 1.5, ["a"], {"a": 1}, "nul\x00inside", "two\nlines", "bell\x07"],
    ids=repr,
)
async def test_a_bad_concurrency_key_is_422_and_stores_nothing(api: Api, key: object) -> None:
    response = await api.http.post(
        "/jobs", json={"kind": "echo", "payload": {"message": "m"}, "concurrency_key": key}
    )
    error = assert_error(response, 422, "invalid_request")
    assert "concurrency_key" in error["message"]
    assert jobs(api) == []


# Limits


async def test_set_read_back_merge_and_clear_an_override(api: Api) -> None:
    assert (await api.http.get("/limits")).json() == {"limits": [], "paused": []}
    await api.submit(queue="lim")
    await api.submit(queue="lim")
    [held] = api.store.claim("w", ["lim"], 1, 30)

    response = await api.http.put("/limits/echo", json={"concurrency": 3, "rate": "10/s"})
    assert response.status_code == 200, response.text
    entry = response.json()
    assert entry["kind"] == "echo"
    assert (entry["concurrency"], entry["rate"], entry["key_concurrency"]) == (3, "10/s", None)
    assert entry["override"] == NO_LIMITS | {"concurrency": 3, "rate": "10/s"}
    assert entry["declared"] == NO_LIMITS
    assert entry["updated_at"] is not None

    # The fields given change; the others stay.
    merged = (await api.http.put("/limits/echo", json={"key_rate": "5/m", "rate": "2/h"})).json()
    assert merged["override"] == NO_LIMITS | {
        "concurrency": 3,
        "rate": "2/h",
        "key_rate": "5/m",
    }
    listing = (await api.http.get("/limits")).json()
    [echo] = listing["limits"]
    assert echo == echo | {"kind": "echo", "concurrency": 3, "rate": "2/h", "key_rate": "5/m"}
    assert (echo["running"], echo["waiting"]) == (1, 1)
    assert api.job(held.id).state.value == "running"

    cleared = await api.http.delete("/limits/echo")
    assert cleared.status_code == 200
    assert cleared.json() == {"kind": "echo", "cleared": True}
    assert (await api.http.delete("/limits/echo")).json() == {"kind": "echo", "cleared": False}
    assert (await api.http.get("/limits")).json()["limits"] == []


async def test_an_override_wins_over_the_code_until_cleared(api: Api) -> None:
    api.store.declare_limits({"echo": Limits.checked(concurrency=2, rate="100/m")})
    [declared] = (await api.http.get("/limits")).json()["limits"]
    assert (declared["concurrency"], declared["rate"]) == (2, "100/m")
    assert declared["override"] == NO_LIMITS

    entry = (await api.http.put("/limits/echo", json={"concurrency": 5})).json()
    assert (entry["concurrency"], entry["rate"]) == (5, "100/m")
    assert entry["declared"] == NO_LIMITS | {"concurrency": 2, "rate": "100/m"}

    assert (await api.http.delete("/limits/echo")).json()["cleared"] is True
    [again] = (await api.http.get("/limits")).json()["limits"]
    assert (again["concurrency"], again["rate"], again["override"]) == (2, "100/m", NO_LIMITS)


async def test_any_kind_name_has_its_routes(api: Api) -> None:
    """A kind with "/", "%", a newline, spaces or 200 characters is one path
    segment, escaped."""
    for kind in ("reports/daily", "100% done", "two\nlines", "k" * 200):
        path = "/limits/" + quote(kind, safe="")
        response = await api.http.put(path, json={"concurrency": 1})
        assert response.json()["kind"] == kind, response.text
        assert (await api.http.delete(path)).json() == {"kind": kind, "cleared": True}
    assert (await api.http.get("/limits")).json()["limits"] == []


BAD_LIMITS: dict[str, tuple[Any, str, str]] = {
    "nothing to set": ({}, "invalid_limits", "say which limits to set"),
    "only nulls": ({"concurrency": None, "rate": None}, "invalid_limits", "say which limits"),
    "concurrency 0": ({"concurrency": 0}, "invalid_limits", "from 1 to 100,000, not 0"),
    "concurrency -1": ({"concurrency": -1}, "invalid_limits", "from 1 to 100,000, not -1"),
    "concurrency 10**12": (
        {"concurrency": 10**12},
        "invalid_limits",
        "not 1000000000000",
    ),
    "concurrency as text": ({"concurrency": "3"}, "invalid_limits", "not '3'"),
    "concurrency 2.5": ({"concurrency": 2.5}, "invalid_limits", "not 2.5"),
    "concurrency true": ({"concurrency": True}, "invalid_limits", "not True"),
    "concurrency a list": ({"concurrency": [3]}, "invalid_limits", "not [3]"),
    "rate 0/s": ({"rate": "0/s"}, "invalid_limits", "1 to 1,000,000 starts per period, not 0"),
    "rate abc": ({"rate": "abc"}, "invalid_limits", "rate 'abc' is not N/s, N/m or N/h"),
    "rate empty": ({"rate": ""}, "invalid_limits", "is not N/s, N/m or N/h"),
    "rate per day": ({"rate": "10/d"}, "invalid_limits", "is not N/s, N/m or N/h"),
    "rate negative": ({"rate": "-1/s"}, "invalid_limits", "is not N/s, N/m or N/h"),
    "rate too high": ({"rate": "10000000/s"}, "invalid_limits", "not 10000000"),
    "rate absurdly long": ({"rate": "9" * 5000 + "/s"}, "invalid_limits", "is not N/s"),
    "rate a number": ({"rate": 10}, "invalid_limits", "text like '10/s'"),
    "key_concurrency 0": ({"key_concurrency": 0}, "invalid_limits", "key_concurrency"),
    "key_concurrency text": ({"key_concurrency": "two"}, "invalid_limits", "key_concurrency"),
    "key_rate 0/m": ({"key_rate": "0/m"}, "invalid_limits", "not 0"),
    "key_rate abc": ({"key_rate": "abc"}, "invalid_limits", "'abc'"),
    "a good value beside a bad one": (
        {"concurrency": 3, "rate": "abc"},
        "invalid_limits",
        "'abc'",
    ),
    "an unknown field": ({"concurrency": 3, "burst": 5}, "invalid_request", "burst"),
    "a misspelt field": ({"concurency": 3}, "invalid_request", "concurency"),
    "a list": ([{"concurrency": 3}], "invalid_request", "invalid request"),
    "a string": ("concurrency=3", "invalid_request", "invalid request"),
}


@pytest.mark.parametrize(("body", "code", "says"), BAD_LIMITS.values(), ids=BAD_LIMITS.keys())
async def test_bad_limits_are_422_and_store_nothing(
    api: Api, body: Any, code: str, says: str
) -> None:
    await api.http.put("/limits/echo", json={"concurrency": 7})
    before = flow(api)
    error = assert_error(await api.http.put("/limits/echo", json=body), 422, code)
    assert says in error["message"]
    assert len(error["message"]) < 300 and "\n" not in error["message"]
    assert flow(api) == before
    [echo] = api.store.limits()
    assert echo.effective == Limits.checked(concurrency=7)


@pytest.mark.parametrize(
    ("content", "headers", "status", "code"),
    [
        (b"", {"Content-Type": "application/json"}, 400, "invalid_json"),
        (b"", {}, 400, "invalid_json"),
        (b'{"concurrency": ', {"Content-Type": "application/json"}, 400, "invalid_json"),
        (b'{"concurrency": NaN}', {"Content-Type": "application/json"}, 400, "invalid_json"),
        (b"null", {"Content-Type": "application/json"}, 422, "invalid_request"),
        (b"concurrency=3", {"Content-Type": "text/plain"}, 415, "unsupported_media_type"),
        (b'{"rate": "' + b"9" * 70_000 + b'"}', {}, 413, "body_too_large"),
    ],
)
async def test_a_missing_or_broken_body_is_refused_and_stores_nothing(
    api: Api, content: bytes, headers: dict[str, str], status: int, code: str
) -> None:
    response = await api.http.put("/limits/echo", content=content, headers=headers)
    assert_error(response, status, code)
    assert flow(api) == ([], [])


BAD_NAMES = {
    "empty": "",
    "too long": "k" * 201,
    "NUL": "a%00b",
}


@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=BAD_NAMES.keys())
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/limits/{}"),
        ("DELETE", "/limits/{}"),
        ("POST", "/queues/{}/pause"),
        ("POST", "/queues/{}/resume"),
        ("POST", "/kinds/{}/pause"),
        ("POST", "/kinds/{}/resume"),
    ],
)
async def test_a_bad_kind_or_queue_name_is_422_and_stores_nothing(
    api: Api, method: str, path: str, name: str
) -> None:
    response = await api.http.request(
        method, path.format(name), json={"concurrency": 2} if method == "PUT" else None
    )
    error = assert_error(response, 422)
    assert "kind" in error["message"] or "queue" in error["message"]
    assert flow(api) == ([], [])


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/limits"),
        ("POST", "/limits"),
        ("GET", "/limits/echo"),
        ("POST", "/limits/echo"),
        ("GET", "/queues/default/pause"),
        ("PUT", "/queues/default/resume"),
        ("GET", "/kinds/echo/pause"),
        ("DELETE", "/kinds/echo/resume"),
    ],
)
async def test_wrong_methods_are_405(api: Api, method: str, path: str) -> None:
    assert_error(await api.http.request(method, path), 405, "method_not_allowed")
    assert flow(api) == ([], [])


# Pauses


async def test_pause_and_resume_a_queue_and_a_kind(api: Api) -> None:
    response = await api.http.post("/queues/emails/pause")
    assert response.status_code == 200
    assert response.json() == {"queue": "emails", "paused": True, "changed": True}
    again = await api.http.post("/queues/emails/pause")
    assert again.json() == {"queue": "emails", "paused": True, "changed": False}
    kind = (await api.http.post("/kinds/echo/pause")).json()
    assert kind == {"kind": "echo", "paused": True, "changed": True}

    paused = (await api.http.get("/limits")).json()["paused"]
    assert [(p["queue"], p["kind"]) for p in paused] == [("emails", None), (None, "echo")]
    assert all(p["paused_at"] for p in paused)

    resumed = (await api.http.post("/queues/emails/resume")).json()
    assert resumed == {"queue": "emails", "paused": False, "changed": True}
    not_paused = (await api.http.post("/queues/emails/resume")).json()
    assert not_paused == {"queue": "emails", "paused": False, "changed": False}
    assert (await api.http.post("/kinds/echo/resume")).json()["changed"] is True
    assert (await api.http.post("/kinds/echo/resume")).json()["changed"] is False
    assert api.store.pauses() == []


async def test_a_queue_name_with_a_slash_is_paused_whole(api: Api) -> None:
    body = (await api.http.post("/queues/team%2Fmail/pause")).json()
    assert body == {"queue": "team/mail", "paused": True, "changed": True}
    assert [(p.queue, p.kind) for p in api.store.pauses()] == [("team/mail", None)]
    assert (await api.http.post("/queues/team/mail/resume")).json()["changed"] is True
    lines = (await api.http.post("/kinds/a%0Ab/pause")).json()
    assert lines == {"kind": "a\nb", "paused": True, "changed": True}
    assert (await api.http.post("/kinds/a%0Ab/resume")).json()["changed"] is True


# Stats and metrics


async def test_stats_show_limits_and_pauses(api: Api) -> None:
    first = (await api.http.get("/stats")).json()
    assert (first["limits"], first["paused"]) == ([], [])
    await api.submit(queue="s")
    await api.http.put("/limits/echo", json={"concurrency": 4, "rate": "30/m"})
    await api.http.post("/queues/s/pause")
    stats = (await api.http.get("/stats")).json()
    [echo] = stats["limits"]
    assert (echo["kind"], echo["concurrency"], echo["rate"]) == ("echo", 4, "30/m")
    assert (echo["running"], echo["waiting"]) == (0, 1)
    assert [(p["queue"], p["kind"]) for p in stats["paused"]] == [("s", None)]


async def test_metrics_show_each_limit_and_pause(api: Api) -> None:
    await api.submit(queue="m")
    await api.submit(queue="m")
    api.store.claim("w", ["m"], 1, 30)
    api.store.declare_limits({"big": Limits.checked(rate="5/s")})
    await api.http.put("/limits/echo", json={"concurrency": 3})
    await api.http.post("/queues/m/pause")
    await api.http.post("/kinds/big/pause")
    text = (await api.http.get("/metrics")).text
    for line in (
        "# TYPE chit_limit_running gauge",
        "# HELP chit_limit_waiting Queued and due jobs of a limited kind, not running",
        'chit_limit_running{kind="echo"} 1.0',
        'chit_limit_waiting{kind="echo"} 1.0',
        'chit_limit_running{kind="big"} 0.0',
        'chit_limit_concurrency{kind="echo"} 3.0',
        "# TYPE chit_paused gauge",
        'chit_paused{kind="",queue="m"} 1.0',
        'chit_paused{kind="big",queue=""} 1.0',
    ):
        assert line in text, line
    assert 'chit_limit_concurrency{kind="big"}' not in text  # a rate, no concurrency
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {"chit_limit_running", "chit_limit_waiting", "chit_limit_concurrency"} <= set(families)
    assert len(families["chit_paused"].samples) == 2


# Keys: limits and pauses hold for every tenant


ROUTES = [
    ("GET", "/limits"),
    ("PUT", "/limits/echo"),
    ("DELETE", "/limits/echo"),
    ("POST", "/queues/default/pause"),
    ("POST", "/queues/default/resume"),
    ("POST", "/kinds/echo/pause"),
    ("POST", "/kinds/echo/resume"),
]


async def request(api: Api, method: str, path: str, key: str | None) -> Any:
    body = {"concurrency": 2} if method == "PUT" else None
    return await api.http.request(method, path, json=body, headers=bearer(key))


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_a_key_bound_to_a_tenant_is_403_and_changes_nothing(
    keyed_api: Api, method: str, path: str
) -> None:
    keyed_api.store.declare_limits({"echo": Limits.checked(concurrency=9)})
    keyed_api.store.pause(queue="default")
    before = flow(keyed_api)
    for key in (ACME_ADMIN, GLOBEX_ADMIN, ADMIN_KEY):  # ADMIN_KEY: the default tenant ""
        error = assert_error(await request(keyed_api, method, path, key), 403, "forbidden")
        assert "every tenant" in error["message"] and "--tenant '*'" in error["message"]
    error = assert_error(await request(keyed_api, method, path, ACME_KEY), 403, "forbidden")
    assert "needs admin" in error["message"]
    assert_error(await request(keyed_api, method, path, None), 401, "unauthorized")
    assert flow(keyed_api) == before


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_an_admin_key_of_every_tenant_may(keyed_api: Api, method: str, path: str) -> None:
    response = await request(keyed_api, method, path, ROOT_KEY)
    assert response.status_code == 200, response.text


async def test_a_tenants_stats_and_metrics_leave_limits_out(keyed_api: Api) -> None:
    """A limit's counts span tenants: only a key of every tenant sees them."""
    await keyed_api.submit(ACME_KEY)
    keyed_api.store.set_limits("echo", Limits.checked(concurrency=2))
    keyed_api.store.pause(queue="secret-queue")
    acme = (await keyed_api.http.get("/stats", headers=bearer(ACME_ADMIN))).json()
    assert (acme["limits"], acme["paused"]) == ([], [])
    metrics = (await keyed_api.http.get("/metrics", headers=bearer(GLOBEX_ADMIN))).text
    assert "chit_limit_running{" not in metrics and "secret-queue" not in metrics
    root = (await keyed_api.http.get("/stats", headers=bearer(ROOT_KEY))).json()
    assert [k["kind"] for k in root["limits"]] == ["echo"]
    assert [p["queue"] for p in root["paused"]] == ["secret-queue"]
    root_metrics = (await keyed_api.http.get("/metrics", headers=bearer(ROOT_KEY))).text
    assert 'chit_limit_concurrency{kind="echo"} 2.0' in root_metrics
