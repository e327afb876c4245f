"""Flow control on the SQL stores: limits and pauses kept in chit_limits and
chit_pauses, the flow claim's reads (`chit.store.flow`) answered with named
queries, and when a claim may skip it all."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from datetime import datetime
from functools import cached_property
from typing import Any

from chit.jobs import Claimed, ClaimedJob
from chit.limits import KindLimits, Limits, Paused, Rate
from chit.store.flow import (
    FLOW_SECONDS,
    Claim,
    Flow,
    FlowClaim,
    FlowRead,
    GroupJobs,
    InUse,
    LockKinds,
    NextGroup,
    QueuedKinds,
    Turns,
    Usage,
)
from chit.store.sql.base import SQLBase


def limit_params(kind: str, limits: Limits) -> dict[str, Any]:
    """A chit_limits row's parameters: each rate as its count and its `_seconds`."""
    params: dict[str, Any] = {"kind": kind, "concurrency": limits.concurrency}
    params["key_concurrency"] = limits.key_concurrency
    for name, rate in (("rate", limits.rate), ("key_rate", limits.key_rate)):
        params[name] = None if rate is None else rate.count
        params[f"{name}_seconds"] = None if rate is None else rate.seconds
    return params


def row_limits(r: Any) -> Limits:
    def rate(name: str) -> Rate | None:
        count, seconds = r[name], r[f"{name}_seconds"]
        return None if count is None or seconds is None else Rate(count, float(seconds))

    return Limits(r["concurrency"], rate("rate"), r["key_concurrency"], rate("key_rate"))


class FlowSQL(SQLBase):
    # Limits and pauses as last read; whether each queue holds more than one
    # group of queued jobs (`_shape`), and where its turns stand.
    _flow: Flow = Flow()

    # Hooks a backend fills in where it differs.

    def _lock_kinds(self, conn: Any, kinds: Sequence[str]) -> bool:
        """Make claims of these limited kinds wait for each other, if the backend
        runs claims side by side; whether it locked."""
        return False

    def _transaction(self, conn: Any) -> AbstractContextManager[Any]:
        """The block's statements in one transaction on `conn`, which may be in
        one already (SQLite's writes always are)."""
        return nullcontext()

    def _opened(self, conn: Any, claim: Claim, rows: list[Any], now: Any) -> None:
        """Open the attempts of jobs `claim_ids` claimed, if it did not."""

    # Claiming chosen rows

    def _claiming(
        self, conn: Any, claim: Claim, query: Any, params: dict[str, Any], order: Callable[..., Any]
    ) -> list[ClaimedJob]:
        """Run a claim statement (`claim`, `claim_ids`) for `claim` at `params["now"]`;
        the jobs it claimed, their attempts opened, in `order`."""
        params |= {"worker": claim.worker, "lease": self.d.interval(claim.lease_seconds)}
        rows = sorted(conn.execute(query, params).fetchall(), key=order)
        self._opened(conn, claim, rows, params["now"])
        return [self._claimed(r) for r in rows]

    # When a claim must heed flow control

    def _flow_for(self, claim: Claim) -> Flow | None:
        """The flow a claim must heed, or None while the one-statement claim
        will do: no queue of the claim paused, and each holding one group of
        queued jobs, of a kind neither limited nor paused. Limits and pauses of
        other kinds cost it nothing: the statement leaves their jobs queued
        (`_held_kinds`), should one come while the shape read here is a second
        old, until the flow claim, which heeds them, takes over."""
        flow = self._flow
        if time.monotonic() - flow.read_at > FLOW_SECONDS:
            with self._read() as conn:
                flow = self._flow = self._read_flow(conn)
        held = self._held_kinds()
        for queue in claim.queues:
            mixed, kind = self._shape(queue)
            if mixed or kind in held or queue in flow.paused_queues:
                return flow
        return None

    def _held_kinds(self) -> tuple[str, ...]:
        """Kinds only a flow claim may take: limited or paused."""
        return self._flow.held_kinds

    def _shape(self, queue: str) -> tuple[bool, str | None]:
        """Whether the queue's queued jobs are of more than one kind, tenant or
        key, and if not, their kind (None: no queued jobs)."""
        shapes = self._shapes
        read_at, answer = shapes.get(queue, (float("-inf"), (False, None)))
        if time.monotonic() - read_at <= FLOW_SECONDS:
            return answer
        with self._read() as conn:
            first = conn.execute(self.Q["next_kind"], {"queue": queue, "kind": ""}).fetchone()
            answer = (False, None)
            if first is not None:
                kind = {"queue": queue, "kind": first["kind"]}
                group = kind | {"tenant": first["tenant"], "key": first["concurrency_key"]}
                several = bool(
                    conn.execute(self.Q["next_group"], group).fetchone()
                    or conn.execute(self.Q["next_kind"], kind).fetchone()
                )
                answer = (several, first["kind"])
        shapes[queue] = (time.monotonic(), answer)
        return answer

    @cached_property
    def _shapes(self) -> dict[str, tuple[float, tuple[bool, str | None]]]:
        return {}

    @cached_property
    def _turns(self) -> Turns:
        return Turns()

    # The flow claim's reads

    def _flow_claim(self, conn: Any, claim: Claim, now: Any, flow: Flow) -> Claimed:
        """Run `FlowClaim` on `conn`, inside the claim's transaction, at `now`."""
        steps = FlowClaim(claim, flow, self._turns).run()
        answer: Any = None
        try:
            while True:
                answer = self._answer(conn, claim, now, steps.send(answer))
        except StopIteration as done:
            claimed: Claimed = done.value
            return claimed

    def _answer(self, conn: Any, claim: Claim, now: Any, read: FlowRead) -> Any:
        Q = self.Q
        if isinstance(read, QueuedKinds):
            rows = conn.execute(Q["queued_kinds"], {"queue": read.queue}).fetchall()
            return [(r["kind"], r["tenant"], r["concurrency_key"]) for r in rows]
        if isinstance(read, InUse):
            window = None if read.window is None else self.d.interval(-read.window)
            params = {"kind": read.kind, "now": now, "window": window, "key": read.key}
            query = "kind_in_use" if read.key is None else "key_in_use"
            r = conn.execute(Q[query], params).fetchone()
            return Usage(r["running"], r["started"], r["frees_in"])
        if isinstance(read, LockKinds):
            return self._lock_kinds(conn, read.kinds)
        if isinstance(read, NextGroup):
            tenant, key = read.after
            params = {"queue": read.queue, "kind": read.kind, "tenant": tenant, "key": key}
            r = conn.execute(Q["next_group"], params).fetchone()
            return None if r is None else (r["tenant"], r["concurrency_key"])
        if isinstance(read, GroupJobs):
            params = {"queue": read.queue, "kind": read.kind, "tenant": read.tenant}
            params |= {"key": read.key, "now": now, "limit": read.limit}
            rows = conn.execute(Q["group_jobs"], params).fetchall()
            return [(r["id"], (r["priority"], r["run_at"], r["id"])) for r in rows]
        return self._claim_ids(conn, claim, read.ids, now)

    def _claim_ids(self, conn: Any, claim: Claim, ids: Sequence[str], now: Any) -> list[ClaimedJob]:
        order = {job_id: n for n, job_id in enumerate(ids)}
        params = {"ids": self.d.array(list(ids)), "now": now}
        return self._claiming(conn, claim, self.Q["claim_ids"], params, lambda r: order[r["id"]])

    # Limits and pauses (FlowControl)

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
