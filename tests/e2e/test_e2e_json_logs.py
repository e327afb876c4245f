"""Structured logs (issue 15): a real `chit worker --log-format json` over a job
that fails once then succeeds writes one JSON object a line, every line, with
the job's events in order; a handler's own log lines and warnings come out as
the worker's do, under either pool; `chit serve` under CHIT_LOG_FORMAT=json
logs each request as one; a bad CHIT_LOG_FORMAT is refused at start, naming it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import chit
from chit.jobs import State
from support.jobs import wait_terminal
from support.processes import Procs, free_port, wait_healthy
from support.waiting import wait_until

pytestmark = pytest.mark.slow


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line parsed; a line that is not a JSON object fails the test."""
    parsed = []
    for line in text.splitlines():
        value = json.loads(line)
        assert isinstance(value, dict), line
        parsed.append(value)
    return parsed


@pytest.mark.timeout(90)
def test_a_worker_logs_a_job_that_fails_once_as_json_lines(procs: Procs, queue: chit.Queue) -> None:
    job_id = queue.enqueue("clock", {"fail_first": True}).id
    worker = procs.worker("--log-format", "json", "--concurrency", "1")
    assert wait_terminal(queue, job_id, 60).state is State.SUCCEEDED
    wait_until(lambda: "job.succeeded" in worker.stderr(), 10, what="the success logged")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0

    lines = json_lines(worker.stderr())
    assert all({"time", "level", "logger", "event", "message"} <= set(x) for x in lines)
    started = [x for x in lines if x["event"] == "worker.started"]
    assert len(started) == 1 and started[0]["level"] == "info"
    worker_id = started[0]["worker"]
    assert [x["event"] for x in lines if x["event"] == "worker.stopped"] == ["worker.stopped"]

    events = [x for x in lines if x.get("job_id") == job_id]
    said = [(x["event"], x["attempt"]) for x in events]
    # The failure is logged by the thread that records it, the retry's start by
    # the claim loop: on a busy machine the first may be descheduled past the
    # retry's backoff, after its outcome is stored but before it logs it.
    assert said[0] == ("job.started", 1) and said[3] == ("job.succeeded", 2)
    assert sorted(said[1:3]) == [("job.retrying", 1), ("job.started", 2)]
    for x in events:
        assert x["kind"] == "clock" and x["worker"] == worker_id and x["queue"] == "default"
        assert x["time"].endswith("+00:00")
    retrying = next(x for x in events if x["event"] == "job.retrying")
    succeeded = events[3]
    assert retrying["level"] == "warning"
    assert "RuntimeError: the first attempt fails on purpose" in retrying["error"]
    assert retrying["retry_in"] >= 0 and retrying["duration"] >= 0
    assert succeeded["level"] == "info" and "error" not in succeeded
    assert isinstance(succeeded["duration"], float)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("pool", ["thread", "process"])
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_handlers_own_log_lines_and_warnings_come_out_as_the_workers(
    procs: Procs, queue: chit.Queue, pool: str, fmt: str
) -> None:
    job_id = queue.enqueue("chatty", {}).id
    worker = procs.worker("--log-format", fmt, "--pool", pool, "--concurrency", "1")
    assert wait_terminal(queue, job_id, 60).state is State.SUCCEEDED
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    stderr = worker.stderr()

    if fmt == "text":
        assert f"INFO    e2e_app: chatty info {job_id}" in stderr
        assert f"WARNING e2e_app: chatty warning {job_id}" in stderr
        assert "WARNING py.warnings: " in stderr and f"UserWarning: chatty warns {job_id}" in stderr
        return
    lines = json_lines(stderr)  # every line JSON: no bare text
    mine = {
        (x["level"], x["logger"], x["message"].strip()) for x in lines if job_id in x["message"]
    }
    assert ("info", "e2e_app", f"chatty info {job_id}") in mine
    assert ("warning", "e2e_app", f"chatty warning {job_id}") in mine
    [warned] = [x for x in lines if x["logger"] == "py.warnings"]
    assert (
        warned["level"] == "warning" and f"UserWarning: chatty warns {job_id}" in warned["message"]
    )


@pytest.mark.timeout(60)
def test_the_api_logs_requests_as_json_lines(procs: Procs) -> None:
    port = free_port()
    server = procs.start(
        ["-m", "chit", "serve", "--port", str(port)], "serve", extra_env={"CHIT_LOG_FORMAT": "json"}
    )
    url = f"http://127.0.0.1:{port}"
    wait_healthy(server, url, 30, what="chit serve to answer")
    assert server.alive(), server.stderr()
    wait_until(lambda: '"http.request"' in server.stderr(), 10, what="the request logged")
    server.signal(signal.SIGTERM)
    server.wait(30)
    lines = json_lines(server.stderr())
    requests = [x for x in lines if x["event"] == "http.request"]
    assert {"method": "GET", "path": "/healthz", "status": 200} in [
        {k: x[k] for k in ("method", "path", "status")} for x in requests
    ]
    assert any(x["logger"].startswith("uvicorn") and x["event"] == "log" for x in lines)


def test_a_bad_log_format_is_refused_naming_the_variable(procs: Procs) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "chit", "worker", "--app", "support.e2e_app:queue"],
        env=procs.env | {"CHIT_LOG_FORMAT": "xml"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "CHIT_LOG_FORMAT has value 'xml': use text or json" in done.stderr


@pytest.mark.timeout(120)
def test_chit_up_and_its_children_write_json_lines(
    procs: Procs, queue: chit.Queue, tmp_path: Path
) -> None:
    port = free_port()
    out_path = tmp_path / "up.stdout"
    command = ["-m", "chit", "up", "--workers", "1", "--log-format", "json", "--demo"]
    with open(out_path, "wb") as out:
        up = procs.start(
            [*command, "--port", str(port)],
            "up",
            stdout=out.fileno(),
            extra_env={"CHIT_APP": "support.e2e_app:queue"},
        )
    url = f"http://127.0.0.1:{port}"
    wait_healthy(up, url, 60, what="chit up's API to answer")
    job_id = queue.enqueue("noop", {}).id
    assert wait_terminal(queue, job_id, 60).state is State.SUCCEEDED
    wait_until(lambda: "job.succeeded" in up.stderr(), 10, what="the success logged")
    wait_until(lambda: '"http.request"' in up.stderr(), 10, what="the request logged")
    up.signal(signal.SIGTERM)
    assert up.wait(60) == 0

    said = json_lines(out_path.read_text())
    assert said and all(x["event"] == "up.started" and x["logger"] == "chit.up" for x in said)
    assert any(f"HTTP API on {url}" in x["message"] for x in said)
    assert any("submitted 1 demo jobs" in x["message"] for x in said)
    lines = json_lines(up.stderr())  # the supervisor's, the worker's and the API's
    events = {x["event"] for x in lines}
    assert {"worker.started", "job.started", "job.succeeded", "http.request"} <= events
    assert [x["event"] for x in lines if x.get("job_id") == job_id] == [
        "job.started",
        "job.succeeded",
    ]
