"""Helpers for the API tests: keys, the in-process app, error checks. The
dashboard's tests (support/dashboard.py) run the same app."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

import chit
from chit.api import create_app
from chit.jobs import Job
from chit.settings import Settings
from chit.store import Store

_queues = itertools.count()

# CHIT_API_KEYS entries the keyed fixtures configure.
ADMIN_KEY = "admin-key-0123456789"  # bare: tenant "", every scope
ACME_KEY = "acme-key-0123456789"  # acme, submit+read
ACME_READER = "acme-reader-0123456789"
ACME_SUBMITTER = "acme-submitter-0123456789"
ACME_ADMIN = "acme-admin-0123456789"
GLOBEX_ADMIN = "globex-admin-0123456789"
ROOT_KEY = "root-key-0123456789"  # every tenant, admin
API_KEYS = (
    ADMIN_KEY,
    f"acme:submit+read:{ACME_KEY}",
    f"acme:read:{ACME_READER}",
    f"acme:submit:{ACME_SUBMITTER}",
    f"acme:admin:{ACME_ADMIN}",
    f"globex:admin:{GLOBEX_ADMIN}",
    f"*:admin:{ROOT_KEY}",
)


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'chit.db'}"


def settings_for(database_url: str, **changes: Any) -> Settings:
    return Settings(
        database_url=database_url,
        backoff_base=0.001,
        backoff_max=0.002,
        lease_seconds=30,
        result_inline_bytes=1024,
        max_body_bytes=64 * 1024,
        **changes,
    )


@dataclass
class Api:
    app: FastAPI
    http: httpx.AsyncClient
    queue: chit.Queue

    @property
    def store(self) -> Store:
        return self.queue.store

    def job(self, job_id: str) -> Job:
        job = self.store.get(job_id)
        assert job is not None
        return job

    async def submit(self, key: str | None = None, **body: Any) -> str:
        """Submit a job, by default to a queue of its own so a test can claim it alone."""
        body.setdefault("kind", "echo")
        body.setdefault("queue", f"q{next(_queues)}")
        body.setdefault("payload", {"message": "hi"})
        response = await self.http.post("/jobs", json=body, headers=bearer(key))
        assert response.status_code == 202, response.text
        return str(response.json()["job_id"])


def bearer(key: str | None) -> dict[str, str]:
    return {} if key is None else {"Authorization": f"Bearer {key}"}


async def running_app(
    queue: chit.Queue, **options: Any
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The real app with its lifespan running, and a client through httpx's ASGI
    transport: no server, no worker process. The event poller ticks every 20 ms
    unless `event_interval` says otherwise."""
    options = {"event_interval": 0.02, "key_cache_seconds": 0, **options}
    app = create_app(queue, **options)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            yield app, http


async def running_api(queue: chit.Queue, **options: Any) -> AsyncIterator[Api]:
    async for app, http in running_app(queue, **options):
        yield Api(app, http, queue)


def break_the_sqlite_file(api: Api, tmp_path: Path) -> None:
    """A directory where the app's SQLite file was, so the store cannot open
    it: the store unavailable. Skips the test on PostgreSQL."""
    if not api.queue.settings.database_url.startswith("sqlite"):
        pytest.skip("breaks the database by replacing the SQLite file")
    api.queue.store.close()
    (tmp_path / "chit.db").unlink()
    (tmp_path / "chit.db").mkdir()  # a directory where the file was: cannot be opened


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict:
    """A JSON error with a message a person can act on."""
    assert response.status_code == status, response.text
    body = response.json()
    assert isinstance(body["message"], str) and len(body["message"]) > 10, body
    if code is not None:
        assert body["error"] == code, body
    return body


@contextmanager
def stream_started(api: Api, job_id: str) -> Iterator[Callable[[], bool]]:
    """While inside, a check that holds once a new event stream of `job_id` is
    watching the job and has read it since: the snapshot its first event is
    made of, so no change made after can come before that event. (The route
    reads the job twice, to answer 404 or not and once watched; a stand-in for
    the store's `get` counts the reads.)"""
    hub = api.app.state.chit.hub
    before = hub.listeners
    store = api.store
    get = store.get
    shadowed = "get" in vars(store)  # by a test's own stand-in
    reads: list[str] = []

    def counting_get(*args: Any) -> Any:
        job = get(*args)
        if args[0] == job_id:
            reads.append(job_id)
        return job

    store.get = counting_get  # type: ignore[method-assign]
    try:
        yield lambda: hub.listeners > before and len(reads) >= 2
    finally:
        if shadowed:
            store.get = get  # type: ignore[method-assign]
        else:
            del store.get
