"""The limited claim against a model of the limits (DESIGN.md, "Flow control"),
on every backend.

Hypothesis declares random limits for two kinds (concurrency, rate,
key_concurrency, key_rate; sometimes an operator's override over them), then
drives random sequences of claims by several workers, outcomes (succeeded,
failed with a retry, released; alone or handed in with the next claim),
heartbeats, rescues and the clock moving. After every step no kind has more
running jobs (lease not expired) than its concurrency, no concurrency key more
than its key_concurrency, and no window of a rate's period holds more starts
than the rate allows. No claim takes more than the limits leave room for, and
claims in a row leave none of that room unused: a limit is reached, not starved.
A kind's jobs may sit in two queues a claim takes from, and a key's in two
tenants.

The store's own rows say which jobs run and which are due (the lifecycle is
test_state_machine.py's business); the model keeps the limits and every start
a claim made. The clock is the model's, passed as `now` to every call, an hour
ahead of the real one (jobs enqueued by the real clock are due at once) and in
whole milliseconds (SQLite keeps milliseconds). Where the clock lands exactly
on a lease's end or a window's edge, either reading of the boundary is
accepted.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from chit.jobs import (
    Beat,
    ClaimedJob,
    Failed,
    Job,
    JobFilter,
    NewJob,
    Outcome,
    Released,
    State,
    Succeeded,
)
from chit.limits import Limits, Rate
from chit.store.capabilities import FlowControl, Reports
from support.store_backends import needs

if TYPE_CHECKING:
    from support.store_backends import Backend

LEASE = 5.0  # seconds
WORKERS = ["w1", "w2", "w3"]
KEYS = ["", "x", "y"]  # "" is no key: key limits do not bound it
TENANTS = ["", "t"]
QUEUES = ["default", "other"]  # one claim takes from both, first first
# Kinds of one example are its own: limits declared by an earlier example stay
# in the database (jobs are deleted between examples, limits need not be).
_examples = itertools.count()

# Mostly limited: an unlimited kind only shows that the claim takes everything.
concurrencies = st.sampled_from([None, 1, 2, 3])
rates = st.none() | st.builds(Rate, st.integers(1, 4), st.sampled_from([1.0, 60.0]))
limits = st.builds(Limits, concurrencies, rates, st.sampled_from([None, 1, 2]), rates)


@dataclass(frozen=True)
class Start:
    kind: str
    key: str
    at: datetime


class FlowMachine(RuleBasedStateMachine):
    def __init__(self, backend: Backend, store: Any) -> None:  # FlowControl and Reports
        super().__init__()
        backend.reset()
        n = next(_examples)
        self.kinds = [f"a{n}", f"b{n}"]
        # One store for every example (a PostgreSQL pool a time is slow to open):
        # declaring limits drops the store's view of them, and its turns and
        # cursors are per kind, which no other example has.
        self.store = store
        self.now = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
        self.limits: dict[str, Limits] = {}
        self.starts: list[Start] = []
        self.keys: dict[str, str] = {}  # job id -> concurrency key
        self.tokens: dict[str, str] = {}  # job id -> the token of its latest claim

    @initialize(declared=st.tuples(limits, limits), override=st.none() | limits)
    def declare(self, declared: tuple[Limits, Limits], override: Limits | None) -> None:
        self.store.declare_limits(dict(zip(self.kinds, declared, strict=True)))
        self.limits = dict(zip(self.kinds, declared, strict=True))
        if override:
            kind = self.kinds[0]
            shown = self.store.set_limits(kind, override)
            self.limits[kind] = override.over(declared[0])
            assert shown.effective == self.limits[kind]
        shown_limits = {k.kind: k.effective for k in self.store.limits(now=self.now)}
        for kind, expected in self.limits.items():
            assert shown_limits.get(kind, Limits()) == expected

    # Reading the store

    def rows(self) -> list[Job]:
        return self.store.list(JobFilter(), limit=10_000).jobs

    def running(self, rows: list[Job], lenient: bool) -> list[Job]:
        """Jobs running under a lease that has not run out. `lenient`: a lease
        ending exactly now has run out."""
        return [
            j
            for j in rows
            if j.state is State.RUNNING
            and j.lease_expires_at is not None
            and (j.lease_expires_at > self.now if lenient else j.lease_expires_at >= self.now)
        ]

    def started(self, kind: str, key: str | None, seconds: float, lenient: bool) -> int:
        """Starts of the kind (and key) in the window of `seconds` up to now.
        `lenient`: a start exactly `seconds` ago is out of the window."""
        since = self.now - timedelta(seconds=seconds)
        return sum(
            s.kind == kind
            and (key is None or s.key == key)
            and (s.at > since if lenient else s.at >= since)
            for s in self.starts
        )

    def room(self, rows: list[Job], lenient: bool) -> int:
        """How many jobs the limits let a claim take now, of those due."""
        running = self.running(rows, lenient)
        total = 0
        for kind, lim in self.limits.items():
            of_kind = [j for j in running if j.kind == kind]
            kind_room = free(lim.concurrency, len(of_kind))
            if lim.rate is not None:
                used = self.started(kind, None, lim.rate.seconds, lenient)
                kind_room = min(kind_room, free(lim.rate.count, used))
            due = [
                j
                for j in rows
                if j.kind == kind and j.state is State.QUEUED and j.run_at <= self.now
            ]
            takeable = 0.0
            for key in KEYS:
                waiting = sum(j.concurrency_key == key for j in due)
                if key == "":
                    takeable += waiting
                    continue
                key_room = free(lim.key_concurrency, sum(j.concurrency_key == key for j in of_kind))
                if lim.key_rate is not None:
                    used = self.started(kind, key, lim.key_rate.seconds, lenient)
                    key_room = min(key_room, free(lim.key_rate.count, used))
                takeable += min(key_room, waiting)
            total += int(min(kind_room, takeable))
        return total

    def record(self, claimed: list[ClaimedJob]) -> None:
        for c in claimed:
            assert c.kind in self.kinds
            self.starts.append(Start(c.kind, self.keys[c.id], self.now))
            self.tokens[c.id] = c.lease_token

    def held(self, rows: list[Job], pick: int) -> Job | None:
        """One running job (lease run out or not), or None when none runs."""
        running = [j for j in rows if j.state is State.RUNNING]
        return running[pick % len(running)] if running else None

    def outcome(self, job: Job, what: str, retry_in: int) -> Outcome:
        token = self.tokens[job.id]
        if what == "succeeded":
            return Succeeded(job.id, token)
        if what == "retry":
            return Failed(job.id, token, "failed on purpose", retry_in=retry_in / 1000)
        return Released(job.id, token)

    # Rules

    @rule(
        kind=st.integers(0, 1),
        key=st.sampled_from(KEYS),
        tenant=st.sampled_from(TENANTS),
        queue=st.sampled_from(QUEUES),
        priority=st.integers(0, 2),
        count=st.integers(1, 3),
    )
    def enqueue(
        self, kind: int, key: str, tenant: str, queue: str, priority: int, count: int
    ) -> None:
        jobs = [
            NewJob(
                self.kinds[kind],
                {"n": len(self.keys) + i},
                queue=queue,
                priority=priority,
                max_attempts=25,
                tenant=tenant,
                concurrency_key=key,
            )
            for i in range(count)
        ]
        for e in self.store.enqueue_many(jobs):
            self.keys[e.id] = key

    @rule(worker=st.sampled_from(WORKERS), limit=st.integers(1, 4))
    def claim(self, worker: str, limit: int) -> None:
        most = min(limit, self.room(self.rows(), lenient=True))
        claimed = self.store.claim(worker, QUEUES, limit, LEASE, now=self.now)
        assert len(claimed) <= most, (len(claimed), most, self.limits)
        self.record(claimed)

    @rule(worker=st.sampled_from(WORKERS))
    def drain(self, worker: str) -> None:
        """Claims until the limits leave no room for any due job. A claim visits
        a bounded number of groups, from where the last one stopped, so the room
        may take a few claims to use; one claim a group is plenty."""
        rows = self.rows()
        groups = {(j.queue, j.kind, j.tenant, j.concurrency_key) for j in rows}
        for _ in range(len(groups) + 1):
            if self.room(rows, lenient=False) == 0:
                return
            self.record(self.store.claim(worker, QUEUES, 4, LEASE, now=self.now))
            rows = self.rows()
        assert self.room(rows, lenient=False) == 0, (self.limits, len(groups))

    @rule(
        pick=st.integers(0, 100),
        what=st.sampled_from(["succeeded", "retry", "released"]),
        retry_in=st.sampled_from([0, 300, 2000]),
        then_claim=st.none() | st.tuples(st.sampled_from(WORKERS), st.integers(1, 4)),
    )
    def finish(
        self, pick: int, what: str, retry_in: int, then_claim: tuple[str, int] | None
    ) -> None:
        job = self.held(self.rows(), pick)
        if job is None:
            return
        outcome = self.outcome(job, what, retry_in)
        if then_claim is None:
            assert self.store.finish([outcome], now=self.now) == [True]
            return
        worker, limit = then_claim
        done, claimed = self.store.finish_and_claim(
            [outcome], worker, QUEUES, limit, LEASE, now=self.now
        )
        assert done == [True]
        assert len(claimed) <= limit
        self.record(claimed)

    @rule(pick=st.integers(0, 100))
    def heartbeat(self, pick: int) -> None:
        """What a live worker does: renew a lease before it runs out."""
        job = self.held(self.running(self.rows(), lenient=True), pick)
        if job is None:
            return
        result = self.store.heartbeat([Beat(job.id, self.tokens[job.id])], LEASE, now=self.now)
        assert result.held == {job.id}

    @rule(ms=st.sampled_from([1, 100, 250, 500, 1000, 2000, 5000, 6000]))
    def advance_clock(self, ms: int) -> None:
        self.now += timedelta(milliseconds=ms)

    @rule()
    def rescue(self) -> None:
        self.store.rescue_expired(now=self.now)

    # Invariants

    @invariant()
    def no_limit_is_exceeded(self) -> None:
        if not self.limits:
            return
        running = self.running(self.rows(), lenient=True)
        for kind, lim in self.limits.items():
            of_kind = [j for j in running if j.kind == kind]
            if lim.concurrency is not None:
                assert len(of_kind) <= lim.concurrency, (kind, lim, of_kind)
            if lim.key_concurrency is not None:
                for key in KEYS[1:]:
                    of_key = [j for j in of_kind if j.concurrency_key == key]
                    assert len(of_key) <= lim.key_concurrency, (kind, key, lim, of_key)
            starts = [s for s in self.starts if s.kind == kind]
            if lim.rate is not None:
                assert_rate(lim.rate, [s.at for s in starts], kind)
            if lim.key_rate is not None:
                for key in KEYS[1:]:
                    assert_rate(lim.key_rate, [s.at for s in starts if s.key == key], key)


def free(limit: int | None, used: int) -> float:
    return math.inf if limit is None else max(0, limit - used)


def assert_rate(rate: Rate, starts: list[datetime], what: str) -> None:
    """No window [t, t + period) holds more than `rate.count` starts."""
    ordered = sorted(starts)
    period = timedelta(seconds=rate.seconds)
    for first, after in zip(ordered, ordered[rate.count :], strict=False):
        assert after - first >= period, (what, str(rate), [s.isoformat() for s in ordered])


@needs(FlowControl, Reports)
def test_claims_never_exceed_a_limit_and_take_what_the_limits_leave(backend: Backend) -> None:
    store = backend.open()
    assert isinstance(store, FlowControl) and isinstance(store, Reports)
    run_state_machine_as_test(
        lambda: FlowMachine(backend, store),
        settings=settings(
            # SQLite's examples cost a fifth of PostgreSQL's: more of them.
            max_examples=50 if backend.name == "sqlite" else 20,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            # One failure shrunk, not each: a broken claim breaks several
            # assertions, and shrinking them all outlasts the test's timeout.
            report_multiple_bugs=False,
        ),
    )
