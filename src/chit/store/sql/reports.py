"""What the API, the dashboard and the metrics read from the SQL stores
(`Reports`): attempts, steps, failures, counts, searches."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from chit.ids import id_prefix_range
from chit.jobs import (
    Attempt,
    AttemptOutcome,
    AttemptStats,
    FailureGroup,
    Job,
    MinuteCount,
    State,
    StateKindCount,
    Stats,
    Step,
)
from chit.store.sql.base import SQLBase, scalar


class ReportsSQL(SQLBase):
    def attempts(self, job_id: str) -> list[Attempt]:
        return [
            Attempt(
                **{name: r[name] for name in ("job_id", "attempt", "worker", "error")},
                started_at=self._at(r["started_at"]),
                finished_at=self.d.when(r["finished_at"]),
                outcome=None if r["outcome"] is None else AttemptOutcome(r["outcome"]),
            )
            for r in self._rows(self.Q["attempts"], {"id": job_id})
        ]

    def steps(self, job_id: str) -> list[Step]:
        return [
            Step(
                job_id=job_id,
                **{name: r[name] for name in ("name", "attempt")},
                result=self.d.loads(r["result"]),
                created_at=self._at(r["created_at"]),
            )
            for r in self._rows(self.Q["steps"], {"id": job_id})
        ]

    def failures(self, tenant: str | None = None) -> list[FailureGroup]:
        return [
            FailureGroup(
                **{name: r[name] for name in ("kind", "count", "latest_id")},
                error=r["first_line"],
                first_seen=self._at(r["first_seen"]),
                last_seen=self._at(r["last_seen"]),
            )
            for r in self._rows(self.Q["failures"], {"tenant": tenant})
        ]

    def stats(self, tenant: str | None = None, now: datetime | None = None) -> Stats:
        params = {"tenant": tenant, "now": self.d.now(now)}
        by_state = {s.value: 0 for s in State}
        by_kind: dict[str, dict[str, int]] = {}
        with self._read() as conn:
            for r in conn.execute(self.Q["stats_by_state_kind"], params).fetchall():
                by_state[r["state"]] += r["n"]
                by_kind.setdefault(r["kind"], {})[r["state"]] = r["n"]
            rows = conn.execute(self.Q["stats_last_hour"], params).fetchall()
            last_hour = {r["state"]: r["n"] for r in rows}
            return Stats(
                by_state=by_state,
                by_kind=by_kind,
                failed_last_hour=last_hour.get("failed", 0),
                succeeded_last_hour=last_hour.get("succeeded", 0),
                oldest_queued_age=scalar(conn.execute(self.Q["stats_queue_lag"], params)),
                stale_running=scalar(conn.execute(self.Q["stats_stale"], params)),
            )

    def get_many(self, job_ids: Sequence[str]) -> list[Job]:
        if not job_ids:
            return []
        rows = self._rows(self.Q["get_many"], {"ids": self.d.array(list(job_ids))})
        return [self._job(r) for r in rows]

    def attempt_stats(
        self, bounds: Sequence[float], tenant: str | None = None
    ) -> list[AttemptStats]:
        params = {"bounds": self.d.array([float(b) for b in bounds]), "tenant": tenant}
        rows = self._rows(self.Q["attempt_stats"], params)
        # Fold (kind, outcome, bucket) rows into one AttemptStats per kind and outcome.
        groups: dict[tuple[str, str | None], tuple[int, float, list[int]]] = {}
        for r in rows:
            key, count = (r["kind"], r["outcome"]), r["n"]
            total, seconds, buckets = groups.get(key, (0, 0.0, [0] * (len(bounds) + 1)))
            if r["bucket"] is not None:
                buckets[int(r["bucket"])] += count
            groups[key] = (total + count, seconds + (r["seconds"] or 0.0), buckets)
        return [
            AttemptStats(
                kind=kind,
                outcome=None if outcome is None else AttemptOutcome(outcome),
                count=total,
                duration_sum=seconds,
                buckets=tuple(buckets),
            )
            for (kind, outcome), (total, seconds, buckets) in sorted(
                groups.items(), key=lambda item: (item[0][0], item[0][1] or "")
            )
        ]

    def _by_tenant(self, name: str, tenant: str | None, seek: bool, **params: Any) -> Any:
        """All rows of a named query with a `{tenant}` term (Dialect.tenant)."""
        query = self.d.query(name, tenant=self.d.tenant(tenant, seek))
        return self._rows(query, params | {"tenant": tenant})

    def count_jobs(self, tenant: str | None = None, cap: int = 10_000) -> list[StateKindCount]:
        rows = self._by_tenant("count_by_state_kind", tenant, True, cap=cap)
        return [
            StateKindCount(State(r["state"]), r["kind"], r["n"], r["n"] >= cap)
            for r in rows
            if r["n"]
        ]

    def finished_per_minute(
        self, tenant: str | None = None, now: datetime | None = None
    ) -> list[MinuteCount]:
        rows = self._by_tenant("finished_per_minute", tenant, False, now=self.d.now(now))
        return [
            MinuteCount(self._at(r["minute"]), r["kind"], State(r["state"]), r["n"]) for r in rows
        ]

    def oldest_queued(self, tenant: str | None = None, now: datetime | None = None) -> Job | None:
        rows = self._by_tenant("oldest_queued", tenant, False, now=self.d.now(now))
        return self._job(rows[0]) if rows else None

    def stale_jobs(
        self, tenant: str | None = None, limit: int = 20, now: datetime | None = None
    ) -> list[Job]:
        rows = self._by_tenant("stale_jobs", tenant, True, now=self.d.now(now), limit=limit)
        return [self._job(r) for r in rows]

    def search(self, text: str, tenant: str | None = None, limit: int = 50) -> list[Job]:
        text = self.d.text(text.strip())
        if not text:
            return []
        rows = list(self._by_tenant("search_idempotency_key", tenant, True, key=text, limit=limit))
        bounds = id_prefix_range(text)
        if bounds is not None:
            low, high = bounds
            rows += self._by_tenant(
                "search_id_prefix", tenant, True, low=low, high=high, limit=limit
            )
        found = {r["id"]: self._job(r) for r in rows}
        return sorted(found.values(), key=lambda j: j.id, reverse=True)[:limit]

    def replay_failure_group(self, kind: str, error: str, tenant: str | None = None) -> int:
        query = self.d.query("replay_failure_group", tenant=self.d.tenant(tenant, True))
        params = {"kind": kind, "error": self.d.text(error), "tenant": tenant}
        return self._replayed(query, params)
