"""`chit worker --django` processes for tests/django, on tests/django_project."""

from __future__ import annotations

import os
from pathlib import Path

from support.processes import Proc, Procs, child_env

SETTINGS = "django_project.settings"


def start_worker(
    tmp_path: Path, env: dict[str, str], backend: str, queues: str, **extra: str
) -> tuple[Procs, Proc]:
    """A `chit worker --django` process on `backend`, started; stop it with
    `procs.cleanup()`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CHIT_")}
    procs = Procs(
        tmp_path, child_env(clean, PYTHONUNBUFFERED="1", CHIT_POLL_INTERVAL="0.2") | env | extra
    )
    proc = procs.start(
        [
            "-m",
            "chit",
            "worker",
            "--django",
            f"{SETTINGS}:{backend}",
            "--queues",
            queues,
            "--concurrency",
            "2",
        ],
        f"django-worker-{backend}",
    )
    try:
        proc.wait_started()
    except BaseException:
        procs.cleanup()
        raise
    return procs, proc
