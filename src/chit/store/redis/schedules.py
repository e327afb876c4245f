"""Schedules on Redis (`Schedules`, chit/schedules.py; schedules.lua). Slots
are computed here, at the server's time; a declaration or a resume reads
that time first (two calls), everything else is one."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from chit.jobs import Job
from chit.schedules import Move, Rule, Schedule, StoredSchedule
from chit.store.capabilities import Schedules
from chit.store.redis import codec
from chit.store.redis.codec import clock, dumps, loads, ms
from chit.store.redis.core import RedisCore


def _rule(row: dict[str, Any]) -> Rule:
    return Rule(cron=row.get("cron"), every=row.get("every"), tz=row["tz"])


def _schedule(row: dict[str, Any]) -> Schedule:
    return Schedule(row["name"], row["kind"], loads(row["payload"]), _rule(row), row["catch_up"])


def _stored(out: Sequence[Any]) -> StoredSchedule:
    stored, state = out
    row = loads(stored)
    last_slot = row.get("last_slot")
    return StoredSchedule(
        name=row["name"],
        kind=row["kind"],
        payload=loads(row["payload"]),
        rule=_rule(row),
        catch_up=row["catch_up"],
        paused=bool(row["paused"]),
        next_at=codec.at(str(row["next_at"])),
        last_slot=None if last_slot is None else codec.at(str(last_slot)),
        last_job_id=row.get("last_job_id"),
        last_job_state=state,
        source=row["source"],
        created_at=codec.at(str(row["created_at"])),
        updated_at=codec.at(str(row["updated_at"])),
    )


class SchedulesRedis(RedisCore, Schedules):
    def _server_now(self, now: datetime | None) -> datetime:
        if now is not None:
            return now
        seconds, micros = self.redis.time()
        return codec.at(str(seconds * 1000 + micros // 1000))

    def declare_schedule(
        self, schedule: Schedule, source: str = "operator", now: datetime | None = None
    ) -> StoredSchedule:
        at = self._server_now(now)
        rule = schedule.rule
        row = {
            "name": schedule.name,
            "kind": schedule.kind,
            "payload": dumps(schedule.payload),
            "cron": rule.cron,
            "every": rule.every,
            "tz": rule.tz,
            "catch_up": schedule.catch_up,
            "source": source,
            "next_at": ms(rule.first_from(at)),
        }
        row = {name: v for name, v in row.items() if v is not None}
        return _stored(self.redis.fcall("chit_declare_schedule", ms(at), dumps(row)))

    def get_schedule(self, name: str) -> StoredSchedule | None:
        rows = self.redis.fcall_ro("chit_get_schedules", name)
        return _stored(rows[0]) if rows else None

    def list_schedules(self) -> builtins.list[StoredSchedule]:
        rows = [_stored(r) for r in self.redis.fcall_ro("chit_get_schedules")]
        return sorted(rows, key=lambda s: s.name)

    def remove_schedule(self, name: str) -> bool:
        return bool(self.redis.fcall("chit_remove_schedule", name))

    def pause_schedule(
        self, name: str, paused: bool, now: datetime | None = None
    ) -> StoredSchedule | None:
        found = self.get_schedule(name)
        if found is None:
            return None
        at = self._server_now(now)
        next_at = ms(found.rule.first_from(at))
        out = self.redis.fcall("chit_pause_schedule", ms(at), name, "1" if paused else "", next_at)
        return _stored(out) if out else None

    def schedule_clock(
        self, kinds: Sequence[str], now: datetime | None = None
    ) -> tuple[datetime, datetime | None]:
        at, first, *_ = self.redis.fcall_ro("chit_due_schedules", clock(now), 0, *kinds)
        return codec.at(str(at)), None if first == "" else codec.at(str(first))

    def due_schedules(
        self, kinds: Sequence[str], limit: int, now: datetime | None = None
    ) -> builtins.list[tuple[Schedule, datetime]]:
        _, _, *rows = self.redis.fcall_ro("chit_due_schedules", clock(now), limit, *kinds)
        due = [loads(r) for r in rows]
        return [(_schedule(r), codec.at(str(r["next_at"]))) for r in due]

    def advance_schedules(self, moves: Sequence[Move]) -> int:
        if not moves:
            return 0
        items = [
            {
                "name": m.name,
                "seen": ms(m.seen),
                "next_at": ms(m.next_at),
                "last_slot": None if m.last_slot is None else ms(m.last_slot),
                "last_job_id": m.last_job_id,
            }
            for m in moves
        ]
        return int(self.redis.fcall("chit_advance_schedules", dumps(items)))

    def schedule_runs(self, keys: Sequence[str]) -> builtins.list[Job]:
        if not keys:
            return []
        now, *flats = self.redis.fcall_ro("chit_schedule_runs", "", *keys)
        return [codec.job(codec.pairs(f), int(now)) for f in flats]
