"""The store against a small model of the job state machine (DESIGN.md), on every backend.

Hypothesis drives random sequences of what workers and operators do (enqueue,
claim, heartbeat and checkpoint with current or stale tokens, every outcome,
cancel, retry, replay, the clock moving, rescue) and checks after each step
that the store agrees with the model and keeps the invariants.

The clock: everything that takes `now` gets the model's clock, which starts an
hour ahead of the real one, so times the store takes from the real clock
(enqueue without run_at, replay) are always in the model's past: due at once.
Priorities are distinct, so the claim order is known without ties on run_at.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from chit.jobs import (
    Beat,
    Cancelled,
    CancelResult,
    Failed,
    JobFilter,
    NewJob,
    Outcome,
    Progress,
    Released,
    ReplaySelector,
    State,
    Succeeded,
)
from chit.store.base import Store

if TYPE_CHECKING:
    from support.store_backends import Backend

LEASE = 30  # seconds; whole seconds keep SQLite's millisecond times exact
TERMINAL = {State.SUCCEEDED, State.FAILED, State.CANCELLED}


@dataclass
class ModelJob:
    id: str
    kind: str
    priority: int
    max_attempts: int
    run_at: datetime | None  # None: set by the real clock, so already due
    state: State = State.QUEUED
    attempts: int = 0
    token: str | None = None
    old_tokens: list[str] = field(default_factory=list)
    lease_expires_at: datetime | None = None
    cancel_requested: bool = False
    error: str | None = None
    checkpoint: Any = None
    progress: Progress = field(default_factory=Progress)

    def due(self, now: datetime) -> bool:
        return self.state is State.QUEUED and (self.run_at is None or self.run_at <= now)

    def requeue(self, run_at: datetime | None) -> None:
        self.state, self.run_at = State.QUEUED, run_at
        self.token, self.lease_expires_at = None, None

    def end(self, state: State) -> None:
        self.state = state
        self.token, self.lease_expires_at = None, None

    def replayed(self) -> None:
        self.requeue(None)
        self.attempts, self.error, self.cancel_requested = 0, None, False
        self.checkpoint, self.progress = None, Progress()


class StoreMachine(RuleBasedStateMachine):
    jobs = Bundle("jobs")

    def __init__(self, backend: Backend, store: Store) -> None:
        super().__init__()
        backend.reset()
        self.store = store
        self.now = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
        self.model: dict[str, ModelJob] = {}

    # Helpers

    def token_for(self, job: ModelJob, stale: bool) -> str:
        """The job's current token, or one that must be fenced out."""
        if stale or job.token is None:
            return job.old_tokens[-1] if job.old_tokens else "never-issued"
        return job.token

    def holds(self, job: ModelJob, token: str) -> bool:
        return job.state is State.RUNNING and token == job.token

    # Submitting

    @rule(
        target=jobs,
        kind=st.sampled_from(["a", "b"]),
        priority=st.integers(0, 3),
        max_attempts=st.integers(1, 3),
        delay=st.none() | st.integers(0, 120),
    )
    def enqueue(self, kind: str, priority: int, max_attempts: int, delay: int | None) -> str:
        unique_priority = priority * 1000 + len(self.model)
        run_at = None if delay is None else self.now + timedelta(seconds=delay)
        job = NewJob(
            kind,
            {"n": len(self.model)},
            priority=unique_priority,
            max_attempts=max_attempts,
            run_at=run_at,
        )
        enqueued = self.store.enqueue(job)
        assert enqueued.created
        self.model[enqueued.id] = ModelJob(enqueued.id, kind, unique_priority, max_attempts, run_at)
        return enqueued.id

    # Working

    @rule(limit=st.integers(1, 3))
    def claim(self, limit: int) -> None:
        due = sorted((j for j in self.model.values() if j.due(self.now)), key=lambda j: j.priority)
        expected = due[:limit]
        claimed = self.store.claim("worker", ["default"], limit, LEASE, now=self.now)
        assert [c.id for c in claimed] == [j.id for j in expected]
        for c, job in zip(claimed, expected, strict=True):
            job.attempts += 1
            assert (c.attempt, c.max_attempts) == (job.attempts, job.max_attempts)
            assert c.checkpoint == job.checkpoint and c.progress == job.progress
            assert c.lease_token not in job.old_tokens
            job.state, job.token = State.RUNNING, c.lease_token
            job.old_tokens.append(c.lease_token)
            job.lease_expires_at = self.now + timedelta(seconds=LEASE)

    @rule(
        job_id=jobs,
        stale=st.booleans(),
        progress=st.none() | st.builds(Progress, st.integers(0, 9), st.none() | st.just(9)),
    )
    def heartbeat(self, job_id: str, stale: bool, progress: Progress | None) -> None:
        job = self.model[job_id]
        token = self.token_for(job, stale)
        result = self.store.heartbeat([Beat(job_id, token, progress)], LEASE, now=self.now)
        if self.holds(job, token):
            assert result.held == {job_id}
            assert result.cancel_requested == ({job_id} if job.cancel_requested else set())
            job.lease_expires_at = self.now + timedelta(seconds=LEASE)
            if progress is not None:
                job.progress = progress
        else:
            assert result.held == frozenset() and result.cancel_requested == frozenset()

    @rule(job_id=jobs, stale=st.booleans(), data=st.integers(0, 100))
    def checkpoint(self, job_id: str, stale: bool, data: int) -> None:
        job = self.model[job_id]
        token = self.token_for(job, stale)
        applied = self.store.checkpoint(job_id, token, {"at": data}, None, LEASE, now=self.now)
        assert applied == self.holds(job, token)
        if applied:
            job.checkpoint = {"at": data}
            job.lease_expires_at = self.now + timedelta(seconds=LEASE)

    @rule(
        job_id=jobs,
        stale=st.booleans(),
        outcome=st.sampled_from(["succeeded", "failed", "retry", "released", "cancelled"]),
        retry_in=st.integers(0, 60),
    )
    def finish(self, job_id: str, stale: bool, outcome: str, retry_in: int) -> None:
        job = self.model[job_id]
        token = self.token_for(job, stale)
        # The worker's policy: retry only while attempts remain.
        if outcome == "retry" and job.attempts >= job.max_attempts:
            outcome = "failed"
        error = f"{outcome} at attempt {job.attempts}\ntraceback"
        record: Outcome = {
            "succeeded": Succeeded(job_id, token, {"ok": job.attempts}),
            "failed": Failed(job_id, token, error),
            "retry": Failed(job_id, token, error, retry_in=retry_in),
            "released": Released(job_id, token),
            "cancelled": Cancelled(job_id, token),
        }[outcome]
        held = self.holds(job, token)
        assert self.store.finish([record], now=self.now) == [held]
        if not held:
            return
        if outcome == "succeeded":
            job.end(State.SUCCEEDED)
            job.error = None
        elif outcome in ("failed", "retry"):
            job.error = error
            if job.cancel_requested:
                job.end(State.CANCELLED)
            elif outcome == "failed":
                job.end(State.FAILED)
            else:
                job.requeue(self.now + timedelta(seconds=retry_in))
        elif outcome == "released":
            job.attempts -= 1
            if job.cancel_requested:
                job.end(State.CANCELLED)
            else:
                job.requeue(self.now)
        else:
            job.end(State.CANCELLED)

    @rule(seconds=st.integers(1, 90))
    def advance_clock(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @rule()
    def rescue(self) -> None:
        report = self.store.rescue_expired(now=self.now)
        counts = {"queued": 0, "failed": 0, "cancelled": 0}
        for job in self.model.values():
            if job.state is not State.RUNNING or job.lease_expires_at is None:
                continue
            if not job.lease_expires_at < self.now:
                continue
            if job.cancel_requested:
                job.end(State.CANCELLED)
                counts["cancelled"] += 1
                continue
            job.error = f"worker lost: lease expired after {job.attempts} attempts"
            if job.attempts >= job.max_attempts:
                job.end(State.FAILED)
                counts["failed"] += 1
            else:
                job.requeue(self.now)
                counts["queued"] += 1
        assert (report.requeued, report.failed, report.cancelled) == (
            counts["queued"],
            counts["failed"],
            counts["cancelled"],
        )

    # Operating

    @rule(job_id=jobs)
    def cancel(self, job_id: str) -> None:
        job = self.model[job_id]
        result = self.store.cancel(job_id)
        if job.state is State.QUEUED:
            assert result is CancelResult.CANCELLED
            job.cancel_requested = True
            job.end(State.CANCELLED)
        elif job.state is State.RUNNING:
            assert result is CancelResult.REQUESTED
            job.cancel_requested = True
        else:
            assert result is CancelResult.ALREADY_FINISHED

    @rule(job_id=jobs)
    def retry(self, job_id: str) -> None:
        job = self.model[job_id]
        allowed = job.state in (State.FAILED, State.CANCELLED)
        assert self.store.retry(job_id) == allowed
        if allowed:
            job.replayed()

    @rule(kind=st.sampled_from(["a", "b"]))
    def replay_kind(self, kind: str) -> None:
        matching = [j for j in self.model.values() if j.kind == kind and j.state is State.FAILED]
        assert self.store.replay(ReplaySelector(kind=kind)) == len(matching)
        for job in matching:
            job.replayed()

    # Invariants

    @invariant()
    def store_agrees_with_the_model(self) -> None:
        stored = {j.id: j for j in self.store.list(JobFilter(), limit=10_000).jobs}
        assert set(stored) == set(self.model)
        for job_id, job in self.model.items():
            got = stored[job_id]
            assert got.state is job.state, (job_id, got.state, job.state)
            assert got.attempts == job.attempts
            assert got.cancel_requested == job.cancel_requested
            assert got.error == job.error
            assert got.checkpoint == job.checkpoint
            assert got.progress == job.progress
            assert got.lease_expires_at == job.lease_expires_at
            if job.run_at is not None and job.state is State.QUEUED:
                assert got.run_at == job.run_at

    @invariant()
    def running_jobs_have_leases_and_failed_jobs_have_errors(self) -> None:
        for got in self.store.list(JobFilter(), limit=10_000).jobs:
            if got.state is State.RUNNING:
                assert got.lease_expires_at is not None
            if got.state is State.FAILED:
                assert got.error
            if got.state in TERMINAL:
                assert got.finished_at is not None and got.lease_expires_at is None
            assert 0 <= got.attempts <= got.max_attempts


def test_the_store_follows_the_job_state_machine(backend: Backend) -> None:
    store = backend.open()
    run_state_machine_as_test(
        lambda: StoreMachine(backend, store),
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
