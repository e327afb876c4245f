"""CHIT_CORS_ORIGINS: pages on the listed origins, exactly, may call the API
(preflight answered, answers readable); others get no CORS headers; `*` and
anything that is not an origin are refused at startup."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import chit
from chit.errors import ConfigError
from chit.settings import Settings
from support.api import ADMIN_KEY, API_KEYS, Api, bearer, running_api, settings_for, sqlite_url
from support.api_app import register

pytestmark = pytest.mark.anyio

APP = "https://app.example.com"


@pytest.fixture
async def cors_api(tmp_path) -> AsyncIterator[Api]:
    settings = settings_for(sqlite_url(tmp_path), api_keys=API_KEYS, cors_origins=(APP,))
    queue = register(chit.Queue(settings=settings))
    try:
        async for api in running_api(queue):
            yield api
    finally:
        queue.close()


def preflight(origin: str, method: str = "POST") -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "authorization, content-type, idempotency-key",
    }


async def test_a_listed_origin_gets_preflight_and_readable_answers(cors_api: Api) -> None:
    answer = await cors_api.http.options("/jobs", headers=preflight(APP))
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == APP
    assert "POST" in answer.headers["access-control-allow-methods"]
    allowed = answer.headers["access-control-allow-headers"].lower()
    assert {"authorization", "content-type", "idempotency-key"} <= set(allowed.split(", "))
    assert "access-control-allow-credentials" not in answer.headers

    submitted = await cors_api.http.post(
        "/jobs",
        json={"kind": "echo", "payload": {"message": "from a page"}},
        headers={"Origin": APP, **bearer(ADMIN_KEY)},
    )
    assert submitted.status_code == 202
    assert submitted.headers["access-control-allow-origin"] == APP
    assert "location" in submitted.headers["access-control-expose-headers"].lower()


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "https://app.example.com.evil", "http://app.example.com"]
)
async def test_other_origins_get_no_cors_headers(cors_api: Api, origin: str) -> None:
    answer = await cors_api.http.options("/jobs", headers=preflight(origin))
    assert "access-control-allow-origin" not in answer.headers
    read = await cors_api.http.get("/jobs", headers={"Origin": origin, **bearer(ADMIN_KEY)})
    assert read.status_code == 200 and "access-control-allow-origin" not in read.headers


async def test_without_the_setting_no_origin_gets_cors_headers(api: Api) -> None:
    answer = await api.http.options("/jobs", headers=preflight(APP))
    assert "access-control-allow-origin" not in answer.headers


@pytest.mark.parametrize(
    "origins", ["*", "https://app.example.com/", "app.example.com", "https://a.example/x"]
)
def test_star_and_what_is_not_an_origin_are_refused(origins: str) -> None:
    with pytest.raises(ConfigError, match="CHIT_CORS_ORIGINS"):
        Settings.from_env({"CHIT_CORS_ORIGINS": origins})


def test_origins_read_from_the_environment() -> None:
    settings = Settings.from_env({"CHIT_CORS_ORIGINS": f"{APP}, http://localhost:3000"})
    assert settings.cors_origins == (APP, "http://localhost:3000")
