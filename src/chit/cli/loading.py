"""What the command line configures: the settings (CHIT_* variables with the
flags over them) and the application's Queue from `--app module:attribute` /
CHIT_APP. Nothing is written to the environment: a command passes its `Setup`
to what needs it, and `chit up` renders the settings for its children."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chit.errors import ConfigError
from chit.queue import Queue
from chit.settings import Settings

# Flag (argparse dest) -> Settings field.
FLAGS = {
    "database_url": "database_url",
    "app": "app",
    "concurrency": "concurrency",
    "prefetch": "prefetch",
    "queues": "queues",
    "lease": "lease_seconds",
    "grace": "grace_seconds",
    "poll_interval": "poll_interval",
    "pool": "pool",
    "max_jobs_per_child": "max_jobs_per_child",
    "max_memory_per_child": "max_memory_per_child",
    "host": "host",
    "port": "port",
    "log_format": "log_format",
}


@dataclass(frozen=True)
class Setup:
    settings: Settings
    # The flags given, as Settings fields: they win over the app queue's own
    # settings too, whether it read them from CHIT_* or was given them in code.
    flags: Mapping[str, Any]

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Setup:
        """Fails now, naming the variable, if anything is off."""
        flags: dict[str, Any] = {}
        for flag, field in FLAGS.items():
            value = getattr(args, flag, None)
            if value is not None:
                flags[field] = value
        if isinstance(flags.get("queues"), str):
            flags["queues"] = tuple(q.strip() for q in flags["queues"].split(",") if q.strip())
        _check_flags(flags)
        return cls(Settings.from_env(environ, **flags), flags)

    def stored_queue(self) -> Queue:
        """`queue()` for a command that reads or changes jobs already stored: a
        SQLite file that is not there is named, not made (an empty database
        would answer every such command with nothing)."""
        url = self.settings.database_url
        if url.startswith("sqlite:"):
            from chit.store.sqlite import path_from_url

            path = Path(path_from_url(url))
            if not path.exists():
                raise ConfigError(
                    f"no job database at {path.absolute()} ({url}): run this where your "
                    "app's database is, or name it with --database-url or CHIT_DATABASE_URL"
                )
        return self.queue()

    def queue(self) -> Queue:
        """The app's Queue with the flags applied; a plain Queue with no tasks
        when no app is named."""
        spec = self.settings.app
        if not spec:
            return Queue(settings=self.settings)
        queue = _import_queue(spec)
        queue.configure(**self.flags)
        return queue


def _check_flags(flags: Mapping[str, Any]) -> None:
    """A bad flag's value, named as the flag the user typed (`--concurrency has
    value -1: ...`), not as the CHIT_* variable the settings would blame."""
    try:
        Settings(**flags).validate()
    except ConfigError as e:
        for flag, field in FLAGS.items():
            variable = f"CHIT_{field.upper()}"
            if field in flags and str(e).startswith(f"{variable} "):
                option = "--" + flag.replace("_", "-")
                raise ConfigError(option + str(e).removeprefix(variable)) from None
        raise


def _import_queue(spec: str) -> Queue:
    """Import `module:attribute` (cwd on sys.path, as uvicorn does)."""
    module_name, _, attribute = spec.partition(":")
    attribute = attribute or "queue"
    if not module_name:
        raise ConfigError(f"--app {spec!r}: expected module:attribute, e.g. myapp.jobs:queue")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise ConfigError(f"--app {spec!r}: cannot import module {e.name!r}") from None
    queue = getattr(module, attribute, None)
    if not isinstance(queue, Queue):
        raise ConfigError(f"--app {spec!r}: {module_name}.{attribute} is not a chit.Queue")
    return queue
