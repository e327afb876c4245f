"""`--pool process`: sync handlers run in a pool of child processes, one job at
a time each, started once and reused, so a handler past its deadline can
really be stopped: its child is terminated (SIGTERM, then SIGKILL after a short
grace) and replaced while the worker keeps serving.

The worker keeps every job's lease, context and outcome; a child only runs
handlers. Each child has a thread here that feeds it one call at a time and
watches it: it passes on the progress and checkpoints the child reports (the
worker writes them, with the job's lease), tells the child of a cancellation
or a lost lease, enforces the deadline, and turns a child's death (a segfault,
the OOM killer) into that one attempt's error. Children are recycled after
`max_jobs` jobs or once their peak memory passes `max_memory_mb`.

Why multiprocessing's forkserver: a worker is full of threads and database
connections, which a plain fork would copy half-locked into every child;
spawn is safe but starts a fresh interpreter that imports the app each time
(a replacement after a timeout would take as long as a worker's start). The
forkserver is a small single-threaded process started once, with the app
imported (preloaded); each child is a fork of it, ready in milliseconds.

Between worker and child, tuples over two one-way pipes:
  to the child:   ("run", job, timeout, max_output_bytes) ("cancel", id) ("lost", id)
                  ("checkpointed", ok, error) ("answered", value, error) ("exit",)
  from the child: ("ready",) ("broken", text) ("progress", id, progress)
                  ("checkpoint", data, progress) ("returned", result, progress, peak_kb)
                  ("raised", text, permanent, progress, peak_kb)
                  ("snoozed", seconds, progress, peak_kb)
                  ("waiting", signal, jobs, timeout, progress, peak_kb)
                  ("step", name) ("save_step", name, result) ("report_cost", cost)
                  ("output", values, size)
A checkpoint, a step, a cost or output waits for the worker's answer ("checkpointed", or
"answered" with the stored step or whether it was saved), as the worker holds
the lease that fences it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import queue as queue_mod
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from chit import logs, tracing
from chit.checks import parse_payload
from chit.context import JobContext
from chit.encoding import storable_json_error
from chit.errors import ConfigError, PermanentError, Snooze, StoreError, Suspend
from chit.jobs import ClaimedJob, DependencyInfo, Progress, Received, WaitedJob
from chit.queue import Queue
from chit.store.capabilities import Output, Waits
from chit.worker.execute import (
    Call,
    Free,
    Once,
    Report,
    ReportedError,
    Returned,
    TimedOut,
    describe,
)

log = logging.getLogger("chit.worker")

# SIGTERM first, so a child can die cleanly; SIGKILL if it has not after this.
KILL_GRACE_SECONDS = 1.0
# How long a child may take to start (import the app) before the worker gives up.
START_SECONDS = 60.0
# How often a watcher looks at its job's cancellation and lease, and a child
# sends the progress its handler reported: the heartbeat writes it every second.
WATCH_SECONDS = 0.1


class ChildFailed(Exception):
    """A child process could not be started, or died before it was ready."""


@dataclass
class _Child:
    process: BaseProcess
    to_child: Connection
    from_child: Connection
    pid: int  # kept: a closed process object no longer says
    jobs: int = 0
    stopped: bool = False


class ProcessPool:
    """`size` child processes that import `app` ("module:queue"); an executor."""

    def __init__(
        self,
        app: str,
        size: int,
        *,
        max_jobs: int = 0,
        max_memory_mb: int = 0,
    ) -> None:
        self.app = app
        self.max_jobs = max_jobs
        self.max_memory_kb = max_memory_mb * 1024
        self._context = multiprocessing.get_context("forkserver")
        # Takes effect when the forkserver starts (the first child of this process).
        self._context.set_forkserver_preload([__name__, app.partition(":")[0]])
        self._calls: queue_mod.SimpleQueue[tuple[Call, Report] | None] = queue_mod.SimpleQueue()
        self._closing = threading.Event()
        children = []
        try:
            for _ in range(size):
                children.append(self._start_child())
        except ChildFailed as e:
            for child in children:
                self._stop(child, busy=False)
            raise ConfigError(f"--pool process: {e}") from None
        self._threads = [
            threading.Thread(target=self._serve, args=(child,), name=f"chit-child-{i}", daemon=True)
            for i, child in enumerate(children)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, call: Call, report: Report, free: Free) -> None:
        # A child is stopped at its deadline before the timeout is reported: no
        # report comes while the handler runs on, so `free` is never needed.
        self._calls.put((call, report))

    def close(self) -> None:
        """Stop every child (those still running a job too: the worker handed the
        job back) and the threads that watch them."""
        self._closing.set()
        for _ in self._threads:
            self._calls.put(None)
        deadline = time.monotonic() + 2 * KILL_GRACE_SECONDS + 1
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    # The thread that feeds one child

    def _serve(self, child: _Child | None) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                break
            call, report = item
            once = Once(report)
            keep = False
            try:
                if child is None:
                    child = self._start_child()
                keep = self._supervise(child, call, once)
            except ChildFailed as e:
                once(Returned(error=ReportedError(f"child process: {e}")))
            except Exception as e:
                log.exception("job %s %s: child process watcher error", call.ctx.kind, call.ctx.id)
                once(Returned(error=ReportedError(f"child process watcher error: {e}")))
            if child is not None and not keep:
                self._stop(child, busy=False)  # dead already, unless recycled
                child = None
            if child is None and not self._closing.is_set():
                try:
                    child = self._start_child()
                except ChildFailed as e:  # the next job tries again
                    log.error("could not start a child process: %s", e)
        if child is not None:
            self._stop(child, busy=False)

    def _supervise(self, child: _Child, call: Call, report: Once) -> bool:
        """Run `call` in `child` until it ends one way or another; True if the
        child may run another job."""
        ctx = call.ctx
        timeout = ctx.timeout
        try:
            # The child's spans nest under the attempt's, which lives here.
            job = dataclasses.replace(call.job, traceparent=tracing.span_traceparent(call.span))
            child.to_child.send(("run", job, timeout, ctx.max_output_bytes))
        except (OSError, ValueError):
            report(Returned(error=ReportedError(self._death(child))))
            return False
        deadline = None if timeout is None else time.monotonic() + timeout
        told_cancelled = told_lost = False
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                assert timeout is not None
                ctx.mark_timed_out(timeout)
                # Stopped before it is recorded: a retry never runs beside it.
                self._stop(child)
                log.warning(
                    "job %s %s: child process %d stopped at the %gs timeout",
                    ctx.kind,
                    ctx.id,
                    child.pid,
                    timeout,
                )
                report(Returned(error=TimedOut(timeout)))
                return False
            if self._closing.is_set():  # the worker stops: the job was handed back
                self._stop(child)
                report(Returned(error=ReportedError("the worker stopped")))
                return False
            if ctx.cancel_requested and not told_cancelled:
                told_cancelled = self._tell(child, ("cancel", ctx.id))
            if ctx.lease_lost and not told_lost:
                told_lost = self._tell(child, ("lost", ctx.id))
            wait = WATCH_SECONDS
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - time.monotonic()))
            ready = multiprocessing.connection.wait(
                [child.from_child, child.process.sentinel], wait
            )
            if not ready:
                continue
            # Messages first: a child may have written its result and then died.
            if child.from_child not in ready and not child.from_child.poll():
                report(Returned(error=ReportedError(self._death(child))))
                return False
            try:
                message = child.from_child.recv()
            except (EOFError, OSError):
                report(Returned(error=ReportedError(self._death(child))))
                return False
            ended = self._received(child, ctx, message, report)
            if ended is not None:
                return ended

    def _received(
        self, child: _Child, ctx: JobContext, message: tuple[Any, ...], report: Once
    ) -> bool | None:
        """Act on one message from the child; whether it may run another job once
        this one ended, None while it runs."""
        match message:
            case ("progress", job_id, progress):
                if job_id == ctx.id:  # not a late one from the job before
                    _progressed(ctx, progress)
            case ("checkpoint", data, progress):
                _progressed(ctx, progress)
                try:
                    self._tell(child, ("checkpointed", ctx.checkpoint(data), None))
                except Exception as e:  # the handler sees it raised, as with a thread
                    self._tell(child, ("checkpointed", False, f"{type(e).__name__}: {e}"))
            case ("step", name):
                self._answer(child, lambda: ctx.stored_step(name))
            case ("save_step", name, result):
                self._answer(child, lambda: ctx.save_step(name, result))
            case ("report_cost", cost):
                self._answer(child, lambda: ctx.report_cost(cost))
            case ("output", values, size):
                self._answer(child, lambda: ctx.write_output(values, size))
            case ("returned", result, progress, peak_kb):
                _progressed(ctx, progress)
                report(Returned(result))
                return self._reusable(child, peak_kb)
            case ("raised", text, permanent, progress, peak_kb):
                _progressed(ctx, progress)
                report(Returned(error=ReportedError(text, permanent)))
                return self._reusable(child, peak_kb)
            case ("snoozed", seconds, progress, peak_kb):
                _progressed(ctx, progress)
                report(Returned(error=Snooze(seconds)))
                return self._reusable(child, peak_kb)
            case ("waiting", signal, jobs, timeout, progress, peak_kb):
                _progressed(ctx, progress)
                report(Returned(error=Suspend(signal, jobs, timeout)))
                return self._reusable(child, peak_kb)
            case _:
                log.error("child process %d sent %.100r; replacing it", child.pid, message)
                report(Returned(error=ReportedError("child process broke the protocol")))
                return False
        return None

    def _answer(self, child: _Child, ask: Callable[[], Any]) -> None:
        """Send the child what `ask` gives, or the error it raised (which the
        handler then sees raised, as it would in a thread)."""
        try:
            self._tell(child, ("answered", ask(), None))
        except Exception as e:
            self._tell(child, ("answered", None, f"{type(e).__name__}: {e}"))

    def _reusable(self, child: _Child, peak_kb: int) -> bool:
        child.jobs += 1
        if self.max_jobs and child.jobs >= self.max_jobs:
            log.info("child process %d replaced after %d jobs", child.pid, child.jobs)
            return False
        if self.max_memory_kb and peak_kb > self.max_memory_kb:
            log.info(
                "child process %d replaced: its memory reached %d MB (the limit is %d MB)",
                child.pid,
                peak_kb // 1024,
                self.max_memory_kb // 1024,
            )
            return False
        return True

    @staticmethod
    def _tell(child: _Child, message: tuple[Any, ...]) -> bool:
        try:
            child.to_child.send(message)
            return True
        except (OSError, ValueError):  # it died: the watcher sees it next
            return False

    # Starting and stopping children

    def _start_child(self) -> _Child:
        to_child_r, to_child = self._context.Pipe(duplex=False)
        from_child, from_child_w = self._context.Pipe(duplex=False)
        # Not a daemon: a daemon process may not start processes, and handlers may.
        # A child whose worker is gone sees its pipe close and exits.
        process = self._context.Process(
            target=child_main,
            args=(self.app, to_child_r, from_child_w, logs.configured()),
            name="chit-child",
        )
        try:
            process.start()
        except OSError as e:
            raise ChildFailed(f"could not start: {e}") from None
        finally:
            # Only the child holds these ends: its death closes the pipe.
            to_child_r.close()
            from_child_w.close()
        assert process.pid is not None
        child = _Child(process, to_child, from_child, process.pid)
        ready = multiprocessing.connection.wait([from_child, process.sentinel], START_SECONDS)
        message: Any = None
        if from_child in ready:
            with contextlib.suppress(EOFError, OSError):  # it died: said below
                message = from_child.recv()
        if message != ("ready",):
            self._stop(child, busy=False)
            if isinstance(message, tuple) and message[:1] == ("broken",):
                raise ChildFailed(f"a child cannot load the app {self.app!r}: {message[1]}")
            reason = self._death(child) if ready else f"not ready after {START_SECONDS:.0f}s"
            raise ChildFailed(reason)
        log.debug("child process %d started", child.pid)
        return child

    def _stop(self, child: _Child, busy: bool = True) -> None:
        """End the child: asked to exit when it is idle (`busy=False`), then
        SIGTERM, then SIGKILL after the grace. Once; a dead child is only reaped."""
        if child.stopped:
            return
        child.stopped = True
        process = child.process
        if not busy and self._tell(child, ("exit",)):
            process.join(KILL_GRACE_SECONDS)
        if process.exitcode is None:
            process.terminate()
            process.join(KILL_GRACE_SECONDS)
        if process.exitcode is None:
            process.kill()
            process.join()
        child.to_child.close()
        child.from_child.close()
        process.close()

    @staticmethod
    def _death(child: _Child) -> str:
        """What ended a child, e.g. 'child process killed by SIGKILL'."""
        process = child.process
        process.join(KILL_GRACE_SECONDS)  # its pipe closes a moment before it is reaped
        code = process.exitcode
        if code is None:
            return "child process stopped answering"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"child process killed by {name}"
        return f"child process exited with code {code}"


def _progressed(ctx: JobContext, progress: Progress | None) -> None:
    if progress is not None:
        ctx.progress(progress.done or 0, progress.total, progress.message)


# The child


def child_main(
    app: str, inbox: Connection, outbox: Connection, logging_as: tuple[str, str] | None = None
) -> None:
    """A child process's life: load the app, then run the jobs it is sent.
    `logging_as`: the worker's (level, format), which its handlers' own log
    lines (and warnings) take here too."""
    # Ctrl-C in a terminal signals the whole process group: the worker decides
    # what its children do then.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if logging_as is not None:
        logs.configure(*logging_as)
    link = _Link(inbox, outbox)
    try:
        queue = _load(app)
    except BaseException as e:
        link.send(("broken", f"{type(e).__name__}: {e}"))
        return
    link.send(("ready",))
    link.serve(queue)


def _load(app: str) -> Queue:
    module_name, _, attribute = app.partition(":")
    queue = getattr(importlib.import_module(module_name), attribute or "queue", None)
    if not isinstance(queue, Queue):
        raise TypeError(f"{app} is not a chit.Queue")
    return queue


class _Link:
    """The child's end: runs jobs on its main thread while a reader thread takes
    the worker's messages (a cancellation arrives while a handler runs) and
    sends the progress the handler reported."""

    def __init__(self, inbox: Connection, outbox: Connection) -> None:
        self._inbox = inbox
        self._outbox = outbox
        self._sending = threading.Lock()
        self._jobs: queue_mod.SimpleQueue[tuple[ClaimedJob, float | None, int] | None] = (
            queue_mod.SimpleQueue()
        )
        self._replies: queue_mod.SimpleQueue[tuple[Any, str | None]] = queue_mod.SimpleQueue()
        # One question to the worker at a time: its answers come in the order asked.
        self._asking = threading.Lock()
        self._current: JobContext | None = None
        self._queue: Queue | None = None
        threading.Thread(target=self._read, name="chit-child-reader", daemon=True).start()

    def send(self, message: tuple[Any, ...]) -> None:
        with self._sending:
            self._outbox.send(message)

    def serve(self, queue: Queue) -> None:
        self._queue = queue
        while (item := self._jobs.get()) is not None:
            self._run(queue, *item)

    def _run(self, queue: Queue, job: ClaimedJob, timeout: float | None, max_output: int) -> None:
        # The lease is the worker's: a checkpoint goes through it (`checkpoint` below).
        ctx = JobContext.of(job, self, lease_seconds=0.0)
        ctx.timeout = timeout
        ctx.max_output_bytes = max_output
        self._current = ctx
        try:
            task = queue.tasks.get(job.kind)
            if task is None:
                raise LookupError(f"the child process has no handler for {job.kind!r}")
            with tracing.resumed(job.traceparent):
                result = task.handler(ctx, parse_payload(task, job.payload))
            message: tuple[Any, ...] = ("returned", result, ctx.last_progress(), _peak_kb())
            problem = storable_json_error(result)
        except Snooze as e:
            message, problem = ("snoozed", e.seconds, ctx.last_progress(), _peak_kb()), None
        except Suspend as e:
            message = ("waiting", e.signal, e.jobs, e.timeout, ctx.last_progress(), _peak_kb())
            problem = None
        except BaseException as e:  # a handler must not take its child down
            permanent = isinstance(e, PermanentError)
            message = ("raised", describe(e), permanent, ctx.last_progress(), _peak_kb())
            problem = None
        finally:
            self._current = None
            ctx.flush_output()  # through the worker, before the outcome it records
        if problem is not None:  # it may not even pickle: say why here
            message = ("raised", f"ResultNotJSON: {problem}", True, ctx.last_progress(), _peak_kb())
        elif ctx.output_error is not None and message[0] == "returned":
            message = ("raised", ctx.output_error, False, ctx.last_progress(), _peak_kb())
        self.send(message)

    def dependencies(self, job_id: str) -> list[DependencyInfo]:
        """`JobContext.dependencies`: read by this child itself (reads need no lease)."""
        assert self._queue is not None
        return self._queue.store.dependencies(job_id)

    def get_result(self, job_id: str, tenant: str | None = None) -> tuple[bool, Any]:
        assert self._queue is not None
        return self._queue.store.get_result(job_id, tenant)

    def received(self, job_id: str, name: str) -> Received:
        """`JobContext.wait_for`'s read, by this child itself."""
        assert self._queue is not None
        return Waits.of(self._queue.store).received(job_id, name)

    def waited_jobs(self, job_id: str, ids: Sequence[str]) -> tuple[list[WaitedJob], bool]:
        """`JobContext.wait_for_jobs`' read, by this child itself."""
        assert self._queue is not None
        return Waits.of(self._queue.store).waited_jobs(job_id, ids)

    def checkpoint(
        self, job_id: str, lease_token: str, data: Any, progress: Progress | None, lease: float
    ) -> bool:
        """`JobContext.checkpoint`, written by the worker; waits for its answer."""
        return bool(self._ask(("checkpoint", data, progress)))

    def step(self, job_id: str, name: str) -> tuple[bool, Any]:
        """`JobContext.step`'s read, made by the worker."""
        found, result = self._ask(("step", name))
        return bool(found), result

    def save_step(self, job_id: str, lease_token: str, name: str, result: Any) -> bool:
        """`JobContext.step`'s write, made by the worker with the job's lease."""
        return bool(self._ask(("save_step", name, result)))

    def report_cost(self, job_id: str, lease_token: str, cost: int) -> bool:
        """`JobContext.report_cost`'s write, made by the worker with the job's lease."""
        return bool(self._ask(("report_cost", cost)))

    def append_output(
        self, job_id: str, lease_token: str, values: Sequence[str], size: int
    ) -> int | None:
        """`JobContext.emit`'s write, made by the worker with the job's lease."""
        last = self._ask(("output", list(values), size))
        return None if last is None else int(last)

    def output_used(self, job_id: str) -> tuple[int, int]:
        """Read by this child itself, like `dependencies`."""
        assert self._queue is not None
        return Output.of(self._queue.store).output_used(job_id)

    def _ask(self, message: tuple[Any, ...]) -> Any:
        with self._asking:
            self.send(message)
            value, error = self._replies.get()
        if error is not None:
            raise StoreError(error)
        return value

    def _read(self) -> None:
        while True:
            try:
                if self._inbox.poll(WATCH_SECONDS):
                    self._take(self._inbox.recv())
                current = self._current
                if current is not None and (progress := current.take_progress()) is not None:
                    self.send(("progress", current.id, progress))
            except (EOFError, OSError):
                # The worker is gone: nothing this child does can be recorded now.
                os._exit(0)

    def _take(self, message: tuple[Any, ...]) -> None:
        current = self._current
        match message:
            case ("run", job, timeout, max_output):
                self._jobs.put((job, timeout, max_output))
            case ("cancel", job_id) if current is not None and current.id == job_id:
                current.mark_cancelled()
            case ("lost", job_id) if current is not None and current.id == job_id:
                current.mark_lost()
            case ("checkpointed", value, error) | ("answered", value, error):
                self._replies.put((value, error))
            case ("exit",):
                self._jobs.put(None)


def _peak_kb() -> int:
    """This process's peak resident memory in KB (what max_memory_mb bounds)."""
    import resource  # POSIX only, like the rest of the process pool

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes there, KB on Linux
