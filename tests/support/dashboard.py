"""Helpers for the dashboard's tests: keys, signing in through the form, pages."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

import chit
from chit.settings import Settings
from support.api import running_app

ADMIN_KEY = "dash-admin-0123456789"  # bare: the default tenant "", every scope
READ_KEY = "dash-reader-0123456789"  # the default tenant, read only
SUBMIT_KEY = "dash-submitter-0123456789"  # the default tenant, submit only
GLOBEX_ADMIN = "globex-admin-0123456789"
ROOT_KEY = "root-admin-0123456789"  # every tenant
API_KEYS = (
    ADMIN_KEY,
    f":read:{READ_KEY}",
    f":submit:{SUBMIT_KEY}",
    f"globex:admin:{GLOBEX_ADMIN}",
    f"*:admin:{ROOT_KEY}",
)


def settings_for(database_url: str, **changes: Any) -> Settings:
    return Settings(database_url=database_url, lease_seconds=30, **changes)


@dataclass
class Browser:
    """An in-process client that keeps cookies, as a browser does."""

    http: httpx.AsyncClient
    queue: chit.Queue

    async def sign_in(self, key: str, next: str = "/ui/") -> httpx.Response:
        page = await self.http.get("/ui/login")
        assert page.status_code == 200, page.text
        token = hidden(page.text, "login_token")
        return await self.http.post(
            "/ui/login", data={"login_token": token, "key": key, "next": next}
        )

    async def csrf(self, path: str = "/ui/") -> str:
        page = await self.http.get(path)
        assert page.status_code == 200, page.text
        return hidden(page.text, "csrf_token")


def hidden(html: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert match, f"no hidden field {name} in the page"
    return match.group(1)


async def running_dashboard(queue: chit.Queue, **options: Any) -> AsyncIterator[Browser]:
    async for _, http in running_app(queue, **options):
        yield Browser(http, queue)


_queues = iter(range(1_000_000))


def finished(
    queue: chit.Queue,
    *,
    kind: str = "work",
    error: str | None = None,
    result: Any = None,
    tenant: str = "",
    key: str | None = None,
) -> str:
    """A job moved by store calls, as a worker would: failed with `error`, or
    succeeded with `result`. Each gets a queue of its own so it is claimed alone."""
    from chit.jobs import Failed, NewJob, Succeeded

    name = f"t{next(_queues)}"
    store = queue.store
    job_id = store.enqueue(
        NewJob(kind, {"message": "x"}, queue=name, tenant=tenant, idempotency_key=key)
    ).id
    [claimed] = store.claim("test-worker", [name], 1, 30)
    outcome = (
        Succeeded(job_id, claimed.lease_token, result)
        if error is None
        else Failed(job_id, claimed.lease_token, error)
    )
    assert store.finish([outcome]) == [True]
    return job_id
