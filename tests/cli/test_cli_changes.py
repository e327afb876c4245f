"""`chit update` and `chit run-now`: a delayed job changed and made due; a
started or finished one refused with the reason, nothing changed."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import chit
from support.cli import Cli, assert_refused, run_jobs, snapshot


def test_update_then_run_now_and_the_job_runs_with_its_new_payload(
    cli: Cli, app: chit.Queue
) -> None:
    job_id = app.enqueue(
        "report", {"region": "emea"}, run_at=datetime.now(UTC) + timedelta(days=1)
    ).id
    result = cli("update", job_id, "--priority", "-4", "--payload", '{"region": "apac"}')
    assert result.code == 0, result.err
    assert result.out.startswith(f"{job_id} queued: priority -4, due ") and "UTC" in result.out
    result = cli("update", job_id, "--delay", "1h", "--json")
    due = datetime.fromisoformat(json.loads(result.out)["run_at"])
    assert timedelta(minutes=59) < due - datetime.now(UTC) <= timedelta(hours=1)
    run_jobs(app)
    assert app.get(job_id).state is chit.State.QUEUED  # not due
    assert cli("run-now", job_id).code == 0
    run_jobs(app)
    job = app.get(job_id)
    assert (job.state, job.payload["region"], job.priority) == (chit.State.SUCCEEDED, "apac", -4)


def test_a_finished_job_is_refused_with_the_reason(
    cli: Cli, app: chit.Queue, db_path: Path
) -> None:
    job_id = app.enqueue("echo", {"n": 1}).id
    run_jobs(app)
    before = snapshot(db_path)
    for args in (["run-now", job_id], ["update", job_id, "--priority", "1"]):
        assert_refused(
            cli(*args), 2, f"job {job_id} is succeeded: only queued or waiting jobs can be changed"
        )
    assert snapshot(db_path) == before


def test_a_payload_the_task_refuses_changes_nothing(
    cli: Cli, app: chit.Queue, db_path: Path
) -> None:
    job_id = app.enqueue("report", {"region": "emea"}).id
    before = snapshot(db_path)
    assert_refused(cli("update", job_id, "--payload", '{"region": 5}'), 2, "region")
    assert_refused(cli("update", job_id, "--priority", "9999999"), 2, "priority must be")
    assert snapshot(db_path) == before


def test_submit_with_a_debounce_key_twice_debounces_into_one_job(cli: Cli, app: chit.Queue) -> None:
    flags = ["--debounce-key", "user:7", "--debounce", "1h", "--debounce-max", "2h"]
    first = cli("submit", "report", '{"region": "emea"}', *flags)
    assert first.code == 0, first.err
    job_id = first.out.strip()
    again = cli("submit", "report", '{"region": "apac"}', *flags, "--json")
    assert again.json() == {"job_id": job_id, "created": False, "debounced": True}
    text = cli("submit", "report", '{"region": "amer"}', *flags)
    assert (
        text.out.strip() == f"{job_id} (debounced: the key's job not started yet took this payload)"
    )
    job = app.get(job_id)
    assert job.payload["region"] == "amer" and job.debounce_key == "user:7"
    assert "debounce    user:7" in cli("status", job_id).out


def test_a_bad_debounce_flag_is_refused_and_stores_nothing(cli: Cli, db_path: Path) -> None:
    assert cli("migrate").code == 0  # the database, made
    before = snapshot(db_path)
    cases = [
        (["--debounce", "5s"], "debounce needs a debounce_key"),
        (["--debounce-key", "k"], "needs debounce"),
        (["--debounce-key", "k", "--debounce", "soon"], "'soon' is not a duration"),
        (["--debounce-key", "k", "--debounce", "1m", "--debounce-max", "0s"], "debounce_max"),
        (["--debounce-key", "k", "--debounce", "1m", "--unique-key", "u"], "takes no unique_key"),
    ]
    for flags, says in cases:
        assert_refused(cli("submit", "echo", "{}", *flags), 2, says)
    assert snapshot(db_path) == before
