"""The worker: a claim loop that fills free slots in batches, a pool that runs
handlers (threads; `async def` handlers on one event loop), finishers that
record outcomes in batches, a heartbeat and the maintenance loop.

While jobs keep coming, a finisher records a batch of outcomes and claims the
jobs for the slots they free in one store call (`finish_and_claim`: one
transaction), so a busy worker pays one commit per batch, not two; the claim
loop fills slots when the worker starts, and after it has been idle. On
PostgreSQL two finishers work at once: one batch is written while the server
works on the other. Slots are promised to a claim before it is sent
(`_reserve`), so claims in flight together never fill a slot twice.

Shutdown (SIGTERM or SIGINT): claim nothing more, keep heartbeating, give
running jobs `grace_seconds` to finish, hand back the rest (queued again at
once, attempt not counted), exit 0. A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import queue as queue_mod
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from chit.context import JobContext
from chit.encoding import storable_text
from chit.errors import StoreError
from chit.jobs import Cancelled, ClaimedJob, Failed, Outcome, Released, Succeeded
from chit.queue import Queue
from chit.store import Store
from chit.worker.execute import Prepared, classify, prepare
from chit.worker.heartbeat import Heartbeat
from chit.worker.maintenance import Maintenance

log = logging.getLogger("chit.worker")

# Idle polling starts fast and backs off to poll_interval; between polls the
# store's change check (SQLite data_version, PostgreSQL LISTEN) wakes us early.
FIRST_IDLE_WAIT = 0.05
# After the grace period, how long shutdown keeps trying to write outcomes.
SHUTDOWN_WRITE_SECONDS = 5.0
# Claiming ahead pays off only for jobs shorter than a few database round trips;
# a longer job would keep the jobs claimed behind it from idle workers.
PREFETCH_BELOW_SECONDS = 0.02


def worker_id() -> str:
    """Unique per process incarnation: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker:
    def __init__(
        self,
        queue: Queue,
        *,
        store: Store | None = None,
        concurrency: int | None = None,
        queues: tuple[str, ...] | None = None,
        lease_seconds: float | None = None,
        grace_seconds: float | None = None,
        poll_interval: float | None = None,
        prefetch: int | None = None,
    ) -> None:
        self.settings = queue.settings.replace(
            concurrency=concurrency,
            prefetch=prefetch,
            queues=queues,
            lease_seconds=lease_seconds,
            grace_seconds=grace_seconds,
            poll_interval=poll_interval,
        )
        self.queue = queue
        self.store = store if store is not None else queue.store
        self.id = worker_id()
        self.concurrency = self.settings.concurrency
        self.prefetch = self.settings.prefetch
        self.queues = self.settings.queues
        self.lease_seconds = self.settings.lease_seconds
        self.processed = 0

        self._lock = threading.Lock()
        self._active: dict[str, JobContext] = {}
        self._started: dict[str, float] = {}
        # Held jobs claimed ahead, waiting for a slot; `_running` counts the others.
        self._waiting: collections.deque[tuple[ClaimedJob, JobContext]] = collections.deque()
        self._running = 0
        self._mean_seconds: float | None = None  # recent jobs' run time, smoothed
        self._outcomes: list[Outcome] = []
        self._outcome_ready = threading.Event()
        self._slot_freed = threading.Event()
        self._stopping = threading.Event()
        # Slots promised to claims still in flight, so that claims made at once
        # (the claim loop's, the finishers') never fill a slot twice.
        self._reserved = 0
        # Flushes at once: on PostgreSQL a second runs while the first waits on
        # the server; a SQLite file takes one writer at a time anyway.
        self._flush_slots = 2 if self.store.concurrent_writes else 1
        self._flushes = threading.BoundedSemaphore(self._flush_slots)
        self._give_up_at: float | None = None
        self._pool = _ThreadPool(self.concurrency)
        self._loop: asyncio.AbstractEventLoop | None = None

        self.heartbeat = Heartbeat(self.store, self.held, self.lease_seconds)
        self.maintenance = Maintenance(
            self.store,
            max(0.5, min(self.lease_seconds / 2, 15.0)),
            retention_seconds=self.settings.retention_seconds,
        )
        self._finishers = [
            threading.Thread(target=self._finish_loop, name=f"chit-finisher-{i}", daemon=True)
            for i in range(self._flush_slots)
        ]

    # State shared with the heartbeat

    def held(self) -> list[JobContext]:
        with self._lock:
            return list(self._active.values())

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """Ask the worker to shut down gracefully (what SIGTERM does)."""
        self._stopping.set()
        self._slot_freed.set()

    # One tick

    def run_once(self) -> int:
        """Claim jobs into free slots and start them; returns how many were claimed."""
        free = self._reserve()
        if free <= 0:
            return 0
        try:
            claimed = self.store.claim(self.id, self.queues, free, self.lease_seconds)
        except BaseException:
            self._hold([], free)
            raise
        self._hold(claimed, free)
        return len(claimed)

    def _reserve(self, finishing: int = 0) -> int:
        """Promise a claim the slots free once `finishing` held jobs are recorded
        (and the prefetch while jobs are short; nothing while stopping); returns
        how many. `_hold` ends the promise."""
        if self._stopping.is_set():
            return 0
        with self._lock:
            short = self._mean_seconds is not None and self._mean_seconds < PREFETCH_BELOW_SECONDS
            ahead = self.prefetch if short else 0
            free = self.concurrency + ahead - len(self._active) - self._reserved + finishing
            if free <= 0:
                return 0
            self._reserved += free
            return free

    def _hold(self, claimed: list[ClaimedJob], reserved: int) -> None:
        """Take the jobs claimed for `reserved` promised slots: run them, or keep
        them waiting for a slot when they were claimed ahead."""
        contexts = [(job, self._context(job)) for job in claimed]
        run_now = []
        with self._lock:
            self._reserved -= reserved
            for job, ctx in contexts:
                self._active[job.id] = ctx
                if self._running < self.concurrency:
                    self._running += 1
                    run_now.append((job, ctx))
                else:
                    self._waiting.append((job, ctx))
        for job, ctx in run_now:
            self._run(job, ctx)

    def _context(self, job: ClaimedJob) -> JobContext:
        return JobContext(
            id=job.id,
            kind=job.kind,
            queue=job.queue,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            lease_token=job.lease_token,
            last_checkpoint=job.checkpoint,
            progress=job.progress,
            store=self.store,
            lease_seconds=self.lease_seconds,
        )

    def _run_next(self) -> None:
        """A slot is free: start the next job claimed ahead, if any."""
        with self._lock:
            if not self._waiting or self._running >= self.concurrency or self.stopping:
                return
            job, ctx = self._waiting.popleft()
            self._running += 1
        self._run(job, ctx)

    def _run(self, job: ClaimedJob, ctx: JobContext) -> None:
        """Start a job in a slot counted in `_running`; it ends in one `_outcome`."""
        with self._lock:
            self._started[job.id] = time.monotonic()
        log.info("job %s %s attempt %d/%d started", job.kind, job.id, job.attempt, job.max_attempts)
        # While it waited for a slot, cancellation was asked or the lease was lost.
        if ctx.cancelled:
            self._outcome(Cancelled(job.id, job.lease_token))
            return
        if ctx.lease_lost:
            self._outcome(Released(job.id, job.lease_token))  # fenced out: not ours now
            return
        prepared = prepare(self.queue, job, self.settings)
        if prepared.early is not None:
            self._outcome(prepared.early)
        elif prepared.task is not None and prepared.task.is_async:
            asyncio.run_coroutine_threadsafe(
                self._run_async(job, ctx, prepared), self._event_loop()
            )
        else:
            self._pool.submit(lambda: self._run_sync(job, ctx, prepared))

    def _run_sync(self, job: ClaimedJob, ctx: JobContext, prepared: Prepared) -> None:
        assert prepared.task is not None
        try:
            result = prepared.task.handler(ctx, prepared.body)
        except BaseException as e:  # a handler must not take its thread down
            self._outcome(classify(job, ctx, self.settings, error=e))
        else:
            self._outcome(classify(job, ctx, self.settings, result=result))

    async def _run_async(self, job: ClaimedJob, ctx: JobContext, prepared: Prepared) -> None:
        assert prepared.task is not None
        try:
            result = await prepared.task.handler(ctx, prepared.body)
        except BaseException as e:
            self._outcome(classify(job, ctx, self.settings, error=e))
        else:
            self._outcome(classify(job, ctx, self.settings, result=result))

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="chit-async", daemon=True).start()
                self._loop = loop
            return self._loop

    # Outcomes

    def _outcome(self, outcome: Outcome) -> None:
        """The end of a job `_run` started: record it, and start the next in its slot."""
        with self._lock:
            self._running -= 1
            started = self._started.get(outcome.job_id)
            if started is not None:
                took = time.monotonic() - started
                mean = self._mean_seconds
                self._mean_seconds = took if mean is None else 0.8 * mean + 0.2 * took
            ctx = self._active.get(outcome.job_id)
            if ctx is not None and not ctx.finished:  # else handed back at shutdown
                ctx.finished = True
                self._outcomes.append(outcome)
        self._outcome_ready.set()
        self._run_next()

    def flush(self, wait_for_others: bool = False) -> int:
        """Record every pending outcome in one store call, claiming jobs for the
        slots they free in the same call; returns how many outcomes.

        While the database is away it retries, so no outcome is dropped, until
        the shutdown deadline (then the leases expire and the jobs run again).
        With `wait_for_others` (shutdown), it returns only once the flushes
        running beside it have ended too."""
        with self._flushes:
            with self._lock:
                batch, self._outcomes = self._outcomes, []
            if batch:
                self._flush(batch)
        if wait_for_others:
            for _ in range(self._flush_slots):
                self._flushes.acquire()
            for _ in range(self._flush_slots):
                self._flushes.release()
        return len(batch)

    def _flush(self, batch: list[Outcome]) -> None:
        # A job handed back is for another worker to take: no claim beside it.
        handed_back = any(isinstance(o, Released) for o in batch)
        free = 0 if handed_back else self._reserve(finishing=len(batch))
        recorded = None
        if free > 0:
            try:
                recorded = self.store.finish_and_claim(
                    batch, self.id, self.queues, free, self.lease_seconds
                )
            except Exception as e:  # all or nothing: nothing was recorded
                log.debug("recording %d outcomes with a claim failed: %s", len(batch), e)
        if recorded is None:
            self._hold([], free)
            self._settle(batch, self._record(batch))
        else:
            applied, claimed = recorded
            self._settle(batch, applied)
            self._hold(claimed, free)
        with self._lock:
            self.processed += len(batch)
        self._slot_freed.set()

    def _settle(self, batch: list[Outcome], applied: list[bool]) -> None:
        """The outcomes are recorded: free their slots and log them."""
        now = time.monotonic()
        for outcome, ok in zip(batch, applied, strict=True):
            with self._lock:
                ctx = self._active.pop(outcome.job_id, None)
                started = self._started.pop(outcome.job_id, now)
            self._log_outcome(outcome, ok, ctx, now - started)

    def _record(self, batch: list[Outcome]) -> list[bool]:
        delay = 0.1
        while True:
            try:
                return self.store.finish(batch)
            except StoreError as e:
                if not e.transient:
                    return self._record_each(batch, e)
                if self._give_up_at is not None and time.monotonic() >= self._give_up_at:
                    log.error(
                        "gave up recording %d outcomes at shutdown (%s); their leases will "
                        "expire and the jobs run again: %s",
                        len(batch),
                        e,
                        ", ".join(o.job_id for o in batch),
                    )
                    return [False] * len(batch)
                log.warning(
                    "recording %d outcomes failed, retrying in %.1fs: %s", len(batch), delay, e
                )
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
            except Exception as e:
                log.exception("recording %d outcomes failed", len(batch))
                return self._record_each(batch, e)

    def _record_each(self, batch: list[Outcome], error: Exception) -> list[bool]:
        """Something in the batch cannot be stored: record the outcomes one by one,
        and fail the one that cannot be stored with an error that can."""
        if len(batch) > 1:
            return [self._record([outcome])[0] for outcome in batch]
        outcome = batch[0]
        if isinstance(outcome, Failed) and outcome.error.startswith("OutcomeNotStored"):
            log.error("job %s: its outcome cannot be stored: %s", outcome.job_id, error)
            return [False]
        text = storable_text(f"OutcomeNotStored: {type(error).__name__}: {error}")
        return self._record([Failed(outcome.job_id, outcome.lease_token, text)])

    def _log_outcome(
        self, outcome: Outcome, applied: bool, ctx: JobContext | None, seconds: float
    ) -> None:
        kind = ctx.kind if ctx else "?"
        name = type(outcome).__name__.lower()
        if not applied:
            log.warning(
                "job %s %s: %s outcome fenced out: the lease was lost and the job "
                "belongs to someone else now; nothing recorded",
                kind,
                outcome.job_id,
                name,
            )
        elif isinstance(outcome, Succeeded):
            log.info("job %s %s succeeded in %.3fs", kind, outcome.job_id, seconds)
        else:
            detail = getattr(outcome, "error", "") or ""
            retry_in = getattr(outcome, "retry_in", None)
            when = f", retry in {retry_in:.1f}s" if retry_in is not None else ""
            log.warning(
                "job %s %s %s after %.3fs%s %s",
                kind,
                outcome.job_id,
                name,
                seconds,
                when,
                detail.split("\n", 1)[0],
            )

    def _finish_loop(self) -> None:
        while True:
            self._outcome_ready.wait()
            self._outcome_ready.clear()
            try:
                self.flush()
            except Exception:
                log.exception("finisher error; continuing")

    # Running

    def run(self, install_signals: bool = True) -> int:
        """Work until stopped; returns the process exit code."""
        if install_signals and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        log.info(
            "worker %s started: queues %s, concurrency %d, lease %.1fs",
            self.id,
            ",".join(self.queues),
            self.concurrency,
            self.lease_seconds,
        )
        for finisher in self._finishers:
            finisher.start()
        self.heartbeat.start()
        self.maintenance.start()
        idle_wait = FIRST_IDLE_WAIT
        error_wait = 0.5
        while not self._stopping.is_set():
            self._slot_freed.clear()
            try:
                claimed = self.run_once()
                error_wait = 0.5
            except Exception as e:  # the loop outlives any one failure
                if isinstance(e, StoreError):
                    log.warning("claim failed, retrying in %.1fs: %s", error_wait, e)
                else:
                    log.exception("claim loop error, retrying in %.1fs", error_wait)
                self._stopping.wait(error_wait)
                error_wait = min(error_wait * 2, 10.0)
                continue
            with self._lock:
                full = len(self._active) >= self.concurrency
            if full:
                self._slot_freed.wait(self.settings.poll_interval)
            elif claimed:
                idle_wait = FIRST_IDLE_WAIT
            else:
                try:
                    self.store.wait_for_jobs(self.queues, idle_wait)
                except StoreError as e:
                    log.warning("waiting for jobs failed: %s", e)
                    self._stopping.wait(idle_wait)
                idle_wait = min(idle_wait * 2, self.settings.poll_interval)
        return self._shutdown()

    def _shutdown(self) -> int:
        deadline = time.monotonic() + self.settings.grace_seconds
        # Outcomes still unwritten this long after the grace (database away) are
        # given up on: their leases expire and other workers run the jobs again.
        self._give_up_at = deadline + SHUTDOWN_WRITE_SECONDS
        self.release_held(waiting_only=True)
        with self._lock:
            running = len(self._active)
        if running:
            log.info(
                "stopping: waiting up to %.0fs for %d running jobs",
                self.settings.grace_seconds,
                running,
            )
        while time.monotonic() < deadline:
            self._slot_freed.clear()
            with self._lock:
                if not self._active:
                    break
            self._slot_freed.wait(0.1)
        self.release_held()
        self.heartbeat.stop()
        self.maintenance.stop()
        log.info("worker %s stopped after %d jobs", self.id, self.processed)
        return 0

    def release_held(self, waiting_only: bool = False) -> int:
        """Hand back every job still held (or only those claimed ahead that have
        not started): queued again at once, attempt not counted."""
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
        if unfinished:
            log.warning("handing back %d unfinished jobs", len(unfinished))
        self.flush(wait_for_others=True)
        return len(unfinished)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # The kernel handles the next one: it ends the process even while this
        # thread waits in C (on a busy SQLite file), where a Python handler would not run.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        log.info(
            "%s: finishing running jobs (grace %.0fs); send again to exit at once",
            signal.Signals(signum).name,
            self.settings.grace_seconds,
        )
        self.stop()

    # For tests and scripts

    def run_until_idle(self, timeout: float = 30.0) -> int:
        """Run jobs from this thread until nothing is due and nothing runs (tests,
        scripts); returns how many outcomes were recorded."""
        deadline = time.monotonic() + timeout
        done = 0
        quiet = 0
        while time.monotonic() < deadline:
            claimed = self.run_once()
            flushed = self.flush()
            done += flushed
            with self._lock:
                busy = bool(self._active)
            if busy:
                quiet = 0
                self._outcome_ready.wait(0.05)
                self._outcome_ready.clear()
            elif claimed or flushed:
                quiet = 0
            elif quiet >= 2:
                return done
            else:
                # A retry due in a few milliseconds is still work to wait for.
                quiet += 1
                time.sleep(0.01)
        raise TimeoutError(f"jobs still running or due after {timeout}s")


class _ThreadPool:
    """Daemon threads, so a worker that must exit is never held by a stuck handler."""

    def __init__(self, size: int) -> None:
        self._tasks: queue_mod.SimpleQueue[Callable[[], Any]] = queue_mod.SimpleQueue()
        for i in range(size):
            threading.Thread(target=self._work, name=f"chit-job-{i}", daemon=True).start()

    def submit(self, fn: Callable[[], Any]) -> None:
        self._tasks.put(fn)

    def _work(self) -> None:
        while True:
            fn = self._tasks.get()
            try:
                fn()
            except Exception:
                log.exception("job thread error")
