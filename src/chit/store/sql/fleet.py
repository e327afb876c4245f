"""The SQL stores' part of chit/fleet.py: workers' beats and each queue's
counts, in the statements of each dialect's queries.sql."""

from __future__ import annotations

import json
from datetime import datetime

from chit.fleet import LiveWorker, QueueCounts, WorkerBeat
from chit.store.sql.base import SQLBase


class FleetSQL(SQLBase):
    def beat_worker(
        self, beat: WorkerBeat, stale_after: float, now: datetime | None = None
    ) -> None:
        params = {
            "id": beat.id,
            "host": beat.host,
            "pid": beat.pid,
            "queues": json.dumps(list(beat.queues)),
            "kinds": json.dumps(list(beat.kinds)),
            "slots": beat.slots,
            "busy": beat.busy,
            "stale_after": self.d.interval(stale_after),
            "now": self.d.now(now),
        }
        with self._tx() as conn:
            conn.execute(self.Q["beat_worker"], params)
            conn.execute(self.Q["forget_dead_workers"], params)

    def forget_worker(self, worker_id: str) -> None:
        self._changed("forget_worker", {"id": worker_id})

    def live_workers(self, now: datetime | None = None) -> list[LiveWorker]:
        rows = self._rows(self.Q["live_workers"], {"now": self.d.now(now)})
        return [
            LiveWorker(
                WorkerBeat(
                    r["id"],
                    r["host"],
                    r["pid"],
                    tuple(self.d.loads(r["queues"])),
                    tuple(self.d.loads(r["kinds"])),
                    r["slots"],
                    r["busy"],
                ),
                self._at(r["started_at"]),
                self._at(r["seen_at"]),
            )
            for r in rows
        ]

    def queue_counts(
        self, tenant: str | None = None, now: datetime | None = None
    ) -> list[QueueCounts]:
        query = self.d.query("queue_counts", tenant=self.d.tenant(tenant, False))
        rows = self._rows(query, {"tenant": tenant, "now": self.d.now(now)})
        return [
            QueueCounts(
                r["queue"],
                int(r["ready"] or 0),
                int(r["scheduled"] or 0),
                int(r["running"] or 0),
                float(r["oldest_ready_seconds"] or 0.0),
            )
            for r in rows
        ]
