"""Running one job is a pipeline to exactly one outcome: resolve the task,
validate the payload, call the handler, classify what happened."""

from __future__ import annotations

import json
import random
import traceback
from typing import Any

from chit import backoff
from chit.context import JobContext
from chit.errors import InvalidPayload, PermanentError
from chit.jobs import Cancelled, ClaimedJob, Failed, Outcome, Succeeded
from chit.queue import Queue, Task, validate_payload
from chit.settings import Settings

ERROR_MAX_CHARS = 8000


class Prepared:
    """A job ready to call: its task, context and validated body; or the outcome
    that ends it before it runs."""

    def __init__(self, task: Task | None, body: Any, early: Outcome | None) -> None:
        self.task = task
        self.body = body
        self.early = early


def prepare(queue: Queue, job: ClaimedJob, settings: Settings) -> Prepared:
    task = queue.tasks.get(job.kind)
    if task is None:
        # Another deployment may know this kind: retry rather than fail at once.
        error = f"UnknownKind: this worker has no handler for {job.kind!r}"
        return Prepared(None, None, retry_or_fail(job, error, settings))
    try:
        body = job.payload
        if task.payload_model is not None:
            validate_payload(task, body)
            body = task.payload_model.model_validate(body)
    except InvalidPayload as e:
        # Retrying cannot make a stored payload valid.
        return Prepared(task, None, Failed(job.id, job.lease_token, f"InvalidPayload: {e}"))
    return Prepared(task, body, None)


def classify(
    job: ClaimedJob,
    ctx: JobContext,
    settings: Settings,
    result: Any = None,
    error: BaseException | None = None,
) -> Outcome:
    if ctx.cancelled:
        return Cancelled(job.id, job.lease_token)
    if error is None:
        try:
            json.dumps(result, allow_nan=False)
        except (TypeError, ValueError) as e:
            return Failed(job.id, job.lease_token, f"ResultNotJSON: {e}")
        return Succeeded(job.id, job.lease_token, result, ctx.take_progress())
    text = describe(error)
    if isinstance(error, PermanentError):
        return Failed(job.id, job.lease_token, text)
    return retry_or_fail(job, text, settings)


def retry_or_fail(job: ClaimedJob, error: str, settings: Settings) -> Failed:
    if job.attempt >= job.max_attempts:
        return Failed(job.id, job.lease_token, error)
    wait = backoff.delay(job.attempt, settings.backoff_base, settings.backoff_max, random)
    return Failed(job.id, job.lease_token, error, retry_in=wait)


def describe(error: BaseException) -> str:
    """'Type: message' first, so the first line groups failures; then the traceback."""
    headline = f"{type(error).__name__}: {error}".strip()
    trace = "".join(traceback.format_exception(error))
    text = f"{headline}\n\n{trace}"
    if len(text) > ERROR_MAX_CHARS:
        keep = ERROR_MAX_CHARS // 2
        text = f"{text[:keep]}\n… truncated …\n{text[-keep:]}"
    return text
