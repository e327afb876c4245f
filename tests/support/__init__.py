"""Helpers shared by every test folder, in one place.

- `postgres`: the test PostgreSQL server, a database of one's own on it.
- `waiting`: wait for a condition (`wait_until`, async `until`), never a fixed sleep.
- `processes`: child processes (`Procs`, `Proc`, started and stopped), free ports.
- `stack`: a real API server and two real workers on one SQLite file.
- `browser`: a real headless Chromium for the browser tests.
- `jobs`: reading jobs back (`all_jobs`, `get`, `wait_terminal`) and run logs.
- `refusals`: a one-task queue, and a request refused by enqueue and enqueue_many alike.
- `api`, `dashboard`, `cli`: the in-process app, keys and helpers of those tests.
- `pg_cluster`: a private PostgreSQL server to restart and load at will.
- test apps, imported by tests and by worker processes (`--app support.e2e_app:queue`):
  `api_app`, `dashboard_app`, `cli_app`, `e2e_app` (and `e2e_writer`, a script).

The pytest configuration puts tests/ on sys.path (`pythonpath`), and every child
process gets it on PYTHONPATH (`processes.child_env`).
"""

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
