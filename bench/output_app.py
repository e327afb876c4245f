"""The output benchmark's handler (output_bench.py): emits body["count"] values
body["every"] seconds apart, each carrying the wall-clock time it was emitted."""

import time

import chit

queue = chit.Queue()


@queue.task("emitter", max_attempts=1)
def emitter(job: chit.JobContext, body: dict) -> int:
    for i in range(body["count"]):
        job.emit({"i": i, "t": time.time()})
        time.sleep(body["every"])
    return int(body["count"])
