"""The jobs a worker holds: which run in its `concurrency` slots, which were
claimed ahead and wait for one, which slots are promised to claims in flight,
and the outcomes waiting to be recorded.

A job enters here once to start and once to end. It starts in `hold` (the
claim loop's: `reserve` promises the slots a claim may fill, `hold` ends the
promise with what it claimed) or in `settle` (a finisher's: `take` promises the
slots its batch frees to the claim beside the batch), so claims in flight
together never fill a slot twice. It ends in `end`: its outcome, kept for the
finishers, and its slot, which starts the next job waiting. It stays held until
its outcome is recorded (`settle`), so the heartbeat keeps its lease until then.

A handler past its deadline ends without its slot: an async one slow to unwind,
a sync thread, which cannot be stopped. Its timeout is recorded and the job no
longer held, while it runs on; `free` says when it returns. Such a slot
*lingers*: counted as taken, not held.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence

from chit.context import JobContext
from chit.jobs import ClaimedJob, Outcome, Released
from chit.store import Store

# Claiming ahead pays off only for jobs shorter than a few database round trips;
# a longer job would keep the jobs claimed behind it from idle workers. Short
# jobs are claimed ahead as many as the slots run in this long at their mean
# time (up to the prefetch): never more work than that held back from others.
PREFETCH_BELOW_SECONDS = 0.02


class Slots:
    def __init__(
        self,
        store: Store,
        *,
        concurrency: int,
        prefetch: int,
        lease_seconds: float,
        stopping: threading.Event,
    ) -> None:
        self.store = store
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.lease_seconds = lease_seconds
        # What runs a job given a slot: the pipeline, which ends each in `end`,
        # so it is built after the slots and set here.
        self.start: Callable[[ClaimedJob, JobContext], None] = _no_pipeline
        self._stopping = stopping
        # Set when an outcome is waiting to be recorded, and when slots are freed
        # (or the worker stops): what the finishers and the claim loop wait on.
        self.outcome_ready = threading.Event()
        self.freed = threading.Event()

        self._lock = threading.Lock()
        self._active: dict[str, JobContext] = {}
        self._started: dict[str, float] = {}
        # Held jobs claimed ahead, waiting for a slot; `_running` holds the others'
        # ids until their handler returns, and `_lingering` those whose outcome
        # went to be recorded before it returned.
        self._waiting: collections.deque[tuple[ClaimedJob, JobContext]] = collections.deque()
        self._running: set[str] = set()
        self._lingering: set[str] = set()
        self._reserved = 0
        self._promise_ended = threading.Condition(self._lock)
        self._mean_seconds: float | None = None  # recent jobs' run time, smoothed
        self._outcomes: list[Outcome] = []

    def held(self) -> list[JobContext]:
        with self._lock:
            return list(self._active.values())

    def busy(self) -> int:
        """Handlers running now: at most `concurrency`."""
        with self._lock:
            return len(self._running)

    def count(self) -> int:
        """Jobs held, and slots taken by handlers past their recorded outcome."""
        with self._lock:
            if not self._lingering:
                return len(self._active)
            return len(self._active) + self._lingering_unheld()

    def unfinished(self) -> int:
        """Jobs held whose handler has not ended (nor passed its deadline): what
        a shutdown's grace waits for."""
        with self._lock:
            return sum(1 for ctx in self._active.values() if not ctx.finished)

    def _lingering_unheld(self) -> int:
        return sum(1 for job_id in self._lingering if job_id not in self._active)

    # A job starts

    def reserve(self, wait: float = 0.0) -> int:
        """Promise the claim loop's claim the free slots, and the prefetch while
        jobs are short; nothing while stopping. Returns how many. `hold` ends
        the promise. `wait`: seconds to wait, when a finisher's claim has been
        promised every free slot, for that claim to end (one round trip)."""
        with self._lock:
            free = self._reserve(())
            if free or not wait:  # a claim of a busy worker reads no clock here
                return free
            deadline = time.monotonic() + wait
            # In steps, to see a stop (the finisher's call may hang).
            while not free and self._reserved and not self._stopping.is_set():
                if (left := deadline - time.monotonic()) <= 0:
                    break
                self._promise_ended.wait(min(left, 0.05))
                free = self._reserve(())
            return free

    def hold(self, claimed: list[ClaimedJob], reserved: int) -> None:
        """Take the jobs claimed for `reserved` promised slots: start them, or keep
        them waiting for a slot when they were claimed ahead."""
        contexts = [(job, JobContext.of(job, self.store, self.lease_seconds)) for job in claimed]
        with self._lock:
            run_now = self._hold(contexts, reserved)
        for job, ctx in run_now:
            self.start(job, ctx)

    def _reserve(self, finishing: Sequence[Outcome]) -> int:
        # Under the lock. The `finishing` outcomes free their slots once recorded,
        # unless their handler still runs: `free` says when that slot is free
        # (and wakes the claim loop to fill it).
        if self._stopping.is_set():
            return 0
        ahead, mean = 0, self._mean_seconds
        if mean is not None and mean < PREFETCH_BELOW_SECONDS:
            ahead = self.prefetch
            if mean * self.prefetch > self.concurrency * PREFETCH_BELOW_SECONDS:
                ahead = int(self.concurrency * PREFETCH_BELOW_SECONDS / mean)
        still = 0
        if self._running:
            still_running = {o.job_id for o in finishing if o.job_id in self._running}
            self._lingering |= still_running
            still = len(still_running)
        taken = len(self._active) + self._reserved
        if self._lingering:  # rare: a handler past its deadline
            taken += self._lingering_unheld()
        free = self.concurrency + ahead - taken + len(finishing) - still
        if free <= 0:
            return 0
        self._reserved += free
        return free

    def _hold(
        self, contexts: list[tuple[ClaimedJob, JobContext]], reserved: int
    ) -> list[tuple[ClaimedJob, JobContext]]:
        # Under the lock; returns the jobs to start once it is released.
        self._reserved -= reserved
        if reserved:
            self._promise_ended.notify_all()
        run_now = []
        now = time.monotonic()
        for job, ctx in contexts:
            self._active[job.id] = ctx
            if len(self._running) < self.concurrency:
                self._running.add(job.id)
                self._started[job.id] = now
                run_now.append((job, ctx))
            else:
                self._waiting.append((job, ctx))
        return run_now

    # A job ends

    def end(self, outcome: Outcome, running: bool = False) -> None:
        """A started job's outcome: keep it for the finishers (unless the job was
        handed back meanwhile), and give its slot to the next job waiting. Not
        while its handler is still `running` past its deadline: `free` then
        says when it returned."""
        job_id = outcome.job_id
        with self._lock:
            started = self._started.get(job_id)
            if started is not None:
                took = time.monotonic() - started
                mean = self._mean_seconds
                self._mean_seconds = took if mean is None else 0.8 * mean + 0.2 * took
            ctx = self._active.get(job_id)
            if ctx is not None and not ctx.finished:  # else handed back at shutdown
                ctx.finished = True
                self._outcomes.append(outcome)
            following = None if running else self._vacate(job_id)
        self.outcome_ready.set()
        if following is not None:
            self.start(*following)

    def free(self, job_id: str) -> None:
        """The handler of a job ended `running` returned: its slot runs the next
        job waiting."""
        with self._lock:
            following = self._vacate(job_id)
        if following is not None:
            self.start(*following)

    def _vacate(self, job_id: str) -> tuple[ClaimedJob, JobContext] | None:
        # Under the lock; returns the job waiting to start in the slot, if any.
        self._running.discard(job_id)
        if self._lingering and job_id in self._lingering:
            self._lingering.discard(job_id)
            self.freed.set()  # a slot the claim loop counted as taken
        if not self._waiting or len(self._running) >= self.concurrency or self._stopping.is_set():
            return None
        job, ctx = self._waiting.popleft()
        self._running.add(job.id)
        self._started[job.id] = time.monotonic()
        return job, ctx

    # Its outcome is recorded

    def take(self) -> tuple[list[Outcome], int]:
        """The outcomes waiting to be recorded, and the slots promised to a claim
        beside them: those they free, and the prefetch while jobs are short (see
        `reserve`). None when one is a hand-back: a job handed back is for
        another worker to take. `settle` ends the promise."""
        with self._lock:
            batch, self._outcomes = self._outcomes, []
            if not batch:
                return batch, 0
            for outcome in batch:
                if isinstance(outcome, Released):
                    return batch, 0
            return batch, self._reserve(batch)

    def settle(
        self,
        batch: list[Outcome],
        claimed: list[ClaimedJob],
        reserved: int,
        recorded: Callable[[list[tuple[JobContext | None, float]]], None],
    ) -> None:
        """The batch is recorded: its jobs are no longer held. The jobs claimed
        beside it for the `reserved` slots `take` promised are held, and those
        with a slot start, after `recorded` is told each recorded job's context
        and how long it ran (so a retry's start is logged after its failure)."""
        contexts = [(job, JobContext.of(job, self.store, self.lease_seconds)) for job in claimed]
        now = time.monotonic()
        with self._lock:
            if self._running:
                self._lingering.update(o.job_id for o in batch if o.job_id in self._running)
            settled = [
                (self._active.pop(o.job_id, None), now - self._started.pop(o.job_id, now))
                for o in batch
            ]
            run_now = self._hold(contexts, reserved)
        recorded(settled)
        for job, ctx in run_now:
            self.start(job, ctx)

    def hand_back(self, waiting_only: bool = False) -> int:
        """Turn every job still held (or only those claimed ahead that have not
        started) into a `Released` outcome waiting to be recorded; returns how many."""
        with self._lock:
            if waiting_only:
                unfinished = [ctx for _, ctx in self._waiting]
            else:
                # Not those whose outcome is waiting or being written: that outcome stands.
                unfinished = [c for c in self._active.values() if not c.finished]
            self._waiting.clear()
            for ctx in unfinished:
                ctx.finished = True
                self._outcomes.append(Released(ctx.id, ctx.lease_token))
        return len(unfinished)


def _no_pipeline(job: ClaimedJob, ctx: JobContext) -> None:
    raise RuntimeError("Slots.start was not set: nothing runs the jobs it holds")
