"""`JobContext`: what a handler knows about the job it runs, and how it reports back."""

from __future__ import annotations

import threading
from typing import Any, Protocol

from chit.jobs import ClaimedJob, DependencyInfo, Progress, State


class ContextStore(Protocol):
    """What a context needs of its store: a `Store`, or, in a process-pool child,
    the link that asks the worker (which holds the lease) to write."""

    def checkpoint(
        self, job_id: str, lease_token: str, data: Any, progress: Progress | None, lease: float
    ) -> bool: ...

    def dependencies(self, job_id: str) -> list[DependencyInfo]: ...

    def get_result(self, job_id: str, tenant: str | None = None) -> tuple[bool, Any]: ...


class Dependency:
    """One direct dependency of the running job: `.id`, `.kind`, `.state` (a
    `chit.State`) and `.result`, a large result read from the store on first use."""

    __slots__ = ("_info", "_result", "_store")

    def __init__(self, info: DependencyInfo, store: ContextStore) -> None:
        self._info = info
        self._store = store
        self._result: Any = info.result

    @property
    def id(self) -> str:
        return self._info.id

    @property
    def kind(self) -> str:
        return self._info.kind

    @property
    def state(self) -> State:
        return self._info.state

    @property
    def result(self) -> Any:
        if self._info.result_external:
            _, self._result = self._store.get_result(self._info.id)
            self._info = DependencyInfo(self.id, self.kind, self.state, self._result)
        return self._result

    def __repr__(self) -> str:
        return f"<Dependency {self.kind} {self.id} {self.state.value}>"


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
        store: ContextStore,
        lease_seconds: float,
        timeout: float | None = None,
        has_dependencies: bool = False,
    ) -> None:
        self.id = id
        self.kind = kind
        self.queue = queue
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.lease_token = lease_token
        self.last_checkpoint = last_checkpoint
        # Seconds this attempt may run (None: no deadline); past it `cancelled` is true.
        self.timeout = timeout
        self._store = store
        self._lease_seconds = lease_seconds
        self._lock = threading.Lock()
        self._progress = progress
        self._progress_dirty = False
        self._progress_reported = False
        self._cancelled = threading.Event()
        self._cancel_reason: str | None = None
        self._cancel_requested = False
        self._lost = threading.Event()
        # Set by the worker once the handler's outcome is waiting to be recorded.
        self.finished = False
        self._has_dependencies = has_dependencies
        self._dependencies: list[Dependency] | None = None

    @classmethod
    def of(cls, job: ClaimedJob, store: ContextStore, lease_seconds: float) -> JobContext:
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
            timeout=job.timeout,
            has_dependencies=job.has_dependencies,
        )

    def __repr__(self) -> str:
        return f"<JobContext {self.kind} {self.id} attempt {self.attempt}/{self.max_attempts}>"

    @property
    def dependencies(self) -> list[Dependency]:
        """The jobs this one depends on directly, in the order given at enqueue,
        each with its state and result (read once, on first use); [] for none."""
        if self._dependencies is None:
            infos = self._store.dependencies(self.id) if self._has_dependencies else []
            self._dependencies = [Dependency(info, self._store) for info in infos]
        return self._dependencies

    @property
    def cancelled(self) -> bool:
        """True once someone asked to cancel this job, or its deadline passed
        (`cancel_reason` says which); stop soon and return."""
        return self._cancelled.is_set()

    @property
    def cancel_reason(self) -> str | None:
        """Why `cancelled` is true: "cancel requested" or "timed out after N s";
        None while it is false."""
        return self._cancel_reason

    @property
    def cancel_requested(self) -> bool:
        """True once someone asked to cancel the job (not merely its deadline passed)."""
        return self._cancel_requested

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
        with self._lock:
            self._cancel_requested = True
            self._cancel_reason = "cancel requested"
        self._cancelled.set()

    def mark_timed_out(self, seconds: float) -> None:
        with self._lock:
            if self._cancel_reason is None:
                self._cancel_reason = timed_out(seconds)
        self._cancelled.set()

    def mark_lost(self) -> None:
        self._lost.set()


def timed_out(seconds: float) -> str:
    """The error of an attempt past its deadline, e.g. "timed out after 2 s"."""
    return f"timed out after {seconds:g} s"
