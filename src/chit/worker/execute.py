"""Running one job is a pipeline to exactly one outcome: resolve the task,
validate the payload, call the handler, classify what happened. Nothing here
raises: whatever a handler or its payload does, the job gets an outcome."""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any

from chit import backoff
from chit.context import JobContext
from chit.encoding import storable_json_error, storable_text
from chit.errors import PermanentError
from chit.jobs import Cancelled, ClaimedJob, Failed, Outcome, Succeeded
from chit.queue import Queue, Task, parse_payload
from chit.settings import Settings

ERROR_MAX_CHARS = 8000


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
