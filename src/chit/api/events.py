"""Server-Sent Events for jobs, fed by one poller per process.

Each `GET /jobs/{id}/events` registers a `Watch` with the process's `EventHub`.
The hub reads every watched job with one `Store.get_many` call per tick
(`interval`, 0.5 s by default), however many listeners there are, and hands each
watch the latest snapshot; a watch wakes its stream only when what a client
sees changed (state, attempts, progress, staleness, a cancel request), so lease
renewals that change nothing visible send nothing.

Event ids are a digest of that visible status. A client reconnecting with
`Last-Event-ID` gets the current status only if it differs from the last one it
saw, and a `204` (telling EventSource to stop reconnecting) when that last one
was already terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence

import anyio.to_thread
from starlette.responses import Response, StreamingResponse

from chit.errors import StoreError
from chit.jobs import Job
from chit.store import FullStore

log = logging.getLogger("chit.api")

POLL_INTERVAL = 0.5
KEEPALIVE_SECONDS = 15.0
# Tells EventSource how long to wait before reconnecting, in milliseconds.
RECONNECT_MS = 2000


def version(job: Job) -> str:
    """What a listener sees of a job, as a short digest: the SSE event id."""
    seen = (
        job.state.value,
        job.attempts,
        job.progress.done,
        job.progress.total,
        job.stale,
        job.cancel_requested,
        job.error is not None,
    )
    return hashlib.blake2b(repr(seen).encode(), digest_size=8).hexdigest()


def kind_of_change(before: Job | None, after: Job) -> str:
    """`state` for anything but a pure progress step, which is `progress`."""
    if before is None:
        return "state"
    same = (
        before.state == after.state
        and before.attempts == after.attempts
        and before.stale == after.stale
        and before.cancel_requested == after.cancel_requested
    )
    return "progress" if same else "state"


class Watch:
    """One listener's view of one job: the latest snapshot the hub saw."""

    def __init__(self, job_id: str, seen: str | None, wake: asyncio.Event | None = None) -> None:
        self.job_id = job_id
        self.seen = seen
        self.latest: Job | None = None
        self.gone = False
        self.closed = False
        # Shared by the watches of one workflow's jobs: one listener wakes for any.
        self._changed = wake or asyncio.Event()

    def offer(self, job: Job | None) -> None:
        if job is None:
            self.gone = True
            self._changed.set()
        elif version(job) != self.seen:
            self.latest = job
            self._changed.set()

    def close(self) -> None:
        self.closed = True
        self._changed.set()

    async def changed(self, timeout: float) -> bool:
        """Wait for a new snapshot (or the end); False on timeout."""
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            return False
        self._changed.clear()
        return True


class EventHub:
    """The process's single poller for every watched job."""

    def __init__(self, store: FullStore, interval: float = POLL_INTERVAL) -> None:
        self.store = store
        self.interval = interval
        self._watches: dict[str, set[Watch]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.polls = 0

    @property
    def listeners(self) -> int:
        return sum(len(w) for w in self._watches.values())

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="chit-event-hub")

    async def stop(self) -> None:
        for watches in list(self._watches.values()):
            for watch in list(watches):
                watch.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    @contextlib.contextmanager
    def watch(
        self, job_id: str, seen: str | None = None, wake: asyncio.Event | None = None
    ) -> Iterator[Watch]:
        w = Watch(job_id, seen, wake)
        self._watches.setdefault(job_id, set()).add(w)
        self._wake.set()
        try:
            yield w
        finally:
            watches = self._watches.get(job_id)
            if watches is not None:
                watches.discard(w)
                if not watches:
                    del self._watches[job_id]

    async def poll_once(self) -> int:
        """One store call for every watched job; returns how many were read."""
        ids = list(self._watches)
        if not ids:
            return 0
        jobs = await anyio.to_thread.run_sync(self.store.get_many, ids)
        self.polls += 1
        found = {job.id: job for job in jobs}
        for job_id in ids:
            for w in list(self._watches.get(job_id, ())):
                w.offer(found.get(job_id))
        return len(jobs)

    async def _run(self) -> None:
        delay = self.interval
        while True:
            if not self._watches:
                self._wake.clear()
                await self._wake.wait()
            try:
                await self.poll_once()
                delay = self.interval
            except StoreError as e:
                delay = min(delay * 2, 10.0)
                log.warning("event poller: store unavailable, retrying in %.1fs: %s", delay, e)
            except Exception:
                delay = min(delay * 2, 10.0)
                log.exception("event poller error; continuing")
            await asyncio.sleep(delay)


def sse(event: str, data: str, event_id: str | None = None) -> bytes:
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append(f"event: {event}")
    lines.extend(f"data: {line}" for line in data.splitlines() or [""])
    return ("\n".join(lines) + "\n\n").encode()


async def stream(
    watch: Watch,
    first: Job,
    render: Callable[[Job], str],
    send_first: bool,
    keepalive: float = KEEPALIVE_SECONDS,
) -> AsyncIterator[bytes]:
    """The event stream for one listener: the current status (unless the client
    already has it), then one event per visible change, ending after a terminal
    state or when the job is deleted."""
    # `retry:` goes with the first event, not alone: a lone block is an empty
    # event to some clients (httpx-sse).
    retry = f"retry: {RECONNECT_MS}\n".encode()
    last = first
    if send_first:
        watch.seen = version(first)
        yield retry + sse("state", render(first), watch.seen)
        retry = b""
    if first.state.terminal:
        return
    while not watch.closed:
        if not await watch.changed(keepalive):
            yield b": keepalive\n\n"
            continue
        if watch.gone:
            yield retry + sse("gone", '{"message": "the job was deleted"}')
            return
        job = watch.latest
        if job is None or version(job) == watch.seen:
            continue
        watch.seen = version(job)
        yield retry + sse(kind_of_change(last, job), render(job), watch.seen)
        retry = b""
        last = job
        if job.state.terminal:
            return


def response(
    hub: EventHub,
    store: FullStore,
    job: Job,
    tenant: str | None,
    last_event_id: str | None,
    render: Callable[[Job], str],
) -> Response:
    """`GET /jobs/{id}/events` for a job the caller may see (the API's route and
    the dashboard's both answer with this)."""
    if last_event_id == version(job) and job.state.terminal:
        return Response(status_code=204)

    async def body() -> AsyncIterator[bytes]:
        with hub.watch(job.id, last_event_id) as watch:
            try:
                # Read again once watched, so no change can fall between the two.
                current = await anyio.to_thread.run_sync(store.get, job.id, tenant) or job
            except StoreError as e:
                # The answer has started: say so as an event; the client reconnects.
                # The store's message names the server: the log's, not the client's.
                log.warning("event stream of %s: %s", job.id, e)
                message = "the job database is unavailable right now; reconnect shortly"
                yield f"retry: {RECONNECT_MS}\n".encode() + sse(
                    "error", json.dumps({"message": message})
                )
                return
            send_first = watch.seen != version(current)
            async for chunk in stream(watch, current, render, send_first):
                yield chunk

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


# A workflow's events (`GET /workflows/{id}/events`): the same hub watches each
# of its jobs, all waking one listener. Each event is one job's status; its id
# is a digest of every job's visible status after it, so a client reconnecting
# with the latest id gets nothing again (204 once every job has finished).


def workflow_version(jobs: Iterable[Job]) -> str:
    seen = sorted((job.id, version(job)) for job in jobs)
    return hashlib.blake2b(repr(seen).encode(), digest_size=8).hexdigest()


async def workflow_stream(
    watches: Sequence[Watch],
    wake: asyncio.Event,
    first: Sequence[Job],
    render: Callable[[Job], str],
    send_first: bool,
    keepalive: float = KEEPALIVE_SECONDS,
) -> AsyncIterator[bytes]:
    """Every job's current status (unless the client already has them all), then
    one event per visible change of any job, ending once every job is terminal."""
    retry = f"retry: {RECONNECT_MS}\n".encode()
    current = {job.id: job for job in first}
    for w in watches:
        if w.job_id in current:
            w.seen = version(current[w.job_id])
    if send_first:
        for job in first:
            yield retry + sse("state", render(job), workflow_version(current.values()))
            retry = b""
    while current and not all(job.state.terminal for job in current.values()):
        try:
            await asyncio.wait_for(wake.wait(), keepalive)
        except TimeoutError:
            yield b": keepalive\n\n"
            continue
        wake.clear()
        if any(w.closed for w in watches):
            return
        for w in watches:
            if w.gone and w.job_id in current:
                del current[w.job_id]
                data = json.dumps({"id": w.job_id, "message": "the job was deleted"})
                yield retry + sse("gone", data, workflow_version(current.values()))
                retry = b""
                continue
            latest = w.latest
            if latest is None or w.gone or version(latest) == w.seen:
                continue
            w.seen = version(latest)
            change = kind_of_change(current.get(latest.id), latest)
            current[latest.id] = latest
            yield retry + sse(change, render(latest), workflow_version(current.values()))
            retry = b""


def workflow_response(
    hub: EventHub,
    store: FullStore,
    jobs_now: Sequence[Job],
    tenant: str | None,
    last_event_id: str | None,
    render: Callable[[Job], str],
) -> Response:
    """`GET /workflows/{id}/events` for a workflow the caller may see, whose
    jobs (`jobs_now`, in the workflow's order) were just read."""
    if last_event_id == workflow_version(jobs_now) and all(j.state.terminal for j in jobs_now):
        return Response(status_code=204)
    job_ids = [job.id for job in jobs_now]

    async def body() -> AsyncIterator[bytes]:
        wake = asyncio.Event()
        with contextlib.ExitStack() as stack:
            watches = [stack.enter_context(hub.watch(i, None, wake)) for i in job_ids]
            try:
                # Read once watched, so no change can fall between the two.
                jobs = await anyio.to_thread.run_sync(store.get_many, list(job_ids))
            except StoreError as e:
                log.warning("event stream of a workflow: %s", e)
                message = "the job database is unavailable right now; reconnect shortly"
                yield f"retry: {RECONNECT_MS}\n".encode() + sse(
                    "error", json.dumps({"message": message})
                )
                return
            if tenant is not None:
                jobs = [job for job in jobs if job.tenant == tenant]
            order = {job_id: n for n, job_id in enumerate(job_ids)}
            jobs.sort(key=lambda job: order[job.id])
            send_first = last_event_id != workflow_version(jobs)
            async for chunk in workflow_stream(watches, wake, jobs, render, send_first):
                yield chunk

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
