"""What the benchmark starts and cleans up: its own redis-server, a fresh
PostgreSQL database per run, and the process groups of the drivers."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg import sql

PG_ADMIN = os.environ.get("BENCH_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# How every Redis system's server runs: the durability chit's Redis store
# insists on (it refuses a server without AOF or with an evicting policy), so
# the peers run on the same server as chit. No RDB snapshots.
REDIS_SETTINGS = ("--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
                  "--maxmemory-policy", "noeviction")  # fmt: skip


class Redis:
    """redis-server on a free loopback port, its append-only file in a
    temporary folder (removed by stop()), stopped by stop()."""

    def __init__(self, log: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server not found: apt-get install redis-server")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._log = log.open("ab")
        self._dir = tempfile.mkdtemp(prefix="bench-redis-")
        cmd = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self._dir,
               *REDIS_SETTINGS, "--protected-mode", "yes"]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 10
        while self.command("PING") != "+PONG":
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"redis-server did not start; see {log}")
            time.sleep(0.05)

    def command(self, *words: str) -> str:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                s.sendall(" ".join(words).encode() + b"\r\n")
                return s.recv(4096).decode().strip()
        except OSError:
            return ""

    def flush(self) -> None:
        """Every key and every function library: chit and chit@REF load their
        own, and an older chit refuses a newer library."""
        if self.command("FLUSHALL") != "+OK" or self.command("FUNCTION", "FLUSH") != "+OK":
            raise RuntimeError("redis FLUSHALL / FUNCTION FLUSH failed")

    def version(self) -> str:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(b"INFO server\r\n")
            time.sleep(0.1)
            info = s.recv(65536).decode()
        for line in info.splitlines():
            if line.startswith("redis_version:"):
                return line.split(":", 1)[1].strip()
        return "?"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)


class Postgres:
    """Creates and drops the benchmark's databases on the local server."""

    def __init__(self) -> None:
        self.created: set[str] = set()
        try:
            with self._admin() as conn:
                row = conn.execute("SHOW server_version").fetchone()
                self.version = str(row[0]) if row else "?"
                self.settings = {
                    name: str(conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name)))
                              .fetchone()[0])  # type: ignore[index]
                    for name in ("synchronous_commit", "fsync", "shared_buffers")
                }  # fmt: skip
        except psycopg.OperationalError as e:
            raise SystemExit(f"PostgreSQL is not reachable at {PG_ADMIN}: {e}") from e

    def _admin(self) -> psycopg.Connection:
        return psycopg.connect(PG_ADMIN, autocommit=True)

    def dsn(self, name: str) -> str:
        return PG_ADMIN.rsplit("/", 1)[0] + "/" + name

    def fresh(self, name: str) -> str:
        self.drop(name)
        with self._admin() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self.created.add(name)
        return self.dsn(name)

    def drop(self, name: str) -> None:
        with self._admin() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
        self.created.discard(name)

    def drop_all(self) -> None:
        for name in list(self.created):
            with contextlib.suppress(psycopg.Error):
                self.drop(name)


def kill_group(pgid: int) -> None:
    """SIGKILL whatever is left of a driver's process group (its workers, their children)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def cpu_busy(seconds: float = 0.5) -> float:
    """Fraction of all cores busy over `seconds` (from /proc/stat)."""

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]
        return idle, sum(fields)

    idle0, total0 = sample()
    time.sleep(seconds)
    idle1, total1 = sample()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def wait_quiet(limit: float = 0.25, patience: float = 3.0) -> float:
    """Wait (at most `patience` seconds) until other processes leave the machine
    mostly idle; returns the busy fraction measured last."""
    deadline = time.monotonic() + patience
    busy = cpu_busy()
    while busy > limit and time.monotonic() < deadline:
        busy = cpu_busy()
    return busy


def machine() -> dict[str, str]:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if "model name" in line),
        "?",
    )
    mem_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    return {
        "cpu": model,
        "cores": str(os.cpu_count()),
        "memory": f"{mem_kb / 1024 / 1024:.0f} GiB",
        "kernel": os.uname().release,
    }
