"""Schedules (chit/api/schedules.py; DESIGN.md, "Time")."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from chit.jobs import State
from chit.schedules import StoredSchedule, recent_slots, slot_key, slot_text


class PutSchedule(BaseModel):
    """`PUT /schedules/{name}`: declare or replace a schedule. Exactly one of
    `cron` (5 fields, in `tz`) and `every` ("30s", "15m", or seconds). A schedule
    whose rule is unchanged keeps its next slot; `paused` left out keeps its pause."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="the task kind each slot's job runs")
    payload: Any = Field(default=None, description="the jobs' payload (a JSON object)")
    cron: Any = Field(default=None, description='a 5-field cron rule, e.g. "0 8 * * *"')
    every: Any = Field(default=None, description='a period, e.g. "30s" or 30 (seconds); >= 1 s')
    tz: Any = Field(default="UTC", description='an IANA time zone for cron, e.g. "Europe/Paris"')
    catch_up: Any = Field(
        default="latest", description="after downtime: latest (one), all (each) or none"
    )
    paused: bool | None = Field(default=None, strict=True)  # 0 or "yes" is a slip


class ScheduleRun(BaseModel):
    """One of a schedule's recent jobs."""

    slot: str = Field(description="the slot in UTC, YYYY-MM-DDTHH:MM:SSZ")
    job_id: str
    state: State
    finished_at: datetime | None = None
    error: str | None = None

    @classmethod
    def recent(cls, jobs_of: Any, s: StoredSchedule, count: int = 10) -> list[ScheduleRun]:
        """The jobs of the schedule's last `count` slots, newest first, read with
        `jobs_of(keys)` (the store's schedule_runs): slots with no job left out."""
        slots = recent_slots(s.rule, s.last_slot, count)
        by_key = {j.idempotency_key: j for j in jobs_of([slot_key(s.name, t) for t in slots])}
        runs = []
        for t in slots:
            job = by_key.get(slot_key(s.name, t))
            if job is not None:
                runs.append(
                    cls(
                        slot=slot_text(t),
                        job_id=job.id,
                        state=job.state,
                        finished_at=job.finished_at,
                        error=job.error,
                    )
                )
        return runs


class ScheduleOut(BaseModel):
    name: str
    kind: str
    payload: dict[str, Any]
    rule: str = Field(description='as people read it: "0 8 * * * (Europe/Paris)", "every 30s"')
    cron: str | None
    every: int | None = Field(description="seconds")
    tz: str
    catch_up: str
    paused: bool
    source: str = Field(description="code (queue.schedule) or operator (CLI, API)")
    next_at: datetime = Field(description="the next slot to enqueue")
    last_slot: datetime | None
    last_job_id: str | None
    last_job_state: State | None
    created_at: datetime
    updated_at: datetime
    runs: list[ScheduleRun] | None = Field(
        default=None, description="GET /schedules/{name}: the recent slots' jobs, newest first"
    )

    @classmethod
    def of(cls, s: StoredSchedule, runs: Sequence[ScheduleRun] | None = None) -> ScheduleOut:
        return cls(
            name=s.name,
            kind=s.kind,
            payload=s.payload,
            rule=str(s.rule),
            cron=s.rule.cron,
            every=s.rule.every,
            tz=s.rule.tz,
            catch_up=s.catch_up,
            paused=s.paused,
            source=s.source,
            next_at=s.next_at,
            last_slot=s.last_slot,
            last_job_id=s.last_job_id,
            last_job_state=None if s.last_job_state is None else State(s.last_job_state),
            created_at=s.created_at,
            updated_at=s.updated_at,
            runs=None if runs is None else list(runs),
        )


class SchedulesOut(BaseModel):
    schedules: list[ScheduleOut]


class ScheduleRemoved(BaseModel):
    name: str
    removed: bool
