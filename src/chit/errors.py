"""The exceptions chit raises, and the one handlers raise.

Exception
 ├── PermanentError          raised by a handler: fail now, no retry
 ├── Snooze                  raised by a handler: run again later, the attempt not counted
 ├── Suspend (a BaseException) raised by JobContext.wait_for / wait_for_jobs:
 │                          the attempt ends, the job waits (never caught by a handler's
 │                          `except Exception`)
 └── ChitError               raised by chit; `str(e)` is a message a person can act on
      ├── ConfigError        a CHIT_* setting or flag has a bad value
      ├── StoreError         the database cannot be reached or used
      ├── InvalidRequest     a submission is malformed (bad key, bad max_attempts)
      │    ├── UnknownKind       no task is registered under that kind
      │    ├── InvalidPayload    the payload does not fit the task's model
      │    └── PayloadTooLarge
      ├── IdempotencyConflict  the key was used before with a different request
      ├── JobNotFound
      ├── WorkflowNotFound
      ├── InvalidTransition  the job is not in a state that allows the action
      ├── InvalidStep        a durable step's name or result cannot be stored
      │                      (also a PermanentError: a retry would run the same code)
      ├── InvalidOutput      `job.emit` of a value JSON cannot hold, or past the
      │                      job's output cap (also a PermanentError)
      ├── InvalidWait        a wait or a signal cannot be: a bad name, timeout, data or
      │                      job to wait for (a PermanentError too, in a handler)
      └── JobFinished        a signal to a job that has finished
"""

from __future__ import annotations

from typing import Any

from chit.bounds import SNOOZE_MAX


class PermanentError(Exception):
    """Raise from a handler to fail the job at once, without retrying."""


class Snooze(Exception):
    """Raise from a handler to put the job back, due after `seconds`, without
    counting the attempt (polling something external burns no attempts). The
    attempt history shows it `snoozed`. `seconds` is a number from 0 to
    bounds.SNOOZE_MAX (30 days); anything else raises ValueError here, which
    fails the attempt like any error."""

    def __init__(self, seconds: float) -> None:
        number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
        if not number or not 0 <= seconds <= SNOOZE_MAX:  # NaN fails the comparison too
            raise ValueError(
                f"chit.Snooze takes a number of seconds from 0 to {SNOOZE_MAX:,} (30 days),"
                f" not {seconds!r}"
            )
        super().__init__(seconds)
        self.seconds = float(seconds)

    def __str__(self) -> str:
        return f"snoozed for {self.seconds:g} s"


class ChitError(Exception):
    """Base of every error chit raises on purpose."""


class ConfigError(ChitError):
    pass


class Unsupported(ConfigError):
    """The store in use lacks a capability a call needs (chit.store.capabilities)."""


class StoreError(ChitError):
    """`transient`: the database is away or busy and the same call may succeed
    later; False when this call itself can never be stored (bad data)."""

    def __init__(self, message: str, *, transient: bool = True) -> None:
        super().__init__(message)
        self.transient = transient


class DatabaseRefused(StoreError):
    """The database server answered and refused the URL's database, user or
    password: no wait mends that (a worker does not wait for it to)."""


class InvalidRequest(ChitError):
    pass


class UnknownKind(InvalidRequest):
    def __init__(self, kind: str, known: list[str]) -> None:
        self.kind = kind
        self.known = sorted(known)
        listed = ", ".join(self.known) or (
            "none are registered (name the module that registers them: --app module:queue,"
            " or CHIT_APP)"
        )
        super().__init__(f"unknown job kind {kind!r}; known kinds: {listed}")


class InvalidPayload(InvalidRequest):
    def __init__(self, kind: str, errors: list[dict[str, Any]]) -> None:
        self.kind = kind
        self.errors = errors
        details = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ())) or 'payload'}: {e.get('msg')}"
            for e in errors
        )
        super().__init__(f"invalid payload for {kind!r}: {details}")


class PayloadTooLarge(InvalidRequest):
    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"payload is {size} bytes as JSON; the limit is {limit} bytes")


class IdempotencyConflict(ChitError):
    def __init__(self, key: str, job_id: str) -> None:
        self.key = key
        self.job_id = job_id
        super().__init__(
            f"idempotency key {key!r} was already used for job {job_id} with a different request"
        )


class JobNotFound(ChitError):
    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"no job with id {job_id!r}")


class WorkflowNotFound(ChitError):
    def __init__(self, workflow_id: str) -> None:
        self.workflow_id = workflow_id
        super().__init__(f"no workflow with id {workflow_id!r}")


class InvalidTransition(ChitError):
    pass


class InvalidStep(ChitError, PermanentError):
    """Raised by `JobContext.step`: the name is empty, too long or not storable
    text, or the step's function returned a value that is not JSON. Nothing is
    stored, and the job fails without a retry unless the handler catches it."""


class InvalidOutput(ChitError, PermanentError):
    """`job.emit` was given a value JSON cannot hold, or the job's output would
    pass CHIT_MAX_OUTPUT_BYTES. Nothing of that value is stored; a retry would
    emit the same, so the attempt fails for good unless the handler catches it."""


class InvalidWait(ChitError, PermanentError):
    """Raised by `JobContext.wait_for` / `wait_for_jobs` and `Queue.signal`: a
    name, timeout or data out of bounds, or a job that may not be waited for
    (itself, unknown, another tenant's). In a handler the job fails without a
    retry unless the handler catches it."""


class JobFinished(InvalidTransition):
    """A signal to a job that has finished: nothing was stored."""


class Suspend(BaseException):
    """Raised by `JobContext.wait_for` and `wait_for_jobs` to end the attempt
    without an outcome: the worker records the job `waiting`. A BaseException,
    so a handler's `except Exception` does not swallow it; let it through."""

    def __init__(
        self,
        signal: str | None = None,
        jobs: tuple[str, ...] | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__(signal if signal is not None else f"{len(jobs or ())} jobs")
        self.signal = signal
        self.jobs = jobs
        self.timeout = timeout
