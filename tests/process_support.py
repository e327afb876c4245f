"""Plumbing for tests that start real servers and workers: a free port, a
graceful stop, and polling a job over HTTP until it reaches a state."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(processes: Sequence[subprocess.Popen[Any]], timeout: float = 10) -> None:
    """SIGTERM every process still running, then wait; kill what outlives the timeout."""
    for p in processes:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in processes:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def poll_job(
    http: httpx.Client,
    job_id: str,
    done: Callable[[dict[str, Any]], bool],
    timeout: float = 15,
) -> dict[str, Any]:
    """GET /jobs/{id} until `done(body)`; fails the test with the last body."""
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = http.get(f"/jobs/{job_id}").json()
        if done(body):
            return body
        assert time.monotonic() < deadline, f"gave up waiting; last status {body}"
        time.sleep(0.05)
