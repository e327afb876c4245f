"""Limits and pauses on the SQL stores (`FlowControl`), kept in chit_limits
and chit_pauses, and read by claims at most once a `FLOW_SECONDS`."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from chit.limits import KindLimits, Limits, Paused, Rate
from chit.store.flow import Flow
from chit.store.sql.base import SQLBase


def limit_params(kind: str, limits: Limits) -> dict[str, Any]:
    """A chit_limits row's parameters: each rate as its count and its `_seconds`."""
    params: dict[str, Any] = {"kind": kind, "concurrency": limits.concurrency}
    params["key_concurrency"] = limits.key_concurrency
    rates = [("rate", limits.rate), ("key_rate", limits.key_rate)]
    rates += [("cost_rate", limits.cost_rate), ("key_cost_rate", limits.key_cost_rate)]
    for name, rate in rates:
        params[name] = None if rate is None else rate.count
        params[f"{name}_seconds"] = None if rate is None else rate.seconds
    return params


def row_limits(r: Any) -> Limits:
    def rate(name: str) -> Rate | None:
        count, seconds = r[name], r[f"{name}_seconds"]
        return None if count is None or seconds is None else Rate(count, float(seconds))

    return Limits(
        r["concurrency"],
        rate("rate"),
        r["key_concurrency"],
        rate("key_rate"),
        rate("cost_rate"),
        rate("key_cost_rate"),
    )


class LimitsSQL(SQLBase):
    # Limits and pauses as last read by this process's claims.
    _flow: Flow = Flow()

    def _read_flow(self, conn: Any) -> Flow:
        declared: dict[str, Limits] = {}
        override: dict[str, Limits] = {}
        updated: dict[str, datetime | None] = {}
        for r in conn.execute(self.Q["flow_limits"]).fetchall():
            (declared if r["source"] == "code" else override)[r["kind"]] = row_limits(r)
            when = self.d.when(r["updated_at"])
            updated[r["kind"]] = max(filter(None, (updated.get(r["kind"]), when)), default=None)
        kinds = {
            kind: KindLimits(
                kind,
                declared=declared.get(kind, Limits()),
                override=override.get(kind, Limits()),
                updated_at=updated[kind],
            )
            for kind in sorted(updated)
        }
        paused = [
            Paused(
                queue=r["name"] if r["scope"] == "queue" else None,
                kind=r["name"] if r["scope"] == "kind" else None,
                paused_at=self._at(r["paused_at"]),
            )
            for r in conn.execute(self.Q["flow_pauses"]).fetchall()
        ]
        return Flow(time.monotonic(), kinds, paused)

    def _flow_changed(self, query: str, params: Mapping[str, Any]) -> int:
        """`_changed` for a write to limits or pauses, which claims then read afresh."""
        changed = self._changed(query, params)
        self._flow = Flow()
        return changed

    def declare_limits(self, declared: Mapping[str, Limits]) -> None:
        with self._write() as conn:
            for kind, limits in declared.items():
                name = "declare_limits" if limits else "forget_declared_limits"
                conn.execute(self.Q[name], limit_params(kind, limits))
        self._flow = Flow()

    def set_limits(self, kind: str, limits: Limits) -> KindLimits:
        self._flow_changed("set_limits", limit_params(kind, limits))
        return next(k for k in self.limits() if k.kind == kind)

    def clear_limits(self, kind: str) -> bool:
        return self._flow_changed("clear_limits", {"kind": kind}) == 1

    def limits(self, now: datetime | None = None) -> list[KindLimits]:
        with self._read() as conn:
            flow = self._read_flow(conn)
            rows = conn.execute(self.Q["limit_usage"], {"now": self.d.now(now)}).fetchall()
        usage = {r["kind"]: {"running": r["running"], "waiting": r["waiting"]} for r in rows}
        return [replace(k, **usage.get(kind, {})) for kind, k in flow.kinds.items()]

    def report_cost(
        self, job_id: str, lease_token: str, cost: int, now: datetime | None = None
    ) -> bool:
        params = {"id": job_id, "token": lease_token, "cost": cost}
        return self._changed("report_cost", params) == 1

    def pause(self, queue: str | None = None, kind: str | None = None) -> bool:
        return self._pausing("pause", queue, kind)

    def resume(self, queue: str | None = None, kind: str | None = None) -> bool:
        return self._pausing("resume", queue, kind)

    def _pausing(self, query: str, queue: str | None, kind: str | None) -> bool:
        if (queue is None) == (kind is None):
            raise ValueError("name a queue or a kind, not both")
        scope, name = ("queue", queue) if kind is None else ("kind", kind)
        return self._flow_changed(query, {"scope": scope, "name": name}) == 1

    def pauses(self) -> list[Paused]:
        with self._read() as conn:
            return list(self._read_flow(conn).paused)
