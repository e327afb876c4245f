"""`GET /workflows/{id}/events` over the wire (issue 14): a real uvicorn server
(`chit.cli.serve.serve`) and two real `chit worker` processes on the test's
database, SQLite and PostgreSQL. A graph whose first job fails: the stream,
opened before any worker starts, shows the failure, its dependent cancelled
and the `run_on="finished"` callback running after both, then ends by itself;
reconnecting with the last event id answers 204."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

import chit
from chit.client import Event, SSEParser
from support.processes import Procs, free_port, wait_ready
from support.stack import SERVER

pytestmark = pytest.mark.slow

KEY = "e2e-workflow-events-0123456789"


@pytest.fixture
def http(procs: Procs, queue: chit.Queue) -> Iterator[httpx.Client]:
    """The server on the test's database (migrated by `queue` first)."""
    port = free_port()
    server = procs.start(
        ["-c", SERVER.format(module="support.e2e_app", port=port)],
        "server",
        extra_env={"CHIT_API_KEYS": KEY},
    )
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30) as client:
        wait_ready(server, lambda: client.get("/readyz"), 60, what="the API server to answer")
        yield client


@pytest.mark.timeout(120)
def test_a_workflows_events_follow_a_failure_its_cancelled_dependent_and_the_callback(
    http: httpx.Client, procs: Procs
) -> None:
    body = {
        "jobs": [
            {"ref": "a", "kind": "refuse"},
            {"ref": "b", "kind": "noop", "depends_on": ["a"]},
            {"ref": "c", "kind": "noop", "depends_on": ["a", "b"], "run_on": "finished"},
        ]
    }
    posted = http.post("/workflows", json=body)
    assert posted.status_code == 202, posted.text
    ids = posted.json()["jobs"]
    url = f"{posted.json()['status_url']}/events"
    names = {job_id: ref for ref, job_id in ids.items()}

    events: list[Event] = []
    parser = SSEParser()
    with http.stream("GET", url) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        for line in stream.iter_lines():
            event = parser.feed(line)
            if event is None:
                continue
            events.append(event)
            if len(events) == 3:  # every job's status first: now let workers run them
                procs.worker("--concurrency", "2")
                procs.worker("--concurrency", "2")
    # The loop ended because the server ended the stream, once every job finished.

    seen = [(names[e.job.id], e.job.state.value) for e in events if e.job]
    assert seen[:3] == [("a", "queued"), ("b", "waiting"), ("c", "waiting")]
    by_job = {ref: [state for name, state in seen if name == ref] for ref in "abc"}
    assert by_job["a"][-1] == "failed"
    assert by_job["b"] == ["waiting", "cancelled"]  # never ran
    assert by_job["c"][-1] == "succeeded"
    # The callback ran only after its dependencies had ended.
    first_run_of_c = next(n for n, s in enumerate(seen) if s[0] == "c" and s[1] != "waiting")
    assert seen.index(("a", "failed")) < first_run_of_c
    assert seen.index(("b", "cancelled")) < first_run_of_c
    last = [e.job for e in events if e.job and e.job.id == ids["b"]][-1]
    assert last is not None and last.error == f"dependency {ids['a']} failed"

    again = http.get(url, headers={"Last-Event-ID": events[-1].id or ""})
    assert again.status_code == 204
    view = http.get(posted.json()["status_url"]).json()
    assert view["states"] == {"failed": 1, "cancelled": 1, "succeeded": 1}
