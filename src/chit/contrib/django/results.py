"""A chit job read back as Django's `TaskResult`: state to status, attempts to
`worker_ids` (so `attempts` counts them), each failed attempt's stored error to
a `TaskError`, priorities turned back the other way."""

from __future__ import annotations

import builtins
import re
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

from chit.contrib.django import framework
from chit.jobs import Attempt, Job, State

# What a job failed of when no exception of the task's says why: its lease
# expired with no attempts left, it timed out, it was cancelled.
OUTSIDE_THE_TASK = "chit.errors.ChitError"

STATUS = {
    State.QUEUED: "READY",
    State.RUNNING: "RUNNING",
    State.SUCCEEDED: "SUCCESSFUL",
    State.FAILED: "FAILED",
    # Django has no cancelled status: the task did not succeed.
    State.CANCELLED: "FAILED",
}

# A line of a traceback naming the exception: "module.Class: message" (Python
# leaves the module out for builtins).
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")


def django_priority(chit_priority: int) -> int:
    """chit runs smaller numbers first, Django larger ones: the same scale turned
    over. A job submitted by other means may lie outside Django's range."""
    return max(framework.TASK_MIN_PRIORITY, min(framework.TASK_MAX_PRIORITY, -chit_priority))


def task_of(job: Job, alias: str) -> Any:
    """The Django Task a job was enqueued from, with the job's own priority,
    queue and run_after. Raises TaskResultDoesNotExist when the job's kind is not
    a Django task (a job of chit's own, or a task since removed)."""
    try:
        task = import_string(job.kind)
    except ImportError:
        task = None
    if not isinstance(task, framework.Task):
        raise framework.TaskResultDoesNotExist(
            f"job {job.id} is of kind {job.kind!r}, which is not a Django task"
        )
    payload = job.payload if isinstance(job.payload, dict) else {}
    run_after = payload.get("run_after")
    return task.using(
        priority=django_priority(job.priority),
        queue_name=job.queue,
        backend=alias,
        run_after=None if run_after is None else local(datetime.fromisoformat(run_after)),
    )


def task_result(
    job: Job, attempts: list[Attempt], return_value: Any, alias: str, task: Any = None
) -> Any:
    payload = job.payload if isinstance(job.payload, dict) else {}
    errors = [_task_error(a.error) for a in attempts if a.error]
    if job.state in (State.FAILED, State.CANCELLED) and not errors:
        errors.append(_task_error(job.error or f"job {job.state.value}"))
    result = framework.TaskResult(
        task=task if task is not None else task_of(job, alias),
        id=job.id,
        status=framework.TaskResultStatus[STATUS[job.state]],
        enqueued_at=local(job.created_at),
        started_at=local(job.started_at or (attempts[0].started_at if attempts else None)),
        finished_at=local(job.finished_at) if job.state.terminal else None,
        last_attempted_at=local(attempts[-1].started_at) if attempts else None,
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=alias,
        errors=errors,
        worker_ids=[a.worker for a in attempts],
    )
    if job.state == State.SUCCEEDED:
        object.__setattr__(result, "_return_value", return_value)
    return result


def _task_error(error: str) -> Any:
    return framework.TaskError(exception_class_path=exception_class_path(error), traceback=error)


def exception_class_path(error: str) -> str:
    """The dotted path of the exception a stored error describes. chit stores
    "Name: message", a blank line, then the traceback, whose last line naming
    `Name` gives its module; an error no exception raised names none."""
    name = error.split("\n", 1)[0].split(":", 1)[0].strip()
    if name.isidentifier() and "\n\n" in error:
        for line in reversed(error.splitlines()):
            match = _EXCEPTION_LINE.match(line)
            if match is None:
                continue
            path = match[1]
            if path.endswith(f".{name}"):
                return path
            if path == name and isinstance(getattr(builtins, name, None), type):
                return f"builtins.{name}"
    return OUTSIDE_THE_TASK


def local(value: datetime | None) -> datetime | None:
    """Aware UTC from chit; naive local time when the project runs with USE_TZ off."""
    if value is None or settings.USE_TZ:
        return value
    return timezone.make_naive(value)
