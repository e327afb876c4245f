"""The jobs a worker holds: which run in its `concurrency` slots, which were
claimed ahead and wait for one, which slots are promised to claims in flight,
and the outcomes waiting to be recorded.

A claim first reserves the slots it may fill (`reserve`), and `hold` ends the
promise with what it claimed, so claims in flight together (the claim loop's,
the finishers') never fill a slot twice. A job stays held until its outcome is
recorded (`settle`), so the heartbeat keeps its lease until then.

A slot is taken from a job's start until its handler returns (`free`), which is
usually when its outcome is ready (`end`), but not for a sync thread past its
deadline: its timeout is recorded and the job no longer held, while its thread
runs on. Such a slot *lingers*: counted as taken, not held.
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
# a longer job would keep the jobs claimed behind it from idle workers.
PREFETCH_BELOW_SECONDS = 0.02


class Slots:
    def __init__(
        self,
        store: Store,
        *,
        concurrency: int,
        prefetch: int,
        lease_seconds: float,
        start: Callable[[ClaimedJob, JobContext], None],
        stopping: threading.Event,
    ) -> None:
        self.store = store
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.lease_seconds = lease_seconds
        self._start = start
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
            return len(self._active) + self._lingering_unheld()

    def _lingering_unheld(self) -> int:
        return sum(1 for job_id in self._lingering if job_id not in self._active)

    def reserve(self, finishing: Sequence[Outcome] = ()) -> int:
        """Promise a claim the slots free once the `finishing` outcomes are recorded
        (those whose handler returned), and the prefetch while jobs are short;
        nothing while stopping. Returns how many. `hold` ends the promise."""
        if self._stopping.is_set():
            return 0
        with self._lock:
            short = self._mean_seconds is not None and self._mean_seconds < PREFETCH_BELOW_SECONDS
            ahead = self.prefetch if short else 0
            # A handler still running keeps its slot past its outcome: `free` says
            # when it is free (and wakes the claim loop to fill it).
            still = {o.job_id for o in finishing if o.job_id in self._running}
            self._lingering |= still
            taken = len(self._active) + self._lingering_unheld() + self._reserved
            free = self.concurrency + ahead - taken + len(finishing) - len(still)
            if free <= 0:
                return 0
            self._reserved += free
            return free

    def hold(self, claimed: list[ClaimedJob], reserved: int) -> None:
        """Take the jobs claimed for `reserved` promised slots: start them, or keep
        them waiting for a slot when they were claimed ahead."""
        contexts = [(job, JobContext.of(job, self.store, self.lease_seconds)) for job in claimed]
        run_now = []
        with self._lock:
            self._reserved -= reserved
            now = time.monotonic()
            for job, ctx in contexts:
                self._active[job.id] = ctx
                if len(self._running) < self.concurrency:
                    self._running.add(job.id)
                    self._started[job.id] = now
                    run_now.append((job, ctx))
                else:
                    self._waiting.append((job, ctx))
        for job, ctx in run_now:
            self._start(job, ctx)

    def end(self, outcome: Outcome) -> None:
        """A started job's outcome: keep it for the finishers (unless the job was
        handed back meanwhile). Its slot is freed by `free`."""
        with self._lock:
            started = self._started.get(outcome.job_id)
            if started is not None:
                took = time.monotonic() - started
                mean = self._mean_seconds
                self._mean_seconds = took if mean is None else 0.8 * mean + 0.2 * took
            ctx = self._active.get(outcome.job_id)
            if ctx is not None and not ctx.finished:  # else handed back at shutdown
                ctx.finished = True
                self._outcomes.append(outcome)
        self.outcome_ready.set()

    def free(self, job_id: str) -> None:
        """A started job's handler returned (after its outcome): start the next job
        waiting for a slot."""
        with self._lock:
            self._running.discard(job_id)
            lingered = job_id in self._lingering
            self._lingering.discard(job_id)
        if lingered:  # a slot the claim loop counted as taken
            self.freed.set()
        self._start_next()

    def _start_next(self) -> None:
        with self._lock:
            if (
                not self._waiting
                or len(self._running) >= self.concurrency
                or self._stopping.is_set()
            ):
                return
            job, ctx = self._waiting.popleft()
            self._running.add(job.id)
            self._started[job.id] = time.monotonic()
        self._start(job, ctx)

    def take_outcomes(self) -> list[Outcome]:
        with self._lock:
            batch, self._outcomes = self._outcomes, []
            return batch

    def settle(self, batch: list[Outcome]) -> list[tuple[JobContext | None, float]]:
        """The batch is recorded: its jobs are no longer held. Returns each one's
        context and how long it ran."""
        now = time.monotonic()
        with self._lock:
            self._lingering.update(o.job_id for o in batch if o.job_id in self._running)
            return [
                (self._active.pop(o.job_id, None), now - self._started.pop(o.job_id, now))
                for o in batch
            ]

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
