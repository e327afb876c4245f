"""Django tasks run by a real `chit worker --django` process, their results
read back through Django's API, on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from support.django_workers import start_worker
from support.processes import Proc, Procs, child_env
from support.waiting import wait_until

pytestmark = pytest.mark.slow


def tasks() -> Any:
    from django_project.taskapp import tasks

    return tasks


def finished(task: Any, result_id: str) -> Any:
    """The result once the worker has finished the task (never a fixed sleep)."""

    def read() -> Any:
        result = task.get_result(result_id)
        return result if result.is_finished else None

    return wait_until(read, 60, 0.05, what=f"task {result_id} to finish")


def test_a_committed_task_runs_and_its_result_reads_back(alias: str, django_worker: Proc) -> None:
    from django.db import transaction

    add = tasks().add.using(backend=alias)
    with transaction.atomic(using=alias):
        result = add.enqueue(2, 3)
    done = finished(add, result.id)
    assert done.status == "SUCCESSFUL" and done.return_value == 5 and done.errors == []
    assert done.attempts == 1 and len(done.worker_ids) == 1
    assert done.enqueued_at <= done.started_at <= done.finished_at
    assert done.last_attempted_at == done.started_at
    result.refresh()  # the enqueued TaskResult catches up too
    assert result.status == "SUCCESSFUL" and result.return_value == 5
    emails = tasks().send_email.using(backend=alias)  # queue "emails"
    sent = finished(emails, emails.enqueue("a@example.com", subject="hi").id)
    assert sent.return_value == {"to": "a@example.com", "subject": "hi"}


def test_a_failing_task_shows_its_error(alias: str, django_worker: Proc) -> None:
    boom = tasks().boom.using(backend=alias)
    done = finished(boom, boom.enqueue("the printer is on fire").id)
    assert done.status == "FAILED"
    with pytest.raises(ValueError, match="failed"):
        _ = done.return_value
    [error] = done.errors
    assert error.exception_class_path == "django_project.taskapp.tasks.TaskBoom"
    assert error.exception_class is tasks().TaskBoom
    assert "the printer is on fire" in error.traceback
    assert "raise TaskBoom(message)" in error.traceback  # the task's own frame


def test_aenqueue_an_async_task_and_await_its_result(alias: str, django_worker: Proc) -> None:
    double = tasks().double.using(backend=alias)

    async def main() -> Any:
        result = await double.aenqueue(21)
        while not result.is_finished:
            await asyncio.sleep(0.05)
            await result.arefresh()
        return result

    done = asyncio.run(asyncio.wait_for(main(), 60))
    assert done.status == "SUCCESSFUL" and done.return_value == 42


def test_a_task_that_takes_context_sees_its_result_and_attempt(
    alias: str, django_worker: Proc
) -> None:
    attempt = tasks().attempt.using(backend=alias)
    result = attempt.enqueue(tag="x")
    done = finished(attempt, result.id)
    assert done.return_value == {"attempt": 1, "id": result.id, "tag": "x"}


def test_manage_py_chit_worker_runs_tasks_too(
    alias: str, tmp_path: Path, django_databases: dict[str, str]
) -> None:
    """`python -m django` is django-admin, which runs commands as manage.py does."""
    add = tasks().add.using(backend=alias)
    result = add.enqueue(20, 22)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CHIT_")}
    env = child_env(clean, PYTHONUNBUFFERED="1", CHIT_POLL_INTERVAL="0.2") | django_databases
    procs = Procs(tmp_path, env)
    try:
        worker = procs.start(
            [
                "-m",
                "django",
                "chit_worker",
                "--settings",
                "django_project.settings",
                "--backend",
                alias,
                "--queues",
                "default",
                "--concurrency",
                "1",
            ],
            "manage-py-worker",
        )
        worker.wait_started()
        assert finished(add, result.id).return_value == 42
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        procs.cleanup()


def test_a_retried_task_keeps_each_attempts_error(
    alias: str, tmp_path: Path, django_databases: dict[str, str]
) -> None:
    """MAX_ATTEMPTS 2: the first attempt's error stays in `errors` after the second succeeds."""
    backend = f"{alias}_retrying"
    flaky = tasks().flaky.using(backend=backend)
    result = flaky.enqueue()
    procs, _ = start_worker(
        tmp_path,
        django_databases,
        backend,
        "retries",
        CHIT_BACKOFF_BASE="0.05",
        CHIT_BACKOFF_MAX="0.1",
    )
    try:
        done = finished(flaky, result.id)
    finally:
        procs.cleanup()
    assert done.status == "SUCCESSFUL" and done.return_value == 2
    assert done.attempts == 2 and len(done.worker_ids) == 2
    [error] = done.errors
    assert error.exception_class is tasks().TaskBoom and "attempt 1 fails" in error.traceback


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_django_sets_up_is_a_clean_exit(
    alias: str, tmp_path: Path, django_databases: dict[str, str], signum: signal.Signals
) -> None:
    loading, go = tmp_path / "loading", tmp_path / "go"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CHIT_")}
    env = child_env(clean, CHIT_TEST_LOADING=str(loading), CHIT_TEST_GO=str(go))
    procs = Procs(tmp_path, env | django_databases)
    try:
        worker = procs.start(
            ["-m", "chit", "worker", "--django", f"django_project.slow_settings:{alias}"],
            "django-worker",
        )
        wait_until(loading.exists, 30, what="Django to read the settings")
        worker.signal(signum)
        go.touch()
        assert worker.wait(30) == 0, worker.stderr()
        assert f"{signum.name} before the worker started: exiting" in worker.stderr()
        assert "started: queues" not in worker.stderr()
    finally:
        procs.cleanup()
