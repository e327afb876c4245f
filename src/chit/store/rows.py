"""Rows to values, the same for every backend.

A backend hands over its rows (mappings with the column names of the named
queries) and says how its columns decode: `loads` for JSON columns (SQLite
keeps text, PostgreSQL's jsonb arrives decoded) and `when` for times (ISO text,
or timestamptz values)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from chit.jobs import (
    ApiKey,
    Attempt,
    AttemptOutcome,
    AttemptStats,
    FailureGroup,
    Job,
    Progress,
    State,
)

Row = Mapping[str, Any]
Loads = Callable[[Any], Any]
When = Callable[[Any], datetime | None]


def job(r: Row, loads: Loads, when: When) -> Job:
    return Job(
        id=r["id"],
        kind=r["kind"],
        queue=r["queue"],
        priority=r["priority"],
        payload=loads(r["payload"]),
        state=State(r["state"]),
        attempts=r["attempts"],
        max_attempts=r["max_attempts"],
        run_at=_required(when(r["run_at"])),
        created_at=_required(when(r["created_at"])),
        updated_at=_required(when(r["updated_at"])),
        tenant=r["tenant"],
        idempotency_key=r["idempotency_key"],
        lease_expires_at=when(r["lease_expires_at"]),
        worker=r["worker"],
        progress=Progress(r["progress_done"], r["progress_total"]),
        checkpoint=loads(r["checkpoint"]),
        result=loads(r["result"]),
        result_external=bool(r["result_external"]),
        error=r["error"],
        cancel_requested=bool(r["cancel_requested"]),
        started_at=when(r["started_at"]),
        finished_at=when(r["finished_at"]),
        stale=bool(r["stale"]),
    )


def attempt(r: Row, when: When) -> Attempt:
    return Attempt(
        job_id=r["job_id"],
        attempt=r["attempt"],
        worker=r["worker"],
        started_at=_required(when(r["started_at"])),
        finished_at=when(r["finished_at"]),
        outcome=None if r["outcome"] is None else AttemptOutcome(r["outcome"]),
        error=r["error"],
    )


def failure_group(r: Row, when: When) -> FailureGroup:
    return FailureGroup(
        kind=r["kind"],
        error=r["first_line"],
        count=r["n"],
        first_seen=_required(when(r["first_seen"])),
        last_seen=_required(when(r["last_seen"])),
        latest_id=r["latest_id"],
    )


def api_key(r: Row, when: When) -> ApiKey:
    return ApiKey(
        id=r["id"],
        name=r["name"],
        tenant=r["tenant"],
        scopes=tuple(r["scopes"].split()),
        created_at=_required(when(r["created_at"])),
        revoked_at=when(r["revoked_at"]),
    )


def attempt_stats(rows: Iterable[Row], n_bounds: int) -> list[AttemptStats]:
    """Fold (kind, outcome, bucket, n, seconds) rows into one AttemptStats per
    kind and outcome."""
    groups: dict[tuple[str, str | None], tuple[int, float, list[int]]] = {}
    for r in rows:
        kind, outcome, bucket, count, seconds = (
            r["kind"], r["outcome"], r["bucket"], r["n"], r["seconds"]
        )  # fmt: skip
        total, seconds_sum, buckets = groups.get((kind, outcome), (0, 0.0, [0] * (n_bounds + 1)))
        if bucket is not None:
            buckets[int(bucket)] += count
        groups[(kind, outcome)] = (total + count, seconds_sum + (seconds or 0.0), buckets)
    return [
        AttemptStats(
            kind=kind,
            outcome=None if outcome is None else AttemptOutcome(outcome),
            count=total,
            duration_sum=seconds_sum,
            buckets=tuple(buckets),
        )
        for (kind, outcome), (total, seconds_sum, buckets) in sorted(
            groups.items(), key=lambda item: (item[0][0], item[0][1] or "")
        )
    ]


def _required(value: datetime | None) -> datetime:
    assert value is not None, "a NOT NULL time column was NULL"
    return value
