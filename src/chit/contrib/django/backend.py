"""`ChitBackend`: Django's task framework on chit's job table.

    TASKS = {
        "default": {
            "BACKEND": "chit.contrib.django.ChitBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"DATABASE": "default"},
        }
    }

OPTIONS (all optional):
- `DATABASE`: the alias in `DATABASES` whose database holds chit's tables.
  Without it (and without `DATABASE_URL`) chit's own settings decide
  (`CHIT_DATABASE_URL`).
- `DATABASE_URL`: a chit database URL of its own instead.
- `JOIN_TRANSACTION` (default True with `DATABASE`): a task enqueued inside
  `transaction.atomic()` on that database is inserted on Django's connection,
  in Django's transaction: the job exists if and only if it commits, and no
  worker can start it before. Off, the job is stored at once (Django's default:
  wrap the enqueue in `transaction.on_commit` yourself).
- `MAX_ATTEMPTS`: attempts before a task that raises is FAILED (default
  `CHIT_MAX_ATTEMPTS`). Between attempts the result is READY again, with the
  error in `errors`.
- `MODULES`: modules the worker imports besides each app's `tasks` module.

A task's chit kind is its module path (`myapp.tasks.send_email`); its
arguments are the job's payload, `{"args": [...], "kwargs": {...}}`.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.db.backends.signals import connection_created
from django.utils import timezone

from chit.bounds import NAME_MAX
from chit.contrib.django import framework, results
from chit.contrib.django.database import chit_url
from chit.contrib.django.runner import handler_for
from chit.errors import StoreError
from chit.jobs import Enqueued, State
from chit.queue import Queue
from chit.settings import Settings

log = logging.getLogger("chit.contrib.django")


class ChitBackend(framework.BaseTaskBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # Django keeps QUEUES as a set; a worker claims in this order, first first.
        self.queue_names = tuple(dict.fromkeys(params.get("QUEUES", ["default"])))
        options = dict(self.options)
        unknown = set(options) - {
            "DATABASE",
            "DATABASE_URL",
            "JOIN_TRANSACTION",
            "MAX_ATTEMPTS",
            "MODULES",
        }
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS']: unknown option(s) {', '.join(sorted(unknown))}"
            )
        self.database: str | None = options.get("DATABASE")
        url = options.get("DATABASE_URL")
        if self.database is not None:
            if url is not None:
                raise ImproperlyConfigured(
                    f"TASKS[{alias!r}]['OPTIONS']: give DATABASE or DATABASE_URL, not both"
                )
            if self.database not in settings.DATABASES:
                raise ImproperlyConfigured(
                    f"TASKS[{alias!r}]['OPTIONS']['DATABASE']: no database {self.database!r}"
                    " in DATABASES"
                )
            url = chit_url(self.database, settings.DATABASES[self.database])
        self.join_transaction = bool(options.get("JOIN_TRANSACTION", self.database is not None))
        if self.join_transaction and self.database is None:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS']: JOIN_TRANSACTION needs DATABASE, the Django"
                " database chit's tables live in"
            )
        self.max_attempts: int | None = options.get("MAX_ATTEMPTS")
        self.modules: list[str] = list(options.get("MODULES", []))
        self.queue = _shared_queue(alias, url)
        if self.join_transaction:
            _open_with(self.database, self.queue)

    # What Django calls

    def validate_task(self, task: Any) -> None:
        """Django validates each Task as it is made (the @task decorator,
        .using()): the moment to register its kind, so that a worker that imports
        the task's module knows how to run it."""
        super().validate_task(task)
        if len(task.module_path) > NAME_MAX:
            raise framework.InvalidTask(
                f"task path {task.module_path!r} is over {NAME_MAX} characters"
            )
        self.register(task)

    def register(self, task: Any) -> None:
        """Make a task's kind runnable by this backend's workers (once a kind)."""
        with _queues_lock:  # backends of two threads may meet one new kind at once
            if task.module_path not in self.queue.tasks:
                register = self.queue.task(task.module_path, max_attempts=self.max_attempts)
                register(handler_for(task, self.get_result))

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        # Django's own check and message for arguments JSON cannot hold (TypeError).
        payload: dict[str, Any] = {
            "args": framework.normalize_json(list(args)),
            "kwargs": framework.normalize_json(dict(kwargs)),
        }
        run_at = None if task.run_after is None else _aware(task.run_after)
        if run_at is not None:
            payload["run_after"] = run_at.astimezone(UTC).isoformat()
        enqueued = self.queue.enqueue(
            task.module_path,
            payload,
            priority=-task.priority,  # Django runs larger first, chit smaller
            queue=task.queue_name,
            run_at=run_at,
            connection=self._joined_connection(),
        )
        result = framework.TaskResult(
            task=task,
            id=enqueued.id,
            status=framework.TaskResultStatus.READY,
            # What is stored (the database's clock), so that refresh() and
            # get_result() read the same time back.
            enqueued_at=_enqueued_at(enqueued),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=payload["args"],
            kwargs=payload["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        framework.task_enqueued.send(sender=type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        store = self.queue.store
        job = store.get(result_id)
        if job is None:
            raise framework.TaskResultDoesNotExist(result_id)
        value = None
        if job.state == State.SUCCEEDED:
            _, value = store.get_result(result_id)
        return results.task_result(job, store.attempts(result_id), value, self.alias)

    # chit's side

    def _joined_connection(self) -> Any:
        """Django's DB-API connection when a transaction is open on it: chit
        inserts the job there. None otherwise (chit's own connection)."""
        if not self.join_transaction:
            return None
        assert self.database is not None
        connection = connections[self.database]
        # Not get_autocommit(), which connects: Django's connection is opened
        # only for a job that joins its transaction. One never opened (or in
        # autocommit) has no transaction to join.
        if not connection.in_atomic_block and (
            connection.connection is None or connection.autocommit
        ):
            return None
        # chit's tables must exist before a statement on Django's connection uses
        # them: opening the store creates them (once; see _open_with).
        self.queue.store  # noqa: B018
        connection.ensure_connection()
        raw = connection.connection
        if type(raw).__module__.split(".")[0] not in ("sqlite3", "psycopg"):
            raise ImproperlyConfigured(
                f"chit: cannot join a transaction on DATABASES[{self.database!r}]: it is on"
                f" {type(raw).__module__}, and chit needs sqlite3 or psycopg 3"
            )
        return raw


# Django makes a backend for each thread (as it does database connections); they
# share one chit Queue per alias and database: one store, one connection pool,
# one registry of kinds.
_queues: dict[tuple[str, str | None], Queue] = {}
_queues_lock = threading.RLock()


def _shared_queue(alias: str, url: str | None) -> Queue:
    with _queues_lock:
        queue = _queues.get((alias, url))
        if queue is None:
            # Settings from CHIT_* (what a worker's flags override), on this database.
            queue = _queues[(alias, url)] = Queue(url, settings=Settings.from_env())
        return queue


def _open_with(database: str | None, queue: Queue) -> None:
    """Open chit's store as Django connects to its database, before Django
    starts a transaction there: on SQLite, making chit's tables and switching
    the file to WAL would wait forever behind a Django transaction that
    already writes (with `transaction_mode` IMMEDIATE, one that has begun)."""

    def opened(sender: Any, connection: Any, **kwargs: Any) -> None:
        if connection.alias != database:
            return
        try:
            queue.store  # noqa: B018
        except StoreError as e:  # enqueue will say so; Django's connection is fine
            log.warning("chit: cannot open the task database yet: %s", e)

    connection_created.connect(opened, weak=False, dispatch_uid=f"chit.contrib.django:{database}")


def _enqueued_at(enqueued: Enqueued) -> datetime:
    """The stored created_at, as get_result() reads it back."""
    at = enqueued.created_at if enqueued.created_at is not None else datetime.now(UTC)
    local = results.local(at)
    assert local is not None
    return local


def _aware(run_after: datetime) -> datetime:
    """Django's validation wants aware times under USE_TZ; without it a naive
    time is local time (TIME_ZONE), which chit would otherwise read as UTC."""
    if timezone.is_aware(run_after):
        return run_after
    return timezone.make_aware(run_after, timezone.get_default_timezone())
