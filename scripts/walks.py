"""The two walks through chit's code a reader takes most (issue 23): from
`POST /jobs` to the stored row, and from a claim to its recorded outcome. Each
is traced on a real app on SQLite (every Python call into src/chit, in every
thread) and printed as the files entered in order, with how many files it
enters and how often it comes back to a file it had left.

    .venv/bin/python scripts/walks.py            # this tree
    PYTHONPATH=/path/to/other/src .venv/bin/python scripts/walks.py   # another

Run it before and after a change that moves code: the figures are exact, not
timings.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import chit
from chit.settings import Settings

ROOT = Path(chit.__file__).resolve().parent


class Walk:
    """The chit files entered, in order, across threads, while it is on."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self.on = False
        self.lock = threading.Lock()

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on or event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(str(ROOT)):
            return
        name = str(Path(path).resolve().relative_to(ROOT))
        with self.lock:
            if not self.files or self.files[-1] != name:
                self.files.append(name)

    def install(self) -> None:
        """Hook every thread started from now on (and this one); record nothing
        until `on`. Hooked before the app starts, so its threads are too."""
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)

    def uninstall(self) -> None:
        self.on = False
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]

    def __enter__(self) -> Walk:
        self.on = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.on = False

    def report(self, title: str) -> None:
        seen: set[str] = set()
        returns = 0
        for name in self.files:
            if name in seen:
                returns += 1
            seen.add(name)
        print(f"## {title}")
        print(f"files entered: {len(seen)}; steps: {len(self.files)}; returns: {returns}")
        print(" -> ".join(self.files))
        print()


def post_jobs(database_url: str) -> Walk:
    from fastapi.testclient import TestClient

    from chit.api.app import create_app

    settings = Settings.from_env().replace(
        database_url=database_url, api_keys=("walk-key-0123456789abcdef",)
    )
    queue = chit.Queue(settings=settings)

    @queue.task("noop")
    def noop(job: chit.JobContext, body: Any) -> None:
        return None

    walk = Walk()
    walk.install()
    with TestClient(create_app(queue)) as client:
        headers = {"Authorization": "Bearer walk-key-0123456789abcdef"}
        client.post("/jobs", json={"kind": "noop", "payload": {}}, headers=headers)  # warm
        with walk:
            answer = client.post("/jobs", json={"kind": "noop", "payload": {}}, headers=headers)
        assert answer.status_code == 202, answer.text
    walk.uninstall()
    queue.close()
    return walk


def claim_to_outcome(database_url: str) -> Walk:
    from chit.worker import Worker

    queue = chit.Queue(database_url)
    done = threading.Event()

    @queue.task("noop")
    def noop(job: chit.JobContext, body: Any) -> None:
        done.set()

    walk = Walk()
    walk.install()
    worker = Worker(queue)
    queue.enqueue("noop", {})
    worker.run_until_idle()  # warm: limits declared, statements prepared
    job = queue.enqueue("noop", {})
    done.clear()
    with walk:
        worker.run_once()
    done.wait(10)
    while True:  # the flush that records the outcome: the empty ones before it are not kept
        kept = len(walk.files)
        with walk:
            recorded = worker.flush()
        if recorded:
            break
        del walk.files[kept:]
        time.sleep(0.001)
    walk.uninstall()
    assert queue.store.get(job.id).state.value == "succeeded"
    queue.close()
    return walk


def main() -> None:
    print(f"chit from {ROOT}\n")
    with tempfile.TemporaryDirectory() as folder:
        post_jobs(f"sqlite:///{folder}/api.db").report("POST /jobs to the stored row")
        claim_to_outcome(f"sqlite:///{folder}/worker.db").report("a claim to its recorded outcome")


if __name__ == "__main__":
    main()
