"""The raw limits of the stores on this machine, to read every figure against:
one-row UPDATE commits per second on SQLite (WAL, with each synchronous level)
and pgbench's one-row-update TPS on PostgreSQL with 1 and 2 clients."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

PGBENCH_SCRIPT = """\\set aid random(1, 100000 * :scale)
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;
"""


def sqlite_commits(directory: Path, synchronous: str, seconds: float) -> float:
    """Autocommitted one-row UPDATEs per second, one connection, WAL."""
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        conn = sqlite3.connect(Path(tmp) / "limit.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
        conn.execute("INSERT INTO t VALUES (1, 0)")
        done = 0
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            for _ in range(100):
                conn.execute("UPDATE t SET n = n + 1 WHERE id = 1")
            done += 100
        elapsed = time.perf_counter() - started
        conn.close()
    return done / elapsed


def pgbench_tps(dsn: str, clients: int, seconds: int, directory: Path) -> float:
    """pgbench TPS of a one-row UPDATE (scale 1), after `pgbench -i`."""
    pgbench = shutil.which("pgbench")
    if pgbench is None:
        raise RuntimeError("pgbench not found: apt-get install postgresql-client")
    subprocess.run([pgbench, "-i", "-q", "-s", "1", dsn], check=True, capture_output=True)
    script = directory / "one_row_update.sql"
    script.write_text(PGBENCH_SCRIPT)
    out = subprocess.run(
        [pgbench, "-n", "-f", str(script), "-c", str(clients), "-j", str(clients),
         "-T", str(seconds), dsn],
        check=True, capture_output=True, text=True, timeout=seconds + 60,
    ).stdout  # fmt: skip
    match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    if match is None:
        raise RuntimeError(f"cannot read pgbench output:\n{out}")
    return float(match.group(1))
