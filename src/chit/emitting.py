"""`JobContext.emit`'s way to the store: each attempt's values wait in an
`Emitter` and one thread per process (`Flusher`) writes them, so a handler
that emits a token at a time never waits on the database.

Batching: a value that finds no write under way goes at once; values emitted
while one is under way or within `WINDOW` seconds after it go together in the
next, so a busy stream is written at least every 100 ms and a quiet one with
no delay. Each write is fenced on the attempt's lease (`Output.append_output`);
a fenced-out write stores nothing, and the attempt's later values are dropped.
The worker flushes what is left when the handler returns, before the outcome
is recorded, so a reader who sees the job finished sees all its output.
A job that never emits costs nothing: no emitter, no statement.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from chit.encoding import storable_json_error
from chit.errors import InvalidOutput, StoreError

log = logging.getLogger("chit.worker")

# Values emitted within this long of a write go in the next one together.
WINDOW = 0.05
# A write that failed (the store unreachable) is tried again after this long,
# and when the attempt ends up to FINAL_TRIES times.
RETRY_SECONDS = 0.5
FINAL_TRIES = 5
# Values a write carries at most: one statement stays short.
BATCH_MAX = 1000

_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


@runtime_checkable
class OutputStore(Protocol):
    """What an emitter writes to: the store, or in a process-pool child the link
    that asks the worker (which holds the lease) to write."""

    def append_output(
        self, job_id: str, lease_token: str, values: Sequence[str], size: int
    ) -> int | None: ...

    def output_used(self, job_id: str) -> tuple[int, int]: ...


class Emitter:
    """One attempt's output on its way to the store."""

    def __init__(self, store: OutputStore, job_id: str, lease_token: str, max_bytes: int) -> None:
        self.store = store
        self.job_id = job_id
        self.lease_token = lease_token
        self.max_bytes = max_bytes
        self._lock = threading.Lock()  # the buffer
        self._writing = threading.Lock()  # one write at a time, in order
        self._pending: list[tuple[str, int]] = []
        self._used: int | None = None  # bytes stored or pending, every attempt's
        self.lost = False
        self.written = 0  # the last seq this attempt wrote

    def emit(self, value: Any) -> None:
        problem = storable_json_error(value)
        if problem is not None:
            raise InvalidOutput(f"emit: the value is not JSON ({problem}); nothing was stored")
        text = _encode(value)
        size = len(text.encode())
        with self._lock:
            if self._used is None:  # the first emit of the attempt: one read
                self._used = self.store.output_used(self.job_id)[1]
            if self._used + size > self.max_bytes:
                raise InvalidOutput(
                    f"emit: job {self.job_id}'s output would pass CHIT_MAX_OUTPUT_BYTES"
                    f" ({self.max_bytes:,} bytes; {self._used:,} used, this value {size:,});"
                    " nothing was stored"
                )
            self._used += size
            self._pending.append((text, size))
        flusher().wake(self)

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def flush(self) -> bool:
        """Write what is pending, in batches; False if a write failed (the
        values stay pending) or the lease was lost (they are dropped)."""
        with self._writing:
            while True:
                with self._lock:
                    batch = self._pending[:BATCH_MAX]
                if not batch:
                    return True
                if self.lost:
                    with self._lock:
                        self._pending.clear()
                    return False
                values = [text for text, _ in batch]
                size = sum(n for _, n in batch)
                try:
                    last = self.store.append_output(self.job_id, self.lease_token, values, size)
                except StoreError as e:
                    log.warning("job %s: output not written yet, will retry: %s", self.job_id, e)
                    return False
                with self._lock:
                    del self._pending[: len(batch)]
                if last is None:
                    self.lost = True
                    log.warning(
                        "job %s: output not stored: the lease was lost"
                        " (another worker may hold the job)",
                        self.job_id,
                    )
                    continue
                self.written = last

    def close(self) -> int:
        """The attempt ends: write what is left before its outcome is recorded.
        How many values could not be written (the store stayed away): the
        worker then fails the attempt rather than record it whole."""
        for n in range(FINAL_TRIES):
            if self.flush() or self.lost:
                return 0
            time.sleep(RETRY_SECONDS * (n + 1))
        with self._lock:
            unwritten, self._pending = len(self._pending), []
        log.error("job %s: %d output values could not be written", self.job_id, unwritten)
        return unwritten


class Flusher:
    """The process's one writer of emitted values."""

    def __init__(self, window: float = WINDOW) -> None:
        self.window = window
        self._due: dict[Emitter, None] = {}
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def wake(self, emitter: Emitter) -> None:
        with self._wake:
            self._due[emitter] = None
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="chit-output", daemon=True)
                self._thread.start()
            self._wake.notify()

    def run_once(self) -> None:
        with self._wake:
            due, self._due = list(self._due), {}
        for emitter in due:
            try:
                if not emitter.flush() and emitter.pending:
                    threading.Timer(RETRY_SECONDS, self.wake, (emitter,)).start()
            except Exception:  # a bug must not end the writer of every job's output
                log.exception("job %s: output writer error", emitter.job_id)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._due:
                    self._wake.wait()
            self.run_once()
            time.sleep(self.window)


_flusher: Flusher | None = None
_flusher_lock = threading.Lock()


def flusher() -> Flusher:
    global _flusher
    with _flusher_lock:
        if _flusher is None:
            _flusher = Flusher()
        return _flusher
