"""SIGTERM and SIGINT in a worker process, from `chit worker`'s first line.

Python's default SIGTERM ends the process at once (-15), and its SIGINT raises
KeyboardInterrupt wherever the main thread is. So `chit worker` takes both as
it starts (`caught_early`), before it imports the app or sets Django up: a stop
asked for before the worker runs is kept (`early`), and the worker then exits
0 without claiming anything. Once the worker runs, its own handlers take over
(`Worker.run`)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_early = threading.Event()
_first: list[int] = []


@contextmanager
def caught_early() -> Iterator[threading.Event]:
    """Keep SIGTERM and SIGINT while in the block (main thread only: Python
    installs handlers there); the event is set when one arrives. On the way out
    the handlers before it are back (a `chit worker` run inside another
    program, a test, leaves it as it was)."""
    if threading.current_thread() is not threading.main_thread():
        yield _early
        return
    before = {signum: signal.signal(signum, _on_early_signal) for signum in STOP_SIGNALS}
    try:
        yield _early
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
        _first.clear()
        _early.clear()


def early() -> signal.Signals | None:
    """The signal that asked this process to stop before its worker ran, if any."""
    return signal.Signals(_first[0]) if _first else None


def _on_early_signal(signum: int, frame: FrameType | None) -> None:
    if not _first:
        _first.append(signum)
    _early.set()
