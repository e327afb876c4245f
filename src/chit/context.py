"""`JobContext`: what a handler knows about the job it runs, and how it reports back."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from chit.bounds import COST_MAX, OUTPUT_BYTES, PROGRESS_MESSAGE_MAX, STEP_NAME_MAX, whole_cost
from chit.emitting import Emitter, OutputStore
from chit.encoding import storable_json_error, storable_text
from chit.errors import InvalidStep, Suspend, Unsupported
from chit.jobs import ClaimedJob, DependencyInfo, Progress, Received, State, WaitedJob
from chit.waits import Waited, check_ids, check_signal_name, check_timeout, known

log = logging.getLogger("chit.worker")


class ContextStore(Protocol):
    """What a context needs of its store: a `Store`, or, in a process-pool child,
    the link that asks the worker (which holds the lease) to write."""

    def checkpoint(
        self, job_id: str, lease_token: str, data: Any, progress: Progress | None, lease: float
    ) -> bool: ...

    def step(self, job_id: str, name: str) -> tuple[bool, Any]: ...

    def save_step(self, job_id: str, lease_token: str, name: str, result: Any) -> bool: ...

    def report_cost(self, job_id: str, lease_token: str, cost: int) -> bool: ...

    def dependencies(self, job_id: str) -> list[DependencyInfo]: ...

    def get_result(self, job_id: str, tenant: str | None = None) -> tuple[bool, Any]: ...


@runtime_checkable
class WaitReads(Protocol):
    """What `wait_for` and `wait_for_jobs` read: a store with `Waits`, or the
    process-pool child's link."""

    def received(self, job_id: str, name: str) -> Received: ...

    def waited_jobs(self, job_id: str, ids: Sequence[str]) -> tuple[list[WaitedJob], bool]: ...

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
        tenant: str = "",
    ) -> None:
        self.id = id
        self.kind = kind
        self.queue = queue
        self.tenant = tenant
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
        # Flags, not Events: nothing waits on them, and two Events a job cost the
        # worker more than its no-op handler. A bool's store is atomic.
        self._cancelled = False
        self._cancel_reason: str | None = None
        self._cancel_requested = False
        self._lost = False
        # Set by the worker once the handler's outcome is waiting to be recorded.
        self.finished = False
        self._has_dependencies = has_dependencies
        self._dependencies: list[Dependency] | None = None
        # CHIT_MAX_OUTPUT_BYTES (the worker sets it); the emitter exists once the job emits.
        self.max_output_bytes = OUTPUT_BYTES
        self._emitter: Emitter | None = None
        # Why the attempt's output is not whole (the store stayed away), or None.
        self.output_error: str | None = None

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
            tenant=job.tenant,
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
        return self._cancelled

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
        return self._lost

    def progress(self, done: int, total: int | None = None, message: str | None = None) -> None:
        """Report progress, with a short `message` saying what the job is doing
        (at most 1,000 characters; None: none). Cheap: the worker writes it with
        its next lease renewal, in the same statement."""
        if message is not None:
            if not isinstance(message, str):
                raise TypeError(f"a progress message is text, not {type(message).__name__}")
            if len(message) > PROGRESS_MESSAGE_MAX:
                raise ValueError(
                    f"a progress message is at most {PROGRESS_MESSAGE_MAX} characters,"
                    f" not {len(message)}"
                )
            message = storable_text(message)
        progress = Progress(int(done), None if total is None else int(total), message)
        with self._lock:
            self._progress = progress
            self._progress_dirty = True
            self._progress_reported = True

    def emit(self, value: Any) -> None:
        """Append a JSON value to the job's output, which clients read and
        stream as it comes (`GET /jobs/{id}/events`, `queue.output`). Cheap: the
        value is written in the background, batched, within 100 ms, and what is
        left when the handler returns is written before its outcome. Each value
        gets the job's next `seq` and this attempt's number.

        Raises `InvalidOutput` (nothing stored) for a value that is not JSON
        and for one that would take the job's output, every attempt's, past
        CHIT_MAX_OUTPUT_BYTES. Once the lease was lost nothing more is stored
        (logged, and `lease_lost` turns true). Safe from any thread, and from
        async handlers (it never waits on the store but for the first value's
        one read of what the job's output already holds)."""
        with self._lock:
            if self._emitter is None:
                self._emitter = Emitter(
                    self._output_store(), self.id, self.lease_token, self.max_output_bytes
                )
        self._emitter.emit(value)
        if self._emitter.lost:
            self._lost = True

    def write_output(self, values: Sequence[str], size: int) -> int | None:
        """Write checked values with this attempt's lease (for a process-pool
        child's emitter, whose writes the worker makes)."""
        last = self._output_store().append_output(self.id, self.lease_token, values, size)
        if last is None:
            self._lost = True
        return last

    def _output_store(self) -> OutputStore:
        if not isinstance(self._store, OutputStore):
            raise Unsupported(f"{type(self._store).__name__} does not offer job output")
        return self._store

    @property
    def emitted(self) -> bool:
        """Whether the handler emitted anything (its output may wait to be written)."""
        return self._emitter is not None

    def flush_output(self) -> None:
        """Write the output still waiting (the worker, as the handler returns)."""
        if self._emitter is not None:
            unwritten = self._emitter.close()
            if self._emitter.lost:
                self._lost = True
            elif unwritten and self.output_error is None:
                self.output_error = (
                    f"OutputNotWritten: {unwritten} values emitted by attempt {self.attempt}"
                    " could not be written (the database was unreachable)"
                )

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
            self._lost = True
        return stored

    def report_cost(self, cost: int) -> bool:
        """Replace this attempt's cost (the job's `cost`, its estimate) with what
        it really spent, a whole number from 0 to COST_MAX: later claims count it
        against the kind's cost_rate and key_cost_rate. Call it once the spend
        is known (again to correct it). Written now, fenced by the lease: False
        (and `lease_lost` true) when another worker may hold the job. Raises
        ValueError for a cost that is not a whole number in range."""
        spent = whole_cost(cost, 0)
        if spent is None:
            raise ValueError(
                f"report_cost takes a whole number from 0 to {COST_MAX:,}, not {cost!r}"
            )
        if self._store.report_cost(self.id, self.lease_token, spent):
            return True
        self._lost = True
        log.warning("job %s: cost not reported: the lease was lost", self.id)
        return False

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` once for this job and return its result.

        The result (JSON) is stored under (job id, `name`), fenced by this
        attempt's lease; a later attempt of the job (after a crash, a retry or a
        replay) gets the stored result back without calling `fn`. What is
        returned is the stored form either way (a tuple comes back a list), so
        the first run and a resumed one see the same value.

        At least once: if the worker dies after `fn` did its work but before
        the result is stored, `fn` runs again in the next attempt; make its side
        effects idempotent, keyed on (`job.id`, `name`).

        Raises `InvalidStep` (nothing stored) for an empty name, one over 200
        characters or with a NUL, and for a result that is not JSON. If the
        lease was lost the result is returned but not stored (logged, and
        `lease_lost` turns true). An async handler uses `astep`."""
        _check_name(name)
        if inspect.iscoroutinefunction(fn):
            raise InvalidStep(
                f"step {name!r}: {fn.__name__} is a coroutine function; "
                "in an async handler use `await job.astep(...)`"
            )
        found, stored = self.stored_step(name)
        if found:
            return stored
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()
            raise InvalidStep(
                f"step {name!r} returned an awaitable; in an async handler use "
                "`await job.astep(...)`"
            )
        result = _stored_form(name, value)
        self.save_step(name, result)
        return result

    async def astep(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """`step` for async handlers: `fn` may be a coroutine function (awaited)
        or a plain one; the store is read and written off the event loop."""
        _check_name(name)
        found, stored = await asyncio.to_thread(self.stored_step, name)
        if found:
            return stored
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        result = _stored_form(name, value)
        await asyncio.to_thread(self.save_step, name, result)
        return result

    # Waits (DESIGN.md "Long AI tasks")

    def wait_for(self, name: str, timeout: float | None = None) -> Any:
        """The data of this job's signal `name` (`Queue.signal`, `POST
        /jobs/{id}/signals/{name}`), at once if it was sent, even before this
        call; None if an earlier wait for it timed out.

        Otherwise the attempt ends here (a `chit.Suspend` goes up: let it
        through) and the job waits, holding no slot or lease, its attempt not
        counted, until the signal comes or `timeout` seconds (None: no limit)
        pass; then the handler runs again from the top, and this call answers.
        Work before the wait belongs in `job.step`. InvalidWait (the job fails)
        for a bad name or timeout."""
        check_signal_name(name)
        seconds = check_timeout(timeout)
        got = self._wait_reads().received(self.id, name)
        if got.found:
            return got.data
        if got.timed_out:
            return None
        raise Suspend(signal=name, timeout=seconds)

    def wait_for_jobs(self, ids: Sequence[str], timeout: float | None = None) -> list[Waited]:
        """The jobs `ids` once every one has finished (any terminal state), in
        `ids`' order, each with `.id`, `.kind`, `.state`, `.result` and `.error`.

        Until then the attempt ends as `wait_for`'s does, and the job is queued
        in the transaction that ends the last of them (a failed one does not
        fail this job: look at `.state`). After `timeout` seconds the handler
        runs again and gets them as they are (some not finished). InvalidWait
        (the job fails) for its own id, an unknown id or another tenant's job,
        or a bad timeout. Enqueue the jobs in a `job.step`, so that the rerun
        does not enqueue them again."""
        wanted = check_ids(ids, self.id)
        seconds = check_timeout(timeout)
        reads = self._wait_reads()
        found, timed_out = reads.waited_jobs(self.id, wanted)
        jobs = known(wanted, found, self.tenant)
        if timed_out or all(job.state.terminal for job in jobs):
            return [Waited(job, reads) for job in jobs]
        raise Suspend(jobs=wanted, timeout=seconds)

    def _wait_reads(self) -> WaitReads:
        if not isinstance(self._store, WaitReads):
            raise Unsupported(f"{type(self._store).__name__} does not offer waits and signals")
        return self._store

    async def await_signal(self, name: str, timeout: float | None = None) -> Any:
        """`wait_for` for async handlers: the store is read off the event loop."""
        return await asyncio.to_thread(self.wait_for, name, timeout)

    async def await_jobs(self, ids: Sequence[str], timeout: float | None = None) -> list[Waited]:
        """`wait_for_jobs` for async handlers."""
        return await asyncio.to_thread(self.wait_for_jobs, ids, timeout)

    # For the worker (and `step`)

    def stored_step(self, name: str) -> tuple[bool, Any]:
        """(True, result) when this job stored step `name` in any attempt."""
        return self._store.step(self.id, name)

    def save_step(self, name: str, result: Any) -> bool:
        """Store a checked step result with this attempt's lease; False (logged,
        and the lease marked lost) when fenced out."""
        if self._store.save_step(self.id, self.lease_token, name, result):
            return True
        self._lost = True
        log.warning(
            "job %s: step %r not stored: the lease was lost (another worker may hold the job)",
            self.id,
            name,
        )
        return False

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
        self._cancelled = True

    def mark_timed_out(self, seconds: float) -> None:
        with self._lock:
            if self._cancel_reason is None:
                self._cancel_reason = timed_out(seconds)
        self._cancelled = True

    def mark_lost(self) -> None:
        self._lost = True


def timed_out(seconds: float) -> str:
    """The error of an attempt past its deadline, e.g. "timed out after 2 s"."""
    return f"timed out after {seconds:g} s"


def _check_name(name: Any) -> None:
    if not isinstance(name, str):
        raise InvalidStep(f"a step name is text, not {type(name).__name__}")
    if not name:
        raise InvalidStep("a step name must not be empty")
    if len(name) > STEP_NAME_MAX:
        raise InvalidStep(
            f"step name {name[:40]!r}... is {len(name)} characters; at most {STEP_NAME_MAX}"
        )
    if storable_text(name) != name:
        raise InvalidStep(f"step name {name!r} holds a NUL or a lone surrogate")


def _stored_form(name: str, value: Any) -> Any:
    """`value` as the store gives it back (JSON decoded), or InvalidStep."""
    problem = storable_json_error(value)
    if problem is not None:
        raise InvalidStep(
            f"step {name!r} returned a value that is not JSON ({problem}); nothing was stored"
        )
    return json.loads(json.dumps(value, ensure_ascii=False))
