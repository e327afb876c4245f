"""Periodic upkeep a worker does for everyone: rescue jobs whose lease expired."""

from __future__ import annotations

import logging
import threading

from chit.errors import StoreError
from chit.store import Store

log = logging.getLogger("chit.worker")


class Maintenance:
    def __init__(self, store: Store, interval: float) -> None:
        self.store = store
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chit-maintenance", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def run_once(self) -> None:
        try:
            report = self.store.rescue_expired()
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

    def _run(self) -> None:
        while True:
            try:
                self.run_once()
            except Exception:
                log.exception("maintenance loop error; continuing")
            if self._stop.wait(self.interval):
                return
