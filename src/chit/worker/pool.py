"""The executors a worker calls handlers with: daemon threads for sync handlers,
one event loop on its own thread for `async def` handlers. (`children.py` runs
sync handlers in child processes instead: `--pool process`.)

Deadlines: an async handler is cancelled at its deadline. A thread cannot be
stopped from outside, so a sync handler past its deadline has its timeout
recorded at once, sees `job.cancelled`, and keeps its slot until it returns;
what it returns then is dropped (the job is no longer its attempt's)."""

from __future__ import annotations

import asyncio
import logging
import queue as queue_mod
import threading
import time
from collections.abc import Callable

from chit.logs import job_fields
from chit.worker.deadlines import Deadlines
from chit.worker.execute import Call, Free, Once, Report, Returned, TimedOut, ainvoke, invoke

log = logging.getLogger("chit.worker")

# How long an async handler cancelled at its deadline may take to unwind before
# the timeout is recorded anyway (its slot stays taken until it does end).
CANCEL_GRACE_SECONDS = 0.5


class ThreadPool:
    """Daemon threads, so a worker that must exit is never held by a stuck handler."""

    def __init__(self, size: int, deadlines: Deadlines | None = None) -> None:
        self._deadlines = deadlines if deadlines is not None else Deadlines()
        self._calls: queue_mod.SimpleQueue[tuple[Call, Report, Free] | _Wait] = (
            queue_mod.SimpleQueue()
        )
        # The thread running a wait_here, and the first call submitted from it.
        self._keeper: int | None = None
        self._kept: list[tuple[Call, Report, Free]] = []
        for i in range(size):
            threading.Thread(target=self._work, name=f"chit-job-{i}", daemon=True).start()

    def submit(self, call: Call, report: Report, free: Free) -> None:
        if self._keeper == threading.get_ident() and not self._kept:
            self._kept.append((call, report, free))
            return
        self._calls.put((call, report, free))

    def wait_here(self, wait: Callable[[], None]) -> None:
        """Call `wait` (a wait for jobs that starts those it claims) on one of
        the pool's threads, which then runs the first job `wait` submits
        itself: the thread the wake reached runs the job, with no hand-off to
        another. Returns once `wait` has, raising what it raised. The pool
        needs a thread free for it: a worker's has one more than its slots."""
        item = _Wait(wait)
        self._calls.put(item)
        item.done.wait()
        if item.error is not None:
            raise item.error

    def _work(self) -> None:
        while True:
            item = self._calls.get()
            try:
                if isinstance(item, _Wait):
                    self._wait_then_run(item)
                else:
                    self._run(*item)
            except Exception:
                log.exception("job thread error")

    def _wait_then_run(self, item: _Wait) -> None:
        self._keeper = threading.get_ident()
        try:
            item.wait()
        except BaseException as e:  # the caller's to handle
            item.error = e
        finally:
            self._keeper = None
            kept, self._kept = self._kept, []
            item.done.set()
        for call, report, free in kept:
            self._run(call, report, free)

    def _run(self, call: Call, report: Report, free: Free) -> None:
        timeout = call.ctx.timeout
        if timeout is None:
            report(invoke(call))
            return
        once = Once(report)
        started = time.monotonic()

        def expire() -> None:
            call.ctx.mark_timed_out(timeout)
            if once(Returned(error=TimedOut(timeout)), running=True):
                ctx = call.ctx
                log.warning(
                    "job %s %s passed its %gs timeout: its thread runs on, abandoned (a thread"
                    " cannot be stopped; --pool process stops it at the deadline)",
                    ctx.kind,
                    ctx.id,
                    timeout,
                    extra=job_fields("job.abandoned", ctx.id, ctx.kind, attempt=ctx.attempt),
                )

        deadline = self._deadlines.after(timeout, expire)
        returned = invoke(call)
        deadline.cancel()
        if not once(returned):
            free(call.ctx.id)
            log.warning(
                "job %s %s returned %.1fs after its %gs timeout: what it returned is dropped "
                "(the timeout was recorded; run it with --pool process to stop it at the deadline)",
                call.ctx.kind,
                call.ctx.id,
                time.monotonic() - started - timeout,
                timeout,
            )


class _Wait:
    """A wait_here call, queued for a pool thread."""

    def __init__(self, wait: Callable[[], None]) -> None:
        self.wait = wait
        self.done = threading.Event()
        self.error: BaseException | None = None


class AsyncLoop:
    """One event loop for every async handler, started on the first one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def submit(self, call: Call, report: Report, free: Free) -> None:
        asyncio.run_coroutine_threadsafe(self._run(call, report, free), self._running_loop())

    async def _run(self, call: Call, report: Report, free: Free) -> None:
        timeout = call.ctx.timeout
        if timeout is None:
            report(await ainvoke(call))
            return
        task = asyncio.ensure_future(ainvoke(call))
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if done:
            report(task.result())
            return
        call.ctx.mark_timed_out(timeout)
        task.cancel()
        # The handler may clean up on CancelledError: a moment for it, not forever.
        await asyncio.wait({task}, timeout=CANCEL_GRACE_SECONDS)
        running = not task.done()
        if running:
            log.warning(
                "job %s %s went on after it was cancelled at its %gs timeout; its slot "
                "stays taken until it ends",
                call.ctx.kind,
                call.ctx.id,
                timeout,
            )
            # Run on this loop, so not before the report below.
            task.add_done_callback(lambda _: free(call.ctx.id))
        report(Returned(error=TimedOut(timeout)), running=running)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="chit-async", daemon=True).start()
                self._loop = loop
            return self._loop
