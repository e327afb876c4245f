"""Submitting: what is refused before anything is stored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

import chit
from chit.settings import Settings


class Report(BaseModel):
    region: str = Field(min_length=1)
    year: int = 2026


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[chit.Queue]:
    q = chit.Queue(
        settings=Settings(database_url=f"sqlite:///{tmp_path / 'q.db'}", max_payload_bytes=2000)
    )
    q.task("report", payload=Report, max_attempts=3)(lambda job, body: None)
    q.task("free")(lambda job, body: None)
    yield q
    q.close()


def count(queue: chit.Queue) -> int:
    return sum(queue.store.stats().by_state.values())


def test_the_payload_is_stored_as_the_model_sees_it(queue: chit.Queue) -> None:
    job = queue.enqueue("report", {"region": "emea"})
    stored = queue.store.get(job.id)
    assert stored.payload == {"region": "emea", "year": 2026}
    assert stored.max_attempts == 3


@pytest.mark.parametrize(
    ("kind", "payload", "error", "text"),
    [
        ("nope", {}, chit.UnknownKind, "known kinds: free, report"),
        ("report", {"region": ""}, chit.InvalidPayload, "region"),
        ("report", {"year": "soon"}, chit.InvalidPayload, "year"),
        ("report", [1, 2], chit.InvalidPayload, "report"),
        ("free", {"blob": "x" * 5000}, chit.PayloadTooLarge, "limit is 2000 bytes"),
        ("free", {"when": object()}, chit.InvalidPayload, "not JSON"),
        ("free", {"n": float("nan")}, chit.InvalidPayload, "not JSON"),
        ("free", {"text": "a\x00b"}, chit.InvalidPayload, "NUL character"),
    ],
)
def test_bad_submissions_are_refused_and_nothing_is_stored(
    queue: chit.Queue, kind: str, payload: object, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=text):
        queue.enqueue(kind, payload)
    assert count(queue) == 0


@pytest.mark.parametrize("key", ["", "k" * 256, "tab\there", "naïve"])
def test_malformed_idempotency_keys_are_refused(queue: chit.Queue, key: str) -> None:
    with pytest.raises(chit.InvalidRequest, match="idempotency key"):
        queue.enqueue("free", {}, idempotency_key=key)
    assert count(queue) == 0


def test_a_literal_backslash_u0000_is_ordinary_text(queue: chit.Queue) -> None:
    job = queue.enqueue("free", {"text": "C:\\u0000"})
    assert queue.store.get(job.id).payload == {"text": "C:\\u0000"}


def test_the_same_key_and_request_returns_the_same_job(queue: chit.Queue) -> None:
    first = queue.enqueue("report", {"region": "emea"}, idempotency_key="emea-q3")
    again = queue.enqueue("report", {"region": "emea", "year": 2026}, idempotency_key="emea-q3")
    assert first.created and not again.created
    assert first.id == again.id
    assert count(queue) == 1


def test_the_same_key_with_another_request_is_a_conflict(queue: chit.Queue) -> None:
    first = queue.enqueue("report", {"region": "emea"}, idempotency_key="k1")
    with pytest.raises(chit.IdempotencyConflict, match=first.id):
        queue.enqueue("report", {"region": "apac"}, idempotency_key="k1")
    assert count(queue) == 1


def test_a_bulk_submission_with_one_bad_job_stores_none(queue: chit.Queue) -> None:
    jobs = [chit.JobRequest("free", {"i": i}) for i in range(50)]
    jobs.append(chit.JobRequest("report", {"region": ""}))
    with pytest.raises(chit.InvalidPayload):
        queue.enqueue_many(jobs)
    assert count(queue) == 0
    assert len(queue.enqueue_many(jobs[:50])) == 50


def test_registering_a_kind_twice_is_an_error(queue: chit.Queue) -> None:
    with pytest.raises(chit.ConfigError, match="registered twice"):
        queue.task("free")(lambda job, body: None)
