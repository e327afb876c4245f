"""ChitBackend through Django's own API, in this process (no worker): what
enqueue stores, how it joins Django's transaction, what Django refuses. Each
test runs on SQLite and on PostgreSQL (conftest.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import chit
from chit.jobs import State
from support.postgres import postgres_skipped

SimpleTestCase = pytest.importorskip("django.test").SimpleTestCase


def tasks() -> Any:
    from django_project.taskapp import tasks

    return tasks


def test_a_task_enqueued_in_a_transaction_that_rolls_back_leaves_no_job(
    alias: str, chit_queue: chit.Queue
) -> None:
    from django.db import transaction

    from chit.contrib.django import framework

    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        result = tasks().add.using(backend=alias).enqueue(1, 2)
        raise RuntimeError("roll back")
    assert chit_queue.store.get(result.id) is None
    with pytest.raises(framework.TaskResultDoesNotExist):
        tasks().add.using(backend=alias).get_result(result.id)


def test_a_task_enqueued_in_a_transaction_exists_once_it_commits_and_not_before(
    alias: str, chit_queue: chit.Queue
) -> None:
    from django.db import transaction

    with transaction.atomic(using=alias):
        result = tasks().add.using(backend=alias).enqueue(1, 2)
        # chit's own connection, like a worker's, cannot see it yet.
        assert chit_queue.store.get(result.id) is None
    job = chit_queue.store.get(result.id)
    assert job is not None and job.state == State.QUEUED
    assert job.kind == "django_project.taskapp.tasks.add"
    assert job.payload == {"args": [1, 2], "kwargs": {}}
    read = tasks().add.using(backend=alias).get_result(result.id)
    assert read.status == "READY" and read.args == [1, 2] and read.kwargs == {}
    assert not read.is_finished and read.attempts == 0
    with pytest.raises(ValueError, match="not finished"):
        _ = read.return_value


def test_without_join_transaction_a_job_is_stored_at_once(django_databases: Any) -> None:
    from django.db import transaction

    from chit.contrib.django import framework

    backend = framework.task_backends["unjoined"]
    with pytest.raises(RuntimeError), transaction.atomic(using="default"):
        result = tasks().add.using(backend="unjoined").enqueue(5, 6)
        raise RuntimeError("roll back")
    assert backend.queue.store.get(result.id) is not None  # Django's default: on_commit is yours


def test_priority_queue_and_arguments_map_onto_the_job(alias: str, chit_queue: chit.Queue) -> None:
    email = tasks().send_email.using(backend=alias)  # priority 50, queue "emails"
    result = email.enqueue("a@example.com", subject=("hi", "there"))
    job = chit_queue.store.get(result.id)
    assert job is not None
    assert (job.priority, job.queue) == (-50, "emails")  # chit: smaller runs first
    # As Django's own backends do: tuples become lists, already on the result.
    assert result.kwargs == {"subject": ["hi", "there"]}
    read = email.get_result(result.id)
    assert (read.task.priority, read.task.queue_name, read.backend) == (50, "emails", alias)
    assert read.task.func is tasks().send_email.func
    assert read.enqueued_at is not None and read.enqueued_at.tzinfo is not None


def test_larger_django_priorities_are_claimed_first(alias: str, chit_queue: chit.Queue) -> None:
    add = tasks().add.using(backend=alias, queue_name="ordered")
    ids = {p: add.using(priority=p).enqueue(p, 0).id for p in (-5, 0, 100, 50, -100)}
    claimed = chit_queue.store.claim("test", ["ordered"], 10, 30)
    order = [job.id for job in claimed if job.id in ids.values()]
    assert order == [ids[p] for p in (100, 50, 0, -5, -100)]


def test_run_after_defers_the_job(alias: str, chit_queue: chit.Queue) -> None:
    later = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    add = tasks().add.using(backend=alias, queue_name="ordered", run_after=later)
    result = add.enqueue(1, 1)
    job = chit_queue.store.get(result.id)
    assert job is not None and job.run_at == later
    claimed = chit_queue.store.claim("test", ["ordered"], 10, 30)
    assert result.id not in [job.id for job in claimed]
    assert add.get_result(result.id).task.run_after == later


def test_arguments_json_cannot_hold_are_refused_as_django_refuses_them(
    alias: str, chit_queue: chit.Queue
) -> None:
    def stored() -> int:
        return sum(chit_queue.store.stats().by_state.values())

    before = stored()
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks().add.using(backend=alias).enqueue(object(), 1)
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks().add.using(backend=alias).enqueue(1, b=datetime.now(UTC))
    assert stored() == before


def test_unknown_queues_and_bad_priorities_are_refused_as_django_refuses_them(
    alias: str,
) -> None:
    from chit.contrib.django import framework

    with pytest.raises(framework.InvalidTask, match="Queue 'nowhere' is not valid"):
        tasks().add.using(backend=alias, queue_name="nowhere")
    with pytest.raises(framework.InvalidTask, match="priority must be a whole number"):
        tasks().add.using(backend=alias, priority=101)
    with pytest.raises(framework.InvalidTask, match="aware datetime"):
        tasks().add.using(backend=alias, run_after=datetime(2030, 1, 1))


def test_an_unknown_result_id_does_not_exist(alias: str) -> None:
    from chit.contrib.django import framework

    with pytest.raises(framework.TaskResultDoesNotExist):
        tasks().add.using(backend=alias).get_result("no-such-job")


def test_a_result_of_another_task_is_a_mismatch(alias: str) -> None:
    from chit.contrib.django import framework

    result = tasks().add.using(backend=alias).enqueue(1, 2)
    mismatch = framework._exceptions.TaskResultMismatch
    with pytest.raises(mismatch):
        tasks().send_email.using(backend=alias).get_result(result.id)


def test_aenqueue_and_aget_result(alias: str, chit_queue: chit.Queue) -> None:
    double = tasks().double.using(backend=alias)

    async def main() -> tuple[Any, Any]:
        result = await double.aenqueue(21)
        return result, await double.aget_result(result.id)

    result, read = asyncio.run(main())
    assert chit_queue.store.get(result.id) is not None
    assert (read.id, read.status, read.args) == (result.id, "READY", [21])


def test_the_backend_declares_what_it_supports(backend: Any) -> None:
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority


def test_a_cancelled_job_reads_back_as_failed_with_a_reason(
    alias: str, chit_queue: chit.Queue
) -> None:
    add = tasks().add.using(backend=alias, queue_name="ordered")
    result = add.enqueue(1, 2)
    chit_queue.store.cancel(result.id)
    read = add.get_result(result.id)
    assert read.status == "FAILED" and read.is_finished  # Django has no "cancelled"
    [error] = read.errors
    assert error.exception_class_path == "chit.errors.ChitError"
    assert issubclass(error.exception_class, chit.ChitError)


def test_enqueue_returns_the_stored_enqueued_at(alias: str, chit_queue: chit.Queue) -> None:
    """Not the application's clock read after the insert: the database's, as
    refresh() and get_result() read it back (SQLite keeps milliseconds)."""
    from django.db import transaction

    add = tasks().add.using(backend=alias, queue_name="ordered")
    results = [add.enqueue(1, 2)]
    with transaction.atomic(using=alias):  # inserted on Django's connection
        results.append(add.enqueue(3, 4))
    for result in results:
        job = chit_queue.store.get(result.id)
        assert job is not None and result.enqueued_at == job.created_at
        enqueued_at = result.enqueued_at
        result.refresh()
        assert result.enqueued_at == enqueued_at == add.get_result(result.id).enqueued_at


@pytest.mark.usefixtures("django_databases")
class TestEnqueueOutsideATransaction(SimpleTestCase):
    """SimpleTestCase makes any use of Django's database connections an error:
    chit writes through its own, and opens Django's only to join a transaction."""

    def test_enqueue_does_not_touch_djangos_connection(self) -> None:
        from django.db import connections

        aliases = ["default"] if postgres_skipped() else ["default", "pg"]
        for alias in aliases:
            # Opening it is what is forbidden; one left open by an earlier test is not.
            connections[alias].close()
            result = tasks().add.using(backend=alias, queue_name="ordered").enqueue(5, 6)
            assert connections[alias].connection is None
            queue = tasks().add.using(backend=alias).get_backend().queue
            job = queue.store.get(result.id)
            assert job is not None and job.payload == {"args": [5, 6], "kwargs": {}}
