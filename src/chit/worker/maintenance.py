"""Periodic upkeep a worker does for everyone: rescue jobs whose lease expired,
cancel jobs that expired before they started (expires_at), and, when
`CHIT_RETENTION` is set, delete finished jobs older than that."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime

from chit.errors import StoreError
from chit.store import Store

log = logging.getLogger("chit.worker")

# How often a worker prunes when a retention is set. Every worker does it; the
# delete of nothing-to-delete reads one index range, so extra workers cost little.
PRUNE_EVERY_SECONDS = 300.0


class Maintenance:
    def __init__(
        self,
        store: Store,
        interval: float,
        *,
        retention_seconds: float | None = None,
        prune_every: float = PRUNE_EVERY_SECONDS,
    ) -> None:
        self.store = store
        self.interval = interval
        self.retention_seconds = retention_seconds
        self.prune_every = prune_every
        self._last_prune: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chit-maintenance", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def run_once(self, now: datetime | None = None) -> None:
        """One tick: rescue expired leases; prune when a retention is set and
        `prune_every` has passed since the last prune. `now` is for tests."""
        self.rescue(now)
        if self.retention_seconds is not None and (
            self._last_prune is None or time.monotonic() - self._last_prune >= self.prune_every
        ):
            self.prune(self.retention_seconds, now)

    def rescue(self, now: datetime | None = None) -> None:
        self.expire(now)
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
        while True:
            try:
                self.run_once()
            except Exception:
                log.exception("maintenance loop error; continuing")
            if self._stop.wait(self.interval):
                return
