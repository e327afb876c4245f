"""The benchmark's handlers: no-op jobs, so the figures measure chit itself.

Under the harness (BENCH_RECORD_DIR set) the handler also records when it
started; see recorder.py. Payloads are {"i": job number, "t": enqueue time}.

The flow-control steps limit the kind: BENCH_KIND_CONCURRENCY and
BENCH_KIND_RATE (drive.py sets them from --kind-concurrency and --kind-rate)
become the task's `concurrency` and `rate`. Unset, the task is declared as it
always was, so a chit from before flow control (--baseline) imports it too.
"""

import os
import time
from typing import Any

import chit
from recorder import record

queue = chit.Queue()

_limits: dict[str, Any] = {}
if os.environ.get("BENCH_KIND_CONCURRENCY"):
    _limits["concurrency"] = int(os.environ["BENCH_KIND_CONCURRENCY"])
if os.environ.get("BENCH_KIND_RATE"):
    _limits["rate"] = os.environ["BENCH_KIND_RATE"]


@queue.task("noop", **_limits)
def noop(job: chit.JobContext, body: dict) -> None:
    started = time.time()
    record(body.get("i", -1), body.get("t", 0.0), started)
    return None
