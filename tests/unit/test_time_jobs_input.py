"""Expiry and unique keys refused before anything is stored (DESIGN.md "Time"):
on enqueue, on JobRequest, and chit.Snooze's delay."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import chit
from chit.bounds import EXPIRES_IN_MAX, SNOOZE_MAX
from support.refusals import one_task_queue, refused_both_ways, stored

BAD_EXPIRES_IN = {
    "zero": 0,
    "negative": -1,
    "bool": True,
    "text": "30",
    "nan": float("nan"),
    "inf": float("inf"),
    "over-10-years": EXPIRES_IN_MAX + 1,
}


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[chit.Queue]:
    with one_task_queue(tmp_path) as q:
        yield q


@pytest.mark.parametrize("expires_in", BAD_EXPIRES_IN.values(), ids=BAD_EXPIRES_IN.keys())
def test_a_bad_expires_in_is_refused_and_nothing_is_stored(
    queue: chit.Queue, expires_in: object
) -> None:
    refused_both_ways(
        queue,
        {"expires_in": expires_in},
        "expires_in must be a number of seconds above 0",
        "expires_in",
    )
    assert stored(queue) == []


def test_a_bad_expires_at_is_refused_and_nothing_is_stored(queue: chit.Queue) -> None:
    now = datetime.now(UTC)
    cases = [
        ({"expires_at": now - timedelta(seconds=1)}, "has already passed"),
        ({"expires_at": "2030-01-01T00:00:00Z"}, "expires_at must be a datetime"),
        ({"expires_at": now + timedelta(hours=1), "expires_in": 60}, "not both"),
        (
            {"expires_at": now + timedelta(hours=1), "run_at": now + timedelta(hours=2)},
            "not after run_at",
        ),
        ({"expires_at": datetime(9999, 6, 1, tzinfo=UTC)}, "out of range"),
    ]
    for fields, message in cases:
        refused_both_ways(queue, fields, message)
    assert stored(queue) == []


def test_a_naive_expires_at_is_taken_as_utc(queue: chit.Queue) -> None:
    at = datetime.now(UTC).replace(tzinfo=None) + timedelta(hours=1)
    job = queue.get(queue.enqueue("t", expires_at=at).id)
    assert job.expires_at is not None
    assert abs((job.expires_at - at.replace(tzinfo=UTC)).total_seconds()) < 0.01


@pytest.mark.parametrize("seconds", [-1, True, float("nan"), SNOOZE_MAX + 1, "5", None])
def test_snooze_refuses_a_bad_delay(seconds: object) -> None:
    with pytest.raises(ValueError, match=r"chit\.Snooze takes a number of seconds from 0 to"):
        chit.Snooze(seconds)  # type: ignore[arg-type]


def test_snooze_keeps_its_delay_in_seconds() -> None:
    assert chit.Snooze(0).seconds == 0.0
    assert chit.Snooze(SNOOZE_MAX).seconds == SNOOZE_MAX
    assert str(chit.Snooze(1.5)) == "snoozed for 1.5 s"


@pytest.mark.parametrize("key", ["", "x" * 256, "a\nb", "clé", 7])
def test_a_bad_unique_key_is_refused_and_nothing_is_stored(queue: chit.Queue, key: object) -> None:
    refused_both_ways(
        queue, {"unique_key": key}, "unique key must be 1 to 255 printable ASCII", "unique key"
    )
    assert stored(queue) == []


def test_a_unique_key_match_is_no_idempotency_conflict(queue: chit.Queue) -> None:
    first = queue.enqueue("t", {"a": 1}, unique_key="u")
    again = queue.enqueue("t", {"a": 2}, unique_key="u", priority=5)
    assert (again.id, again.created, again.unique) == (first.id, False, True)
