"""The pools benchmark's chit app (bench/pools.py): a no-op task and a 10 ms
CPU-bound one, each recording its start and end (recorder.py).

    python bench/pools_chit.py WORKLOAD N    enqueue N jobs of WORKLOAD in one call
"""

from __future__ import annotations

import sys
import time

import chit
from pools import CPU_SECONDS, spin
from recorder import record

queue = chit.Queue()


@queue.task("noop")
def noop(job: chit.JobContext, body: dict) -> None:
    started = time.time()
    record(body["i"], body["t"], started)


@queue.task("cpu")
def cpu(job: chit.JobContext, body: dict) -> None:
    started = time.time()
    spin(CPU_SECONDS)
    record(body["i"], body["t"], started)


if __name__ == "__main__":
    kind, n = sys.argv[1], int(sys.argv[2])
    t = time.time()
    queue.enqueue_many([chit.JobRequest(kind, {"i": i, "t": t}) for i in range(n)])
    queue.close()
