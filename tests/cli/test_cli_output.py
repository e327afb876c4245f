"""`chit output ID`: a job's output, one JSON line a value (--json: with seq,
attempt and time); `--follow` prints values as they are written until the job
finishes (a real `chit` process, fed by a writer in this one)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import chit
from chit.jobs import Succeeded
from support.cli import Cli
from support.processes import child_env


def test_output_prints_each_value_and_refuses_unknown_jobs(cli: Cli, app: chit.Queue) -> None:
    job_id = app.enqueue("echo", {}).id
    [held] = app.store.claim("w", ["default"], 1, 30)
    app.store.append_output(job_id, held.lease_token, ['"a"', '{"b":[1]}', "3"], 12)
    result = cli("output", job_id)
    assert result.code == 0, result
    assert result.out.splitlines() == ['"a"', '{"b": [1]}', "3"]
    listed = cli("output", job_id, "--after", "1", "--json").out
    rows = [json.loads(line) for line in listed.splitlines()]
    assert [(r["seq"], r["attempt"], r["data"]) for r in rows] == [(2, 1, {"b": [1]}), (3, 1, 3)]
    assert cli("output", "01JNOSUCHJOB0000000000000").code == 2
    assert cli("output", job_id, "--after", "-1").code == 2


def test_output_follow_prints_values_as_they_come_until_the_job_ends(app: chit.Queue) -> None:
    job_id = app.enqueue("echo", {}).id
    [held] = app.store.claim("w", ["default"], 1, 30)
    app.store.append_output(job_id, held.lease_token, ['"first"'], 7)
    with subprocess.Popen(
        [sys.executable, "-m", "chit", "output", job_id, "--follow"],
        env=child_env(),
        stdout=subprocess.PIPE,
        text=True,
    ) as follow:
        assert follow.stdout is not None
        assert follow.stdout.readline() == '"first"\n'
        writer = threading.Timer(
            0.2, lambda: app.store.append_output(job_id, held.lease_token, ['"second"'], 8)
        )
        writer.start()
        assert follow.stdout.readline() == '"second"\n'
        writer.join()
        app.store.finish([Succeeded(job_id, held.lease_token, None)])
        assert follow.wait(10) == 0
        assert follow.stdout.read() == ""
