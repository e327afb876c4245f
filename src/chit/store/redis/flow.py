"""Limits and pauses on Redis (`FlowControl`), and claims under them: the
flow claim (`chit.store.flow.FlowClaim`) with Redis answering its reads.

A claim takes the one-call path (lifecycle.lua's claim) while no queue of it is
paused and each holds one group of queued jobs of a kind neither limited nor
paused; that call leaves the limited and paused kinds' jobs queued. Otherwise
the flow claim runs, each read one call: a queue's groups (P:qg, its due
scheduled jobs made ready first), a group's due jobs (P:gr), a kind's or a
key's use (running leases P:rk, starts P:sk), and the claim of the chosen ids.
Its reads and its claim are not one atomic step, so the limited kinds it
counts are locked first (`LockKinds`: one short key a kind, all or none,
expiring by itself should the claimer die): two claims cannot both take a
limited kind's last slot. Round trips: 3 + 2 a limited kind + 1 a group.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from functools import cached_property
from typing import Any

from chit.errors import StoreError
from chit.jobs import Claimed, ClaimedJob, Outcome
from chit.limits import KindLimits, Limits, Paused, Rate
from chit.store.capabilities import FlowControl
from chit.store.flow import (
    FLOW_SECONDS,
    THROTTLED_POLL,
    Claim,
    ClaimIds,
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
from chit.store.redis import codec
from chit.store.redis.codec import clock, dumps, loads
from chit.store.redis.core import RedisCore

# How long a flow claim's lock of its limited kinds lives if never released
# (its claimer died), and how long another claim waits for it.
LOCK_MS = 2_000
LOCK_WAIT_SECONDS = 2.0


def _limits(stored: Mapping[str, Any] | None) -> Limits:
    if not stored:
        return Limits()

    def rate(name: str) -> Rate | None:
        count, seconds = stored.get(name), stored.get(f"{name}_seconds")
        return None if count is None or seconds is None else Rate(int(count), float(seconds))

    return Limits(
        stored.get("concurrency"),
        rate("rate"),
        stored.get("key_concurrency"),
        rate("key_rate"),
        rate("cost_rate"),
        rate("key_cost_rate"),
    )


def _stored(limits: Limits) -> str:
    """The fields given, as chit.lua stores them: each rate as its count and `_seconds`."""
    out: dict[str, Any] = {}
    for name in ("concurrency", "key_concurrency"):
        if getattr(limits, name) is not None:
            out[name] = getattr(limits, name)
    for name in ("rate", "key_rate", "cost_rate", "key_cost_rate"):
        rate = getattr(limits, name)
        if rate is not None:
            out[name], out[f"{name}_seconds"] = rate.count, rate.seconds
    return dumps(out)


def _group(kind: str, tenant: str, key: str) -> str:
    return f"{kind}\0{tenant}\0{key}"


class FlowRedis(RedisCore, FlowControl):
    # Limits and pauses as last read by this process's claims.
    _flow: Flow = Flow()

    # Limits and pauses

    def _read_flow(self) -> Flow:
        def read() -> tuple[dict[str, str], dict[str, str]]:
            pipe = self.redis.client.pipeline(transaction=False)
            pipe.hgetall(f"{self.prefix}:limits")
            pipe.hgetall(f"{self.prefix}:pauses")
            limits, pauses = pipe.execute()
            return limits, pauses

        limits, pauses = self.redis.run(read)
        kinds = {}
        for kind in sorted(limits):
            row = loads(limits[kind])
            times = [codec.when(str(row[t])) for t in ("code_at", "operator_at") if t in row]
            kinds[kind] = KindLimits(
                kind,
                declared=_limits(row.get("code")),
                override=_limits(row.get("operator")),
                updated_at=max(filter(None, times), default=None),
            )
        paused = []
        for field, at in pauses.items():
            scope, name = field.split("\0", 1)
            when = codec.at(at)
            paused.append(
                Paused(queue=name, kind=None, paused_at=when)
                if scope == "queue"
                else Paused(queue=None, kind=name, paused_at=when)
            )
        paused.sort(key=lambda p: (p.kind is not None, p.queue or p.kind or ""))
        return Flow(time.monotonic(), kinds, paused)

    def declare_limits(self, declared: Mapping[str, Limits]) -> None:
        for kind, limits in declared.items():
            self.redis.fcall("chit_write_limits", "", "declare", kind, _stored(limits))
        self._flow = Flow()

    def set_limits(self, kind: str, limits: Limits) -> KindLimits:
        self.redis.fcall("chit_write_limits", "", "set", kind, _stored(limits))
        self._flow = Flow()
        return next(k for k in self.limits() if k.kind == kind)

    def clear_limits(self, kind: str) -> bool:
        cleared = bool(self.redis.fcall("chit_write_limits", "", "clear", kind, "{}"))
        self._flow = Flow()
        return cleared

    def limits(self, now: datetime | None = None) -> list[KindLimits]:
        flow = self._read_flow()
        kinds = list(flow.kinds)
        if not kinds:
            return []
        usage = self.redis.fcall_ro("chit_limit_usage", clock(now), *kinds)
        return [
            replace(flow.kinds[kind], running=int(usage[2 * n]), waiting=int(usage[2 * n + 1]))
            for n, kind in enumerate(kinds)
        ]

    def report_cost(
        self, job_id: str, lease_token: str, cost: int, now: datetime | None = None
    ) -> bool:
        return bool(self.redis.fcall("chit_report_cost", clock(now), job_id, lease_token, cost))

    def pause(self, queue: str | None = None, kind: str | None = None) -> bool:
        return self._pausing("1", queue, kind)

    def resume(self, queue: str | None = None, kind: str | None = None) -> bool:
        return self._pausing("", queue, kind)

    def _pausing(self, on: str, queue: str | None, kind: str | None) -> bool:
        if (queue is None) == (kind is None):
            raise ValueError("name a queue or a kind, not both")
        scope, name = ("queue", queue) if kind is None else ("kind", kind)
        changed = bool(self.redis.fcall("chit_pausing", "", on, scope, name))
        self._flow = Flow()
        return changed

    def pauses(self) -> list[Paused]:
        return list(self._read_flow().paused)

    # Claims

    def _claim(self, claim: Claim, now: str) -> Claimed:
        flow = self._flow_for(claim)
        if flow is None:
            held = self._flow.held_kinds
            claimed = super()._claim_held(claim, now, held)
            if held and len(claimed) < claim.limit:
                claimed = self._and_the_rest(claim, now, claimed)
            return claimed
        return self._flow_claim(claim, now, flow)

    def _claims_in_one_call(self, claim: Claim) -> bool:
        return self._flow_for(claim) is None and not self._flow.held_kinds

    def _finish_and_claim(
        self, outcomes: Sequence[Outcome], claim: Claim, now: str, held: Sequence[str] = ()
    ) -> tuple[list[bool], Claimed]:
        flow = self._flow_for(claim)
        if flow is None:
            held = self._flow.held_kinds
            applied, claimed = super()._finish_and_claim(outcomes, claim, now, held)
            if held and len(claimed) < claim.limit:
                claimed = self._and_the_rest(claim, now, claimed)
            return applied, claimed
        # Under flow control the claim is several calls: the outcomes first.
        return self.finish_at(outcomes, now), self._flow_claim(claim, now, flow)

    def _and_the_rest(self, claim: Claim, now: str, claimed: Claimed) -> Claimed:
        """After a one-call claim that left held kinds' jobs queued: their shapes
        read again, and the flow claim takes what is left if it must."""
        self._shapes.clear()
        flow = self._flow_for(claim)
        if flow is None:
            return claimed
        more = self._flow_claim(claim._replace(limit=claim.limit - len(claimed)), now, flow)
        claimed += more
        claimed.look_again_at = more.look_again_at
        return claimed

    def _flow_for(self, claim: Claim) -> Flow | None:
        """The flow a claim must heed, or None while the one-call claim will do
        (see chit.store.sql.claims, whose rule this is)."""
        flow = self._flow
        if time.monotonic() - flow.read_at > FLOW_SECONDS:
            flow = self._flow = self._read_flow()
        held = flow.held_kinds
        for queue in claim.queues:
            mixed, kind = self._shape(queue)
            if mixed or kind in held or queue in flow.paused_queues:
                return flow
        return None

    def _shape(self, queue: str) -> tuple[bool, str | None]:
        """Whether the queue's queued jobs are of more than one group, and if
        not, their kind (None: no queued jobs); read at most once a FLOW_SECONDS."""
        read_at, answer = self._shapes.get(queue, (float("-inf"), (False, None)))
        if time.monotonic() - read_at <= FLOW_SECONDS:
            return answer
        key = f"{self.prefix}:qg:{queue}"
        groups = self.redis.run(lambda: self.redis.client.hkeys(key))
        if not groups:
            answer = (False, None)
        else:
            answer = (len(groups) > 1, str(groups[0]).split("\0", 1)[0])
        self._shapes[queue] = (time.monotonic(), answer)
        return answer

    @cached_property
    def _shapes(self) -> dict[str, tuple[float, tuple[bool, str | None]]]:
        return {}

    @cached_property
    def _turns(self) -> Turns:
        return Turns()

    def _flow_claim(self, claim: Claim, now: str, flow: Flow) -> Claimed:
        if set(claim.queues) <= flow.paused_queues:
            paused = Claimed()
            paused.look_again_at = time.monotonic() + THROTTLED_POLL
            return paused
        if now == "":  # one instant for every read of the claim, by the server's clock
            seconds, micros = self.redis.time()
            now = str(seconds * 1000 + micros // 1000)
        steps = FlowClaim(claim, flow, self._turns).run()
        groups: dict[str, list[tuple[str, str, str]]] = {}
        locked: tuple[str, ...] = ()
        token = secrets.token_hex(8)
        answer: Any = None
        try:
            while True:
                read = steps.send(answer)
                if isinstance(read, LockKinds):
                    answer = self._lock(token, read.kinds)
                    locked = read.kinds if answer else ()
                else:
                    answer = self._answer(claim, now, read, groups)
        except StopIteration as done:
            claimed: Claimed = done.value
            return claimed
        finally:
            if locked:
                self.redis.fcall("chit_unlock", token, *locked)

    def _lock(self, token: str, kinds: tuple[str, ...]) -> bool:
        """Lock these kinds for this claim, waiting for another claim's lock."""
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        wait = 0.001
        while not self.redis.fcall("chit_lock", token, LOCK_MS, *kinds):
            if time.monotonic() > deadline:
                raise StoreError(f"limited kinds {', '.join(kinds)} stayed locked by another claim")
            time.sleep(wait)  # another claim holds them for a few milliseconds
            wait = min(wait * 2, 0.02)
        return True

    def _answer(
        self, claim: Claim, now: str, read: FlowRead, groups: dict[str, list[tuple[str, str, str]]]
    ) -> Any:
        if isinstance(read, QueuedKinds):
            found = self._groups(now, read.queue, groups)
            firsts: dict[str, tuple[str, str, str]] = {}
            for g in found:
                firsts.setdefault(g[0], g)
            return [firsts[kind] for kind in sorted(firsts)]
        if isinstance(read, InUse):
            window = "" if read.window is None else int(read.window * 1000)
            running, started, frees = self.redis.fcall_ro(
                "chit_in_use", now, read.kind, read.key or "", window
            )
            return Usage(int(running), int(started), None if frees < 0 else frees / 1000)
        if isinstance(read, Spent):
            window_ms = int(read.window * 1000)
            cost, frees = self.redis.fcall_ro(
                "chit_spent", now, read.kind, read.key or "", window_ms
            )
            return Usage(0, int(cost), None if frees < 0 else frees / 1000)
        if isinstance(read, NextGroup):
            after = (read.kind, *read.after)
            following = [g for g in self._groups(now, read.queue, groups) if g[0] == read.kind]
            return next(((t, k) for (_, t, k) in following if (read.kind, t, k) > after), None)
        if isinstance(read, GroupJobs):
            group = _group(read.kind, read.tenant, read.key)
            out = self.redis.fcall_ro("chit_group_jobs", now, read.queue, group, read.limit)
            return [
                (out[i], (float(out[i + 1]), int(out[i + 2]), out[i]), int(out[i + 3]))
                for i in range(0, len(out), 4)
            ]
        assert isinstance(read, ClaimIds), read
        return self._claim_ids(claim, now, read.ids)

    def _groups(
        self, now: str, queue: str, groups: dict[str, list[tuple[str, str, str]]]
    ) -> list[tuple[str, str, str]]:
        """The queue's groups (kind, tenant, key) in group order, read once a claim."""
        found = groups.get(queue)
        if found is None:
            flat = self.redis.fcall("chit_groups", now, queue)
            parts = (str(g).split("\0", 2) for g in flat[::2])
            found = groups[queue] = sorted((kind, tenant, key) for kind, tenant, key in parts)
        return found

    def _claim_ids(self, claim: Claim, now: str, ids: Sequence[str]) -> list[ClaimedJob]:
        lease = int(claim.lease_seconds * 1000)
        return codec.claimed(self.redis.fcall("chit_claim_ids", now, claim.worker, lease, *ids))
