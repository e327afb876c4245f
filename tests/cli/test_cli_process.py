"""The real `chit` command in child processes: the console script, submit --wait
against a running worker, `chit up` stopped with Ctrl-C, and errors that are one
line on stderr with no traceback."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from support.cli import run_cli
from support.postgres import postgres_skipped, postgres_url
from support.processes import WORKER_STARTED, child_env
from support.waiting import wait_until

pytestmark = pytest.mark.slow

Start = Callable[..., subprocess.Popen[bytes]]


@pytest.mark.timeout(30)
def test_console_script_runs(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("chit")
    assert script.exists()
    proc = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=20)
    assert proc.returncode == 0
    assert "submit" in proc.stdout
    bare = subprocess.run([script], capture_output=True, text=True, timeout=20)
    assert bare.returncode == 2
    assert "the following arguments are required: COMMAND" in bare.stderr


@pytest.mark.timeout(60)
def test_submit_wait_prints_the_result_once_a_worker_ran_it(worker_process: Start) -> None:
    worker_process()
    result = run_cli("submit", "report", '{"region": "emea", "seconds": 0.3}', "--wait")
    assert result.code == 0, result
    assert json.loads(result.out) == {"region": "emea", "attempt": 1}
    progress = result.err.splitlines()
    job_id = progress[0]
    assert progress[-1].startswith("succeeded")

    status = run_cli("status", job_id, "--json")
    assert status.code == 0
    body = json.loads(status.out)
    assert (body["state"], body["attempts"]) == ("succeeded", 1)

    as_json = run_cli("submit", "report", '{"region": "apac"}', "--wait", "--json")
    assert as_json.code == 0
    assert json.loads(as_json.out)["result"] == {"region": "apac", "attempt": 1}

    failing = run_cli("submit", "boom", '{"message": "no luck"}', "--wait")
    assert failing.code == 1
    assert failing.out == ""
    assert failing.err.splitlines()[-1] == "failed: RuntimeError: no luck"


@pytest.mark.timeout(60)
def test_up_runs_workers_until_ctrl_c(tmp_path: Path) -> None:
    err_path = tmp_path / "up.stderr"
    with open(err_path, "wb") as err:
        up = subprocess.Popen(
            [sys.executable, "-m", "chit", "up", "--workers", "2"],
            env=child_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
        )
        try:
            assert up.stdout is not None
            banner = up.stdout.readline().decode()
            assert "2 worker process(es)" in banner
            assert "Ctrl-C stops everything" in banner
            assert "HTTP API on http://" in up.stdout.readline().decode()
            dashboard = up.stdout.readline().decode().rstrip()
            assert dashboard.startswith("chit up: dashboard on http://"), dashboard
            assert dashboard.endswith("/ui/"), dashboard
            result = run_cli("submit", "echo", '{"hello": "up"}', "--wait", "--wait-timeout", "20")
            assert result.code == 0, result
            assert json.loads(result.out) == {"hello": "up"}
            # One worker ran the job; the other may still be importing, and a
            # process stopped before it starts has nothing to log.
            wait_until(
                lambda: err_path.read_text().count(WORKER_STARTED) == 2,
                60,
                what="both workers to start (their log lines)",
            )

            up.send_signal(signal.SIGINT)
            assert up.wait(20) == 0
        finally:
            if up.poll() is None:
                up.kill()
                up.wait(10)
            if up.stdout is not None:
                up.stdout.close()
    log = err_path.read_text()
    assert "chit up: stopping" in log
    assert log.count("stopped after") == 2, log
    assert "Traceback" not in log


ERRORS = {
    "malformed JSON": (["submit", "echo", "{oops"], {}, 2, "payload is not valid JSON"),
    "unknown kind": (["submit", "nope", "{}"], {}, 2, "known kinds: boom, echo, flaky, report"),
    "payload failing the model": (["submit", "report", "{}"], {}, 2, "region: Field required"),
    "oversized payload": (
        ["submit", "echo", '{"text": "%s"}' % ("x" * 200)],
        {"CHIT_MAX_PAYLOAD_BYTES": "100"},
        2,
        "the limit is 100 bytes",
    ),
    "no database to read": (["status", "01nosuchjob"], {}, 2, "no job database at "),
    "database in a missing directory": (
        ["submit", "echo", "{}", "--database-url", "sqlite:////nonexistent/dir/x.db"],
        {},
        3,
        "cannot open SQLite database '/nonexistent/dir/x.db'",
    ),
    # Said in a few seconds, not after the pool's 30 s of multi-line warnings.
    "PostgreSQL with nothing listening": (
        ["stats", "--database-url", "postgresql://postgres@127.0.0.1:1/test"],
        {},
        3,
        "cannot connect to PostgreSQL at 127.0.0.1:1: connection failed: ",
    ),
    "bad variable": (["stats"], {"CHIT_LEASE_SECONDS": "abc"}, 2, "CHIT_LEASE_SECONDS"),
    "worker with a bad variable": (
        ["worker"],
        {"CHIT_CONCURRENCY": "many"},
        2,
        "CHIT_CONCURRENCY has value 'many': not a whole number",
    ),
}
# A worker waits for a server that is down or starting, not for a database
# that is not there or credentials the server refuses: no wait mends those.
if not postgres_skipped():
    ERRORS["worker on a database that does not exist"] = (
        ["worker", "--app", "support.cli_app:queue"],
        {"CHIT_DATABASE_URL": postgres_url("chit_no_such_database")},
        3,
        'database "chit_no_such_database" does not exist; check the URL\'s user',
    )
    ERRORS["worker with a role the server does not know"] = (
        ["worker", "--app", "support.cli_app:queue"],
        {"CHIT_DATABASE_URL": postgres_url("postgres").replace("postgres@", "chit_nobody@", 1)},
        3,
        'role "chit_nobody" does not exist',
    )


@pytest.mark.timeout(30)
@pytest.mark.parametrize("args, env, code, message", ERRORS.values(), ids=ERRORS.keys())
def test_errors_are_one_line_without_a_traceback(
    args: list[str], env: dict[str, str], code: int, message: str
) -> None:
    result = run_cli(*args, **env)
    assert result.code == code, result
    assert result.out == ""
    assert "Traceback" not in result.err
    assert len(result.err.splitlines()) == 1, result.err
    assert result.err.startswith("chit: error: ")
    assert message in result.err


@pytest.mark.timeout(30)
def test_wait_on_a_pipe_prints_plain_state_lines(worker_process: Start) -> None:
    submitted = run_cli("submit", "report", '{"region": "emea", "seconds": 1}')
    job_id = submitted.out.strip()
    waiting = subprocess.Popen(
        [sys.executable, "-m", "chit", "wait", job_id],
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # The worker starts once `chit wait` has seen the job queued (its first line).
    assert waiting.stderr is not None
    first = waiting.stderr.readline()
    worker_process()
    out, rest = waiting.communicate(timeout=20)
    err = first + rest
    assert waiting.returncode == 0
    assert json.loads(out) == {"region": "emea", "attempt": 1}
    states = [line.split()[0] for line in err.splitlines()]
    assert states[0] == "queued"
    assert states[-1] == "succeeded"
    assert "\r" not in err  # no progress-bar redraws when stderr is not a terminal
