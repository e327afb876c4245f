"""Finding the application's Queue from `--app module:attribute` / CHIT_APP."""

from __future__ import annotations

import importlib
import os
import sys

from chit.errors import ConfigError
from chit.queue import Queue


def load_queue(spec: str | None) -> Queue:
    """Import `module:attribute` (cwd on sys.path, as uvicorn does); a plain Queue
    with no tasks when no app is named."""
    if not spec:
        return Queue()
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
