"""In-process API fixtures: the real app driven through httpx's ASGI transport
with the lifespan running; no server, no worker process. Every test that takes
`queue`, `keyed_queue`, `api` or `keyed_api` runs on SQLite (a temporary file)
and on PostgreSQL (the session database, emptied first)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

import chit
from support.api import API_KEYS, Api, running_api, settings_for
from support.api_app import register


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
