"""In-process API fixtures: the real app driven through httpx's ASGI transport
with the lifespan running; no server, no worker process. Every test that takes
`queue`, `keyed_queue`, `api` or `keyed_api` runs on SQLite (a temporary file)
and on PostgreSQL (the session database, emptied first)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from api_support import API_KEYS, Api, running_api, settings_for, sqlite_url
from app_for_tests import register

import chit


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path)
    url: str = request.getfixturevalue("postgres_database")
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('chit_jobs')").fetchone() != (None,):
            conn.execute("TRUNCATE chit_jobs, chit_attempts, chit_results, chit_api_keys")
    return url


@pytest.fixture
def queue(database_url: str) -> Iterator[chit.Queue]:
    q = register(chit.Queue(settings=settings_for(database_url)))
    yield q
    q.close()


@pytest.fixture
def keyed_queue(database_url: str) -> Iterator[chit.Queue]:
    q = register(chit.Queue(settings=settings_for(database_url, api_keys=API_KEYS)))
    yield q
    q.close()


@pytest.fixture
async def api(queue: chit.Queue) -> AsyncIterator[Api]:
    async for a in running_api(queue):
        yield a


@pytest.fixture
async def keyed_api(keyed_queue: chit.Queue) -> AsyncIterator[Api]:
    async for a in running_api(keyed_queue):
        yield a
