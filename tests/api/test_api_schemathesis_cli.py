"""`schemathesis run --checks all` against a real `chit serve`, on SQLite and on
PostgreSQL, as a user of the CLI runs it: every check (server errors, status
codes, content types, headers, schemas, schema-valid data accepted and invalid
data refused, missing and ignored auth, unsupported methods, Allow headers,
use after delete), all phases (examples, coverage, fuzzing, stateful), with a
key of every tenant given as the spec's bearer scheme. Operations that take a
job id get a succeeded job to find, so `GET /jobs/{id}/events` answers a
bounded stream (its terminal event, then the end) and `/result` a result.
It must end with 0 failures."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import chit
from chit.jobs import Succeeded
from support.api_app import register
from support.processes import Procs, child_env, free_port, wait_ready
from support.stack import SERVER

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT_KEY = "root-key-0123456789"
TESTS = Path(__file__).parents[1]
MAX_EXAMPLES = 10  # per operation and phase: about a minute a backend
# The routes that take a job id, given the seed job: random ids only find 404.
JOB_ROUTES = (
    "GET /jobs/{job_id}",
    "HEAD /jobs/{job_id}",
    "GET /jobs/{job_id}/result",
    "GET /jobs/{job_id}/steps",
    "GET /jobs/{job_id}/events",
    "POST /jobs/{job_id}/events-token",
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'chit.db'}"
        return
    from support.postgres import new_database

    with new_database(request, prefix="chit_st") as url:
        yield url


def seed(url: str) -> str:
    """A succeeded job: its event stream is its last event and the end."""
    queue = register(chit.Queue(settings=chit.Settings(database_url=url)))
    try:
        job_id = queue.enqueue("big", {"size": 10}).id
        [claimed] = queue.store.claim("seed", ["default"], 1, 30)
        assert claimed.id == job_id
        queue.store.finish([Succeeded(job_id, claimed.lease_token, {"blob": "x"})])
        return job_id
    finally:
        queue.close()


def config(tmp_path: Path, job_id: str) -> Path:
    lines = [
        "[auth.openapi.HTTPBearer]",
        f'bearer = "{ROOT_KEY}"',
        "",
    ]
    for name in JOB_ROUTES:
        lines += [
            "[[operations]]",
            f'include-name = "{name}"',
            f'parameters = {{ job_id = "{job_id}" }}',
            "",
        ]
    # PATCH's payload is checked against the stored job's own kind, which the
    # path's id decides and no schema can say: a payload valid for some kind
    # is refused (422) for a job of another.
    lines += [
        "[[operations]]",
        'include-name = "PATCH /jobs/{job_id}"',
        'checks.positive_data_acceptance.expected-statuses = ["2xx", 401, 403, 404, 409, 422]',
        "",
    ]
    path = tmp_path / "schemathesis.toml"
    path.write_text("\n".join(lines))
    return path


def test_schemathesis_checks_all_finds_nothing(database: str, tmp_path: Path) -> None:
    job_id = seed(database)
    procs = Procs(
        tmp_path,
        child_env(CHIT_DATABASE_URL=database, CHIT_API_KEYS=f"*:admin:{ROOT_KEY}"),
    )
    port = free_port()
    server = procs.start(["-c", SERVER.format(module="support.api_app", port=port)], "server")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(server, lambda: httpx.get(f"{url}/readyz"), 30, what="the server to answer")
        run = subprocess.run(
            [
                str(Path(sys.executable).parent / "schemathesis"),
                "--config-file",
                str(config(tmp_path, job_id)),
                "run",
                f"{url}/openapi.json",
                "--checks",
                "all",
                "--max-examples",
                str(MAX_EXAMPLES),
                "--request-timeout",
                "10",
                "--seed",
                "1",
                "--no-color",
            ],
            env=child_env(PYTHONPATH=str(TESTS), SCHEMATHESIS_HOOKS="support.schemathesis_hooks"),
            cwd=tmp_path,  # its .schemathesis/ cache goes there
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )
    finally:
        procs.cleanup()
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-20000:]
    summary = report[report.rindex("SUMMARY") :]
    assert "Failures:" not in summary and "Errors:" not in summary, report[-20000:]
    assert re.search(r"\d+ generated, \d+ passed", summary), summary
