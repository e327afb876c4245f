"""The workflows benchmark's Celery app (bench/workflows.py): the chord that
matches chit's fan-in, N `leaf` header tasks and one `callback`, each
recording its start and end (recorder.py). Redis is the broker and the result
backend (a chord needs one), as systems/celery_redis.py has it otherwise
(prefetch multiplier 64).

    python bench/workflows_celery.py store chord N   send the chord; JSON {seconds, jobs}
    python bench/workflows_celery.py store plain N   the same N leaves, one at a time,
                                                     results ignored (as in systems/celery_redis.py)
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from celery import Celery, chord

from recorder import record

URL = os.environ["BENCH_REDIS_URL"]
app = Celery("workflows", broker=URL, backend=URL)
app.conf.update(
    worker_prefetch_multiplier=64,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="leaf")
def leaf(i: int, t: float) -> None:
    started = time.time()
    record(i, t, started)


@app.task(name="callback")
def callback(results: list[Any], i: int, t: float) -> None:
    started = time.time()
    if len(results) != i:  # the callback gets every header result
        raise RuntimeError(f"{len(results)} header results, not {i}")
    record(i, t, started)


if __name__ == "__main__":
    shape, n = sys.argv[2], int(sys.argv[3])
    t = time.time()
    started = time.perf_counter()
    if shape == "chord":
        chord(leaf.s(i, t) for i in range(n))(callback.s(n, t))
    else:
        # Without a chord nothing reads the results; storing them would also
        # subscribe the sender to each task's result channel.
        for i in range(n):
            leaf.apply_async((i, t), ignore_result=True)
    jobs = n + 1 if shape == "chord" else n
    print(json.dumps({"seconds": time.perf_counter() - started, "jobs": jobs}))
