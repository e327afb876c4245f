"""Running one job is a pipeline to exactly one outcome: check the job is still
ours, resolve the task, validate the payload, call the handler, classify what
happened. Nothing here raises: whatever a handler or its payload does, the job
gets an outcome, handed once to the pipeline's `done`.

How a handler is called is the one replaceable step, an `Executor`: threads
(`worker/pool.py`) or child processes (`worker/children.py`) for sync handlers,
one event loop for async ones. What an executor reports goes through the same
classification, so a deadline or a child's death is an executor reporting an
error (`ReportedError`), not a second path to an outcome.

An outcome frees its slot with it, but for a handler past its deadline (a sync
thread cannot be stopped; an async one may be slow to unwind): its timeout is
recorded at the deadline while it keeps its slot until it returns, so then an
executor reports, and frees once it has returned.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from chit import backoff, tracing
from chit.checks import parse_payload
from chit.context import JobContext, timed_out
from chit.encoding import storable_json_error, storable_text
from chit.errors import PermanentError, Snooze, Suspend
from chit.jobs import (
    Cancelled,
    ClaimedJob,
    Failed,
    Outcome,
    Released,
    Snoozed,
    Succeeded,
    Suspended,
)
from chit.logs import job_fields
from chit.queue import Queue, Task
from chit.settings import Settings

log = logging.getLogger("chit.worker")

ERROR_MAX_CHARS = 8000


class Pipeline:
    """Runs jobs: each ends in exactly one outcome, passed once to `end` (in a
    worker, `Slots.end`; and `Slots.free` for a handler that runs on past it)."""

    def __init__(
        self,
        queue: Queue,
        settings: Settings,
        end: End,
        free: Free,
        *,
        sync: Executor,
        asynchronous: Executor,
        worker_id: str | None = None,
    ) -> None:
        self.worker_id = worker_id  # for the log lines
        self.queue = queue
        self.settings = settings
        self.end = end  # the job's outcome, ready to record, and its slot unless still running
        self.free = free  # the slot of a job ended while its handler ran on, once it returned
        self.sync = sync
        self.asynchronous = asynchronous

    def start(self, job: ClaimedJob, ctx: JobContext) -> None:
        if log.isEnabledFor(logging.INFO):  # its fields cost more than a no-op job
            log.info(
                "job %s %s attempt %d/%d started",
                job.kind,
                job.id,
                job.attempt,
                job.max_attempts,
                extra=job_fields(
                    "job.started",
                    job.id,
                    job.kind,
                    attempt=job.attempt,
                    worker=self.worker_id,
                    queue=job.queue,
                    max_attempts=job.max_attempts,
                ),
            )
        span = tracing.start_run(job, self.worker_id)
        # While it waited for a slot, cancellation was asked or the lease was lost.
        prepared = None
        if ctx.cancel_requested:
            early: Outcome | None = Cancelled(job.id, job.lease_token)
        elif ctx.lease_lost:
            early = Released(job.id, job.lease_token)  # fenced out: not ours now
        else:
            prepared = prepare(self.queue, job, self.settings)
            early = prepared.early
        if early is not None:
            tracing.end_run(span, early)
            self.end(early)
            return
        assert prepared is not None and prepared.task is not None
        task = prepared.task
        if ctx.timeout is None:  # a job stored before its task had a timeout
            ctx.timeout = task.timeout
        ctx.max_output_bytes = self.settings.max_output_bytes
        executor = self.asynchronous if task.is_async else self.sync

        def report(returned: Returned, running: bool = False) -> None:
            # invoke() has written the output already, but a deadline's outcome comes
            # while the handler still runs: what it emitted so far goes first
            ctx.flush_output()
            outcome = classify(job, ctx, self.settings, returned.result, returned.error)
            try:
                tracing.end_run(span, outcome, returned.error)
            finally:  # the slot is freed here: never lost to a tracing error
                self.end(outcome, running)

        call = Call(task, ctx, prepared.body, job, span)
        executor.submit(call, report, self.free)


@dataclass(frozen=True, slots=True)
class Call:
    """One handler call: what an executor runs."""

    task: Task
    ctx: JobContext
    body: Any
    job: ClaimedJob  # what a child process is sent: it parses the payload itself
    span: Any = None  # the attempt's trace span (chit.tracing), current while the handler runs


@dataclass(frozen=True, slots=True)
class Returned:
    """How a call ended: the handler's result, or what it raised."""

    result: Any = None
    error: BaseException | None = None


class Report(Protocol):
    """How a call ended, and whether its handler is still `running` (so keeps
    its slot) past it."""

    def __call__(self, returned: Returned, running: bool = False) -> None: ...


class End(Protocol):
    """A job's outcome, and whether its handler is still `running` past it."""

    def __call__(self, outcome: Outcome, running: bool = False) -> None: ...


Free = Callable[[str], None]  # the job's id


class Executor(Protocol):
    """Where and when handlers run."""

    def submit(self, call: Call, report: Report, free: Free) -> None:
        """Start `call` and return at once. `report` is called exactly once, from
        any thread, with what the handler returned or raised, or the error the
        executor stopped it with (`TimedOut` at `call.ctx.timeout`, a child's
        death); the call no longer takes a slot. Unless its handler is still
        running (past its deadline): then it reports with `running=True`, and
        calls `free(call.ctx.id)` once the handler has returned."""
        ...


class ReportedError(Exception):
    """An error described where it happened, stored as its `text`: a deadline, a
    child process's death, a handler's error raised in a child process."""

    def __init__(self, text: str, permanent: bool = False) -> None:
        super().__init__(text, permanent)
        self.text = text
        self.permanent = permanent  # fail without retry, as PermanentError

    def __str__(self) -> str:
        return self.text


class TimedOut(ReportedError):
    def __init__(self, seconds: float) -> None:
        super().__init__(timed_out(seconds))


class Once:
    """A report that takes the first of its callers (the handler or its deadline)
    and tells each later one it came too late."""

    def __init__(self, report: Report) -> None:
        self._report = report
        self._lock = threading.Lock()
        self._done = False

    def __call__(self, returned: Returned, running: bool = False) -> bool:
        with self._lock:
            if self._done:
                return False
            self._done = True
        self._report(returned, running)
        return True


def invoke(call: Call) -> Returned:
    """Call a sync handler where the executor runs it."""
    try:
        with tracing.activated(call.span):
            return Returned(call.task.handler(call.ctx, call.body))
    except BaseException as e:  # a handler must not take its thread down
        return Returned(error=e)
    finally:  # its output is written before its outcome
        call.ctx.flush_output()


async def ainvoke(call: Call) -> Returned:
    """Await an async handler on the executor's event loop."""
    try:
        with tracing.activated(call.span):
            return Returned(await call.task.handler(call.ctx, call.body))
    except BaseException as e:
        return Returned(error=e)
    finally:  # its output is written before its outcome, off the event loop
        if call.ctx.emitted:  # a job that emitted nothing skips the thread hop
            await asyncio.to_thread(call.ctx.flush_output)


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
    if ctx.cancel_requested:  # not a deadline: that is an error, retried
        return Cancelled(job.id, job.lease_token)
    if error is None and ctx.output_error is not None:  # a retry streams it whole
        return retry_or_fail(job, ctx.output_error, settings)
    if error is None:
        problem = storable_json_error(result)
        if problem is not None:
            return Failed(job.id, job.lease_token, f"ResultNotJSON: {problem}")
        return Succeeded(job.id, job.lease_token, result, ctx.last_progress())
    if isinstance(error, Snooze):  # its constructor checked the delay
        return Snoozed(job.id, job.lease_token, error.seconds)
    if isinstance(error, Suspend):  # JobContext.wait_for checked what it waits for
        return Suspended(job.id, job.lease_token, error.signal, error.jobs, error.timeout)
    if isinstance(error, ReportedError):
        text, permanent = storable_text(error.text), error.permanent
    else:
        text, permanent = describe(error), isinstance(error, PermanentError)
    if permanent:
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
