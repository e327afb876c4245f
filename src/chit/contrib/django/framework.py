"""Django's task framework, from wherever this install has it.

Django 6 ships it as `django.tasks`; on Django 5.2 (Python 3.11, which Django 6
no longer supports) the `django-tasks` backport provides the same API as
`django_tasks`, with two exceptions renamed. The rest of this package imports
the framework from here only, so the two spellings live in one place.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


def _first(*names: str) -> ModuleType:
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(
        "chit.contrib.django needs Django's task framework: Django 6 (django.tasks), or"
        " the django-tasks backport on Django 5.2; install chit[django]"
    )


_tasks = _first("django.tasks", "django_tasks")
_prefix = _tasks.__name__
_base = importlib.import_module(f"{_prefix}.base")
_backends = importlib.import_module(f"{_prefix}.backends.base")
_exceptions = importlib.import_module(f"{_prefix}.exceptions")
_signals = importlib.import_module(f"{_prefix}.signals")
# Django 6 moved normalize_json into django.utils; the backport keeps its own.
_json = _first("django.utils.json") if _prefix == "django.tasks" else _first("django_tasks.utils")

NAME: str = _prefix
# Typed as Any: Django ships no type hints, and the backport's differ from
# Django's; this package checks what it relies on in its tests instead.
BaseTaskBackend: Any = _backends.BaseTaskBackend
Task: Any = _base.Task
TaskContext: Any = _base.TaskContext
TaskError: Any = _base.TaskError
TaskResult: Any = _base.TaskResult
TaskResultStatus: Any = _base.TaskResultStatus
TASK_MIN_PRIORITY: int = _base.TASK_MIN_PRIORITY
TASK_MAX_PRIORITY: int = _base.TASK_MAX_PRIORITY
InvalidTask: type[Exception] = getattr(_exceptions, "InvalidTask", None) or (
    _exceptions.InvalidTaskError
)
TaskResultDoesNotExist: type[Exception] = _exceptions.TaskResultDoesNotExist
task_enqueued: Any = _signals.task_enqueued
task_started: Any = _signals.task_started
task_finished: Any = _signals.task_finished
task_backends: Any = _tasks.task_backends
# Arguments and return values as JSON has them (tuples become lists); raises
# TypeError or ValueError for anything else, as Django's own backends do.
normalize_json: Any = _json.normalize_json
