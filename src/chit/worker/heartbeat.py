"""Lease renewal: one statement renews every lease a worker holds and carries
the progress its handlers reported since the last one."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from chit.context import JobContext
from chit.errors import StoreError
from chit.jobs import Beat
from chit.store import Store

log = logging.getLogger("chit.worker")

# Progress is written at most this often, and never more often than leases need renewing.
PROGRESS_INTERVAL = 1.0


class Heartbeat:
    def __init__(
        self,
        store: Store,
        held: Callable[[], list[JobContext]],
        lease_seconds: float,
    ) -> None:
        self.store = store
        self.held = held
        self.lease_seconds = lease_seconds
        self.interval = lease_seconds / 3
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chit-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def run_once(self, force: bool = False, now: float | None = None) -> None:
        """Renew leases when a third of the lease has passed, or sooner to carry
        progress. `now` (on the `time.monotonic()` clock) is for tests."""
        if now is None:
            now = time.monotonic()
        contexts = self.held()
        if not contexts:
            self._last = now
            return
        since = now - self._last
        lease_due = force or since >= self.interval
        if not lease_due and since < PROGRESS_INTERVAL:
            return
        beats, sent = [], []
        for ctx in contexts:
            progress = ctx.take_progress()
            if progress is not None:
                sent.append((ctx, progress))
            beats.append(Beat(ctx.id, ctx.lease_token, progress))
        if not lease_due and not sent:
            return
        try:
            result = self.store.heartbeat(beats, self.lease_seconds)
        except StoreError as e:
            for ctx, progress in sent:
                ctx.progress_unsent(progress)
            log.warning("heartbeat failed, will retry: %s", e)
            return
        self._last = now
        still_held = {ctx.id for ctx in self.held()}
        for ctx in contexts:
            if ctx.id in result.cancel_requested and not ctx.cancel_requested:
                log.info("job %s %s: cancellation requested", ctx.kind, ctx.id)
                ctx.mark_cancelled()
            lost = ctx.id not in result.held and ctx.id in still_held and not ctx.finished
            if lost and not ctx.lease_lost:
                log.warning(
                    "job %s %s: lease lost (another worker may run it); its outcome will be "
                    "fenced out",
                    ctx.kind,
                    ctx.id,
                )
                ctx.mark_lost()

    def _run(self) -> None:
        tick = min(0.25, self.interval / 2)
        while not self._stop.wait(tick):
            try:
                self.run_once()
            except Exception:
                log.exception("heartbeat loop error; continuing")
