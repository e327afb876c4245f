"""`job.emit` in the worker, in-process on a real SQLite file: sync and async
handlers' output is all written before their outcome (a retry's after the
failed attempt's), a handler's progress message reaches the job, and output
past CHIT_MAX_OUTPUT_BYTES fails the job for good with nothing of that value
stored."""

from __future__ import annotations

import asyncio

import chit
from chit.jobs import State
from chit.worker import Worker


def test_sync_and_async_output_is_written_before_the_outcome(queue: chit.Queue) -> None:
    @queue.task("tokens", max_attempts=2)
    def tokens(job: chit.JobContext, body: dict) -> int:
        for i in range(body["n"]):
            job.emit({"i": i, "attempt": job.attempt})
        job.progress(body["n"], body["n"], message="all emitted")
        if job.attempt == 1:
            raise ConnectionError("the first attempt fails after its output")
        return body["n"]

    @queue.task("atokens")
    async def atokens(job: chit.JobContext, body: dict) -> int:
        for i in range(body["n"]):
            job.emit(i)
            await asyncio.sleep(0)
        return body["n"]

    sync_job = queue.enqueue("tokens", {"n": 50})
    async_job = queue.enqueue("atokens", {"n": 30})
    Worker(queue).run_until_idle()

    done = queue.get(sync_job.id)
    assert done.state is State.SUCCEEDED and done.attempts == 2
    assert done.progress.message == "all emitted"
    out = queue.output(sync_job.id)
    assert [(o.seq, o.attempt, o.data["i"]) for o in out] == [
        (n + 1, 1 + n // 50, n % 50) for n in range(100)
    ]
    assert [o.data for o in queue.output(async_job.id)] == list(range(30))
    assert queue.get(async_job.id).state is State.SUCCEEDED


def test_output_past_the_cap_fails_the_job_for_good(queue: chit.Queue) -> None:
    queue.configure(max_output_bytes=100)

    @queue.task("chatty", max_attempts=3)
    def chatty(job: chit.JobContext, body: dict) -> None:
        for _ in range(10):
            job.emit("x" * 28)  # 30 bytes of JSON: the fourth passes the cap

    job = queue.enqueue("chatty", {})
    Worker(queue).run_until_idle()
    failed = queue.get(job.id)
    assert failed.state is State.FAILED and failed.attempts == 1
    assert failed.error is not None
    assert failed.error.startswith("InvalidOutput: emit: job ")
    assert "CHIT_MAX_OUTPUT_BYTES (100 bytes; 90 used, this value 30)" in failed.error
    assert [o.seq for o in queue.output(job.id)] == [1, 2, 3]
