"""Periodic upkeep a worker does for itself and for everyone: say it is alive
(its beat: chit/fleet.py), rescue jobs whose lease expired,
cancel jobs that expired before they started (expires_at), queue waiting jobs
whose wait timed out, when
`CHIT_RETENTION` is set delete finished jobs older than that, and enqueue the
due slots of schedules (`scheduler.py`), waking for each slot."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime

from chit.errors import StoreError
from chit.store import Store
from chit.store.capabilities import Waits
from chit.worker.scheduler import POLL_SECONDS, Scheduler

log = logging.getLogger("chit.worker")

# How often a worker prunes when a retention is set. Every worker does it; the
# delete of nothing-to-delete reads one index range, so extra workers cost little.
PRUNE_EVERY_SECONDS = 300.0
# A worker whose beat is this many upkeep intervals old is taken for dead.
STALE_AFTER_UPKEEPS = 3
# How often a worker queues the waiting jobs whose wait timed out, between
# upkeeps: a `wait_for(..., timeout=5)` resumes about 5 s on, not at the next
# upkeep (up to 15 s later). One statement on an index of the deadlines.
WAKE_SECONDS = 1.0


class Maintenance:
    def __init__(
        self,
        store: Store,
        interval: float,
        *,
        retention_seconds: float | None = None,
        prune_every: float = PRUNE_EVERY_SECONDS,
        scheduler: Scheduler | None = None,
        beat: Callable[[float], None] | None = None,
    ) -> None:
        self.store = store
        self.interval = interval
        self.retention_seconds = retention_seconds
        self.prune_every = prune_every
        self.scheduler = scheduler
        self.beat = beat
        self._last_prune: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chit-maintenance", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def run_once(self, now: datetime | None = None) -> float:
        """One tick: rescue expired leases; prune when a retention is set and
        `prune_every` has passed since the last prune; enqueue due schedule
        slots. `now` is for tests. Seconds until the next slot is due (0: more
        schedules are due at once)."""
        self.upkeep(now)
        return self.schedule(now)

    def upkeep(self, now: datetime | None = None) -> None:
        if self.beat is not None:
            try:  # alive until three upkeeps are missed
                self.beat(STALE_AFTER_UPKEEPS * self.interval)
            except StoreError as e:
                log.warning("the worker's beat failed, will retry: %s", e)
        self.rescue(now)
        if self.retention_seconds is not None and (
            self._last_prune is None or time.monotonic() - self._last_prune >= self.prune_every
        ):
            self.prune(self.retention_seconds, now)

    def schedule(self, now: datetime | None = None) -> float:
        """Enqueue the due slots; seconds until the next look."""
        if self.scheduler is None:
            return float("inf")
        try:
            return self.scheduler.run_once(now).wait
        except StoreError as e:
            log.warning("enqueueing due schedule slots failed, will retry: %s", e)
            return POLL_SECONDS

    def rescue(self, now: datetime | None = None) -> None:
        self.expire(now)
        self.wake(now)
        try:
            report = self.store.rescue_expired(now)
        except StoreError as e:
            log.warning("rescue of expired leases failed, will retry: %s", e)
            return
        if report.requeued or report.failed or report.cancelled:
            log.warning(
                "rescued jobs whose lease expired: %d queued again, %d failed "
                "(no attempts left), %d cancelled",
                report.requeued,
                report.failed,
                report.cancelled,
            )

    def expire(self, now: datetime | None = None) -> None:
        """Cancel the jobs not started by their expires_at (claims skip them)."""
        try:
            expired = self.store.expire_jobs(now)
        except StoreError as e:
            log.warning("cancelling expired jobs failed, will retry: %s", e)
            return
        if expired:
            log.info("cancelled %d jobs that expired before they started", expired)

    def wake(self, now: datetime | None = None) -> None:
        """Queue the waiting jobs whose wait's timeout has passed."""
        if not isinstance(self.store, Waits):
            return
        try:
            woken = self.store.wake_waiters(now)
        except StoreError as e:
            log.warning("waking jobs whose wait timed out failed, will retry: %s", e)
            return
        if woken:
            log.info("queued %d waiting jobs whose wait timed out", woken)

    def prune(self, retention_seconds: float, now: datetime | None = None) -> None:
        try:
            pruned = self.store.prune(retention_seconds, now)
        except StoreError as e:
            log.warning("pruning finished jobs failed, will retry: %s", e)
            return
        self._last_prune = time.monotonic()
        if pruned:
            log.info(
                "pruned %d finished jobs older than CHIT_RETENTION (%g s)",
                pruned,
                retention_seconds,
            )

    def _run(self) -> None:
        # Upkeep every `interval`; schedules as their slots come (at least once a
        # POLL_SECONDS while the worker has tasks).
        upkeep_at = wake_at = time.monotonic()
        while True:
            wait = self.interval
            try:
                if time.monotonic() >= upkeep_at:
                    upkeep_at = time.monotonic() + self.interval
                    self.upkeep()  # wakes too
                    wake_at = time.monotonic() + WAKE_SECONDS
                elif time.monotonic() >= wake_at:
                    wake_at = time.monotonic() + WAKE_SECONDS
                    self.wake()
                soonest = min(upkeep_at, wake_at) - time.monotonic()
                wait = min(self.schedule(), soonest)
            except Exception:
                log.exception("maintenance loop error; continuing")
            if self._stop.wait(max(0.001, wait)):
                return
