"""The benchmark's handlers: no-op jobs, so the figures measure chit itself."""

import chit

queue = chit.Queue()


@queue.task("noop")
def noop(job: chit.JobContext, body: dict) -> None:
    return None
