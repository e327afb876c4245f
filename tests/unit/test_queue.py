"""Submitting: what is refused before anything is stored."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from pydantic import BaseModel, Field, field_validator

import chit
from chit import requests as requests_module
from chit.checks import parse_payload
from chit.queue import JobRequest
from chit.settings import Settings


class Report(BaseModel):
    region: str = Field(min_length=1)
    year: int = 2026
    ratio: float = 0.5


class Picky(BaseModel):
    """A validator that raises what pydantic does not wrap."""

    n: int

    @field_validator("n")
    @classmethod
    def even(cls, n: int) -> int:
        if n % 2:
            raise TypeError("no odd numbers")
        return n


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[chit.Queue]:
    q = chit.Queue(
        settings=Settings(database_url=f"sqlite:///{tmp_path / 'q.db'}", max_payload_bytes=2000)
    )
    q.task("report", payload=Report, max_attempts=3)(lambda job, body: None)
    q.task("free")(lambda job, body: None)
    q.task("picky", payload=Picky)(lambda job, body: None)
    yield q
    q.close()


def count(queue: chit.Queue) -> int:
    return sum(queue.store.stats().by_state.values())


def test_the_payload_is_stored_as_the_model_sees_it(queue: chit.Queue) -> None:
    job = queue.enqueue("report", {"region": "emea"})
    stored = queue.store.get(job.id)
    assert stored.payload == {"region": "emea", "year": 2026, "ratio": 0.5}
    assert stored.max_attempts == 3


@pytest.mark.parametrize(
    ("kind", "payload", "error", "text"),
    [
        ("nope", {}, chit.UnknownKind, "known kinds: free, picky, report"),
        ("report", {"region": ""}, chit.InvalidPayload, "region"),
        ("report", {"year": "soon"}, chit.InvalidPayload, "year"),
        ("report", [1, 2], chit.InvalidPayload, "report"),
        ("free", {"blob": "x" * 5000}, chit.PayloadTooLarge, "limit is 2000 bytes"),
        ("free", {"when": object()}, chit.InvalidPayload, "not JSON"),
        ("free", {"n": float("nan")}, chit.InvalidPayload, "not JSON"),
        ("free", {"text": "a\x00b"}, chit.InvalidPayload, "NUL character"),
        ("free", [1, 2], chit.InvalidPayload, "must be a JSON object, not an array"),
        ("free", "text", chit.InvalidPayload, "must be a JSON object, not a string"),
        ("free", 3, chit.InvalidPayload, "must be a JSON object, not a number"),
        ("free", True, chit.InvalidPayload, "must be a JSON object, not a boolean"),
        ("report", {"region": "emea", "ratio": float("nan")}, chit.InvalidPayload, "not JSON"),
        ("picky", {"n": 1}, chit.InvalidPayload, "TypeError: no odd numbers"),
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
    again = queue.enqueue("report", Report(region="emea"), idempotency_key="emea-q3")
    assert first.created and not again.created
    assert first.id == again.id
    assert count(queue) == 1


def test_the_same_key_with_another_request_is_a_conflict(queue: chit.Queue) -> None:
    first = queue.enqueue("report", {"region": "emea"}, idempotency_key="k1")
    with pytest.raises(chit.IdempotencyConflict, match=first.id):
        queue.enqueue("report", {"region": "apac"}, idempotency_key="k1")
    assert count(queue) == 1


def test_the_request_hash_is_of_the_stored_payload(queue: chit.Queue) -> None:
    """Number keys are stored as text, and sort as text: the same request again,
    spelled either way, is not a conflict."""
    first = queue.enqueue("free", {10: "a", 9: (1, 2)}, idempotency_key="k")
    again = queue.enqueue("free", {"9": [1, 2], "10": "a"}, idempotency_key="k")
    assert first.created and not again.created and first.id == again.id
    assert queue.store.get(first.id).payload == {"9": [1, 2], "10": "a"}
    with pytest.raises(chit.IdempotencyConflict):
        queue.enqueue("free", {"9": [1, 2], "10": "b"}, idempotency_key="k")


def test_the_payload_size_is_its_canonical_json_in_bytes(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 's.db'}", max_payload_bytes=20)
    with closing(chit.Queue(settings=settings)) as q:
        q.task("free")(lambda job, body: None)
        q.enqueue("free", {"t": "é" * 2})  # {"t":"\u00e9\u00e9"}: 20 bytes
        with pytest.raises(chit.PayloadTooLarge, match="21 bytes"):
            q.enqueue("free", {"t": "abcdefghijklm"})  # {"t":"abcdefghijklm"}: 21 bytes


@pytest.fixture
def two_tasks(tmp_path: Path) -> Iterator[chit.Queue]:
    """A task without a payload model and one with."""
    q = chit.Queue(settings=Settings(database_url=f"sqlite:///{tmp_path / 'r.db'}"))
    q.task("free")(lambda job, body: None)
    q.task("report", payload=Report)(lambda job, body: None)
    yield q
    q.close()


@pytest.mark.parametrize(
    ("bad", "error", "text"),
    [
        (chit.JobRequest("free", {"n": float("nan")}), chit.InvalidPayload, "not JSON"),
        (chit.JobRequest("free", {"when": object()}), chit.InvalidPayload, "not JSON"),
        (chit.JobRequest("free", {"text": "a\x00b"}), chit.InvalidPayload, "NUL character"),
        (chit.JobRequest("free", {"blob": "x" * 2_000_000}), chit.PayloadTooLarge, "bytes"),
        (chit.JobRequest("free", [1]), chit.InvalidPayload, "not an array"),
        (chit.JobRequest("nope", {}), chit.UnknownKind, "nope"),
        (chit.JobRequest("free", {}, priority=10**7), chit.InvalidRequest, "priority"),
    ],
)
def test_a_bulk_submission_raises_its_first_error(
    two_tasks: chit.Queue, bad: chit.JobRequest, error: type[Exception], text: str
) -> None:
    requests = [chit.JobRequest("free", {"i": i}) for i in range(1200)]
    requests[900] = chit.JobRequest("free", {"n": float("inf")})  # refused, but later
    requests[650] = bad
    with pytest.raises(error, match=text):
        two_tasks.enqueue_many(requests)
    assert count(two_tasks) == 0


def test_a_bulk_submission_with_one_bad_job_stores_none(queue: chit.Queue) -> None:
    jobs = [chit.JobRequest("free", {"i": i}) for i in range(50)]
    jobs.append(chit.JobRequest("report", {"region": ""}))
    with pytest.raises(chit.InvalidPayload):
        queue.enqueue_many(jobs)
    assert count(queue) == 0
    assert len(queue.enqueue_many(jobs[:50])) == 50


def test_a_bulk_submission_is_prepared_once_each_however_it_is_read(
    queue: chit.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stores read a batch by index and by iteration, interleaved; each
    request is checked once, and each read gives the same job, in order."""
    calls: list[int] = []
    real = requests_module.prepared

    def counted(request: JobRequest, *args: object) -> object:
        calls.append(request.payload["i"])
        return real(request, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(requests_module, "prepared", counted)
    batch = [chit.JobRequest("free", {"i": i}) for i in range(6)]
    batch.append(chit.JobRequest("free", {"i": 6, "bad": float("nan")}))
    jobs = requests_module.PreparedOnRead(batch, queue.tasks, queue.settings)
    read = jobs[1]
    seen = []
    iterator = iter(jobs)
    seen.append(next(iterator))
    seen.append(jobs[3])  # prepares 2 and 3 while the iteration stands at 1
    seen += [next(iterator) for _ in range(5)]
    with pytest.raises(chit.InvalidPayload):  # the bad one, when it is reached
        next(iterator)
    assert calls == [0, 1, 2, 3, 4, 5, 6]
    assert [job.payload["i"] for job in seen] == [0, 3, 1, 2, 3, 4, 5]
    assert seen[2] is read


def test_registering_a_kind_twice_is_an_error(queue: chit.Queue) -> None:
    with pytest.raises(chit.ConfigError, match="registered twice"):
        queue.task("free")(lambda job, body: None)


def test_a_task_without_a_model_takes_no_payload_as_an_empty_object(queue: chit.Queue) -> None:
    job = queue.enqueue("free")
    assert queue.store.get(job.id).payload == {}


def test_a_payload_is_stored_as_json_and_given_to_the_handler_as_its_body(
    queue: chit.Queue,
) -> None:
    stored = queue.prepare(JobRequest("report", {"region": "emea", "year": "2027"})).payload
    assert stored == {"region": "emea", "year": 2027, "ratio": 0.5}
    assert parse_payload(queue.tasks["report"], stored) == Report(region="emea", year=2027)
    free = queue.prepare(JobRequest("free", {"a": (1, 2)})).payload
    assert free == parse_payload(queue.tasks["free"], free) == {"a": [1, 2]}


def test_parse_payload_gives_the_handler_a_model_instance_or_a_dict(queue: chit.Queue) -> None:
    body = parse_payload(queue.tasks["report"], {"region": "emea", "year": 2026, "ratio": 0.5})
    assert isinstance(body, Report) and body.region == "emea"
    assert parse_payload(queue.tasks["free"], {"a": 1}) == {"a": 1}
    assert parse_payload(queue.tasks["free"], None) == {}


@pytest.mark.parametrize(
    ("kind", "stored", "text"),
    [
        ("free", [1, 2], "must be a JSON object, not an array"),
        ("free", "x", "must be a JSON object, not a string"),
        ("free", 0, "must be a JSON object, not a number"),
        ("report", {"region": ""}, "region"),
        ("report", [], "report"),
        ("picky", {"n": 3}, "TypeError: no odd numbers"),
    ],
)
def test_parse_payload_refuses_a_stored_payload_that_no_longer_fits(
    queue: chit.Queue, kind: str, stored: object, text: str
) -> None:
    with pytest.raises(chit.InvalidPayload, match=text):
        parse_payload(queue.tasks[kind], stored)


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"priority": 1_000_001}, "priority must be from -1,000,000 to 1,000,000, not 1000001"),
        ({"priority": -(2**63)}, "priority must be from -1,000,000 to 1,000,000"),
        ({"priority": 1.5}, "priority must be"),
        ({"priority": True}, "priority must be"),
        ({"max_attempts": 1001}, "max_attempts must be 1 to 1000, not 1001"),
        ({"max_attempts": 10**20}, "max_attempts must be 1 to 1000"),
        ({"max_attempts": 0}, "max_attempts must be 1 to 1000, not 0"),
        ({"run_at": datetime(1969, 12, 31, tzinfo=UTC)}, "1970 to 9998"),
        ({"run_at": datetime(9999, 1, 1)}, "run_at 9999-01-01T00:00:00\\+00:00 is out of range"),
        (
            {"run_at": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))},
            "run_at 0001-01-01T00:00:00\\+05:00 is out of range",
        ),
        ({"run_at": "2026-01-01"}, "run_at must be a datetime, not str"),
    ],
)
def test_out_of_range_submissions_are_refused_on_every_entry_point(
    queue: chit.Queue, fields: dict[str, object], text: str
) -> None:
    """Queue.prepare holds the bounds the HTTP API checks, for code and the CLI too."""
    with pytest.raises(chit.InvalidRequest, match=text):
        queue.enqueue("free", {}, **fields)  # type: ignore[arg-type]
    assert count(queue) == 0


def test_the_bounds_themselves_are_accepted(queue: chit.Queue) -> None:
    for fields in [
        {"priority": 1_000_000, "max_attempts": 1000},
        {"priority": -1_000_000, "max_attempts": 1},
        {"run_at": datetime(1970, 1, 1, tzinfo=UTC)},
        {"run_at": datetime(9998, 12, 31, 23, 59, tzinfo=UTC)},
    ]:
        queue.enqueue("free", {}, **fields)  # type: ignore[arg-type]
    assert count(queue) == 4


@pytest.mark.parametrize(
    ("options", "text"),
    [
        ({"max_attempts": 1001}, "max_attempts must be 1 to 1000"),
        ({"priority": 2_000_000}, "priority must be from -1,000,000 to 1,000,000"),
    ],
)
def test_a_task_registered_out_of_range_is_a_config_error(
    queue: chit.Queue, options: dict[str, int], text: str
) -> None:
    with pytest.raises(chit.ConfigError, match=text):
        queue.task("wide", **options)  # type: ignore[arg-type]


def test_enqueue_and_aenqueue_take_the_same_arguments_each_a_job_request_field() -> None:
    # Both build their JobRequest from their arguments by name (queue._one_request).
    def parameters(method: object) -> list[tuple[str, object, object]]:
        signature = inspect.signature(method)  # type: ignore[arg-type]
        return [(p.name, p.kind, p.default) for p in signature.parameters.values()]

    assert parameters(chit.Queue.enqueue) == parameters(chit.Queue.aenqueue)
    fields = {f.name for f in dataclasses.fields(JobRequest)}
    names = [name for name, _, _ in parameters(chit.Queue.enqueue)]
    assert set(names) - {"self", "connection"} <= fields


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"priority": 7, "queue": "q2", "max_attempts": 2, "tenant": "acme"},
        {"run_on": "succeeded", "cost": 1, "depends_on": (), "traceparent": None},
        {"depends_on": []},
        {"idempotency_key": "k-1"},
        {"cost": 3},
    ],
)
def test_a_request_without_rare_options_is_prepared_as_the_whole_way_prepares_it(
    queue: chit.Queue, monkeypatch: pytest.MonkeyPatch, options: dict[str, object]
) -> None:
    # A request whose rare options are at their defaults skips their checks
    # and fields: the job must be the one the whole way builds.
    queue.task("timed", timeout=30, priority=3, queue="slow", max_attempts=4)(lambda j, b: None)
    request = JobRequest("timed", {"a": 1}, **options)  # type: ignore[arg-type]
    short = queue.prepare(request)
    monkeypatch.setattr(requests_module, "_RARE_DEFAULTS", ())  # never matches
    assert queue.prepare(request) == short


class _Anything:
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


def test_an_option_that_equals_anything_is_still_checked(queue: chit.Queue) -> None:
    # Types are compared before values: a value whose == says yes to None
    # (a mock's ANY) must not pass for an option left out.
    with pytest.raises(chit.InvalidRequest):
        queue.prepare(JobRequest("free", {}, run_at=_Anything()))  # type: ignore[arg-type]


@pytest.mark.parametrize("cost", [True, 0, "1"])
def test_a_cost_equal_to_one_but_not_the_whole_number_one_is_checked(
    queue: chit.Queue, cost: object
) -> None:
    with pytest.raises(chit.InvalidRequest):
        queue.prepare(JobRequest("free", {}, cost=cost))  # type: ignore[arg-type]
