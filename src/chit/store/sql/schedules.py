"""Schedules on the SQL stores (`Schedules`, chit/schedules.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from chit.jobs import Job
from chit.schedules import Move, Rule, Schedule, StoredSchedule
from chit.store.sql.base import SQLBase, dumps


class SchedulesSQL(SQLBase):
    def _rule(self, r: Any) -> Rule:
        return Rule(cron=r["cron"], every=r["every_seconds"], tz=r["tz"])

    def _declared(self, r: Any) -> dict[str, Any]:
        """The fields of a schedule row that a Schedule has."""
        fields = {name: r[name] for name in ("name", "kind", "catch_up")}
        return fields | {"payload": self.d.loads(r["payload"]), "rule": self._rule(r)}

    def _schedule(self, r: Any) -> StoredSchedule:
        return StoredSchedule(
            **self._declared(r),
            **{name: r[name] for name in ("last_job_id", "last_job_state", "source")},
            paused=bool(r["paused"]),
            next_at=self._at(r["next_at"]),
            last_slot=self.d.when(r["last_slot"]),
            created_at=self._at(r["created_at"]),
            updated_at=self._at(r["updated_at"]),
        )

    def _clock(self, conn: Any, kinds: Sequence[str], now: Any) -> tuple[datetime, datetime | None]:
        r = conn.execute(self.Q["schedule_clock"], {"now": now, "kinds": self.d.array(kinds)})
        row = r.fetchone()
        return self._at(row["now"]), self.d.when(row["next_at"])

    def declare_schedule(
        self, schedule: Schedule, source: str = "operator", now: datetime | None = None
    ) -> StoredSchedule:
        at = self.d.now(now)
        rule = schedule.rule
        params = {name: getattr(schedule, name) for name in ("name", "kind", "catch_up")}
        params |= {"cron": rule.cron, "every_seconds": rule.every, "tz": rule.tz}
        params |= {"payload": dumps(schedule.payload), "source": source, "now": at}
        with self._tx() as conn:
            clock, _ = self._clock(conn, [], at)
            params["next_at"] = self.d.time(rule.first_from(clock))
            conn.execute(self.Q["declare_schedule"], params)
            row = conn.execute(self.Q["get_schedule"], {"name": schedule.name}).fetchone()
        return self._schedule(row)

    def get_schedule(self, name: str) -> StoredSchedule | None:
        rows = self._rows(self.Q["get_schedule"], {"name": name})
        return self._schedule(rows[0]) if rows else None

    def list_schedules(self) -> list[StoredSchedule]:
        return [self._schedule(r) for r in self._rows(self.Q["list_schedules"], {})]

    def remove_schedule(self, name: str) -> bool:
        return self._changed("remove_schedule", {"name": name}) == 1

    def pause_schedule(
        self, name: str, paused: bool, now: datetime | None = None
    ) -> StoredSchedule | None:
        with self._tx() as conn:
            row = conn.execute(self.Q["get_schedule"], {"name": name}).fetchone()
            if row is None:
                return None
            clock, _ = self._clock(conn, [], self.d.now(now))
            next_at = self.d.time(self._rule(row).first_from(clock))
            params = {"name": name, "paused": paused, "next_at": next_at}
            conn.execute(self.Q["pause_schedule"], params)
            row = conn.execute(self.Q["get_schedule"], {"name": name}).fetchone()
        return self._schedule(row)

    def schedule_clock(
        self, kinds: Sequence[str], now: datetime | None = None
    ) -> tuple[datetime, datetime | None]:
        with self._read() as conn:
            return self._clock(conn, list(kinds), self.d.now(now))

    def due_schedules(
        self, kinds: Sequence[str], limit: int, now: datetime | None = None
    ) -> list[tuple[Schedule, datetime]]:
        params = {"kinds": self.d.array(list(kinds)), "limit": limit, "now": self.d.now(now)}
        rows = self._rows(self.Q["due_schedules"], params)
        return [(Schedule(**self._declared(r)), self._at(r["next_at"])) for r in rows]

    def advance_schedules(self, moves: Sequence[Move]) -> int:
        if not moves:
            return 0
        time = self.d.time
        items = [
            asdict(m)
            | {"seen": time(m.seen), "next_at": time(m.next_at)}
            | {"last_slot": None if m.last_slot is None else time(m.last_slot)}
            for m in moves
        ]
        return self._changed("advance_schedules", {"moves": dumps(items)})

    def schedule_runs(self, keys: Sequence[str]) -> list[Job]:
        if not keys:
            return []
        rows = self._rows(self.Q["schedule_runs"], {"keys": self.d.array(list(keys))})
        return [self._job(r) for r in rows]
