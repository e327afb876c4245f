"""What each `chit` command does when the input is good, as text and as --json."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import chit
from chit.jobs import AttemptOutcome, State
from chit.store import queries
from support.cli import Cli, Result, run_jobs

SCHEMA_VERSION = len(queries.migrations("sqlite"))


def submitted(result: Result) -> str:
    assert result.code == 0, result
    lines = result.out.splitlines()
    assert len(lines) == 1, result.out
    return lines[0].split()[0]


def get(q: chit.Queue, job_id: str) -> chit.Job:
    job = q.store.get(job_id)
    assert job is not None
    return job


# submit


def test_submit_prints_the_id_of_a_queued_job(cli: Cli, app: chit.Queue) -> None:
    job_id = submitted(cli("submit", "report", '{"region": "emea"}'))
    job = get(app, job_id)
    assert (job.kind, job.state, job.attempts, job.max_attempts) == ("report", "queued", 0, 3)
    assert job.payload == {"region": "emea", "seconds": 0.0}  # stored as the model dumps it


def test_submit_json(cli: Cli, app: chit.Queue) -> None:
    result = cli("submit", "echo", '{"a": [1, 2]}', "--json")
    assert result.code == 0
    body = result.json()
    assert body == {"job_id": body["job_id"], "created": True, "debounced": False}
    assert get(app, body["job_id"]).payload == {"a": [1, 2]}


def test_submit_options_reach_the_job(cli: Cli, app: chit.Queue) -> None:
    job_id = submitted(
        cli(
            "submit",
            "echo",
            "{}",
            "--priority",
            "-5",
            "--queue",
            "urgent",
            "--max-attempts",
            "7",
            "--delay",
            "1h",
        )
    )
    job = get(app, job_id)
    assert (job.priority, job.queue, job.max_attempts) == (-5, "urgent", 7)
    assert job.run_at > datetime.now(UTC) + timedelta(minutes=59)
    at = submitted(cli("submit", "echo", "{}", "--run-at", "2031-01-02T03:04:05+00:00"))
    assert get(app, at).run_at == datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_submit_with_the_same_idempotency_key_returns_the_same_job(
    cli: Cli, app: chit.Queue
) -> None:
    args = ("submit", "report", '{"region": "emea"}', "--idempotency-key", "emea-2026-q3")
    first = cli(*args)
    again = cli(*args)
    job_id = submitted(first)
    assert first.out == f"{job_id}\n"
    assert again.code == 0
    assert again.out == f"{job_id} (existing job, same key)\n"
    assert cli(*args, "--json").json() == {"job_id": job_id, "created": False, "debounced": False}
    # Key order in the JSON does not make it a different request.
    reordered = ("submit", "report", '{"seconds": 0, "region": "emea"}')
    assert cli(*reordered, "--idempotency-key", "emea-2026-q3").code == 0

    conflict = cli("submit", "report", '{"region": "apac"}', "--idempotency-key", "emea-2026-q3")
    assert conflict.code == 2
    assert conflict.err == (
        f"chit: error: idempotency key 'emea-2026-q3' was already used for job {job_id} "
        "with a different request\n"
    )
    assert [j.id for j in app.store.list(chit.jobs.JobFilter()).jobs] == [job_id]


# status and wait


def test_status_shows_the_job_and_every_attempt(cli: Cli, app: chit.Queue) -> None:
    job_id = submitted(cli("submit", "flaky", "{}"))
    run_jobs(app)

    result = cli("status", job_id)
    assert result.code == 0
    out = result.out
    assert f"id          {job_id}" in out
    assert "state       succeeded" in out
    assert "attempts    2/3" in out
    assert 'result      {"attempt": 2}' in out
    rows = out.split("attempts:\n", 1)[1].splitlines()
    assert rows[0].split() == ["#", "worker", "started", "finished", "outcome", "error"]
    assert rows[1].split()[0] == "1"
    assert "retried" in rows[1]
    assert "ConnectionError: first attempt always fails" in rows[1]
    assert "second line" not in out  # only the first line of each error in the table
    assert rows[2].split()[0] == "2"
    assert "succeeded" in rows[2]

    body = cli("status", job_id, "--json").json()
    assert (body["id"], body["state"], body["attempts"]) == (job_id, "succeeded", 2)
    assert body["result"] == {"attempt": 2}
    assert [a["outcome"] for a in body["attempts_history"]] == ["retried", "succeeded"]
    assert [a["attempt"] for a in body["attempts_history"]] == [1, 2]
    assert body["attempts_history"][0]["error"].startswith("ConnectionError: first attempt")


def test_status_shows_a_jobs_cost_when_it_has_one(cli: Cli, app: chit.Queue) -> None:
    costly = submitted(cli("submit", "echo", '{"message": "x"}', "--cost", "12000"))
    assert "cost        12,000" in cli("status", costly).out
    assert cli("status", costly, "--json").json()["cost"] == 12000
    plain = submitted(cli("submit", "echo", '{"message": "x"}'))
    assert "cost " not in cli("status", plain).out
    assert cli("status", plain, "--json").json()["cost"] == 1


def test_status_shows_the_steps_a_job_stored(cli: Cli, app: chit.Queue) -> None:
    job_id = submitted(cli("submit", "stepped", "{}"))
    run_jobs(app)

    out = cli("status", job_id).out
    rows = out.split("steps:\n", 1)[1].splitlines()
    assert rows[0].split() == ["step", "attempt", "stored", "result"]
    assert rows[1].split()[:2] == ["fetch", "1"]
    assert json.loads(rows[1].split(None, 4)[4]) == {"rows": 3, "by": 1}

    body = cli("status", job_id, "--json").json()
    assert body["result"] == {"fetched": {"rows": 3, "by": 1}, "attempt": 2}
    assert [(s["name"], s["attempt"], s["result"]) for s in body["steps"]] == [
        ("fetch", 1, {"rows": 3, "by": 1})
    ]
    assert "steps:" not in cli("status", submitted(cli("submit", "flaky", "{}"))).out


def test_status_of_a_failed_job_shows_the_whole_error(cli: Cli, app: chit.Queue) -> None:
    job_id = submitted(cli("submit", "boom", '{"message": "disk full"}'))
    run_jobs(app)
    out = cli("status", job_id).out
    assert "state       failed" in out
    assert "attempts    1/1" in out
    assert "error       RuntimeError: disk full" in out
    assert "Traceback" in out  # the stored traceback, indented under the error


def test_wait_prints_the_result_of_a_finished_job(cli: Cli, app: chit.Queue) -> None:
    job_id = submitted(cli("submit", "report", '{"region": "emea"}'))
    run_jobs(app)
    result = cli("wait", job_id)
    assert result.code == 0
    assert json.loads(result.out) == {"region": "emea", "attempt": 1}
    assert "succeeded" in result.err
    body = cli("wait", job_id, "--json").json()
    assert (body["state"], body["result"]) == ("succeeded", {"region": "emea", "attempt": 1})


def test_wait_for_a_failed_job_exits_1_with_its_error(cli: Cli, app: chit.Queue) -> None:
    job_id = submitted(cli("submit", "boom", '{"message": "disk full"}'))
    run_jobs(app)
    result = cli("wait", job_id)
    assert result.code == 1
    assert result.out == ""
    assert result.err.splitlines()[-1] == "failed: RuntimeError: disk full"
    assert cli("wait", job_id, "--json").json()["state"] == "failed"


def test_wait_gives_up_after_its_timeout(cli: Cli) -> None:
    job_id = submitted(cli("submit", "echo", "{}"))
    result = cli("wait", job_id, "--timeout", "0.3")
    assert result.code == 1
    assert result.err.splitlines()[-1] == "chit: still queued after 0.3s"


def test_submit_wait_with_a_timeout_and_no_worker_exits_1(cli: Cli) -> None:
    result = cli("submit", "echo", "{}", "--wait", "--wait-timeout", "0.2")
    assert result.code == 1
    assert result.out == ""
    assert "still queued" in result.err


# list


@pytest.fixture
def mixed(cli: Cli, app: chit.Queue) -> dict[str, list[str]]:
    """Five echo jobs (two of them run) and three report jobs, all queued."""
    echo = [submitted(cli("submit", "echo", json.dumps({"n": n}))) for n in range(2)]
    run_jobs(app)
    echo += [submitted(cli("submit", "echo", json.dumps({"n": n}))) for n in range(2, 5)]
    report = [submitted(cli("submit", "report", '{"region": "r"}')) for _ in range(3)]
    return {"echo": echo, "report": report}


def test_list_shows_jobs_newest_first(cli: Cli, mixed: dict[str, list[str]]) -> None:
    result = cli("list")
    assert result.code == 0
    lines = result.out.splitlines()
    assert lines[0].split() == ["id", "kind", "state", "tries", "progress", "created", "error"]
    ids = [line.split()[0] for line in lines[1:]]
    assert ids == sorted(mixed["echo"] + mixed["report"], reverse=True)


def test_list_filters_by_state_and_kind(cli: Cli, mixed: dict[str, list[str]]) -> None:
    def ids(*args: str) -> list[str]:
        return [j["id"] for j in cli("list", *args, "--json").json()["jobs"]]

    assert ids("--kind", "report") == sorted(mixed["report"], reverse=True)
    assert ids("--state", "succeeded") == sorted(mixed["echo"][:2], reverse=True)
    assert ids("--state", "queued", "--kind", "echo") == sorted(mixed["echo"][2:], reverse=True)
    assert ids("--state", "failed") == []
    assert ids("--kind", "nope") == []


def test_list_pages_with_limit_and_cursor(cli: Cli, mixed: dict[str, list[str]]) -> None:
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        args = ["list", "--kind", "echo", "--limit", "2", "--json"]
        page = cli(*args, *(["--cursor", cursor] if cursor else [])).json()
        assert len(page["jobs"]) <= 2
        seen += [j["id"] for j in page["jobs"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == sorted(mixed["echo"], reverse=True)

    text = cli("list", "--kind", "echo", "--limit", "2")
    assert len(text.out.split("\n\n")[0].splitlines()) == 3  # header and two jobs
    assert text.out.splitlines()[-1] == f"more: chit list --cursor {seen[1]}"


def test_list_json_jobs_have_the_status_fields(cli: Cli, mixed: dict[str, list[str]]) -> None:
    job = cli("list", "--limit", "1", "--json").json()["jobs"][0]
    for field in ("id", "kind", "state", "attempts", "max_attempts", "progress", "created_at"):
        assert field in job
    assert datetime.fromisoformat(job["created_at"]).tzinfo is not None


# failures and replay


@pytest.fixture
def failed(cli: Cli, app: chit.Queue) -> dict[str, list[str]]:
    """Three boom jobs failed with 'disk full', two with 'timeout'; one echo succeeded."""
    groups: dict[str, list[str]] = {"disk full": [], "timeout": []}
    for message, n in (("disk full", 3), ("timeout", 2)):
        for i in range(n):
            payload = json.dumps({"message": f"{message}\ndetail {i}"})
            groups[message].append(submitted(cli("submit", "boom", payload)))
    groups["ok"] = [submitted(cli("submit", "echo", "{}"))]
    run_jobs(app)
    return groups


def test_failures_groups_by_kind_and_first_error_line(
    cli: Cli, failed: dict[str, list[str]]
) -> None:
    body = cli("failures", "--json").json()
    groups = [(g["count"], g["kind"], g["error"]) for g in body["failures"]]
    assert groups == [
        (3, "boom", "RuntimeError: disk full"),
        (2, "boom", "RuntimeError: timeout"),
    ]
    for g in body["failures"]:
        assert g["first_seen"] <= g["last_seen"]

    result = cli("failures")
    assert result.code == 0
    rows = result.out.splitlines()
    assert rows[0].split()[:3] == ["count", "kind", "error"]
    assert rows[1].split()[:4] == ["3", "boom", "RuntimeError:", "disk"]
    assert rows[2].split()[:4] == ["2", "boom", "RuntimeError:", "timeout"]


def test_failures_with_none(cli: Cli) -> None:
    assert cli("migrate").code == 0
    assert cli("failures").out == "no failed jobs\n"
    assert cli("failures", "--json").json() == {"failures": []}


def test_replay_by_ids_resets_attempts(
    cli: Cli, app: chit.Queue, failed: dict[str, list[str]]
) -> None:
    ids = failed["disk full"][:2]
    result = cli("replay", *ids)
    assert (result.code, result.out) == (0, "replayed 2 jobs\n")
    for job_id in ids:
        job = get(app, job_id)
        assert (job.state, job.attempts, job.error) == (State.QUEUED, 0, None)
    assert get(app, failed["disk full"][2]).state is State.FAILED
    # A job that did not fail is not replayed.
    assert cli("replay", failed["ok"][0]).out == "replayed 0 jobs\n"
    assert get(app, failed["ok"][0]).state is State.SUCCEEDED


def test_status_lists_dependencies_and_replay_refuses_a_job_its_failed_one_cancelled(
    cli: Cli, app: chit.Queue
) -> None:
    flow = app.enqueue_workflow(
        [
            chit.JobRequest("boom", {"message": "disk full"}, ref="a"),
            chit.JobRequest("echo", {}, ref="b", depends_on=["a"]),
        ]
    )
    first, then = flow.jobs["a"], flow.jobs["b"]
    run_jobs(app)
    out = cli("status", then).out
    rows = out.split("depends on (runs once every one has succeeded):\n", 1)[1].splitlines()
    assert rows[1].split() == [first, "boom", "failed"]
    assert cli("status", first).out.count("depends on") == 0  # none of its own
    body = cli("status", then, "--json").json()
    assert body["dependency_states"] == [{"id": first, "kind": "boom", "state": "failed"}]

    refused = cli("replay", then)
    assert refused.code != 0 and refused.out == ""
    assert f"{first} (boom) is failed; retry {first} first" in refused.err
    assert get(app, then).state is State.CANCELLED

    assert cli("replay", first).out == "replayed 1 job\n"
    waiting = cli("status", then).out
    assert "state       waiting" in waiting
    assert f"waiting on dependencies: {first} (boom, queued)" in waiting


def test_replay_by_kind_and_error_prefix(
    cli: Cli, app: chit.Queue, failed: dict[str, list[str]]
) -> None:
    result = cli("replay", "--kind", "boom", "--error", "RuntimeError: time")
    assert result.out == "replayed 2 jobs\n"
    assert {get(app, i).state for i in failed["timeout"]} == {State.QUEUED}
    assert {get(app, i).state for i in failed["disk full"]} == {State.FAILED}
    assert cli("replay", "--kind", "echo").out == "replayed 0 jobs\n"
    assert cli("replay", "--kind", "boom", "--json").json() == {"replayed": 3}


def test_replay_since(cli: Cli, app: chit.Queue, failed: dict[str, list[str]]) -> None:
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert cli("replay", "--since", future).out == "replayed 0 jobs\n"
    assert cli("replay", "--since", "1h").out == "replayed 5 jobs\n"
    assert cli("failures", "--json").json() == {"failures": []}
    # Replayed jobs run again from attempt 1.
    run_jobs(app)
    job = get(app, failed["timeout"][0])
    assert (job.state, job.attempts) == (State.FAILED, 1)
    history = app.store.attempts(job.id)
    assert [(a.attempt, a.outcome) for a in history] == [
        (1, AttemptOutcome.FAILED),
        (1, AttemptOutcome.FAILED),
    ]


def test_replay_all(cli: Cli, failed: dict[str, list[str]]) -> None:
    assert cli("replay", "--all").out == "replayed 5 jobs\n"


# cancel, prune, stats, migrate


def test_cancel_a_queued_job(cli: Cli, app: chit.Queue) -> None:
    job_id = submitted(cli("submit", "echo", "{}"))
    result = cli("cancel", job_id)
    assert (result.code, result.out) == (0, f"{job_id} cancelled\n")
    job = get(app, job_id)
    assert job.state is State.CANCELLED
    assert job.finished_at is not None
    again = cli("cancel", job_id)
    assert (again.code, again.out) == (0, f"{job_id} had already finished; nothing changed\n")
    run_jobs(app)
    assert get(app, job_id).state is State.CANCELLED  # never runs


def test_cancel_a_running_job_asks_it_to_stop(cli: Cli, app: chit.Queue) -> None:
    job_id = submitted(cli("submit", "echo", "{}"))
    [claimed] = app.store.claim("test-worker", ["default"], 1, 30)
    result = cli("cancel", job_id)
    assert result.code == 0
    assert result.out.startswith(f"{job_id} is running: cancellation requested")
    job = get(app, job_id)
    assert (job.state, job.cancel_requested) == (State.RUNNING, True)
    assert cli("cancel", job_id, "--json").json() == {"job_id": job_id, "result": "requested"}
    assert claimed.id == job_id


def test_prune_deletes_only_finished_jobs_older_than_the_duration(
    cli: Cli, app: chit.Queue, failed: dict[str, list[str]]
) -> None:
    queued = submitted(cli("submit", "echo", "{}"))
    cancelled = submitted(cli("submit", "echo", "{}"))
    cli("cancel", cancelled)
    assert cli("prune").out == "deleted 0 finished jobs older than 7d\n"
    assert cli("prune", "--older-than", "1h", "--json").json() == {"pruned": 0}

    result = cli("prune", "--older-than", "0s")
    assert (result.code, result.out) == (0, "deleted 7 finished jobs older than 0s\n")
    remaining = [j.id for j in app.store.list(chit.jobs.JobFilter()).jobs]
    assert remaining == [queued]
    assert app.store.attempts(failed["timeout"][0]) == []


def test_stats_counts_by_state_and_kind(
    cli: Cli, app: chit.Queue, failed: dict[str, list[str]]
) -> None:
    submitted(cli("submit", "report", '{"region": "x"}'))
    body = cli("stats", "--json").json()
    assert body["by_state"] == {
        "waiting": 0,
        "queued": 1,
        "running": 0,
        "succeeded": 1,
        "failed": 5,
        "cancelled": 0,
    }
    assert body["by_kind"] == {
        "boom": {"failed": 5},
        "echo": {"succeeded": 1},
        "report": {"queued": 1},
    }
    assert (body["failed_last_hour"], body["succeeded_last_hour"]) == (5, 1)
    assert body["failure_rate"] == 5 / 6
    assert "failure_ratio" not in body  # one failure figure, one name
    assert body["stale_running"] == 0

    out = cli("stats").out
    assert "failed     5" in out
    assert "last hour: 1 succeeded, 5 failed (failure rate 83.3%)" in out


def test_stats_of_an_empty_database(cli: Cli) -> None:
    assert cli("migrate").code == 0
    body = cli("stats", "--json").json()
    assert set(body["by_state"].values()) == {0}
    assert body["failure_rate"] is None
    assert "(failure rate -)" in cli("stats").out


def test_migrate_creates_the_schema_and_can_run_again(cli: Cli, db_path: Path) -> None:
    assert not db_path.exists()
    first = cli("migrate")
    assert first.code == 0
    assert first.out == f"schema version {SCHEMA_VERSION}: sqlite:///{db_path}\n"
    assert db_path.exists()
    assert cli("migrate", "--json").json() == {"schema_version": SCHEMA_VERSION}


def test_database_url_flag_wins_over_the_environment(cli: Cli, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    assert cli("migrate", "--database-url", f"sqlite:///{other}").code == 0
    assert other.exists()
    assert not (tmp_path / "chit.db").exists()


def test_flags_are_not_written_to_the_environment(cli: Cli, tmp_path: Path) -> None:
    before = dict(os.environ)
    other = tmp_path / "other.db"
    assert (
        cli("migrate", "--database-url", f"sqlite:///{other}", "--app", "support.cli_app").code == 0
    )
    assert dict(os.environ) == before


# --json everywhere


def test_every_command_prints_json_with_json(
    cli: Cli, app: chit.Queue, failed: dict[str, list[str]]
) -> None:
    queued = submitted(cli("submit", "echo", "{}"))
    done = failed["ok"][0]
    commands = [
        ["submit", "echo", "{}"],
        ["status", done],
        ["wait", done],
        ["list"],
        ["list", "--state", "failed", "--limit", "1"],
        ["failures"],
        ["replay", failed["timeout"][0]],
        ["replay", "--kind", "boom", "--error", "RuntimeError: disk"],
        ["cancel", queued],
        ["prune", "--older-than", "1d"],
        ["stats"],
        ["migrate"],
    ]
    for args in commands:
        result = cli(*args, "--json")
        assert result.code == 0, (args, result)
        assert isinstance(json.loads(result.out), dict), args


# workflows


def test_submit_depends_on_and_workflow_show_the_graph(cli: Cli, app: chit.Queue) -> None:
    a = submitted(cli("submit", "flaky", "{}"))
    b = submitted(cli("submit", "flaky", "{}"))
    c = submitted(cli("submit", "flaky", "{}", "--depends-on", a, "--depends-on", b))
    d = submitted(cli("submit", "flaky", "{}", "--depends-on", c, "--run-on", "finished"))
    job = app.get(c)
    assert job.state is State.WAITING and job.depends_on == (a, b)
    assert app.get(d).run_on.value == "finished"
    workflow_id = job.workflow_id
    assert workflow_id is not None

    out = cli("workflow", workflow_id).out
    assert out.startswith(f"workflow {workflow_id}: 2 jobs (2 waiting)")
    rows = out.splitlines()[1:]
    assert rows[0].split() == ["id", "ref", "kind", "state", "depends", "on", "runs", "on"]
    assert rows[1].split() == [c, "-", "flaky", "waiting", f"{a},", b]
    assert rows[2].split() == [d, "-", "flaky", "waiting", c, "finished"]
    body = cli("workflow", workflow_id, "--json").json()
    assert [(j["id"], j["depends_on"], j["run_on"]) for j in body["jobs"]] == [
        (c, [a, b], "succeeded"),
        (d, [c], "finished"),
    ]
    run_jobs(app)
    assert {app.get(i).state for i in (a, b, c, d)} == {State.SUCCEEDED}


def test_bad_dependencies_and_unknown_workflows_are_refused(cli: Cli, app: chit.Queue) -> None:
    unknown = cli("submit", "flaky", "{}", "--depends-on", "01m8zzzzzzzzzzzzzzzzzzzzzz")
    assert unknown.code == 2 and "01m8zzzzzzzzzzzzzzzzzzzzzz" in unknown.err
    bad = cli("submit", "flaky", "{}", "--run-on", "sometimes")
    assert bad.code == 2 and "--run-on" in bad.err
    assert app.store.list(chit.jobs.JobFilter()).jobs == []
    missing = cli("workflow", "nope")
    assert missing.code == 2 and "no workflow with id 'nope'" in missing.err
