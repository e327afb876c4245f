"""Running one job is a pipeline to exactly one outcome: check the job is still
ours, resolve the task, validate the payload, call the handler, classify what
happened. Nothing here raises: whatever a handler or its payload does, the job
gets an outcome, handed once to the pipeline's `done`.

How a handler is called is the one replaceable step, an `Executor`: threads
for sync handlers and one event loop for async ones today (`worker/pool.py`).
What an executor reports goes through the same classification, so a deadline
or a child process plugs in as an executor that reports an error, not as a
second path to an outcome.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from chit import backoff
from chit.context import JobContext
from chit.encoding import storable_json_error, storable_text
from chit.errors import PermanentError
from chit.jobs import Cancelled, ClaimedJob, Failed, Outcome, Released, Succeeded
from chit.queue import Queue, Task, parse_payload
from chit.settings import Settings

log = logging.getLogger("chit.worker")

ERROR_MAX_CHARS = 8000


class Pipeline:
    """Runs jobs: each ends in exactly one outcome, passed to `done` once."""

    def __init__(
        self,
        queue: Queue,
        settings: Settings,
        done: Callable[[Outcome], None],
        *,
        sync: Executor,
        asynchronous: Executor,
    ) -> None:
        self.queue = queue
        self.settings = settings
        self.done = done
        self.sync = sync
        self.asynchronous = asynchronous

    def start(self, job: ClaimedJob, ctx: JobContext) -> None:
        log.info("job %s %s attempt %d/%d started", job.kind, job.id, job.attempt, job.max_attempts)
        # While it waited for a slot, cancellation was asked or the lease was lost.
        if ctx.cancelled:
            self.done(Cancelled(job.id, job.lease_token))
            return
        if ctx.lease_lost:
            self.done(Released(job.id, job.lease_token))  # fenced out: not ours now
            return
        prepared = prepare(self.queue, job, self.settings)
        if prepared.early is not None:
            self.done(prepared.early)
            return
        task = prepared.task
        assert task is not None
        executor = self.asynchronous if task.is_async else self.sync

        def report(returned: Returned) -> None:
            self.done(classify(job, ctx, self.settings, returned.result, returned.error))

        executor.submit(Call(task, ctx, prepared.body), report)


@dataclass(frozen=True, slots=True)
class Call:
    """One handler call: what an executor runs."""

    task: Task
    ctx: JobContext
    body: Any


@dataclass(frozen=True, slots=True)
class Returned:
    """How a call ended: the handler's result, or what it raised."""

    result: Any = None
    error: BaseException | None = None


Report = Callable[[Returned], None]


class Executor(Protocol):
    """Where and when handlers run."""

    def submit(self, call: Call, report: Report) -> None:
        """Start `call` and return at once. `report` is called exactly once, from
        any thread, with what the handler returned or raised (an executor that
        stops a call reports the error it stopped it with)."""
        ...


def invoke(call: Call) -> Returned:
    """Call a sync handler where the executor runs it."""
    try:
        return Returned(call.task.handler(call.ctx, call.body))
    except BaseException as e:  # a handler must not take its thread down
        return Returned(error=e)


async def ainvoke(call: Call) -> Returned:
    """Await an async handler on the executor's event loop."""
    try:
        return Returned(await call.task.handler(call.ctx, call.body))
    except BaseException as e:
        return Returned(error=e)


@dataclass(frozen=True)
class Prepared:
    """A job ready to call (its task and the body the handler receives), or the
    outcome that ends it before it runs."""

    task: Task | None
    body: Any
    early: Outcome | None


def prepare(queue: Queue, job: ClaimedJob, settings: Settings) -> Prepared:
    task = queue.tasks.get(job.kind)
    if task is None:
        # Another deployment may know this kind: retry rather than fail at once.
        error = f"UnknownKind: this worker has no handler for {job.kind!r}"
        return Prepared(None, None, retry_or_fail(job, error, settings))
    try:
        body = parse_payload(task, job.payload)
    except Exception as e:
        # Retrying cannot make a stored payload valid.
        return Prepared(
            task, None, Failed(job.id, job.lease_token, storable_text(f"InvalidPayload: {e}"))
        )
    return Prepared(task, body, None)


def classify(
    job: ClaimedJob,
    ctx: JobContext,
    settings: Settings,
    result: Any = None,
    error: BaseException | None = None,
) -> Outcome:
    try:
        return _classify(job, ctx, settings, result, error)
    except Exception as e:  # an exception whose str() fails, say: still one outcome
        return Failed(
            job.id, job.lease_token, f"{type(e).__name__}: the outcome could not be described"
        )


def _classify(
    job: ClaimedJob, ctx: JobContext, settings: Settings, result: Any, error: BaseException | None
) -> Outcome:
    if ctx.cancelled:
        return Cancelled(job.id, job.lease_token)
    if error is None:
        problem = storable_json_error(result)
        if problem is not None:
            return Failed(job.id, job.lease_token, f"ResultNotJSON: {problem}")
        return Succeeded(job.id, job.lease_token, result, ctx.last_progress())
    text = describe(error)
    if isinstance(error, PermanentError):
        return Failed(job.id, job.lease_token, text)
    return retry_or_fail(job, text, settings)


def retry_or_fail(job: ClaimedJob, error: str, settings: Settings) -> Failed:
    if job.attempt >= job.max_attempts:
        return Failed(job.id, job.lease_token, error)
    wait = backoff.delay(job.attempt, settings.backoff_base, settings.backoff_max)
    return Failed(job.id, job.lease_token, error, retry_in=wait)


def describe(error: BaseException) -> str:
    """'Type: message' first, so the first line groups failures; then the traceback."""
    try:
        message = str(error)
    except Exception:
        message = "<the exception's message could not be read>"
    headline = f"{type(error).__name__}: {message}".strip()
    trace = "".join(traceback.format_exception(error))
    text = f"{headline}\n\n{trace}"
    if len(text) > ERROR_MAX_CHARS:
        keep = ERROR_MAX_CHARS // 2
        text = f"{text[:keep]}\n… truncated …\n{text[-keep:]}"
    return storable_text(text)
