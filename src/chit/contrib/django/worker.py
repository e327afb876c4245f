"""The queue a chit worker runs for a Django project:
`chit worker --django myproject.settings[:BACKEND]`.

Django is set up from the settings module, every installed app's `tasks`
module is imported (and the backend's `MODULES`), so each `@task` has
registered its kind with the backend; the worker then serves the backend's
QUEUES unless `--queues` says otherwise.
"""

from __future__ import annotations

import importlib
import os
import sys

from chit.errors import ConfigError
from chit.queue import Queue


def django_queue(spec: str) -> Queue:
    settings_module, _, alias = spec.partition(":")
    alias = alias or "default"
    if not settings_module:
        raise ConfigError(f"--django {spec!r}: expected a settings module, e.g. mysite.settings")
    if os.getcwd() not in sys.path:  # as manage.py runs: the project's directory importable
        sys.path.insert(0, os.getcwd())
    # Django reads its settings module from here, as manage.py sets it; a
    # process pool's children inherit it.
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    try:
        import django
    except ImportError:
        raise ConfigError("--django needs Django: install chit[django]") from None
    try:
        django.setup()
    except ModuleNotFoundError as e:
        raise ConfigError(f"--django {spec!r}: cannot import module {e.name!r}") from None

    from django.apps import apps
    from django.utils.module_loading import autodiscover_modules

    from chit.contrib.django import framework
    from chit.contrib.django.backend import ChitBackend

    if alias not in framework.task_backends.settings:
        raise ConfigError(f"--django {spec!r}: no task backend {alias!r} in TASKS")
    backend = framework.task_backends[alias]
    if not isinstance(backend, ChitBackend):
        raise ConfigError(
            f"--django {spec!r}: TASKS[{alias!r}] is {type(backend).__name__},"
            " not chit.contrib.django.ChitBackend"
        )
    autodiscover_modules("tasks")
    modules = [
        sys.modules[f"{app.name}.tasks"]
        for app in apps.get_app_configs()
        if f"{app.name}.tasks" in sys.modules
    ]
    modules += [importlib.import_module(name) for name in backend.modules]
    # A task made for another backend may be enqueued on this one with
    # .using(backend=...): every task these modules define is this worker's to run.
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, framework.Task):
                backend.register(value)
    if backend.queue_names:  # none: any queue name is allowed; chit's --queues decide
        backend.queue.configure(queues=backend.queue_names)
    return backend.queue
