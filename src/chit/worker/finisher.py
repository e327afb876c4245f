"""Recording outcomes: each batch in one store call, claiming jobs for the slots
it frees in the same call (`finish_and_claim`: one transaction), so a busy
worker pays one commit per batch, not two.

On PostgreSQL two finishers work at once: one batch is written while the
server works on the other; a SQLite file takes one writer at a time anyway.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from chit.context import JobContext
from chit.encoding import storable_text
from chit.errors import StoreError
from chit.jobs import ClaimedJob, Failed, Outcome, Snoozed, Succeeded, Suspended
from chit.logs import job_fields
from chit.store import Store
from chit.worker.slots import Slots

log = logging.getLogger("chit.worker")


class Finisher:
    def __init__(
        self,
        store: Store,
        slots: Slots,
        *,
        worker_id: str,
        queues: tuple[str, ...],
        kinds: Callable[[], frozenset[str]] | None = None,
        lease_seconds: float,
    ) -> None:
        self.store = store
        self.slots = slots
        self.worker_id = worker_id
        self.queues = queues
        self.kinds = kinds
        self.lease_seconds = lease_seconds
        self.processed = 0
        # Past this (monotonic) time, outcomes the database will not take are
        # given up on: set at shutdown.
        self.give_up_at: float | None = None
        self.threads = 2 if store.concurrent_writes else 1
        self._flushes = threading.BoundedSemaphore(self.threads)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, name=f"chit-finisher-{i}", daemon=True)
            for i in range(self.threads)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        deadline = time.monotonic() + 5
        for thread in self._threads:
            # Set again until it is seen: another finisher may clear it first.
            while thread.is_alive() and time.monotonic() < deadline:
                self.slots.outcome_ready.set()
                thread.join(timeout=0.05)

    def run_once(self, wait_for_others: bool = False) -> int:
        """Record every pending outcome in one store call, claiming jobs for the
        slots they free in the same call; returns how many outcomes.

        While the database is away it retries, so no outcome is dropped, until
        `give_up_at` (then the leases expire and the jobs run again). With
        `wait_for_others` (shutdown), it returns only once the finishers
        running beside it have ended their batches too."""
        with self._flushes:
            batch, free = self.slots.take()
            if batch:
                self._finish(batch, free)
        if wait_for_others:
            for _ in range(self.threads):
                self._flushes.acquire()
            for _ in range(self.threads):
                self._flushes.release()
        return len(batch)

    def _run(self) -> None:
        ready = self.slots.outcome_ready
        while True:
            ready.wait()
            ready.clear()
            if self._stop.is_set():
                return
            try:
                self.run_once()
            except Exception:
                log.exception("finisher error; continuing")

    def _finish(self, batch: list[Outcome], free: int) -> None:
        recorded = None
        if free > 0:
            try:
                recorded = self.store.finish_and_claim(
                    batch,
                    self.worker_id,
                    self.queues,
                    free,
                    self.lease_seconds,
                    kinds=None if self.kinds is None else self.kinds(),
                )
            except Exception as e:  # all or nothing: nothing was recorded
                log.debug("recording %d outcomes with a claim failed: %s", len(batch), e)
        claimed: list[ClaimedJob] = []
        if recorded is None:
            if free > 0:  # the claim failed: no slot is promised while the batch is retried
                self.slots.hold([], free)
                free = 0
            applied = self._record(batch)
        else:
            applied, claimed = recorded

        def log_outcomes(settled: list[tuple[JobContext | None, float]]) -> None:
            for outcome, ok, (ctx, seconds) in zip(batch, applied, settled, strict=True):
                _log_outcome(outcome, ok, ctx, seconds, self.worker_id)

        self.slots.settle(batch, claimed, free, log_outcomes)
        with self._lock:
            self.processed += len(batch)
        self.slots.freed.set()

    def _record(self, batch: list[Outcome]) -> list[bool]:
        delay = 0.1
        while True:
            try:
                return self.store.finish(batch)
            except StoreError as e:
                if not e.transient:
                    return self._record_each(batch, e)
                if self.give_up_at is not None and time.monotonic() >= self.give_up_at:
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
    outcome: Outcome, applied: bool, ctx: JobContext | None, seconds: float, worker: str
) -> None:
    if applied and isinstance(outcome, Succeeded) and not log.isEnabledFor(logging.INFO):
        return  # the common case, whose fields cost more than a no-op job
    kind = ctx.kind if ctx else "?"
    name = type(outcome).__name__.lower()
    attempt = ctx.attempt if ctx else None
    fields: dict[str, Any] = {"kind": kind, "attempt": attempt, "worker": worker}
    fields["duration"] = seconds
    if ctx is not None:
        fields["queue"] = ctx.queue
    if not applied:
        log.warning(
            "job %s %s: %s outcome fenced out: the lease was lost and the job "
            "belongs to someone else now; nothing recorded",
            kind,
            outcome.job_id,
            name,
            extra=job_fields("job.fenced_out", outcome.job_id, **fields),
        )
    elif isinstance(outcome, Succeeded):
        log.info(
            "job %s %s succeeded in %.3fs",
            kind,
            outcome.job_id,
            seconds,
            extra=job_fields("job.succeeded", outcome.job_id, **fields),
        )
    elif isinstance(outcome, Snoozed):
        delay = outcome.delay
        log.info(
            "job %s %s snoozed for %gs after %.3fs",
            kind,
            outcome.job_id,
            delay,
            seconds,
            extra=job_fields("job.snoozed", outcome.job_id, **fields),
        )
    elif isinstance(outcome, Suspended):
        what = outcome.signal if outcome.jobs is None else f"{len(outcome.jobs)} jobs"
        log.info(
            "job %s %s waits for %s after %.3fs",
            kind,
            outcome.job_id,
            what,
            seconds,
            extra=job_fields("job.waiting", outcome.job_id, **fields),
        )
    else:
        detail = getattr(outcome, "error", "") or ""
        retry_in = getattr(outcome, "retry_in", None)
        last = ctx is None or ctx.attempt >= ctx.max_attempts
        if isinstance(outcome, Failed):
            # The store fails a job for good once its attempts are used up, whatever retry_in.
            event = "job.retrying" if retry_in is not None and not last else "job.failed"
        else:
            event = f"job.{name}"  # released (handed back), cancelled
        when = f", retry in {retry_in:.1f}s" if retry_in is not None else ""
        log.warning(
            "job %s %s %s after %.3fs%s %s",
            kind,
            outcome.job_id,
            name,
            seconds,
            when,
            detail.split("\n", 1)[0],
            extra=job_fields(
                event,
                outcome.job_id,
                **fields,
                error=detail or None,
                retry_in=retry_in if event == "job.retrying" else None,
            ),
        )
