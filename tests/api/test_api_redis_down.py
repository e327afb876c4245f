"""The API while its `redis-server` is down: a private server killed with
SIGKILL makes every route that needs the store answer 503 (never 500), with
Retry-After, while liveness still answers; started again from its AOF, the
same app answers again by itself, the job it acknowledged before intact."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import chit
from support.api import Api, assert_error, running_api, settings_for
from support.api_app import register
from support.redis import EVERY_WRITE_SYNCED, free_port, start_redis

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# What a client of a down store may ask for; each needs the store.
STORE_ROUTES = ["/readyz", "/stats", "/jobs", "/jobs/{id}", "/metrics"]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[list[subprocess.Popen[bytes]], int]]:
    """A private server and its port; the list gains the server started again."""
    port = free_port()
    process = start_redis(tmp_path, port, *EVERY_WRITE_SYNCED)
    assert process is not None
    box = [process]
    yield box, port
    for p in box:
        if p.poll() is None:
            p.kill()
            p.wait()


async def answers(http: httpx.AsyncClient, path: str, timeout: float = 20) -> httpx.Response:
    """The first 200 of `path` once the store is back: the app reconnects by itself."""
    async with asyncio.timeout(timeout):
        while True:
            response = await http.get(path)
            assert response.status_code in (200, 503), response.text
            if response.status_code == 200:
                return response
            await asyncio.sleep(0.05)  # polling the app for its recovery, no event to wait on


async def test_the_api_answers_503_while_redis_is_down_and_recovers_by_itself(
    tmp_path: Path, server: tuple[list[subprocess.Popen[bytes]], int]
) -> None:
    box, port = server
    queue = register(chit.Queue(settings=settings_for(f"redis://127.0.0.1:{port}/0")))
    try:
        async for api in running_api(queue):
            await run(api, tmp_path, box, port)
    finally:
        queue.close()


async def run(api: Api, tmp_path: Path, box: list[subprocess.Popen[bytes]], port: int) -> None:
    job_id = await api.submit()
    routes = [r.format(id=job_id) for r in STORE_ROUTES]
    for path in routes:
        assert (await api.http.get(path)).status_code == 200, path

    box[0].send_signal(signal.SIGKILL)
    box[0].wait()
    for path in routes:
        body = assert_error(await api.http.get(path), 503)
        assert "6379" not in str(body) and str(port) not in str(body), body
    response = await api.http.post("/jobs", json={"kind": "echo", "payload": {}})
    assert_error(response, 503, "store_unavailable")
    assert response.headers["Retry-After"]
    assert (await api.http.get("/healthz")).status_code == 200

    restarted = start_redis(tmp_path, port, *EVERY_WRITE_SYNCED)
    assert restarted is not None, "the port was taken while the server was down"
    box.append(restarted)
    for path in routes:
        await answers(api.http, path)
    got = (await api.http.get(f"/jobs/{job_id}")).json()
    assert (got["id"], got["state"]) == (job_id, "queued")
    second = await api.submit()
    assert second != job_id
