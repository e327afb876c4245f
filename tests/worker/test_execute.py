"""One job to one outcome: how each way a handler can end is classified."""

from __future__ import annotations

import random

import pytest
from pydantic import BaseModel

import chit
from chit import backoff
from chit.context import JobContext
from chit.jobs import Cancelled, ClaimedJob, Failed, Succeeded
from chit.settings import Settings
from chit.worker.execute import ERROR_MAX_CHARS, classify, describe, prepare

SETTINGS = Settings(backoff_base=2.0, backoff_max=60.0)


def claimed(attempt: int = 1, max_attempts: int = 3, kind: str = "k", payload=None) -> ClaimedJob:
    return ClaimedJob("j1", kind, "default", payload or {}, attempt, max_attempts, "tok")


def context(job: ClaimedJob) -> JobContext:
    return JobContext.of(job, store=None, lease_seconds=30)  # type: ignore[arg-type]  # classification never writes


def test_a_returned_value_succeeds_with_that_result() -> None:
    job = claimed()
    assert classify(job, context(job), SETTINGS, result={"n": 1}) == Succeeded(
        "j1", "tok", {"n": 1}
    )


def test_a_result_that_is_not_json_fails_without_retry() -> None:
    job = claimed()
    outcome = classify(job, context(job), SETTINGS, result={"when": object()})
    assert isinstance(outcome, Failed)
    assert outcome.retry_in is None
    assert outcome.error.startswith("ResultNotJSON")


def test_permanent_error_fails_at_once_with_the_error_first() -> None:
    job = claimed(attempt=1)
    outcome = classify(job, context(job), SETTINGS, error=chit.PermanentError("bad invoice"))
    assert isinstance(outcome, Failed)
    assert outcome.retry_in is None
    assert outcome.error.splitlines()[0] == "PermanentError: bad invoice"


def test_other_errors_retry_with_backoff_while_attempts_remain() -> None:
    job = claimed(attempt=2, max_attempts=3)
    outcome = classify(job, context(job), SETTINGS, error=ValueError("flaky"))
    assert isinstance(outcome, Failed)
    assert outcome.retry_in is not None
    assert 0 <= outcome.retry_in <= 4.0  # base 2 * 2**(2-1)


def test_the_last_attempt_fails_for_good() -> None:
    job = claimed(attempt=3, max_attempts=3)
    outcome = classify(job, context(job), SETTINGS, error=ValueError("flaky"))
    assert isinstance(outcome, Failed)
    assert outcome.retry_in is None


def test_a_cancelled_job_ends_cancelled_whatever_the_handler_did() -> None:
    job = claimed()
    ctx = context(job)
    ctx.mark_cancelled()
    assert classify(job, ctx, SETTINGS, result=1) == Cancelled("j1", "tok")
    assert classify(job, ctx, SETTINGS, error=ValueError()) == Cancelled("j1", "tok")


def test_a_return_whose_output_could_not_all_be_written_is_retried() -> None:
    job = claimed(attempt=1, max_attempts=3)
    ctx = context(job)
    ctx.output_error = "OutputNotWritten: 2 values emitted by attempt 1 could not be written"
    outcome = classify(job, ctx, SETTINGS, result={"n": 1})
    assert isinstance(outcome, Failed) and outcome.retry_in is not None
    assert outcome.error == ctx.output_error


def test_errors_are_truncated_but_keep_both_ends() -> None:
    try:
        raise RuntimeError("x" * (ERROR_MAX_CHARS * 2))
    except RuntimeError as e:
        text = describe(e)
    assert len(text) <= ERROR_MAX_CHARS + 50
    assert text.startswith("RuntimeError: xxx")
    assert "truncated" in text


def test_unknown_kind_is_retried_since_another_worker_may_know_it(
    queue: chit.Queue,
) -> None:
    prepared = prepare(queue, claimed(kind="nobody"), SETTINGS)
    assert isinstance(prepared.early, Failed)
    assert prepared.early.retry_in is not None
    assert "no handler for 'nobody'" in prepared.early.error


def test_a_stored_payload_that_no_longer_fits_the_model_fails_without_retry(
    queue: chit.Queue,
) -> None:
    class Body(BaseModel):
        n: int

    queue.task("typed", payload=Body)(lambda job, body: body.n)
    prepared = prepare(queue, claimed(kind="typed", payload={"n": "many"}), SETTINGS)
    assert isinstance(prepared.early, Failed)
    assert prepared.early.retry_in is None
    assert prepared.early.error.startswith("InvalidPayload")

    ok = prepare(queue, claimed(kind="typed", payload={"n": 3}), SETTINGS)
    assert ok.early is None
    assert ok.body == Body(n=3)


@pytest.mark.parametrize("attempt", [1, 2, 5, 10, 80])
def test_backoff_is_full_jitter_under_an_exponential_cap(attempt: int) -> None:
    rng = random.Random(attempt)
    ceiling = min(300.0, 1.5 * 2 ** (attempt - 1))
    delays = [backoff.delay(attempt, 1.5, 300.0, rng) for _ in range(200)]
    assert all(0 <= d <= ceiling for d in delays)
    assert max(delays) > ceiling * 0.8  # spread over the whole range, not clustered


def test_backoff_rejects_attempt_zero() -> None:
    with pytest.raises(ValueError):
        backoff.delay(0, 1, 10)
