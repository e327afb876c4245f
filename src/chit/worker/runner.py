"""The worker: a claim loop that fills free slots (`slots.py`), a pipeline
that runs each job to one outcome (`execute.py`, on the executors in
`pool.py`), finishers that record outcomes in batches (`finisher.py`), a
heartbeat and the maintenance loop. Each loop is a `run_once()` (the claim
loop's is `tick()`) and a thin thread or forever-wrapper around it.

While jobs keep coming, a finisher records a batch of outcomes and claims the
jobs for the slots they free in the same store call; the claim loop fills
slots when the worker starts, and after it has been idle.

Shutdown (SIGTERM or SIGINT): claim nothing more, keep heartbeating, give
running jobs `grace_seconds` to finish, hand back the rest (queued again at
once, attempt not counted), exit 0. A second signal ends the grace at once:
the jobs still running are handed back the same way before the worker exits.
A third is the kernel's: it ends the process even while the main thread waits
in C (on a busy SQLite file), where a Python handler would not run. A signal
that came before the worker ran (`signals.caught_early`) stops it as it starts.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import Literal

from chit.context import JobContext
from chit.errors import ConfigError, StoreError
from chit.fleet import WorkerBeat
from chit.jobs import Claimed
from chit.queue import Queue
from chit.store import FlowControl, FullStore, Store
from chit.store.capabilities import ClaimsOnWake
from chit.worker.children import ProcessPool
from chit.worker.execute import Pipeline
from chit.worker.finisher import Finisher
from chit.worker.heartbeat import Heartbeat
from chit.worker.maintenance import Maintenance
from chit.worker.pool import AsyncLoop, ThreadPool
from chit.worker.scheduler import Scheduler
from chit.worker.signals import STOP_SIGNALS, early
from chit.worker.slots import Slots

log = logging.getLogger("chit.worker")

# Idle polling starts fast and backs off to poll_interval; between polls the
# store's change check (SQLite data_version, PostgreSQL LISTEN) wakes us early.
FIRST_IDLE_WAIT = 0.05
# A wait for jobs this long means the worker is idle, not working through a
# backlog: its next wait runs on a job thread (see `_wait`).
IDLE_AFTER = 0.005
# A failing claim is retried after this, doubling up to MAX_ERROR_WAIT.
FIRST_ERROR_WAIT = 0.5
MAX_ERROR_WAIT = 10.0
# After the grace period, how long shutdown keeps trying to write outcomes.
SHUTDOWN_WRITE_SECONDS = 5.0


def worker_id() -> str:
    """Unique per process incarnation: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass(frozen=True)
class Pause:
    """What the claim loop waits for before its next tick, and for how long at most:
    nothing, the database to recover, a slot to free, or new jobs."""

    until: Literal["now", "error", "slot", "jobs"]
    seconds: float = 0.0


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
        pool: str | None = None,
    ) -> None:
        self.settings = queue.settings.replace(
            concurrency=concurrency,
            prefetch=prefetch,
            pool=pool,
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
        self._kinds: frozenset[str] = frozenset()

        self._stopping = threading.Event()
        # Set by a second signal: the grace ends now.
        self._hurry = threading.Event()
        self._signals = 0
        self._idle_wait = FIRST_IDLE_WAIT
        self._error_wait = FIRST_ERROR_WAIT
        self._asked = 0  # slots the last claim tried to fill
        # From the last claim: when jobs a limit or a pause held back may have room.
        self._look_again_at = float("-inf")
        # What the last wait claimed as a wake ended it (ClaimsOnWake), its slots held.
        self._woken: Claimed | None = None
        self._idle = False  # the last wait for jobs lasted IDLE_AFTER or more
        self._limits_declared = False
        for schedule in queue.schedules.values():  # refused at start, not at the first tick
            if schedule.kind not in queue.tasks:
                raise ConfigError(
                    f"schedule {schedule.name!r} runs kind {schedule.kind!r}, "
                    "which has no task in this app"
                )
        self.sync_pool = self._sync_pool()
        self.slots = Slots(
            self.store,
            concurrency=self.concurrency,
            prefetch=self.prefetch,
            lease_seconds=self.lease_seconds,
            stopping=self._stopping,
        )
        self.pipeline = Pipeline(
            queue,
            self.settings,
            self.slots.end,
            self.slots.free,
            sync=self.sync_pool,
            asynchronous=AsyncLoop(),
            worker_id=self.id,
        )
        self.slots.start = self.pipeline.start
        self.finisher = Finisher(
            self.store,
            self.slots,
            worker_id=self.id,
            queues=self.queues,
            kinds=lambda: self.kinds,
            lease_seconds=self.lease_seconds,
        )
        self.heartbeat = Heartbeat(self.store, self.slots.held, self.lease_seconds)
        self.maintenance = Maintenance(
            self.store,
            max(0.5, min(self.lease_seconds / 2, 15.0)),
            retention_seconds=self.settings.retention_seconds,
            scheduler=Scheduler(self._full_store(), queue) if queue.tasks else None,
            beat=self._beat,
        )

    @property
    def kinds(self) -> frozenset[str]:
        """The kinds it has code for: it claims no other (a rolling deploy's new
        kind, another app's job in the same queue), leaving them queued. Read
        from the queue's tasks, which only grow, again when one is added."""
        if len(self._kinds) != len(self.queue.tasks):
            self._kinds = frozenset(self.queue.tasks)
        return self._kinds

    def _beat(self, stale_after: float) -> None:
        """Say this worker is alive, and what it takes and runs (chit/fleet.py)."""
        beat = WorkerBeat(
            self.id,
            socket.gethostname(),
            os.getpid(),
            self.queues,
            tuple(sorted(self.kinds)),
            self.concurrency,
            self.slots.busy(),
        )
        self._full_store().beat_worker(beat, stale_after)

    def held(self) -> list[JobContext]:
        return self.slots.held()

    @property
    def processed(self) -> int:
        """How many outcomes this worker has recorded (or given up on)."""
        return self.finisher.processed

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """Ask the worker to shut down gracefully (what SIGTERM does)."""
        self._stopping.set()
        self.slots.freed.set()

    def _sync_pool(self) -> ThreadPool | ProcessPool:
        if self.settings.pool == "thread":
            # One thread more than the slots: the one an idle worker's wait for
            # jobs runs on (see `_wait`), never taking a thread a job has a slot for.
            return ThreadPool(self.concurrency + 1)
        if not self.settings.app:
            raise ConfigError(
                "--pool process needs the app as module:queue (--app or CHIT_APP): "
                "its child processes import it"
            )
        return ProcessPool(
            self.settings.app,
            self.concurrency,
            max_jobs=self.settings.max_jobs_per_child,
            max_memory_mb=self.settings.max_memory_per_child,
        )

    # The claim loop

    def run_once(self) -> int:
        """Claim jobs into free slots and start them; returns how many were claimed."""
        if not self._limits_declared:
            self.declare_limits()
        woken, self._woken = self._woken, None
        if woken is not None:  # claimed by the wait that ended as they came
            return len(woken)
        free = self._asked = self.slots.reserve()
        if free <= 0:
            return 0
        try:
            claimed = self.store.claim(
                self.id, self.queues, free, self.lease_seconds, kinds=self.kinds
            )
        except BaseException:
            self.slots.hold([], free)
            raise
        self.slots.hold(claimed, free)
        self._look_again_at = claimed.look_again_at
        return len(claimed)

    def _claim_on_wake(self, store: ClaimsOnWake, seconds: float) -> None:
        """Wait for jobs, and claim them in the round trip that brings the wake
        (`run_once` then counts them), for the slots free now (when idle, once
        the finisher's claim, which may have been promised them all, ends)."""
        free = self._asked = self.slots.reserve(wait=seconds if self._idle else 0.0)
        claimed = None
        try:
            started = time.monotonic()
            claimed = store.claim_on_wake(
                self.id, self.queues, free, self.lease_seconds, seconds, self._stopping, self.kinds
            )
            self._idle = time.monotonic() - started >= IDLE_AFTER
        finally:
            self.slots.hold(claimed or [], free)
        if claimed is not None:
            self._look_again_at = claimed.look_again_at
            self._woken = claimed

    def declare_limits(self) -> None:
        """Tell the store the limits the code gives each kind (none too: a limit
        taken out of the code ends), before the first claim."""
        store = self.store if isinstance(self.store, FlowControl) else self.queue.store
        store.declare_limits({t.kind: t.limits for t in self.queue.tasks.values()})
        if self.queue.schedules:
            self.queue.declare_schedules(self._full_store())
        self._limits_declared = True

    def _full_store(self) -> FullStore:
        return self.store if isinstance(self.store, FullStore) else self.queue.store

    def tick(self) -> Pause:
        """One turn of the claim loop: claim what fits, and say what to wait for
        before the next turn. It outlives any one failure."""
        self.slots.freed.clear()
        try:
            claimed = self.run_once()
        except Exception as e:
            pause = Pause("error", self._error_wait)
            if isinstance(e, StoreError):
                log.warning("claim failed, retrying in %.1fs: %s", pause.seconds, e)
            else:
                log.exception("claim loop error, retrying in %.1fs", pause.seconds)
            self._error_wait = min(self._error_wait * 2, MAX_ERROR_WAIT)
            return pause
        self._error_wait = FIRST_ERROR_WAIT
        if self.slots.count() >= self.concurrency:
            return Pause("slot", self.settings.poll_interval)
        if claimed:
            self._idle_wait = FIRST_IDLE_WAIT
            if claimed >= self._asked:  # and slots freed meanwhile: more may be due
                return Pause("now")
        # Fewer than asked: nothing more was due, so the next job comes with a
        # wake. Claiming again at once would find nothing, and would hold the
        # interpreter while the jobs just claimed start.
        wait = self._idle_wait
        if self._look_again_at > float("-inf"):  # by a limit: look again when room may be free
            wait = min(wait, max(0.001, self._look_again_at - time.monotonic()))
        pause = Pause("jobs", wait)
        if not claimed:
            self._idle_wait = min(self._idle_wait * 2, self.settings.poll_interval)
        return pause

    def _wait(self, pause: Pause) -> None:
        if pause.until == "error":
            self._stopping.wait(pause.seconds)
        elif pause.until == "slot":
            self.slots.freed.wait(pause.seconds)
        elif pause.until == "jobs":
            try:
                if isinstance(self.store, ClaimsOnWake):
                    store, seconds = self.store, pause.seconds
                    pool = self.sync_pool
                    if self._idle and isinstance(pool, ThreadPool):
                        # A job thread waits (the pool's spare) and runs the first
                        # job it claims: a wake's job starts with no hand-off. Not
                        # through a backlog, where waits are short and frequent and
                        # the hand-offs to and from the waiting thread would cost more.
                        pool.wait_here(lambda: self._claim_on_wake(store, seconds))
                    else:
                        self._claim_on_wake(store, seconds)
                else:
                    self.store.wait_for_jobs(self.queues, pause.seconds, self._stopping)
            except StoreError as e:
                log.warning("waiting for jobs failed: %s", e)
                self._stopping.wait(pause.seconds)

    # Outcomes

    def flush(self, wait_for_others: bool = False) -> int:
        """Record every pending outcome now (see `Finisher.run_once`)."""
        return self.finisher.run_once(wait_for_others)

    # Running

    def run(self, install_signals: bool = True) -> int:
        """Work until stopped; returns the process exit code."""
        if install_signals and threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                signal.signal(signum, self._on_signal)
            before = early()
            if before is not None and not self._signals:
                self._signals = 1
                log.info("%s before the worker started: exiting", before.name)
                self.close()
                return 0
        log.info(
            "worker %s started: queues %s, concurrency %d (%s pool), lease %.1fs",
            self.id,
            ",".join(self.queues),
            self.concurrency,
            self.settings.pool,
            self.lease_seconds,
            extra={"event": "worker.started", "worker": self.id},
        )
        self.finisher.start()
        self.heartbeat.start()
        self.maintenance.start()
        while not self._stopping.is_set():
            self._wait(self.tick())
        return self._shutdown()

    def _shutdown(self) -> int:
        deadline = time.monotonic() + self.settings.grace_seconds
        # Outcomes still unwritten this long after the grace (database away) are
        # given up on: their leases expire and other workers run the jobs again.
        self.finisher.give_up_at = deadline + SHUTDOWN_WRITE_SECONDS
        self.release_held(waiting_only=True)
        running = self.slots.count()
        if running:
            log.info(
                "stopping: waiting up to %.0fs for %d running jobs",
                self.settings.grace_seconds,
                running,
            )
        while time.monotonic() < deadline and not self._hurry.is_set():
            self.slots.freed.clear()
            # Not a thread past its timeout: its outcome is recorded, and it
            # may run on for ever (a daemon thread, it ends with the process).
            if not self.slots.unfinished():
                break
            self.slots.freed.wait(0.1)
        self.release_held()
        self.close()
        self.finisher.stop()
        self.heartbeat.stop()
        self.maintenance.stop()
        try:  # gone from GET /queues at once, not when its beat goes stale
            self._full_store().forget_worker(self.id)
        except StoreError as e:
            log.warning("could not unregister the worker (its beat goes stale): %s", e)
        log.info(
            "worker %s stopped after %d jobs",
            self.id,
            self.processed,
            extra={"event": "worker.stopped", "worker": self.id},
        )
        return 0

    def close(self) -> None:
        """Stop the child processes of the process pool (a thread pool's daemon
        threads need nothing); a worker that ran calls it as it stops."""
        if isinstance(self.sync_pool, ProcessPool):
            self.sync_pool.close()

    def release_held(self, waiting_only: bool = False) -> int:
        """Hand back every job still held (or only those claimed ahead that have
        not started): queued again at once, attempt not counted."""
        unfinished = self.slots.hand_back(waiting_only)
        if unfinished:
            log.warning("handing back %d unfinished jobs", unfinished)
        self.flush(wait_for_others=True)
        return unfinished

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals == 1:
            log.info(
                "%s: finishing running jobs (grace %.0fs); send again to hand them back"
                " and exit at once",
                name,
                self.settings.grace_seconds,
            )
            self.stop()
            return
        # The kernel handles the next one (see the module's docstring).
        for other in STOP_SIGNALS:
            signal.signal(other, signal.SIG_DFL)
        log.info("%s again: handing back running jobs and exiting", name)
        self.stop()
        self._hurry.set()
        self.slots.freed.set()

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
            if self.slots.count():
                quiet = 0
                self.slots.outcome_ready.wait(0.05)
                self.slots.outcome_ready.clear()
            elif claimed or flushed:
                quiet = 0
            elif quiet >= 2:
                return done
            else:
                # A retry due in a few milliseconds is still work to wait for.
                quiet += 1
                time.sleep(0.01)
        raise TimeoutError(f"jobs still running or due after {timeout}s")
