"""In-process API fixtures: the real app and a SQLite file, driven through httpx's
ASGI transport with the lifespan running; no server, no worker process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from api_support import API_KEYS, Api, running_api, settings_for
from app_for_tests import register

import chit


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[chit.Queue]:
    q = register(chit.Queue(settings=settings_for(tmp_path)))
    yield q
    q.close()


@pytest.fixture
def keyed_queue(tmp_path: Path) -> Iterator[chit.Queue]:
    q = register(chit.Queue(settings=settings_for(tmp_path, api_keys=API_KEYS)))
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
