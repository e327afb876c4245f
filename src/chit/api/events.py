"""Server-Sent Events for jobs, fed by one watcher per process.

Each `GET /jobs/{id}/events` registers a `Watch` with the process's `EventHub`.
The hub reads every watched job with one `Store.get_many` call (and how far
each one's output goes with one `output_heads` call), however many listeners
there are, and hands each watch the latest snapshot; a watch wakes its stream
only when what a client sees changed (state, attempts, progress, staleness, a
cancel request, new output), so lease renewals that change nothing visible
send nothing.

The hub reads when the store's output feed says something was written
(`Output.output_feed`: NOTIFY on PostgreSQL, pub/sub on Redis, a
`PRAGMA data_version` check every 20 ms on SQLite, chit.store.feeds), and
every `interval` (0.5 s) besides, for state changes a feed does not name.
A stream that finds a job further on than it last told (a short attempt
began and ended between two reads) sends the `running` of each attempt it
missed, from the attempt records, before that attempt's output and the state
now: a client sees running -> succeeded however short the run.

Event ids are `<status digest>.<output seq>`: what the client has seen of
both. A client reconnecting with `Last-Event-ID` gets the current status only
if it differs from the last one it saw, and the output after that seq,
nothing lost or repeated; a `204` (telling EventSource to stop reconnecting)
when the status was already terminal and there is no output after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import Any

import anyio.to_thread
from starlette.responses import Response, StreamingResponse

from chit.errors import StoreError
from chit.jobs import Job, OutputItem, State
from chit.store import FullStore
from chit.store.feeds import OutputFeed

log = logging.getLogger("chit.api")

POLL_INTERVAL = 0.5
KEEPALIVE_SECONDS = 15.0
# Tells EventSource how long to wait before reconnecting, in milliseconds.
RECONNECT_MS = 2000
# Output values a stream reads from the store at a time.
OUTPUT_PAGE = 500


def version(job: Job) -> str:
    """What a listener sees of a job, as a short digest: the SSE event id."""
    seen = (
        job.state.value,
        job.attempts,
        job.progress.done,
        job.progress.total,
        job.progress.message,
        job.stale,
        job.cancel_requested,
        job.error is not None,
    )
    return hashlib.blake2b(repr(seen).encode(), digest_size=8).hexdigest()


def event_id(digest: str | None, seq: int) -> str:
    return f"{digest or ''}.{seq}"


def parse_event_id(last_event_id: str | None) -> tuple[str | None, int]:
    """(status digest, output seq) a client has seen; an id from before output
    existed (a digest alone) has seen no output."""
    if not last_event_id:
        return None, 0
    digest, _, seq = last_event_id.partition(".")
    try:
        after = int(seq) if seq else 0
    except ValueError:
        after = 0
    return digest or None, max(after, 0)


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
    """One listener's view of one job: the latest snapshot the hub saw, how far
    its output goes, and how far the listener was told (`seen`, `seq`)."""

    def __init__(
        self,
        job_id: str,
        seen: str | None,
        wake: asyncio.Event | None = None,
        seq: int | None = 0,
        group: Sequence[str] = (),
    ) -> None:
        self.job_id = job_id
        # The jobs read with this one when a feed names it (a workflow's: their
        # events come in the order their changes were committed).
        self.group = tuple(group)
        # None: a listener of the status alone (a workflow's), whom output does not wake.
        self.wants_output = seq is not None
        seq = seq or 0
        self.seen = seen
        self.seq = seq
        self.head = 0  # the job's last output seq, as the hub last read it
        self.latest: Job | None = None
        self.gone = False
        self.closed = False
        # Shared by the watches of one workflow's jobs: one listener wakes for any.
        self._changed = wake or asyncio.Event()

    def offer(self, job: Job | None, head: int = 0) -> None:
        if job is None:
            self.gone = True
            self._changed.set()
            return
        if self.wants_output:
            self.head = max(self.head, head)
        if version(job) != self.seen or self.head > self.seq:
            self.latest = job
            self._changed.set()

    def close(self) -> None:
        self.closed = True
        self._changed.set()

    async def changed(self, timeout: float) -> bool:
        """Wait for a new snapshot (or the end); False on timeout."""
        try:
            async with asyncio.timeout(timeout):  # not wait_for: see EventHub.stop
                await self._changed.wait()
        except TimeoutError:
            return False
        self._changed.clear()
        return True


class EventHub:
    """The process's single reader of every watched job, woken by the store's
    output feed (read on a thread of its own) and by its interval."""

    def __init__(self, store: FullStore, interval: float = POLL_INTERVAL) -> None:
        self.store = store
        self.interval = interval
        self._watches: dict[str, set[Watch]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.polls = 0
        # What the feed named since the last read: job ids, or every job (None).
        self._fed: set[str] | None = set()
        self._feed_thread: threading.Thread | None = None
        self._stopping = threading.Event()

    @property
    def listeners(self) -> int:
        return sum(len(w) for w in self._watches.values())

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="chit-event-hub")

    async def stop(self) -> None:
        self._stopping.set()
        for watches in list(self._watches.values()):
            for watch in list(watches):
                watch.close()
        if self._task is not None:
            # Python 3.11's asyncio.wait_for swallowed a cancel that came as the
            # wait it guarded ended (fixed in 3.12), and this await never
            # returned: the waits are asyncio.timeout now, the loop sees
            # _stopping, and the cancel is sent again until the task is done.
            self._wake.set()
            while not self._task.done():
                self._task.cancel()
                await asyncio.wait({self._task}, timeout=0.1)
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        thread, self._feed_thread = self._feed_thread, None
        if thread is not None:  # done with the store before it is closed
            await anyio.to_thread.run_sync(thread.join, 2.0)

    @contextlib.contextmanager
    def watch(
        self,
        job_id: str,
        seen: str | None = None,
        wake: asyncio.Event | None = None,
        seq: int | None = 0,
        group: Sequence[str] = (),
    ) -> Iterator[Watch]:
        w = Watch(job_id, seen, wake, seq, group)
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

    async def poll_once(self, job_ids: Sequence[str] | None = None) -> int:
        """One store call for the watched jobs (those given, or all) and one for
        their output heads; returns how many jobs were read."""
        ids = [i for i in (job_ids if job_ids is not None else self._watches) if i in self._watches]
        if not ids:
            return 0
        jobs, heads = await anyio.to_thread.run_sync(self._read, ids)
        self.polls += 1
        found = {job.id: job for job in jobs}
        for job_id in ids:
            for w in list(self._watches.get(job_id, ())):
                w.offer(found.get(job_id), heads.get(job_id, 0))
        return len(jobs)

    def _read(self, ids: list[str]) -> tuple[list[Job], dict[str, int]]:
        # Heads first: every value they count was written before the jobs' read.
        heads = self.store.output_heads(ids)
        return self.store.get_many(ids), heads

    def _start_feed(self) -> None:
        if self._feed_thread is not None:
            return
        loop = asyncio.get_running_loop()
        try:
            feed = self.store.output_feed()
        except Exception:
            log.exception("event hub: no output feed; reading every %.2fs", self.interval)
            return
        self._feed_thread = threading.Thread(
            target=self._listen, args=(feed, loop), name="chit-output-feed", daemon=True
        )
        self._feed_thread.start()

    def _listen(self, feed: OutputFeed, loop: asyncio.AbstractEventLoop) -> None:
        try:
            while not self._stopping.is_set():
                woke = feed.wait(0.25)  # how soon a stopping hub is done with it
                if woke is None or woke:
                    try:
                        loop.call_soon_threadsafe(self._fed_ids, woke)
                    except RuntimeError:  # the loop closed
                        return
        except Exception:
            if not self._stopping.is_set():
                log.exception("event hub: output feed stopped")
        finally:
            feed.close()

    def _fed_ids(self, ids: frozenset[str] | None) -> None:
        if ids is None:
            self._fed = None
        elif self._fed is not None:
            named = ids & self._watches.keys()
            for job_id in named:
                for w in self._watches[job_id]:
                    self._fed |= set(w.group)
            self._fed |= named
            if not self._fed:
                return
        self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        delay = self.interval
        last_full = 0.0  # when every watched job was last read
        while not self._stopping.is_set():
            if not self._watches:
                self._wake.clear()
                await self._wake.wait()
                self._fed = None  # every job, the first time
            self._start_feed()
            self._wake.clear()
            fed, self._fed = self._fed, set()
            # Every job at least each interval, however busy the feed keeps the hub
            # with some of them: changes no feed announces are not starved.
            full = not fed or loop.time() - last_full >= delay
            if full:
                last_full = loop.time()
            try:
                await self.poll_once(None if full else sorted(fed or ()))
                delay = self.interval
            except StoreError as e:
                delay = min(delay * 2, 10.0)
                log.warning("event poller: store unavailable, retrying in %.1fs: %s", delay, e)
            except Exception:
                delay = min(delay * 2, 10.0)
                log.exception("event poller error; continuing")
            if self._fed == set():  # nothing came while reading: a write, or the interval
                left = max(0.0, last_full + delay - loop.time())
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await self._wake.wait()
                if not self._wake.is_set():
                    self._fed = None
            else:
                await asyncio.sleep(0)


def sse(event: str, data: str, event_id: str | None = None) -> bytes:
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append(f"event: {event}")
    lines.extend(f"data: {line}" for line in data.splitlines() or [""])
    return ("\n".join(lines) + "\n\n").encode()


def output_data(item: OutputItem) -> str:
    return json.dumps({"seq": item.seq, "attempt": item.attempt, "data": item.data})


class Told:
    """What one listener has been told of its job, and the events that bring
    it up to a new snapshot, in order."""

    def __init__(
        self, store: FullStore, watch: Watch, render: Callable[[Job], str], last: Job | None
    ) -> None:
        self.store = store
        self.watch = watch
        self.render = render
        self.last = last  # the last status sent (None: none on this connection)

    async def events(self, job: Job) -> list[bytes]:
        w = self.watch
        items: list[OutputItem] = []
        if w.head > w.seq or job.state.terminal:
            items = await anyio.to_thread.run_sync(self._output_after, w.seq)
            if not job.state.terminal:
                # Only what was written before `job` was read (heads are read
                # first): a later attempt's values wait for the read that shows
                # its `running`, so no state comes after its attempt's output.
                items = [i for i in items if i.seq <= w.head]
        states = await self._missed_runs(job)
        if version(job) != w.seen:
            states.append(job)
        order: list[tuple[tuple[int, int], Job | OutputItem]] = [
            ((s.attempts, 0 if s.state is State.RUNNING else 2), s) for s in states
        ]
        order += [((i.attempt, 1), i) for i in items]
        order.sort(key=lambda pair: pair[0])  # stable: states in the order found
        out = []
        for _, what in order:
            if isinstance(what, OutputItem):
                w.seq = what.seq
                out.append(sse("output", output_data(what), event_id(w.seen, w.seq)))
            else:
                w.seen = version(what)
                kind = kind_of_change(self.last, what)
                out.append(sse(kind, self.render(what), event_id(w.seen, w.seq)))
                self.last = what
        return out

    def _output_after(self, after: int) -> list[OutputItem]:
        items: list[OutputItem] = []
        while True:
            page = self.store.output(self.watch.job_id, after, OUTPUT_PAGE) or []
            items += page
            if len(page) < OUTPUT_PAGE:
                return items
            after = page[-1].seq

    async def _missed_runs(self, job: Job) -> list[Job]:
        """The `running` of each attempt that began after the last status sent
        and is not the one running now: a short attempt the reads fell around."""
        last = self.last
        if last is None or job.attempts <= last.attempts:
            return []
        first = last.attempts + 1
        upto = job.attempts - (1 if job.state is State.RUNNING else 0)
        if upto < first:
            return []
        records = await anyio.to_thread.run_sync(self.store.attempts, job.id)
        runs = []
        for a in records:
            if first <= a.attempt <= upto:
                runs.append(
                    dataclasses.replace(
                        job,
                        state=State.RUNNING,
                        attempts=a.attempt,
                        worker=a.worker,
                        started_at=a.started_at,
                        finished_at=None,
                        result=None,
                        result_external=False,
                        error=None,
                        stale=False,
                    )
                )
        return runs


async def stream(
    watch: Watch,
    first: Job,
    render: Callable[[Job], str],
    send_first: bool,
    keepalive: float = KEEPALIVE_SECONDS,
    store: Any = None,
) -> AsyncIterator[bytes]:
    """The event stream for one listener: the current status (unless the client
    already has it) and the output after what it has, then one event per
    visible change and per value emitted, ending after a terminal state (and
    its output) or when the job is deleted."""
    # `retry:` goes with the first event, not alone: a lone block is an empty
    # event to some clients (httpx-sse).
    retry = f"retry: {RECONNECT_MS}\n".encode()
    told = Told(store, watch, render, None)
    if not send_first:
        watch.seen = version(first)
    job: Job | None = first
    while True:
        if job is not None:
            for chunk in await told.events(job):
                yield retry + chunk
                retry = b""
            if job.state.terminal:
                return
        if watch.closed:
            return
        if not await watch.changed(keepalive):
            yield b": keepalive\n\n"
            job = None
            continue
        if watch.gone:
            yield retry + sse("gone", '{"message": "the job was deleted"}')
            return
        job = watch.latest
        if job is not None and version(job) == watch.seen and watch.head <= watch.seq:
            job = None


async def response(
    hub: EventHub,
    store: FullStore,
    job: Job,
    tenant: str | None,
    last_event_id: str | None,
    render: Callable[[Job], str],
) -> Response:
    """`GET /jobs/{id}/events` for a job the caller may see (the API's route and
    the dashboard's both answer with this)."""
    if await finished_and_told(store, job, last_event_id):
        return Response(status_code=204)
    seen, seq = parse_event_id(last_event_id)

    async def body() -> AsyncIterator[bytes]:
        with hub.watch(job.id, seen, seq=seq) as watch:
            try:
                if not job.state.terminal:  # its claims and outcomes announced from now on
                    await anyio.to_thread.run_sync(store.listen_to, [job.id])
                # Read again once watched, so no change can fall between the two
                # (the head first, as the hub reads).
                head = await anyio.to_thread.run_sync(store.output_heads, [job.id])
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
            watch.head = max(watch.head, head.get(job.id, 0))
            send_first = watch.seen != version(current)
            async for chunk in stream(watch, current, render, send_first, store=store):
                yield chunk

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def finished_and_told(store: FullStore, job: Job, last_event_id: str | None) -> bool:
    """Whether a client reconnecting with `last_event_id` has seen everything:
    the terminal status, and every value (the route answers 204)."""
    seen, seq = parse_event_id(last_event_id)
    if seen != version(job) or not job.state.terminal:
        return False
    heads = await anyio.to_thread.run_sync(store.output_heads, [job.id])
    return heads.get(job.id, 0) <= seq


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
            async with asyncio.timeout(keepalive):
                await wake.wait()
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
            watches = [
                stack.enter_context(hub.watch(i, None, wake, None, job_ids)) for i in job_ids
            ]
            try:
                running = [j.id for j in jobs_now if not j.state.terminal]
                await anyio.to_thread.run_sync(store.listen_to, running)
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
