"""Flow control inside the claim (DESIGN.md, "Flow control"), written once for
both backends over the named queries of `queries.sql`.

A claim takes the backend's one-statement path while nothing here applies: no
limit and no pause exists and each queue it claims from holds a single group of
queued jobs. What holds is read at most once a `FLOW_SECONDS`, so an operator's
change reaches every claim within about a second. Otherwise `claim` runs, in the
claim's transaction:

1. Each queue's kinds with queued jobs, one index seek a kind (`queued_kinds`,
   a loose scan of `chit_jobs_groups`): a paused kind, or a kind at its limit, is stepped over
   whatever its backlog, which no claim scans.
2. For each limited kind: what is left of its limit, counted from the jobs and
   attempts themselves (`kind_in_use`), so no counter can drift; an outcome
   frees its slot in its own transaction, an expired lease at its expiry. On
   PostgreSQL a per-kind transaction lock, taken in kind order, makes claims of
   a limited kind count and claim one after another (`lock_kinds`); SQLite's
   write lock already does.
3. Groups of a kind (tenant, concurrency key) in turn, from where the last claim
   left off, and each group's first due jobs (`group_jobs`); a key's own limit
   caps its group (`key_in_use`).
4. The candidates merged: tenants in turn, keys in turn within a tenant,
   priority order within a key; claimed with SKIP LOCKED (`claim_ids`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, ClassVar, NamedTuple, Protocol

from chit.jobs import ClaimedJob
from chit.limits import KindLimits, Limits, Paused, Rate

# How old the store's view of limits, pauses and groups may be.
FLOW_SECONDS = 1.0
# How soon a worker held back by a limit looks again, unless a rate window
# frees sooner: another worker's outcome frees a slot without waking it.
THROTTLED_POLL = 0.1


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


class Claim(NamedTuple):
    """A worker asking for up to `limit` due jobs of `queues`, leased for
    `lease_seconds`: of `kinds`, those it has code for (None: any kind)."""

    worker: str
    queues: Sequence[str]
    limit: int
    lease_seconds: float
    kinds: frozenset[str] | None = None


class ClaimingStore(Protocol):
    """What flow control uses of `chit.store.sql.SQLStore`."""

    Q: ClassVar[dict[str, str]]
    d: ClassVar[Any]  # its Dialect
    throttled_until: float

    @property
    def _cursors(self) -> dict[tuple[str, str], tuple[str, str]]: ...

    @property
    def _turns(self) -> Mapping[str, Iterator[int]]: ...

    def _lock_kinds(self, conn: Any, kinds: Sequence[str]) -> bool: ...

    def _claim_ids(
        self, conn: Any, claim: Claim, ids: Sequence[str], now: Any
    ) -> list[ClaimedJob]: ...


@dataclass(frozen=True)
class Flow:
    """Limits and pauses as last read."""

    read_at: float = float("-inf")  # time.monotonic()
    kinds: Mapping[str, KindLimits] = field(default_factory=dict)
    paused: Sequence[Paused] = ()

    @property
    def limits(self) -> dict[str, Limits]:
        return {kind: k.effective for kind, k in self.kinds.items() if k.effective}

    @property
    def paused_queues(self) -> frozenset[str]:
        return frozenset(p.queue for p in self.paused if p.queue is not None)

    @property
    def paused_kinds(self) -> frozenset[str]:
        return frozenset(p.kind for p in self.paused if p.kind is not None)

    @cached_property
    def held_kinds(self) -> tuple[str, ...]:
        """Kinds only a flow claim may take: limited or paused. Read by every
        claim, so worked out once per reading of the flow."""
        return tuple(sorted(self.limits.keys() | self.paused_kinds))


def read_flow(store: ClaimingStore, conn: Any) -> Flow:
    declared: dict[str, Limits] = {}
    override: dict[str, Limits] = {}
    updated: dict[str, datetime | None] = {}
    for r in conn.execute(store.Q["flow_limits"]).fetchall():
        (declared if r["source"] == "code" else override)[r["kind"]] = row_limits(r)
        when = store.d.when(r["updated_at"])
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
            paused_at=store.d.when(r["paused_at"]),
        )
        for r in conn.execute(store.Q["flow_pauses"]).fetchall()
    ]
    return Flow(time.monotonic(), kinds, paused)


@dataclass(frozen=True, slots=True)
class Candidate:
    id: str
    kind: str
    tenant: str
    key: str
    order: tuple[Any, ...]  # (priority, run_at, id): the claim order within a key


class FlowClaim:
    """One claim under flow control, on a connection inside the claim's transaction."""

    def __init__(self, store: ClaimingStore, conn: Any, claim: Claim, now: Any, flow: Flow):
        self.store, self.conn, self.claim, self.now = store, conn, claim, now
        self.Q = store.Q
        self.limits = flow.limits
        self.paused_kinds = flow.paused_kinds
        self.paused_queues = flow.paused_queues
        # Starts a limited kind, and a limited key of a kind, have left in this
        # claim, whatever queue or tenant their jobs come from.
        self.room: dict[str, int] = {}
        self.key_room: dict[tuple[str, str], int] = {}
        self.throttled = False
        self.frees_in = THROTTLED_POLL  # seconds until a full rate window has room

    def run(self) -> list[ClaimedJob]:
        firsts = {q: self._kinds(q) for q in self.claim.queues if q not in self.paused_queues}
        if len(firsts) < len(self.claim.queues):
            self.throttled = True
        limited = sorted({k for kinds in firsts.values() for k in kinds if k in self.limits})
        self._count(limited)
        claimed: list[ClaimedJob] = []
        for queue, kinds in firsts.items():
            want = self.claim.limit - len(claimed)
            if want <= 0:
                break
            picked = self._pick(queue, kinds, want)
            if picked:
                claimed += self.store._claim_ids(self.conn, self.claim, picked, self.now)
        if self.throttled:
            self.store.throttled_until = time.monotonic() + max(0.0, self.frees_in)
        return claimed

    # 1. Kinds

    def _kinds(self, queue: str) -> dict[str, tuple[str, str]]:
        """Each kind with queued jobs in the queue and its first group (tenant, key),
        paused kinds and those the worker has no code for left out."""
        found: dict[str, tuple[str, str]] = {}
        runnable = self.claim.kinds
        for r in self.conn.execute(self.Q["queued_kinds"], {"queue": queue}).fetchall():
            if runnable is not None and r["kind"] not in runnable:
                continue  # another worker's: left queued, no throttle
            if r["kind"] in self.paused_kinds:
                self.throttled = True
            else:
                found[r["kind"]] = (r["tenant"], r["concurrency_key"])
        return found

    # 2. What each limited kind has left

    def _count(self, kinds: Sequence[str]) -> None:
        self.room = {k: self._left(k) for k in kinds}
        # A kind found full before the lock is left alone: its slots free only by
        # later commits, which a later claim sees. The others are counted again
        # under the lock, which may have waited for claims that took their room.
        open_ = [k for k in kinds if self.room[k] > 0]
        if open_ and self.store._lock_kinds(self.conn, open_):
            self.room |= {k: self._left(k) for k in open_}
        if any(left <= 0 for left in self.room.values()):
            self.throttled = True

    def _left(self, kind: str, key: str | None = None) -> int:
        """What is left of a limited kind's concurrency and rate, or of one key's of it."""
        limits = self.limits[kind]
        concurrency = limits.concurrency if key is None else limits.key_concurrency
        rate = limits.rate if key is None else limits.key_rate
        window = None if rate is None else self.store.d.interval(-rate.seconds)
        params = {"kind": kind, "now": self.now, "window": window, "key": key}
        query = "kind_in_use" if key is None else "key_in_use"
        r = self.conn.execute(self.Q[query], params).fetchone()
        left = self.claim.limit
        if concurrency is not None:
            left = min(left, concurrency - r["running"])
        if rate is not None:
            left = min(left, rate.count - r["started"])
            if left <= 0 and r["frees_in"] is not None:
                self.frees_in = min(self.frees_in, r["frees_in"])
        return left

    # 3. Groups in turn, and their jobs

    def _pick(self, queue: str, kinds: Mapping[str, tuple[str, str]], want: int) -> list[str]:
        open_kinds = [k for k in kinds if self.room.get(k, want) > 0]
        if not open_kinds:
            return []
        # Kinds in turn too: each claim starts one kind further on.
        turn = next(self.store._turns[queue]) % len(open_kinds)
        candidates: list[Candidate] = []
        # Every kind's next group, so that priority orders kinds as before; more
        # groups (tenants, keys) up to what a claim can take one job from each.
        groups_left = max(want, 2)
        visited: dict[str, list[tuple[str, str]]] = {}
        for kind in open_kinds[turn:] + open_kinds[:turn]:
            groups = visited[kind] = self._groups(queue, kind, kinds[kind], max(1, groups_left))
            groups_left -= len(groups)
            for tenant, key in groups:
                candidates += self._jobs(queue, kind, tenant, key, want)
        picked = self._merge(candidates, want)
        # The next claim starts after the last group served (or, if none was,
        # after the last one looked at), so every group comes first in turn.
        chosen = set(picked)
        served = {(c.kind, c.tenant, c.key) for c in candidates if c.id in chosen}
        for kind, groups in visited.items():
            ended = [g for g in groups if (kind, *g) in served] or groups
            self.store._cursors[queue, kind] = ended[-1]
        return picked

    def _groups(
        self, queue: str, kind: str, first: tuple[str, str], most: int
    ) -> list[tuple[str, str]]:
        """Up to `most` groups of the kind, starting after the one the last claim
        of this queue and kind ended on (`_pick` moves it on), and wrapping around."""
        cursor = self.store._cursors.get((queue, kind))
        start = first if cursor is None else (self._next_group(queue, kind, cursor) or first)
        groups = [start]
        while len(groups) < most:
            following = self._next_group(queue, kind, groups[-1]) or first
            if following == start:
                break
            groups.append(following)
        return groups

    def _next_group(self, queue: str, kind: str, after: tuple[str, str]) -> tuple[str, str] | None:
        params = {"queue": queue, "kind": kind, "tenant": after[0], "key": after[1]}
        r = self.conn.execute(self.Q["next_group"], params).fetchone()
        return None if r is None else (r["tenant"], r["concurrency_key"])

    def _jobs(self, queue: str, kind: str, tenant: str, key: str, want: int) -> list[Candidate]:
        most = min(want, self.room.get(kind, want))
        limits = self.limits.get(kind)
        if key and limits is not None and (limits.key_concurrency or limits.key_rate):
            if (kind, key) not in self.key_room:
                self.key_room[kind, key] = self._left(kind, key)
            if self.key_room[kind, key] < most:
                self.throttled = True
            most = min(most, self.key_room[kind, key])
        if most <= 0:
            return []
        params: dict[str, Any] = {"queue": queue, "kind": kind, "tenant": tenant, "key": key}
        params |= {"now": self.now, "limit": most}
        return [
            Candidate(r["id"], kind, tenant, key, (r["priority"], r["run_at"], r["id"]))
            for r in self.conn.execute(self.Q["group_jobs"], params).fetchall()
        ]

    # 4. The merge

    def _merge(self, candidates: Iterable[Candidate], want: int) -> list[str]:
        """Tenants in turn (in the order their groups came), keys in turn within
        a tenant, claim order within a key; no kind past what it has left."""
        keys: dict[str, dict[str, list[Candidate]]] = {}
        for c in candidates:
            keys.setdefault(c.tenant, {}).setdefault(c.key, []).append(c)
        turns = []
        for by_key in keys.values():
            ranked = [
                (rank, c.order, c)
                for group in by_key.values()
                for rank, c in enumerate(sorted(group, key=lambda c: c.order))
            ]
            ranked.sort(key=lambda item: item[:2])
            turns.append(deque(c for _, _, c in ranked))
        room, key_room = self.room, self.key_room
        picked: list[str] = []
        while turns and len(picked) < want:
            for turn in list(turns):
                while turn:
                    c = turn.popleft()
                    if room.get(c.kind, 1) > 0 and key_room.get((c.kind, c.key), 1) > 0:
                        picked.append(c.id)
                        if c.kind in room:
                            room[c.kind] -= 1
                        if (c.kind, c.key) in key_room:
                            key_room[c.kind, c.key] -= 1
                        break
                    self.throttled = True
                if not turn:
                    turns.remove(turn)
                if len(picked) >= want:
                    break
        return picked
