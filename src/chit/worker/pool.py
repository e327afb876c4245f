"""The executors a worker calls handlers with: daemon threads for sync handlers,
one event loop on its own thread for `async def` handlers."""

from __future__ import annotations

import asyncio
import logging
import queue as queue_mod
import threading

from chit.worker.execute import Call, Report, ainvoke, invoke

log = logging.getLogger("chit.worker")


class ThreadPool:
    """Daemon threads, so a worker that must exit is never held by a stuck handler."""

    def __init__(self, size: int) -> None:
        self._calls: queue_mod.SimpleQueue[tuple[Call, Report]] = queue_mod.SimpleQueue()
        for i in range(size):
            threading.Thread(target=self._work, name=f"chit-job-{i}", daemon=True).start()

    def submit(self, call: Call, report: Report) -> None:
        self._calls.put((call, report))

    def _work(self) -> None:
        while True:
            call, report = self._calls.get()
            try:
                report(invoke(call))
            except Exception:
                log.exception("job thread error")


class AsyncLoop:
    """One event loop for every async handler, started on the first one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def submit(self, call: Call, report: Report) -> None:
        asyncio.run_coroutine_threadsafe(self._run(call, report), self._running_loop())

    async def _run(self, call: Call, report: Report) -> None:
        report(await ainvoke(call))

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="chit-async", daemon=True).start()
                self._loop = loop
            return self._loop
