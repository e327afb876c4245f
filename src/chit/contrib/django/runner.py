"""A Django task as a chit handler. The worker calls the task's function with
the stored arguments (and a `TaskContext` when the task takes one), sends
Django's `task_started` and `task_finished` signals, and closes the database
connections Django would close after a request, so a long-running worker does
not keep dead or over-age ones (`CONN_MAX_AGE`) between jobs.

What the task raises goes on to chit unchanged: chit records it with its
traceback (which `results.exception_class_path` reads back) and retries or
fails the job as for any handler.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Awaitable, Callable
from inspect import iscoroutinefunction
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.utils import timezone

from chit.context import JobContext
from chit.contrib.django import framework
from chit.errors import PermanentError

# What the worker calls: (job, payload) -> the task's return value as JSON has it.
Handler = Callable[[JobContext, dict[str, Any]], Any]


def handler_for(task: Any, read_result: Callable[[str], Any]) -> Handler:
    """`read_result(job_id)` reads the job as a TaskResult (the backend's
    get_result): what the signals and the task's context carry."""
    if iscoroutinefunction(task.func):
        return _async_handler(task, read_result)

    def run(job: JobContext, body: dict[str, Any]) -> Any:
        close_old_connections()
        try:
            result = read_result(job.id)
            _started(result)
            args, kwargs = _arguments(task, result, body)
            try:
                value = framework.normalize_json(task.func(*args, **kwargs))
            except BaseException as e:
                _finished(result, job, e)
                raise
            _finished(result, job, None, value)
            return value
        finally:
            close_old_connections()

    return run


def _async_handler(task: Any, read_result: Callable[[str], Any]) -> Handler:
    close = sync_to_async(close_old_connections)

    async def run(job: JobContext, body: dict[str, Any]) -> Any:
        await close()
        try:
            # The store is blocking: off the event loop, as chit's worker reads it.
            result = await asyncio.to_thread(read_result, job.id)
            _started(result)
            args, kwargs = _arguments(task, result, body)
            try:
                coroutine: Awaitable[Any] = task.func(*args, **kwargs)
                value = framework.normalize_json(await coroutine)
            except BaseException as e:
                _finished(result, job, e)
                raise
            _finished(result, job, None, value)
            return value
        finally:
            await close()

    return run


def _arguments(task: Any, result: Any, body: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    args = list(body.get("args", []))
    if task.takes_context:
        args.insert(0, framework.TaskContext(task_result=result))
    return args, dict(body.get("kwargs", {}))


def _started(result: Any) -> None:
    framework.task_started.send(sender=_sender(result), task_result=result)


def _finished(result: Any, job: JobContext, error: BaseException | None, value: Any = None) -> None:
    """The attempt's outcome on the TaskResult the signal carries: SUCCESSFUL,
    FAILED when chit will not run the task again, READY when it will."""
    if error is None:
        status = "SUCCESSFUL"
        object.__setattr__(result, "_return_value", value)
    else:
        final = isinstance(error, PermanentError) or job.attempt >= job.max_attempts
        status = "FAILED" if final else "READY"
        path = f"{type(error).__module__}.{type(error).__qualname__}"
        trace = "".join(traceback.format_exception(error))
        result.errors.append(framework.TaskError(exception_class_path=path, traceback=trace))
    object.__setattr__(result, "status", framework.TaskResultStatus[status])
    if status != "READY":
        object.__setattr__(result, "finished_at", timezone.now())
    framework.task_finished.send(sender=_sender(result), task_result=result)


def _sender(result: Any) -> type:
    return type(result.task.get_backend())
