"""examples/webapp.py: an application's own typed POST /reports that enqueues
through chit and answers 202 + Location, with chit's routes mounted under /chit."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest

import chit

pytestmark = pytest.mark.anyio

EXAMPLE = Path(__file__).parents[2] / "examples" / "webapp.py"


@pytest.fixture
async def webapp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ModuleType]:
    monkeypatch.setenv("CHIT_DATABASE_URL", f"sqlite:///{tmp_path / 'chit.db'}")
    spec = importlib.util.spec_from_file_location("chit_example_webapp", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    async with module.app.router.lifespan_context(module.app):
        yield module
    module.queue.close()


async def test_reports_are_accepted_at_once_and_built_by_a_worker(webapp: ModuleType) -> None:
    transport = httpx.ASGITransport(app=webapp.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        key = {"Idempotency-Key": "emea-q3"}
        response = await http.post("/reports", json={"region": "emea"}, headers=key)
        assert response.status_code == 202
        job_id = response.json()["job_id"]
        location = response.headers["location"]
        assert location == f"/chit/jobs/{job_id}" == response.json()["status_url"]
        again = await http.post("/reports", json={"region": "emea"}, headers=key)
        assert (again.status_code, again.json()["job_id"]) == (200, job_id)

        status = await http.get(location)
        assert (status.json()["state"], status.headers["retry-after"]) == ("queued", "1")

        chit.Worker(webapp.queue, concurrency=1).run_until_idle(timeout=10)
        done = (await http.get(location)).json()
        assert done["state"] == "succeeded"
        assert done["result"] == {"region": "emea", "quarter": "2026-Q3", "total": 4000}


async def test_bad_reports_are_refused_as_json(webapp: ModuleType) -> None:
    transport = httpx.ASGITransport(app=webapp.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        bad = await http.post("/reports", json={"region": "", "quarter": "Q5"})
        assert bad.status_code == 422
        assert {tuple(d["loc"]) for d in bad.json()["details"]["errors"]} == {
            ("body", "region"),
            ("body", "quarter"),
        }
        await http.post("/reports", json={"region": "apac"}, headers={"Idempotency-Key": "k"})
        conflict = await http.post(
            "/reports", json={"region": "amer"}, headers={"Idempotency-Key": "k"}
        )
        assert (conflict.status_code, conflict.json()["error"]) == (422, "idempotency_conflict")
