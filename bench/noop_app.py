"""The benchmark's handlers: no-op jobs, so the figures measure chit itself.

Under the harness (BENCH_RECORD_DIR set) the handler also records when it
started; see recorder.py. Payloads are {"i": job number, "t": enqueue time}.
"""

import time

import chit
from recorder import record

queue = chit.Queue()


@queue.task("noop")
def noop(job: chit.JobContext, body: dict) -> None:
    started = time.time()
    record(body.get("i", -1), body.get("t", 0.0), started)
    return None
