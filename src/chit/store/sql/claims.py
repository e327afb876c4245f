"""Claims on the SQL stores: the one-statement claim while no limit, pause or
mix of groups applies, else the flow claim (`chit.store.flow`), whose reads
are answered here with named queries."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from functools import cached_property
from typing import Any

from chit.jobs import Claimed, ClaimedJob
from chit.store.flow import (
    FLOW_SECONDS,
    THROTTLED_POLL,
    Claim,
    Flow,
    FlowClaim,
    FlowRead,
    GroupJobs,
    InUse,
    LockKinds,
    NextGroup,
    QueuedKinds,
    Spent,
    Turns,
    Usage,
)
from chit.store.sql.limits import LimitsSQL


def _claim_order(r: Any) -> tuple[Any, ...]:
    return (r["priority"], r["run_at"], r["id"])


def kinds_term(held: Sequence[str], runnable: frozenset[str] | None) -> str:
    """A one-statement claim's `{held}`: it leaves the `held` kinds' jobs queued,
    and, when the worker says which kinds it runs, every other kind's. As
    literals, not a parameter: PostgreSQL's generic plan, blind to a parameter's
    value, takes `kind <> ALL($n)` for one that excludes nearly every row and
    sorts the backlog instead of walking chit_jobs_claimable."""
    if runnable is not None:
        allowed = sorted(runnable - set(held))
        return f"kind IN ({_literals(allowed)})" if allowed else "false"
    return f"kind NOT IN ({_literals(held)})" if held else "true"


def runnable_kinds(kinds: Collection[str] | None) -> frozenset[str] | None:
    return None if kinds is None else frozenset(kinds)


def _literals(kinds: Sequence[str]) -> str:
    return ", ".join("'" + k.replace("'", "''") + "'" for k in kinds)


class ClaimsSQL(LimitsSQL):
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

    # Claiming

    def claim(
        self,
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        now: datetime | None = None,
        kinds: Collection[str] | None = None,
    ) -> Claimed:
        if limit <= 0 or not queues:
            return Claimed()
        claim = Claim(worker, queues, limit, lease_seconds, runnable_kinds(kinds))
        return self._claim(claim, self.d.now(now))

    def _claim(self, claim: Claim, now: Any) -> Claimed:
        flow = self._flow_for(claim)
        if flow is not None and set(claim.queues) <= flow.paused_queues:
            paused = Claimed()
            paused.look_again_at = time.monotonic() + THROTTLED_POLL
            return paused
        # One queue without flow control: one statement. Else one transaction, so
        # a failure part way leaves no job claimed by a worker that never heard of it.
        with self._write() if flow is None and len(claim.queues) == 1 else self._tx() as conn:
            return self._claim_in(conn, claim, now, flow)

    def _claim_in(self, conn: Any, claim: Claim, now: Any, flow: Flow | None) -> Claimed:
        """Claim inside the transaction open on `conn`, under `flow` (`_flow_for`):
        without it, queue by queue in the order given until `claim.limit` are claimed."""
        if flow is not None:
            return self._flow_claim(conn, claim, self._fixed_clock(conn, now), flow)
        claimed = Claimed()
        held = self._held_kinds()
        query = self._claim_query("claim", held, claim.kinds)
        for queue in claim.queues:
            params = {"queue": queue, "limit": claim.limit - len(claimed), "now": now}
            # In claim order: SQLite's UPDATE ... RETURNING gives rows in no order.
            claimed += self._claiming(conn, claim, query, params, _claim_order)
            if len(claimed) >= claim.limit:
                return claimed
        if held:
            # Short, while some kinds are held: jobs of theirs may have come since
            # the queues' shapes were read. Read them again, and let the flow claim
            # take what is left if it must.
            self._shapes.clear()
            flow = self._flow_for(claim)
            if flow is not None:
                rest = claim._replace(limit=claim.limit - len(claimed))
                with self._transaction(conn):  # its lock held to the claim's commit
                    more = self._flow_claim(conn, rest, self._fixed_clock(conn, now), flow)
                claimed += more
                claimed.look_again_at = more.look_again_at
        return claimed

    def _claim_query(
        self, name: str, held: tuple[str, ...], runnable: frozenset[str] | None
    ) -> Any:
        """A claim statement with its kinds (`kinds_term`), rendered once for each."""
        key = (name, held, runnable)
        query = self._claim_queries.get(key)
        if query is None:
            if len(self._claim_queries) > 64:  # limits and pauses came and went
                self._claim_queries.clear()
            query = self._claim_queries[key] = self.d.query(name, held=kinds_term(held, runnable))
        return query

    @cached_property
    def _claim_queries(self) -> dict[tuple[str, tuple[str, ...], frozenset[str] | None], Any]:
        return {}

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
        if isinstance(read, Spent):
            params = {"kind": read.kind, "now": now, "key": read.key}
            params["window"] = self.d.interval(-read.window)
            r = conn.execute(
                Q["kind_spent" if read.key is None else "key_spent"], params
            ).fetchone()
            return Usage(0, int(r["started"]), r["frees_in"])
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
            return [(r["id"], (r["priority"], r["run_at"], r["id"]), r["cost"]) for r in rows]
        return self._claim_ids(conn, claim, read.ids, now)

    def _claim_ids(self, conn: Any, claim: Claim, ids: Sequence[str], now: Any) -> list[ClaimedJob]:
        order = {job_id: n for n, job_id in enumerate(ids)}
        params = {"ids": self.d.array(list(ids)), "now": now}
        return self._claiming(conn, claim, self.Q["claim_ids"], params, lambda r: order[r["id"]])
