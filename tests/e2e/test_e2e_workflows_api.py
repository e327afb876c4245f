"""A workflow over HTTP run by a real `chit worker` (issue 14): a 3-job chain
submitted with `POST /workflows` to the app (in-process, through httpx's ASGI
transport) on the test's database ends succeeded, in dependency order, each
job seeing its dependency's result; on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import chit
from chit.jobs import State
from support.api import Api, running_api
from support.jobs import lines, wait_terminal
from support.processes import Procs

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def api(queue: chit.Queue) -> AsyncIterator[Api]:
    async for a in running_api(queue):
        yield a


@pytest.mark.timeout(90)
async def test_a_three_job_chain_over_post_workflows_ends_succeeded(
    api: Api, procs: Procs, queue: chit.Queue, tmp_path: Path
) -> None:
    log = str(tmp_path / "order.log")
    body = {
        "jobs": [
            {"ref": "c", "kind": "link", "payload": {"log": log}, "depends_on": ["b"]},
            {"ref": "a", "kind": "link", "payload": {"log": log}},
            {"ref": "b", "kind": "link", "payload": {"log": log}, "depends_on": ["a"]},
        ]
    }
    response = await api.http.post("/workflows", json=body)
    assert response.status_code == 202, response.text
    answer = response.json()
    ids = answer["jobs"]
    assert response.headers["location"] == f"/workflows/{answer['workflow_id']}"
    assert [queue.get(ids[r]).state for r in "abc"] == [State.QUEUED, State.WAITING, State.WAITING]

    procs.worker("--concurrency", "2")
    done = [wait_terminal(queue, ids[r], 60) for r in "abc"]

    assert [j.state for j in done] == [State.SUCCEEDED] * 3
    assert [queue.get(ids[r]).result for r in "abc"] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert lines(Path(log)) == [ids["a"], ids["b"], ids["c"]]
    view = (await api.http.get(answer["status_url"])).json()
    assert {j["ref"]: (j["state"], j["depends_on"]) for j in view["jobs"]} == {
        "a": ("succeeded", []),
        "b": ("succeeded", [ids["a"]]),
        "c": ("succeeded", [ids["b"]]),
    }
    status = (await api.http.get(f"/jobs/{ids['c']}")).json()
    assert status["dependencies"] == {
        "total": 1,
        "succeeded": 1,
        "failed": 0,
        "cancelled": 0,
        "pending": 0,
    }
    assert status["workflow_id"] == answer["workflow_id"] and status["ref"] == "c"
