"""Values in and out of Redis: times as milliseconds since the epoch, JSON as
text, and a job's hash (chit.lua's field names: its header lists them) read as a `Job`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from chit.jobs import ClaimedJob, DependencyCounts, Job, Progress, RunOn, State, WaitingFor

loads = json.loads
dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ms(value: datetime) -> int:
    """An aware (or UTC naive) datetime as whole milliseconds since the epoch."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def clock(now: datetime | None) -> str:
    """chit.lua's ARGV[1]: "" for the server's TIME, else a test's time."""
    return "" if now is None else str(ms(now))


def when(value: str | None) -> datetime | None:
    if value is None:
        return None
    # Exact, and half the time of fromtimestamp and replace (an enqueue reads one).
    return _EPOCH + timedelta(milliseconds=int(value))


def at(value: str) -> datetime:
    moment = when(value)
    assert moment is not None
    return moment


def opt_int(value: str | None) -> int | None:
    return None if value is None else int(value)


def opt_json(value: str | None) -> Any:
    return None if value is None else loads(value)


def job(f: dict[str, str], now_ms: int, states: dict[str, int] | None = None) -> Job:
    """A job's hash as `get` returns it; `states`: its dependencies' states, counted."""
    state = State(f["state"])
    lease = f.get("lease_expires_at")
    depends_on = tuple(loads(f["depends_on"])) if "depends_on" in f else ()
    counts = None
    if depends_on:
        n = states or {}
        done = n.get("succeeded", 0), n.get("failed", 0), n.get("cancelled", 0)
        counts = DependencyCounts(len(depends_on), *done, pending=sum(n.values()) - sum(done))
    timeout = f.get("timeout")
    return Job(
        id=f["id"],
        kind=f["kind"],
        queue=f["queue"],
        priority=int(f["priority"]),
        payload=loads(f["payload"]),
        state=state,
        attempts=int(f["attempts"]),
        max_attempts=int(f["max_attempts"]),
        run_at=at(f["run_at"]),
        created_at=at(f["created_at"]),
        updated_at=at(f["updated_at"]),
        tenant=f["tenant"],
        idempotency_key=f.get("idem"),
        lease_expires_at=when(lease),
        worker=f.get("worker"),
        progress=Progress(opt_int(f.get("pdone")), opt_int(f.get("ptotal")), f.get("pmsg")),
        checkpoint=opt_json(f.get("checkpoint")),
        result=opt_json(f.get("result")),
        result_external=f.get("result_ext") == "1",
        error=f.get("error"),
        cancel_requested=f.get("cancel") == "1",
        started_at=when(f.get("started_at")),
        finished_at=when(f.get("finished_at")),
        stale=state is State.RUNNING and lease is not None and int(lease) < now_ms,
        concurrency_key=f.get("ckey", ""),
        timeout=None if timeout is None else float(timeout),
        workflow_id=f.get("wf"),
        ref=f.get("ref"),
        run_on=RunOn(f.get("run_on", "succeeded")),
        cost=int(f.get("cost") or 1),
        depends_on=depends_on,
        dependencies=counts,
        expires_at=when(f.get("expires_at")),
        unique_key=f.get("unique"),
        debounce_key=f.get("deb"),
        waiting_for=waiting_for(f) if state is State.WAITING else None,
    )


def waiting_for(f: dict[str, str]) -> WaitingFor | None:
    """What a waiting job's hash says it waits for (a workflow's: None)."""
    if "wsig" not in f and "wjobs" not in f:
        return None
    jobs = f.get("wjobs")
    until = f.get("wuntil")
    return WaitingFor(
        signal=f.get("wsig"),
        jobs=None if jobs is None else tuple(loads(jobs)),
        until=None if until is None else when(until),
    )


# lifecycle.lua's CLAIMED: the fields a claim returns for each job, in this order.
CLAIMED_WIDTH = 14


def claimed(rows: list[Any]) -> list[ClaimedJob]:
    out = []
    for i in range(0, len(rows), CLAIMED_WIDTH):
        (
            job_id,
            kind,
            queue,
            payload,
            attempts,
            max_attempts,
            token,
            checkpoint,
            done,
            total,
            timeout,
            depends_on,
            tenant,
            traceparent,
        ) = rows[i : i + CLAIMED_WIDTH]
        out.append(
            ClaimedJob(
                job_id,
                kind,
                queue,
                loads(payload),
                int(attempts),
                int(max_attempts),
                token,
                None if checkpoint is None else loads(checkpoint),
                Progress(opt_int(done), opt_int(total)),
                None if timeout is None else float(timeout),
                depends_on is not None,
                tenant,
                traceparent,
            )
        )
    return out


def pairs(flat: list[Any]) -> dict[str, Any]:
    return dict(zip(flat[::2], flat[1::2], strict=True))
