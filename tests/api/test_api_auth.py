"""API keys on every route: none, a wrong one, the wrong scope, another tenant's;
keys from CHIT_API_KEYS and from the keys table; the open mode and its limits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import chit
from chit.api.auth import create_key, parse_env_keys
from chit.cli.keys import keys_create, keys_list, keys_revoke
from chit.cli.serve import check_bind, is_loopback
from chit.errors import ConfigError, InvalidRequest
from chit.jobs import JobFilter
from support.api import (
    ACME_ADMIN,
    ACME_KEY,
    ACME_READER,
    ACME_SUBMITTER,
    ADMIN_KEY,
    GLOBEX_ADMIN,
    ROOT_KEY,
    Api,
    assert_error,
    bearer,
    running_api,
    settings_for,
    sqlite_url,
)
from support.api_app import register

pytestmark = pytest.mark.anyio

ROUTES = [
    ("POST", "/jobs", "submit"),
    ("GET", "/jobs/{id}", "read"),
    ("GET", "/jobs/{id}/result", "read"),
    ("GET", "/jobs/{id}/events", "read"),
    ("GET", "/jobs", "read"),
    ("GET", "/queues", "read"),
    ("POST", "/jobs/{id}/retry", "admin"),
    ("POST", "/jobs/{id}/cancel", "admin"),
    ("PATCH", "/jobs/{id}", "admin"),
    ("POST", "/jobs/{id}/run-now", "admin"),
    ("POST", "/jobs/{id}/signals/go", "submit"),
    ("POST", "/jobs/replay", "admin"),
    ("GET", "/failures", "admin"),
    ("GET", "/stats", "admin"),
    ("GET", "/metrics", "admin"),
    ("GET", "/limits", "admin"),
    ("PUT", "/limits/echo", "admin"),
    ("DELETE", "/limits/echo", "admin"),
    ("POST", "/queues/default/pause", "admin"),
    ("POST", "/queues/default/resume", "admin"),
    ("POST", "/kinds/echo/pause", "admin"),
    ("POST", "/kinds/echo/resume", "admin"),
]
JOB_ROUTES = [r for r in ROUTES if "{id}" in r[1]]
# A key of the same tenant that lacks the scope each route needs.
LACKING = {"submit": ACME_READER, "read": ACME_SUBMITTER, "admin": ACME_KEY}


def route_id(route: tuple[str, str, str]) -> str:
    return f"{route[0]} {route[1]}"


async def call(api: Api, route: tuple[str, str, str], job_id: str, key: str | None, **kw):
    method, path, _ = route
    body = None
    if path == "/jobs" and method == "POST":
        body = {"kind": "echo", "payload": {"message": "intruder"}}
    elif path == "/jobs/replay":
        body = {"ids": [job_id]}
    elif method == "PUT":
        body = {"concurrency": 2}
    elif method == "PATCH":
        body = {"priority": 3, "payload": {"message": "changed"}}
    elif "/signals/" in path:
        body = {"by": "intruder"}
    headers = bearer(key) | kw.pop("headers", {})
    return await api.http.request(method, path.format(id=job_id), json=body, headers=headers, **kw)


def snapshot(api: Api) -> list[Any]:
    jobs = api.store.list(JobFilter(), limit=1000).jobs
    return [
        *((j.id, j.state.value, j.attempts, j.tenant, j.priority, j.payload) for j in jobs),
        *((k.kind, k.override) for k in api.store.limits()),
        *((p.queue, p.kind) for p in api.store.pauses()),
    ]


@pytest.fixture
async def acme_job(keyed_api: Api) -> AsyncIterator[str]:
    yield await keyed_api.submit(ACME_KEY)


@pytest.mark.parametrize("route", ROUTES, ids=route_id)
async def test_no_key_is_401(keyed_api: Api, acme_job: str, route: tuple[str, str, str]) -> None:
    before = snapshot(keyed_api)
    response = await call(keyed_api, route, acme_job, None)
    body = assert_error(response, 401, "unauthorized")
    assert "Authorization: Bearer" in body["message"]
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert snapshot(keyed_api) == before


@pytest.mark.parametrize("route", ROUTES, ids=route_id)
async def test_wrong_key_is_401(keyed_api: Api, acme_job: str, route: tuple[str, str, str]) -> None:
    before = snapshot(keyed_api)
    body = assert_error(
        await call(keyed_api, route, acme_job, "not-a-real-key-123456"), 401, "unauthorized"
    )
    assert "not recognised" in body["message"]
    scheme = await call(keyed_api, route, acme_job, None, headers={"Authorization": "Basic eDp5"})
    assert_error(scheme, 401, "unauthorized")
    assert snapshot(keyed_api) == before


@pytest.mark.parametrize("route", ROUTES, ids=route_id)
async def test_wrong_scope_is_403(
    keyed_api: Api, acme_job: str, route: tuple[str, str, str]
) -> None:
    before = snapshot(keyed_api)
    needed = route[2]
    body = assert_error(await call(keyed_api, route, acme_job, LACKING[needed]), 403, "forbidden")
    assert f"needs {needed}" in body["message"]
    assert snapshot(keyed_api) == before


@pytest.mark.parametrize("route", JOB_ROUTES, ids=route_id)
async def test_another_tenants_job_is_404(
    keyed_api: Api, acme_job: str, route: tuple[str, str, str]
) -> None:
    before = snapshot(keyed_api)
    for key in (GLOBEX_ADMIN, ADMIN_KEY):  # globex, and the default tenant ""
        assert_error(await call(keyed_api, route, acme_job, key), 404, "job_not_found")
    assert snapshot(keyed_api) == before


async def test_another_tenant_learns_nothing_from_lists_and_reports(
    keyed_api: Api, acme_job: str
) -> None:
    held = keyed_api.store.claim("w", [keyed_api.job(acme_job).queue], 1, 30)[0]
    keyed_api.store.finish([chit.jobs.Failed(acme_job, held.lease_token, "acme secret error")])
    globex = bearer(GLOBEX_ADMIN)
    assert (await keyed_api.http.get("/jobs", headers=globex)).json()["jobs"] == []
    assert (await keyed_api.http.get("/failures", headers=globex)).json() == {"groups": []}
    stats = (await keyed_api.http.get("/stats", headers=globex)).json()
    assert sum(stats["by_state"].values()) == 0
    metrics = (await keyed_api.http.get("/metrics", headers=globex)).text
    assert "echo" not in metrics
    replayed = await keyed_api.http.post(
        "/jobs/replay", json={"since": "1970-01-01T00:00:00Z"}, headers=globex
    )
    assert replayed.json() == {"replayed": 0}
    # The owner sees it all.
    acme = bearer(ACME_ADMIN)
    assert [j["id"] for j in (await keyed_api.http.get("/jobs", headers=acme)).json()["jobs"]] == [
        acme_job
    ]
    groups = (await keyed_api.http.get("/failures", headers=acme)).json()["groups"]
    assert groups[0]["error"] == "acme secret error"


async def test_jobs_belong_to_the_submitting_keys_tenant(keyed_api: Api, acme_job: str) -> None:
    assert keyed_api.job(acme_job).tenant == "acme"
    globex_job = await keyed_api.submit(GLOBEX_ADMIN)
    assert keyed_api.job(globex_job).tenant == "globex"
    root_job = await keyed_api.submit(ROOT_KEY)
    assert keyed_api.job(root_job).tenant == ""


async def test_idempotency_keys_are_per_tenant(keyed_api: Api) -> None:
    body = {"kind": "echo", "payload": {"message": "same"}}
    ids = set()
    for key in (ACME_KEY, GLOBEX_ADMIN, ACME_KEY):
        response = await keyed_api.http.post(
            "/jobs", json=body, headers=bearer(key) | {"Idempotency-Key": "shared-key"}
        )
        ids.add(response.json()["job_id"])
    assert len(ids) == 2


async def test_an_every_tenant_key_reads_and_operates_on_any_job(
    keyed_api: Api, acme_job: str
) -> None:
    root = bearer(ROOT_KEY)
    assert (await keyed_api.http.get(f"/jobs/{acme_job}", headers=root)).status_code == 200
    cancel = await keyed_api.http.post(f"/jobs/{acme_job}/cancel", headers=root)
    assert cancel.json()["state"] == "cancelled"


async def test_admin_scope_includes_read_and_submit(keyed_api: Api, acme_job: str) -> None:
    admin = bearer(ACME_ADMIN)
    assert (await keyed_api.http.get(f"/jobs/{acme_job}", headers=admin)).status_code == 200
    await keyed_api.submit(ACME_ADMIN)


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/openapi.json"])
async def test_health_and_schema_need_no_key(keyed_api: Api, path: str) -> None:
    assert (await keyed_api.http.get(path)).status_code == 200


async def test_keys_from_the_table_work_until_revoked(keyed_api: Api, acme_job: str) -> None:
    stored, key = create_key(keyed_api.store, tenant="acme", scopes=["read"], name="dashboard")
    assert key.startswith("chit_") and stored.scopes == ("read",)
    assert key not in repr(keyed_api.store.list_api_keys())
    response = await keyed_api.http.get(f"/jobs/{acme_job}", headers=bearer(key))
    assert response.status_code == 200
    assert_error(await keyed_api.http.post("/jobs", json={}, headers=bearer(key)), 403)
    assert keyed_api.store.revoke_api_key(stored.id)
    assert_error(await keyed_api.http.get(f"/jobs/{acme_job}", headers=bearer(key)), 401)


async def test_no_keys_anywhere_means_open_and_a_table_key_closes_it(api: Api) -> None:
    job_id = await api.submit()
    assert (await api.http.get(f"/jobs/{job_id}")).status_code == 200
    _, key = create_key(api.store, tenant="", scopes=["admin"])
    assert_error(await api.http.get(f"/jobs/{job_id}"), 401, "unauthorized")
    assert (await api.http.get(f"/jobs/{job_id}", headers=bearer(key))).status_code == 200


async def test_revoking_the_last_key_leaves_the_api_closed(api: Api) -> None:
    """Open mode is for a store that never had a key: an operator who revokes a
    leaked last key must not find the API open to everyone."""
    job_id = await api.submit()
    stored, key = create_key(api.store, tenant="", scopes=["admin"])
    assert api.store.revoke_api_key(stored.id)
    assert api.store.list_api_keys() == []
    assert_error(await api.http.get(f"/jobs/{job_id}"), 401, "unauthorized")
    assert_error(await api.http.get(f"/jobs/{job_id}", headers=bearer(key)), 401)
    _, fresh = create_key(api.store, tenant="", scopes=["read"])
    assert (await api.http.get(f"/jobs/{job_id}", headers=bearer(fresh))).status_code == 200


async def test_without_keys_a_server_beyond_loopback_lets_no_one_in(tmp_path: Path) -> None:
    queue = register(chit.Queue(settings=settings_for(sqlite_url(tmp_path))))
    async for api in running_api(queue, allow_open=False):
        body = assert_error(await api.http.get("/jobs"), 401, "unauthorized")
        assert "chit keys create" in body["message"]
        assert (await api.http.get("/healthz")).status_code == 200
    queue.close()


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("short", "at least 16"),
        ("acme:read+write:0123456789abcdefgh", "not valid"),
        ("acme::0123456789abcdefgh", "not valid"),
        ("ac me:read:0123456789abcdefgh", "tenant"),
        ("acme:0123456789abcdefgh", "TENANT:SCOPES:KEY"),
        ("acme:read:has space 0123456789", "printable"),
    ],
)
def test_bad_chit_api_keys_entries_fail_at_start_naming_the_entry(entry: str, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_env_keys(["admin-key-0123456789", entry])
    message = str(raised.value)
    assert "CHIT_API_KEYS entry 2" in message and says in message
    assert "0123456789abcdefgh" not in message


def test_env_key_formats() -> None:
    keys = parse_env_keys(
        ["bare-key-0123456789", "acme:read:acme-key-0123456789", "*:submit:all-key-0123456789"]
    )
    principals = sorted(keys.values(), key=lambda p: p.key_id)
    assert [(p.key_id, p.tenant, sorted(p.scopes)) for p in principals] == [
        ("env:1", "", ["admin", "read", "submit"]),
        ("env:2", "acme", ["read"]),
        ("env:3", None, ["submit"]),
    ]


def test_cli_keys_create_list_revoke(queue: chit.Queue, capsys: pytest.CaptureFixture[str]) -> None:
    assert keys_create(queue.store, tenant="acme", scopes="submit+read", name="ci") == 0
    out, err = capsys.readouterr()
    assert "first API key, so the API is no longer open" in err
    key = out.splitlines()[0]
    assert key.startswith("chit_") and "shown only now" in out
    [stored] = queue.store.list_api_keys()
    assert (stored.tenant, stored.scopes, stored.name) == ("acme", ("submit", "read"), "ci")
    assert keys_list(queue.store) == 0
    listing = capsys.readouterr().out
    assert stored.id in listing and "submit+read" in listing and key not in listing
    assert keys_revoke(queue.store, stored.id) == 0
    assert "no key is left: the API refuses every request" in capsys.readouterr().out
    assert queue.store.list_api_keys() == []
    with pytest.raises(InvalidRequest, match="already revoked"):
        keys_revoke(queue.store, stored.id)
    with pytest.raises(InvalidRequest, match="unknown"):
        keys_revoke(queue.store, "nope")
    with pytest.raises(ConfigError, match="scopes"):
        keys_create(queue.store, scopes="root")


def test_only_the_key_that_closes_an_open_api_says_so(
    queue: chit.Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    assert keys_create(queue.store, env_keys=True) == 0
    assert capsys.readouterr().err == ""  # CHIT_API_KEYS had closed it already
    assert keys_create(queue.store) == 0
    assert capsys.readouterr().err == ""  # the table had a key already


def test_serve_refuses_a_public_address_without_keys(queue: chit.Queue) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")
    check_bind(queue.settings, queue, "127.0.0.1")
    with pytest.raises(ConfigError, match=r"refusing to listen on 0\.0\.0\.0 without API keys"):
        check_bind(queue.settings, queue, "0.0.0.0")
    check_bind(queue.settings.replace(api_keys=("k" * 20,)), queue, "0.0.0.0")
    stored, _ = create_key(queue.store)
    check_bind(queue.settings, queue, "0.0.0.0")
    queue.store.revoke_api_key(stored.id)  # closed still: no one gets in
    check_bind(queue.settings, queue, "0.0.0.0")
