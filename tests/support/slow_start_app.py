"""An app whose import waits for the test: it creates the file
CHIT_TEST_LOADING, then goes on once CHIT_TEST_GO exists. A signal sent in
between reaches a worker still loading its app, before its own handlers."""

from __future__ import annotations

import os
import time
from pathlib import Path

import chit

Path(os.environ["CHIT_TEST_LOADING"]).touch()
while not Path(os.environ["CHIT_TEST_GO"]).exists():
    time.sleep(0.01)  # the test's go-ahead: a file, as a child can see it

queue = chit.Queue()


@queue.task("noop")
def noop(job: chit.JobContext, body: dict[str, object]) -> None:
    return None
