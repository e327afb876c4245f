"""A private PostgreSQL server for one test module, to restart and to load at will.

The shared test server (CHIT_TEST_POSTGRES_URL) is used by other test sessions
at the same time: it is never restarted, and a test that needs a hundred
connections does not take them from it. A `Cluster` is made with `initdb` in a
temporary directory, listens on 127.0.0.1 at a free port (and on a Unix socket
in the same directory), trusts every local connection and runs with
fsync=off: nothing here survives the test, and no test here is about disks.

The server runs as the `postgres` OS user when the tests run as root (it
refuses to run as root), through `runuser`.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from support.processes import free_port


def _bin_dir() -> Path:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if not found:
        on_path = shutil.which("initdb")
        if on_path is None:
            pytest.fail(
                "these tests start a private PostgreSQL server and found no initdb "
                "(/usr/lib/postgresql/*/bin/initdb or on PATH); install PostgreSQL or set "
                "CHIT_TEST_SKIP_POSTGRES=1 to skip the PostgreSQL tests on purpose",
                pytrace=False,
            )
        return Path(on_path).parent
    return Path(found[-1]).parent


class Cluster:
    def __init__(self, **settings: str) -> None:
        self.bin = _bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="chit-pg-"))
        self.data = self.root / "data"
        self.sockets = self.root / "sockets"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.running = False
        self._as_postgres: list[str] = []
        if os.geteuid() == 0:
            self._as_postgres = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.root, "postgres")
        self.sockets.mkdir()
        if self._as_postgres:
            shutil.chown(self.sockets, "postgres")
        self._run(
            "initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
            "--locale=C", "--no-sync", "--no-instructions",
        )  # fmt: skip
        conf = {
            "port": str(self.port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.sockets}'",
            "fsync": "off",
            "full_page_writes": "off",
            "max_connections": "100",
            **settings,
        }
        with open(self.data / "postgresql.conf", "a") as f:
            f.writelines(f"{k} = {v}\n" for k, v in conf.items())

    def url(self, database: str = "postgres", user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def _run(self, program: str, *args: str, check: bool = True) -> str:
        done = subprocess.run(
            [*self._as_postgres, str(self.bin / program), *args],
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"{program} {' '.join(args)} exited {done.returncode}:\n{done.stdout}"
                f"{done.stderr}\n{self.server_log()[-3000:]}"
            )
        return done.stdout

    def server_log(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def pg_ctl(self, *args: str) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), *args)

    def start(self) -> None:
        self.pg_ctl("start", "-w", "-t", "60")
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        """`fast`: backends are terminated and the server shuts down cleanly;
        `immediate`: every server process quits at once, as in a crash, and the
        next start recovers from the WAL."""
        self.running = False
        self.pg_ctl("stop", "-w", "-t", "60", "-m", mode)

    def restart(self, mode: str = "fast") -> None:
        self.pg_ctl("restart", "-w", "-t", "60", "-m", mode)
        self.running = True

    def destroy(self) -> None:
        """Stop the server (at once) if it runs, and delete its files."""
        self.running = False
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "stop", "-w", "-m", "immediate", check=False)
        shutil.rmtree(self.root, ignore_errors=True)
