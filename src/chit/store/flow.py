"""Flow control inside the claim (DESIGN.md, "Flow control"), written once for
every store as a sans-IO routine: `FlowClaim.run` yields the reads it needs
(`QueuedKinds`, `InUse`, `Spent`, `LockKinds`, `NextGroup`, `GroupJobs`) and the claim
it decides on (`ClaimIds`), and is sent each answer; a store answers them with
its own statements (SQL: `chit.store.sql.flow`).

A claim takes a store's fast path while nothing here applies: no limit and no
pause exists and each queue it claims from holds a single group of queued jobs.
What holds is read at most once a `FLOW_SECONDS`, so an operator's change
reaches every claim within about a second. Otherwise, inside the claim's
transaction:

1. Each queue's kinds with queued jobs and each one's first group
   (`QueuedKinds`): a paused kind, or a kind at its limit, is stepped over
   whatever its backlog, which no claim scans.
2. For each limited kind: what is left of its limit, counted from the jobs and
   attempts themselves (`InUse`; a budget's cost, `Spent`, only for a kind
   with a cost_rate), so no counter can drift; an outcome frees
   its slot in its own transaction, an expired lease at its expiry. A store
   that runs claims side by side makes claims of a limited kind count and
   claim one after another (`LockKinds`).
3. Groups of a kind (tenant, concurrency key) in turn, from where the last claim
   left off (`NextGroup`), and each group's first due jobs (`GroupJobs`); a
   key's own limit caps its group (`InUse` with the key).
4. The candidates merged: tenants in turn, keys in turn within a tenant,
   priority order within a key; claimed (`ClaimIds`), skipping any another
   claim took meanwhile.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict, deque
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from chit.jobs import Claimed
from chit.limits import KindLimits, Limits, Paused

# How old the store's view of limits, pauses and groups may be.
FLOW_SECONDS = 1.0
# How soon a worker held back by a limit looks again, unless a rate window
# frees sooner: another worker's outcome frees a slot without waking it.
THROTTLED_POLL = 0.1


class Claim(NamedTuple):
    """A worker asking for up to `limit` due jobs of `queues`, leased for
    `lease_seconds`: of `kinds`, those it has code for (None: any kind)."""

    worker: str
    queues: Sequence[str]
    limit: int
    lease_seconds: float
    kinds: frozenset[str] | None = None


@dataclass(frozen=True)
class Flow:
    """Limits and pauses as last read."""

    read_at: float = float("-inf")  # time.monotonic()
    kinds: Mapping[str, KindLimits] = field(default_factory=dict)
    paused: Sequence[Paused] = ()

    @cached_property
    def limits(self) -> dict[str, Limits]:
        return {kind: k.effective for kind, k in self.kinds.items() if k.effective}

    @cached_property
    def paused_queues(self) -> frozenset[str]:
        return frozenset(p.queue for p in self.paused if p.queue is not None)

    @cached_property
    def paused_kinds(self) -> frozenset[str]:
        return frozenset(p.kind for p in self.paused if p.kind is not None)

    @cached_property
    def held_kinds(self) -> tuple[str, ...]:
        """Kinds only a flow claim may take: limited or paused. Read by every
        claim, so (like the others) worked out once per reading of the flow."""
        return tuple(sorted(self.limits.keys() | self.paused_kinds))


# The reads a flow claim asks of its store, each answered as its comment says.


@dataclass(frozen=True, slots=True)
class QueuedKinds:
    """Each kind with queued jobs in `queue` and its first group in group
    order: a list of (kind, tenant, concurrency key)."""

    queue: str


@dataclass(frozen=True, slots=True)
class InUse:
    """A limited kind's (or, with `key`, one key's) use: its running jobs, the
    starts within the last `window` seconds (0 without a window), and the
    seconds until the oldest of those leaves the window (None without one)."""

    kind: str
    key: str | None
    window: float | None


class Usage(NamedTuple):
    running: int
    started: int
    frees_in: float | None


@dataclass(frozen=True, slots=True)
class Spent:
    """A kind's (or, with `key`, one key's) budget use: the sum of the cost of
    the attempts started within the last `window` seconds, and the seconds
    until the oldest of those leaves the window (None without one): a `Usage`
    with `started` the cost and `running` 0."""

    kind: str
    key: str | None
    window: float


@dataclass(frozen=True, slots=True)
class LockKinds:
    """Make claims of these limited kinds wait for each other until this claim
    commits, where claims run side by side: whether the store locked."""

    kinds: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NextGroup:
    """The group (tenant, key) of the kind's queued jobs after `after`, in
    group order; None after the last."""

    queue: str
    kind: str
    after: tuple[str, str]


@dataclass(frozen=True, slots=True)
class GroupJobs:
    """Up to `limit` due queued jobs of one group in claim order, each as
    (id, its claim order: (priority, run_at, id), its cost: None for 1)."""

    queue: str
    kind: str
    tenant: str
    key: str
    limit: int


@dataclass(frozen=True, slots=True)
class ClaimIds:
    """Claim these queued jobs, in this order, skipping any no longer queued:
    the ClaimedJobs."""

    ids: tuple[str, ...]


FlowRead = QueuedKinds | InUse | Spent | LockKinds | NextGroup | GroupJobs | ClaimIds
Claiming = Generator[FlowRead, Any, Claimed]


class Turns:
    """Where the turns of one store's flow claims stand, kept between claims."""

    def __init__(self) -> None:
        # Per queue and kind, the group (tenant, key) the last claim ended on.
        self.cursors: dict[tuple[str, str], tuple[str, str]] = {}
        # Per queue, a count of the flow claims (each starts one kind further on).
        self.counts: defaultdict[str, Iterator[int]] = defaultdict(itertools.count)


@dataclass(frozen=True, slots=True)
class Candidate:
    id: str
    kind: str
    tenant: str
    key: str
    order: tuple[Any, ...]  # (priority, run_at, id): the claim order within a key
    cost: int = 1


class FlowClaim:
    """One claim under flow control: `run()` is the routine."""

    def __init__(self, claim: Claim, flow: Flow, turns: Turns):
        self.claim, self.turns = claim, turns
        self.limits = flow.limits
        self.paused_kinds = flow.paused_kinds
        self.paused_queues = flow.paused_queues
        # Starts a limited kind, and a limited key of a kind, have left in this
        # claim, whatever queue or tenant their jobs come from.
        self.room: dict[str, int] = {}
        self.key_room: dict[tuple[str, str], int] = {}
        # The cost a kind with a cost_rate (a key with a key_cost_rate) may yet
        # start in this claim.
        self.budget: dict[str, int] = {}
        self.key_budget: dict[tuple[str, str], int] = {}
        # Seconds until the oldest start in each budget's window leaves it: a
        # job that did not fit may fit then.
        self.budget_frees: dict[str | tuple[str, str], float] = {}
        self.throttled = False
        self.frees_in = THROTTLED_POLL  # seconds until a full rate window has room

    def run(self) -> Claiming:
        firsts: dict[str, dict[str, tuple[str, str]]] = {}
        for queue in self.claim.queues:
            if queue in self.paused_queues:
                self.throttled = True
            else:
                firsts[queue] = self._kinds(queue, (yield QueuedKinds(queue)))
        limited = sorted({k for kinds in firsts.values() for k in kinds if k in self.limits})
        yield from self._count(limited)
        claimed = Claimed()
        for queue, kinds in firsts.items():
            want = self.claim.limit - len(claimed)
            if want <= 0:
                break
            picked = yield from self._pick(queue, kinds, want)
            if picked:
                claimed += yield ClaimIds(tuple(picked))
        if self.throttled:
            claimed.look_again_at = time.monotonic() + max(0.0, self.frees_in)
        return claimed

    # 1. Kinds

    def _kinds(
        self, queue: str, found: Iterable[tuple[str, str, str]]
    ) -> dict[str, tuple[str, str]]:
        """Each kind with queued jobs in the queue and its first group (tenant, key),
        paused kinds and those the worker has no code for left out."""
        kinds: dict[str, tuple[str, str]] = {}
        runnable = self.claim.kinds
        for kind, tenant, key in found:
            if runnable is not None and kind not in runnable:
                continue  # another worker's: left queued, no throttle
            if kind in self.paused_kinds:
                self.throttled = True
            else:
                kinds[kind] = (tenant, key)
        return kinds

    # 2. What each limited kind has left

    def _count(self, kinds: Sequence[str]) -> Generator[FlowRead, Any, None]:
        for kind in kinds:
            self.room[kind] = yield from self._left(kind)
            yield from self._count_budget(kind)
        # A kind found full before the lock is left alone: its slots free only by
        # later commits, which a later claim sees. The others are counted again
        # under the lock, which may have waited for claims that took their room.
        open_ = tuple(k for k in kinds if self.room[k] > 0)
        if open_ and (yield LockKinds(open_)):
            for kind in open_:
                self.room[kind] = yield from self._left(kind)
                yield from self._count_budget(kind)
        if any(left <= 0 for left in self.room.values()):
            self.throttled = True

    def _left(self, kind: str, key: str | None = None) -> Generator[FlowRead, Any, int]:
        """What is left of a limited kind's concurrency and rate, or of one key's of it."""
        limits = self.limits[kind]
        concurrency = limits.concurrency if key is None else limits.key_concurrency
        rate = limits.rate if key is None else limits.key_rate
        usage: Usage = yield InUse(kind, key, None if rate is None else rate.seconds)
        left = self.claim.limit
        if concurrency is not None:
            left = min(left, concurrency - usage.running)
        if rate is not None:
            left = min(left, rate.count - usage.started)
            if left <= 0 and usage.frees_in is not None:
                self.frees_in = min(self.frees_in, usage.frees_in)
        return left

    def _count_budget(self, kind: str) -> Generator[FlowRead, Any, None]:
        """A kind with a cost_rate whose budget is spent has no room either."""
        if self.limits[kind].cost_rate is not None and self.room[kind] > 0:
            self.budget[kind] = yield from self._budget(kind)
            if self.budget[kind] <= 0:
                self.room[kind] = 0

    def _budget(self, kind: str, key: str | None = None) -> Generator[FlowRead, Any, int]:
        """What is left of a kind's cost_rate, or of one key's key_cost_rate:
        0 or less when spent (then the kind or key takes nothing)."""
        limits = self.limits[kind]
        rate = limits.cost_rate if key is None else limits.key_cost_rate
        assert rate is not None
        spent: Usage = yield Spent(kind, key, rate.seconds)
        left = rate.count - spent.started
        if spent.frees_in is not None:
            self.budget_frees[kind if key is None else (kind, key)] = spent.frees_in
            if left <= 0:
                self.frees_in = min(self.frees_in, spent.frees_in)
        return left

    def _affords(self, c: Candidate) -> bool:
        """Whether the budgets of the candidate's kind and key have room for its
        cost. A job costlier than a whole window (a limit an operator lowered
        after it was enqueued) starts into an empty window, not never. A job
        that does not fit closes its kind (or key) for this claim, so that
        cheaper jobs behind it do not starve it."""
        limits = self.limits.get(c.kind)
        if limits is None:
            return True
        left = self.budget.get(c.kind)
        rate = limits.cost_rate
        if left is not None and rate is not None and c.cost > left and left < rate.count:
            self.budget[c.kind] = 0
            self._look_again(c.kind)
            return False
        left = self.key_budget.get((c.kind, c.key))
        rate = limits.key_cost_rate
        if left is not None and rate is not None and c.cost > left and left < rate.count:
            self.key_budget[c.kind, c.key] = 0
            self._look_again((c.kind, c.key))
            return False
        return True

    def _look_again(self, budget: str | tuple[str, str]) -> None:
        frees = self.budget_frees.get(budget)
        if frees is not None:
            self.frees_in = min(self.frees_in, frees)

    def _spend(self, c: Candidate) -> None:
        if c.kind in self.budget:
            self.budget[c.kind] -= c.cost
        if (c.kind, c.key) in self.key_budget:
            self.key_budget[c.kind, c.key] -= c.cost

    # 3. Groups in turn, and their jobs

    def _pick(
        self, queue: str, kinds: Mapping[str, tuple[str, str]], want: int
    ) -> Generator[FlowRead, Any, list[str]]:
        open_kinds = [k for k in kinds if self.room.get(k, want) > 0]
        if not open_kinds:
            return []
        # Kinds in turn too: each claim starts one kind further on.
        turn = next(self.turns.counts[queue]) % len(open_kinds)
        candidates: list[Candidate] = []
        # Every kind's next group, so that priority orders kinds as before; more
        # groups (tenants, keys) up to what a claim can take one job from each.
        groups_left = max(want, 2)
        visited: dict[str, list[tuple[str, str]]] = {}
        for kind in open_kinds[turn:] + open_kinds[:turn]:
            groups = yield from self._groups(queue, kind, kinds[kind], max(1, groups_left))
            visited[kind] = groups
            groups_left -= len(groups)
            for tenant, key in groups:
                candidates += yield from self._jobs(queue, kind, tenant, key, want)
        picked = self._merge(candidates, want)
        # The next claim starts after the last group served (or, if none was,
        # after the last one looked at), so every group comes first in turn.
        chosen = set(picked)
        served = {(c.kind, c.tenant, c.key) for c in candidates if c.id in chosen}
        for kind, groups in visited.items():
            ended = [g for g in groups if (kind, *g) in served] or groups
            self.turns.cursors[queue, kind] = ended[-1]
        return picked

    def _groups(
        self, queue: str, kind: str, first: tuple[str, str], most: int
    ) -> Generator[FlowRead, Any, list[tuple[str, str]]]:
        """Up to `most` groups of the kind, starting after the one the last claim
        of this queue and kind ended on (`_pick` moves it on), and wrapping around."""
        cursor = self.turns.cursors.get((queue, kind))
        start = first
        if cursor is not None:
            start = (yield NextGroup(queue, kind, cursor)) or first
        groups = [start]
        while len(groups) < most:
            following = (yield NextGroup(queue, kind, groups[-1])) or first
            if following == start:
                break
            groups.append(following)
        return groups

    def _jobs(
        self, queue: str, kind: str, tenant: str, key: str, want: int
    ) -> Generator[FlowRead, Any, list[Candidate]]:
        most = min(want, self.room.get(kind, want))
        limits = self.limits.get(kind)
        if key and limits is not None and (limits.key_concurrency or limits.key_rate):
            if (kind, key) not in self.key_room:
                self.key_room[kind, key] = yield from self._left(kind, key)
            if self.key_room[kind, key] < most:
                self.throttled = True
            most = min(most, self.key_room[kind, key])
        if key and limits is not None and limits.key_cost_rate is not None:
            if (kind, key) not in self.key_budget:
                self.key_budget[kind, key] = yield from self._budget(kind, key)
            if self.key_budget[kind, key] <= 0:
                self.throttled = True
                most = 0
        if most <= 0:
            return []
        found = yield GroupJobs(queue, kind, tenant, key, most)
        return [
            Candidate(job_id, kind, tenant, key, order, cost or 1) for job_id, order, cost in found
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
                    if (
                        room.get(c.kind, 1) > 0
                        and key_room.get((c.kind, c.key), 1) > 0
                        and self._affords(c)
                    ):
                        picked.append(c.id)
                        self._spend(c)
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
