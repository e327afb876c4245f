"""`chit submit --timeout`, `--expires-in` and `--unique-key` (DESIGN.md
"Time"): stored, shown by `chit status`, and bad values refused with one line,
nothing stored."""

from __future__ import annotations

from datetime import datetime

import chit
from chit.jobs import JobFilter
from chit.worker import Worker
from support.cli import Cli, Result, assert_refused


def ok(result: Result) -> Result:
    assert result.code == 0, result
    return result


def test_submit_with_a_timeout_stores_the_jobs_own(cli: Cli, app: chit.Queue) -> None:
    job_id = ok(cli("submit", "echo", "{}", "--timeout", "90s")).out.split()[0]
    job = app.store.get(job_id)
    assert job is not None and job.timeout == 90
    assert ok(cli("status", job_id, "--json")).json()["timeout"] == 90
    in_seconds = ok(cli("submit", "echo", "{}", "--timeout", "2.5")).out.split()[0]
    assert app.store.get(in_seconds).timeout == 2.5  # type: ignore[union-attr]


def test_the_jobs_timeout_is_not_the_waits(cli: Cli, app: chit.Queue) -> None:
    # No worker runs: the wait gives up after its own timeout, the job keeps its.
    result = cli("submit", "echo", "{}", "--timeout", "5m", "--wait", "--wait-timeout", "0.2")
    assert result.code == 1
    assert result.err.splitlines()[-1] == "chit: still queued after 0.2s"
    [job] = app.store.list(JobFilter(), limit=10).jobs
    assert job.timeout == 300


def test_a_job_timeout_with_wait_says_the_wait_has_none(cli: Cli, app: chit.Queue) -> None:
    # A script written when --timeout was the wait's learns of the change. The
    # job ran already (the same idempotency key): the wait ends at once.
    job = app.enqueue("echo", {}, idempotency_key="once", timeout=300)
    Worker(app).run_until_idle()
    result = ok(
        cli("submit", "echo", "{}", "--idempotency-key", "once", "--timeout", "5m", "--wait")
    )
    assert result.err.splitlines()[0] == (
        "chit: --timeout is the job's timeout; --wait waits with no limit"
        " (--wait-timeout SECONDS sets one)"
    )
    assert job.id in result.err
    assert (
        "--wait waits"
        not in ok(cli("submit", "echo", "{}", "--idempotency-key", "once", "--timeout", "5m")).err
    )


def test_a_bad_timeout_is_refused_and_nothing_is_stored(cli: Cli, app: chit.Queue) -> None:
    for value in ("0s", "soon", "-5s"):
        assert_refused(cli("submit", "echo", "{}", f"--timeout={value}"), 2)
    assert app.store.list(JobFilter(), limit=10).jobs == []


def test_submit_with_expires_in(cli: Cli, app: chit.Queue) -> None:
    job_id = ok(cli("submit", "echo", "{}", "--expires-in", "5m")).out.split()[0]
    job = app.store.get(job_id)
    assert job is not None and job.expires_at is not None
    assert abs((job.expires_at - job.created_at).total_seconds() - 300) < 0.01
    assert "expires" in ok(cli("status", job_id)).out
    shown = ok(cli("status", job_id, "--json")).json()["expires_at"]
    assert datetime.fromisoformat(shown) == job.expires_at


def test_a_bad_expires_in_is_refused_and_nothing_is_stored(cli: Cli, app: chit.Queue) -> None:
    for value in ("0s", "soon", "-5s"):
        result = cli("submit", "echo", "{}", f"--expires-in={value}")
        assert_refused(result, 2)
    assert app.store.list(JobFilter(), limit=10).jobs == []


def test_submit_with_a_unique_key_returns_the_active_job(cli: Cli, app: chit.Queue) -> None:
    job_id = ok(cli("submit", "echo", "{}", "--unique-key", "nightly")).out.split()[0]
    again = ok(cli("submit", "echo", '{"other": 1}', "--unique-key", "nightly", "--json")).json()
    assert again == {"job_id": job_id, "created": False, "debounced": False}
    assert "unique key  nightly" in ok(cli("status", job_id)).out
    assert ok(cli("status", job_id, "--json")).json()["unique_key"] == "nightly"


def test_a_bad_unique_key_is_refused_and_nothing_is_stored(cli: Cli, app: chit.Queue) -> None:
    for value in ("", "x" * 256, "clé"):
        assert_refused(cli("submit", "echo", "{}", f"--unique-key={value}"), 2, "unique key")
    assert app.store.list(JobFilter(), limit=10).jobs == []
