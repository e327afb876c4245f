"""`JobContext`: what a handler knows about the job it runs, and how it reports back."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from chit.jobs import ClaimedJob, Progress

if TYPE_CHECKING:
    from chit.store import Store


class JobContext:
    """Handed to every handler as its first argument.

    Delivery is at least once: a job can run again after a crash, so key side
    effects on `id` (and `attempt` where retries matter).
    """

    def __init__(
        self,
        *,
        id: str,
        kind: str,
        queue: str,
        attempt: int,
        max_attempts: int,
        lease_token: str,
        last_checkpoint: Any,
        progress: Progress,
        store: Store,
        lease_seconds: float,
    ) -> None:
        self.id = id
        self.kind = kind
        self.queue = queue
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.lease_token = lease_token
        self.last_checkpoint = last_checkpoint
        self._store = store
        self._lease_seconds = lease_seconds
        self._lock = threading.Lock()
        self._progress = progress
        self._progress_dirty = False
        self._progress_reported = False
        self._cancelled = threading.Event()
        self._lost = threading.Event()
        # Set by the worker once the handler's outcome is waiting to be recorded.
        self.finished = False

    @classmethod
    def of(cls, job: ClaimedJob, store: Store, lease_seconds: float) -> JobContext:
        """The context of a claimed job, its writes fenced by the claim's token."""
        return cls(
            id=job.id,
            kind=job.kind,
            queue=job.queue,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            lease_token=job.lease_token,
            last_checkpoint=job.checkpoint,
            progress=job.progress,
            store=store,
            lease_seconds=lease_seconds,
        )

    def __repr__(self) -> str:
        return f"<JobContext {self.kind} {self.id} attempt {self.attempt}/{self.max_attempts}>"

    @property
    def cancelled(self) -> bool:
        """True once someone asked to cancel this job; stop soon and return."""
        return self._cancelled.is_set()

    @property
    def lease_lost(self) -> bool:
        """True once another worker may hold this job: nothing this run records will stick."""
        return self._lost.is_set()

    def progress(self, done: int, total: int | None = None) -> None:
        """Report progress. Cheap: the worker writes it with its next lease renewal."""
        with self._lock:
            self._progress = Progress(int(done), None if total is None else int(total))
            self._progress_dirty = True
            self._progress_reported = True

    def checkpoint(self, data: Any) -> bool:
        """Persist resume state now (with progress, renewing the lease); a later
        attempt reads it as `last_checkpoint`. False if the lease was lost."""
        with self._lock:
            progress, self._progress_dirty = self._progress, False
        stored = self._store.checkpoint(
            self.id, self.lease_token, data, progress, self._lease_seconds
        )
        if stored:
            self.last_checkpoint = data
        else:
            self._lost.set()
        return stored

    # For the worker

    def take_progress(self) -> Progress | None:
        """Progress reported since the last call, or None when unchanged."""
        with self._lock:
            if not self._progress_dirty:
                return None
            self._progress_dirty = False
            return self._progress

    def last_progress(self) -> Progress | None:
        """The latest progress this run reported, sent or not; None if it reported none."""
        with self._lock:
            return self._progress if self._progress_reported else None

    def progress_unsent(self, sent: Progress) -> None:
        """The write carrying `sent` failed: send it again unless newer progress came."""
        with self._lock:
            if not self._progress_dirty and self._progress == sent:
                self._progress_dirty = True

    def mark_cancelled(self) -> None:
        self._cancelled.set()

    def mark_lost(self) -> None:
        self._lost.set()
