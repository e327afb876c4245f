"""`chit signal ID NAME JSON` and `chit status` of a waiting job: the signal
stored once and the job queued; bad JSON, a bad name, an unknown or finished
job refused in one line, exit code 2, nothing stored."""

from __future__ import annotations

import json
from pathlib import Path

import chit
from chit.jobs import Suspended
from support.cli import Cli, assert_refused, run_jobs, snapshot


def suspend(app: chit.Queue, job_id: str, name: str) -> None:
    [job] = app.store.claim("w", ["default"], 1, 30)
    assert job.id == job_id
    assert app.store.finish([Suspended(job.id, job.lease_token, signal=name)]) == [True]


def test_a_signal_queues_the_job_waiting_for_it(cli: Cli, app: chit.Queue) -> None:
    job_id = app.enqueue("echo", {"n": 1}).id
    suspend(app, job_id, "approval")
    status = cli("status", job_id)
    assert "waits for   signal 'approval'" in status.out, status.out
    assert json.loads(cli("status", job_id, "--json").out)["waiting_for"]["signal"] == "approval"

    result = cli("signal", job_id, "approval", '{"by": "ana"}')
    assert result.code == 0, result.err
    assert result.out.strip() == f"{job_id}: signal 'approval' stored"
    assert app.get(job_id).state is chit.State.QUEUED
    again = cli("signal", job_id, "approval", '{"by": "bob"}', "--json")
    assert json.loads(again.out) == {
        "job_id": job_id,
        "name": "approval",
        "data": {"by": "ana"},
        "created": False,
    }


def test_bad_signals_are_refused_in_one_line_and_store_nothing(
    cli: Cli, app: chit.Queue, db_path: Path
) -> None:
    job_id = app.enqueue("echo", {"n": 1}).id
    done_id = app.enqueue("echo", {"n": 2}).id
    before = snapshot(db_path)
    assert_refused(cli("signal", job_id, "go", "{nope"), 2, "not valid JSON")
    assert_refused(cli("signal", job_id, "go", "[1]"), 2, "JSON object")
    assert_refused(cli("signal", job_id, "x" * 201, "{}"), 2, "at most 200")
    unknown = "01JZZZZZZZZZZZZZZZZZZZZZZZ"
    assert_refused(cli("signal", unknown, "go"), 2, unknown)
    assert snapshot(db_path) == before
    run_jobs(app)
    assert_refused(cli("signal", done_id, "go"), 2, "has finished")
