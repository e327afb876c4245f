"""Fixtures for the dashboard's tests. In-process tests (`dashboard`,
`keyed_dashboard`) drive the real app through httpx on SQLite and on
PostgreSQL; the browser tests (test_dashboard_browser.py) run a real server,
real workers and a real headless Chromium."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import chit
from support.dashboard import API_KEYS, Browser, running_dashboard, settings_for
from support.dashboard_app import register


@pytest.fixture
def keyed_queue(database_url: str) -> Iterator[chit.Queue]:
    q = register(chit.Queue(settings=settings_for(database_url, api_keys=API_KEYS)))
    yield q
    q.close()


@pytest.fixture
def open_queue(tmp_path: Path) -> Iterator[chit.Queue]:
    q = register(chit.Queue(settings=settings_for(f"sqlite:///{tmp_path / 'open.db'}")))
    yield q
    q.close()


@pytest.fixture
async def dashboard(keyed_queue: chit.Queue) -> AsyncIterator[Browser]:
    async for b in running_dashboard(keyed_queue):
        yield b
