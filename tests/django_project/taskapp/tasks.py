"""The test project's tasks, found by the worker as an app's `tasks` module."""

from __future__ import annotations

import asyncio

try:
    from django.tasks import TaskContext, task
except ImportError:  # Django 5.2, with the django-tasks backport
    from django_tasks import TaskContext, task


class TaskBoom(Exception):
    """Raised by `boom`: a class of the project's own, so its path is checked."""


@task()
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="emails", priority=50)
def send_email(to: str, subject: str = "") -> dict[str, str]:
    return {"to": to, "subject": subject}


@task()
def boom(message: str) -> None:
    raise TaskBoom(message)


@task()
async def double(x: int) -> int:
    await asyncio.sleep(0)
    return 2 * x


@task(takes_context=True)
def attempt(context: TaskContext, tag: str) -> dict[str, object]:
    return {"attempt": context.attempt, "id": context.task_result.id, "tag": tag}


@task(takes_context=True, queue_name="retries")
def flaky(context: TaskContext) -> int:
    """Fails its first attempt."""
    if context.attempt < 2:
        raise TaskBoom(f"attempt {context.attempt} fails")
    return context.attempt
