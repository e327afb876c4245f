"""Handler timestamps, the one clock every system is measured with.

A no-op handler calls `record(i, enqueued_at, started_at)`: the job's number,
`time.time()` taken just before the enqueue call, and `time.time()` at the
handler's first line. Each worker process keeps its records in a deque (an
append costs the handler well under a microsecond, no lock, nothing shared
between processes) and a daemon thread writes them to that process's own file
every 50 ms. `Records` reads those files incrementally from the driver.

Nothing is recorded unless BENCH_RECORD_DIR is set, so `noop_app` stays a
plain no-op outside the harness.
"""

from __future__ import annotations

import atexit
import collections
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

FLUSH_SECONDS = 0.05

_dir = os.environ.get("BENCH_RECORD_DIR")
_pending: collections.deque[tuple[int, float, float, float]] = collections.deque()
_pid = -1
_file = None
_init_lock = threading.Lock()


def record(i: int, enqueued_at: float, started_at: float) -> None:
    if _dir is None:
        return
    if _pid != os.getpid():  # first job in this process (also after a fork)
        _start()
    _pending.append((i, enqueued_at, started_at, time.time()))


def _start() -> None:
    global _pid, _file
    with _init_lock:
        if _pid == os.getpid():
            return
        _pending.clear()  # anything inherited through fork belongs to the parent
        assert _dir is not None
        _file = open(Path(_dir) / f"rec-{os.getpid()}.txt", "a", buffering=1 << 16)  # noqa: SIM115
        _pid = os.getpid()
        threading.Thread(target=_flush_forever, name="bench-recorder", daemon=True).start()
        atexit.register(_flush)


def _flush() -> None:
    if _file is None:
        return
    lines = []
    while _pending:
        i, enqueued_at, started_at, ended_at = _pending.popleft()
        lines.append(f"{i} {enqueued_at!r} {started_at!r} {ended_at!r}\n")
    if lines:
        _file.write("".join(lines))
        _file.flush()


def _flush_forever() -> None:
    while True:
        time.sleep(FLUSH_SECONDS)
        _flush()


@dataclass(frozen=True)
class Record:
    i: int
    enqueued_at: float
    started_at: float
    ended_at: float


class Records:
    """Reads every worker's file as it grows; only whole lines count."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.records: list[Record] = []
        self._offsets: dict[Path, int] = {}

    def poll(self) -> int:
        for path in sorted(self.directory.glob("rec-*.txt")):
            offset = self._offsets.get(path, 0)
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read()
            end = data.rfind(b"\n") + 1
            if not end:
                continue
            self._offsets[path] = offset + end
            for line in data[:end].decode().splitlines():
                i, enqueued_at, started_at, ended_at = line.split()
                self.records.append(
                    Record(int(i), float(enqueued_at), float(started_at), float(ended_at))
                )
        return len(self.records)
