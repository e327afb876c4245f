"""A real uvicorn server (`chit.cli.serve.serve`) on a free loopback port and
two real `chit worker` processes, sharing one SQLite file (or the database a
test names): the stack the API's end-to-end tests and the dashboard's browser
tests run against."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from chit.settings import Settings
from chit.store import open_store
from chit.store.sqlite import SQLiteStore
from support.jobs import poll_job
from support.processes import Procs, child_env, free_port, stop, wait_ready

SERVER = (
    "import importlib; from chit.cli.serve import serve; a = importlib.import_module({module!r}); "
    "raise SystemExit(serve(a.queue.settings, a.queue, port={port}, log_level='warning'))"
)


@dataclass
class Server:
    url: str
    http: httpx.Client  # signed in with the stack's key
    tmp: Path
    database_url: str = ""

    def until(
        self, job_id: str, done: Callable[[dict[str, Any]], bool], timeout: float = 15
    ) -> dict[str, Any]:
        return poll_job(self.http, job_id, done, timeout)


@contextmanager
def lone_server(tmp: Path, module: str = "support.api_app", **env: str) -> Iterator[str]:
    """A real `chit serve` on `module`'s queue and a fresh SQLite file, no
    workers; yields its URL once it answers."""
    database = tmp / "chit.db"
    SQLiteStore(database).close()
    procs = Procs(tmp, child_env(CHIT_DATABASE_URL=f"sqlite:///{database}", **env))
    port = free_port()
    proc = procs.start(["-c", SERVER.format(module=module, port=port)], "server")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, lambda: httpx.get(f"{url}/readyz"), 20, what="the server to answer")
        yield url
    finally:
        procs.cleanup()


@contextmanager
def server_with_workers(
    tmp: Path,
    module: str,
    *,
    key: str,
    keys: str,
    worker_flags: tuple[str, ...],
    database_url: str | None = None,
    **env: str,
) -> Iterator[Server]:
    """The server and two workers on `module`'s queue (`support.api_app`, ...),
    CHIT_API_KEYS=`keys`, each process's output in tmp/NAME.stderr, on
    `database_url` (default: a new SQLite file in tmp). Yields once the server
    answers and both workers have started (so SIGTERM at the end is a graceful
    stop); at the end every process must exit 0."""
    if database_url is None:
        database_url = f"sqlite:///{tmp / 'chit.db'}"
    # Migrated once, before anyone races to do it.
    open_store(Settings(database_url=database_url)).close()
    procs = Procs(
        tmp,
        child_env(
            CHIT_DATABASE_URL=database_url,
            CHIT_API_KEYS=keys,
            CHIT_POLL_INTERVAL="0.2",
            PYTHONUNBUFFERED="1",
            **env,
        ),
    )
    port = free_port()
    server = procs.start(["-c", SERVER.format(module=module, port=port)], "server")
    workers = [
        procs.worker(*worker_flags, app=f"{module}:queue", name=f"worker{i}") for i in range(2)
    ]
    url = f"http://127.0.0.1:{port}"
    codes: list[int | None] = []
    try:
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=10
        ) as http:
            wait_ready(server, lambda: http.get("/readyz"), 60, what="the API server to answer")
            for w in workers:
                w.wait_started()
            yield Server(url, http, tmp, database_url)
    finally:
        stop([p.popen for p in procs.all])
        codes = [p.popen.returncode for p in procs.all]
        procs.cleanup()
    assert codes == [0, 0, 0], [p.stderr()[-2000:] for p in procs.all]
