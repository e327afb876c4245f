"""End to end: a real uvicorn server (`chit.cli.serve.serve`) on a free loopback
port and two real `chit worker` processes, sharing one SQLite file. The seed
protocol over the wire: 202 + Location, idempotent replay, Retry-After,
success, retries to attempt 3, a permanent failure with its error, retry of a
failed job, cancel of a queued and of a running job, SSE until terminal."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

import chit
from chit.cli.main import main
from chit.cli.submitting import submit_remote, wait_remote
from chit.client import APIError, APIInvalidRequest, APINotFound
from chit.requests import JobRequest
from support.stack import Server, server_with_workers
from support.waiting import wait_until

pytestmark = pytest.mark.slow

KEY = "e2e-key-0123456789abcdef"
# Limits and pauses need an admin key of every tenant.
ROOT_KEY = "e2e-root-0123456789abcdef"
# Reads schedules (a key of every tenant), may not write them.
READ_KEY = "e2e-read-0123456789abcdef"


@dataclass(kw_only=True)  # after Server's defaulted database_url
class Stack(Server):
    client: chit.Client

    def submit(self, payload: dict[str, Any], **extra: Any) -> httpx.Response:
        response = self.http.post("/jobs", json={"kind": "echo", "payload": payload, **extra})
        assert response.status_code == 202, response.text
        return response


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with (
        server_with_workers(
            tmp_path_factory.mktemp("e2e"),
            "support.api_app",
            key=KEY,
            keys=f"{KEY},*:admin:{ROOT_KEY},*:read:{READ_KEY}",
            worker_flags=("--concurrency", "4", "--lease", "5", "--grace", "2"),
            CHIT_BACKOFF_BASE="0.05",
            CHIT_BACKOFF_MAX="0.1",
        ) as server,
        chit.Client(server.url, api_key=KEY) as client,
    ):
        yield Stack(server.url, server.http, server.tmp, client=client)


def test_submit_answers_202_and_the_job_succeeds(stack: Stack) -> None:
    key = {"Idempotency-Key": "e2e-order-1"}
    body = {"kind": "echo", "payload": {"message": "hello", "seconds": 0.5, "steps": 5}}
    first = stack.http.post("/jobs", json=body, headers=key)
    assert first.status_code == 202
    job_id = first.json()["job_id"]
    location = first.headers["location"]
    assert location == f"/jobs/{job_id}"
    again = stack.http.post("/jobs", json=body, headers=key)
    assert (again.status_code, again.json()["job_id"], again.json()["created"]) == (
        200,
        job_id,
        False,
    )
    status = stack.http.get(location)
    assert status.json()["state"] in ("queued", "running")
    assert status.headers["retry-after"] == "1"
    final = stack.until(job_id, lambda b: b["state"] == "succeeded")
    assert final["result"] == {"message": "hello", "attempt": 1}
    assert "retry-after" not in stack.http.get(location).headers


def test_retries_until_the_third_attempt_succeeds(stack: Stack) -> None:
    job_id = stack.submit({"message": "flaky", "fail_times": 2}).json()["job_id"]
    final = stack.until(job_id, lambda b: b["state"] == "succeeded")
    assert (final["attempts"], final["result"]["attempt"]) == (3, 3)


def test_a_permanent_failure_keeps_its_error(stack: Stack) -> None:
    job_id = stack.submit({"message": "poison", "permanent": True}).json()["job_id"]
    final = stack.until(job_id, lambda b: b["state"] == "failed")
    assert final["attempts"] == 1
    assert final["error"].startswith("PermanentError: cannot echo 'poison': refused for good")
    groups = stack.http.get("/failures").json()["groups"]
    assert any(g["error"].startswith("PermanentError: cannot echo 'poison'") for g in groups)


def test_retry_of_a_failed_job_after_the_outage_ends(stack: Stack) -> None:
    outage = stack.tmp / "upstream-down"
    outage.touch()
    job_id = stack.submit({"message": "later", "fail_while_exists": str(outage)}).json()["job_id"]
    failed = stack.until(job_id, lambda b: b["state"] == "failed")
    assert failed["attempts"] == 3 and "ConnectionError: upstream is down" in failed["error"]
    outage.unlink()
    retried = stack.http.post(f"/jobs/{job_id}/retry")
    assert retried.status_code == 200
    # Queued again with attempts reset; an idle worker may have claimed (or even
    # finished) it before the answer was read back.
    assert (retried.json()["state"], retried.json()["attempts"]) in (
        ("queued", 0),
        ("running", 1),
        ("succeeded", 1),
    )
    final = stack.until(job_id, lambda b: b["state"] == "succeeded")
    assert final["result"] == {"message": "later", "attempt": 1}


def test_cancel_a_delayed_queued_job(stack: Stack) -> None:
    run_at = datetime.now(UTC) + timedelta(minutes=10)
    job_id = stack.submit({"message": "delayed"}, run_at=run_at.isoformat()).json()["job_id"]
    status = stack.http.get(f"/jobs/{job_id}")
    assert status.json()["state"] == "queued"
    assert 590 <= int(status.headers["retry-after"]) <= 600
    cancelled = stack.http.post(f"/jobs/{job_id}/cancel")
    assert (cancelled.status_code, cancelled.json()["state"]) == (200, "cancelled")


def test_a_delayed_job_edited_and_run_now_runs_with_its_new_payload(stack: Stack) -> None:
    """The blocking Client against real processes: the workers run the edited
    payload once run-now makes the job due, an hour early."""
    run_at = datetime.now(UTC) + timedelta(hours=1)
    job_id = stack.submit({"message": "draft"}, run_at=run_at.isoformat()).json()["job_id"]
    edited = stack.client.update(job_id, payload={"message": "final"}, priority=-5)
    assert (edited.state, edited.priority) == (chit.State.QUEUED, -5)
    assert stack.client.run_now(job_id).run_at <= datetime.now(UTC) + timedelta(seconds=1)
    final = stack.until(job_id, lambda b: b["state"] == "succeeded")
    assert final["result"] == {"message": "final", "attempt": 1}
    with pytest.raises(chit.InvalidTransition, match="only queued or waiting jobs"):
        stack.client.run_now(job_id)


def test_cancel_a_running_job(stack: Stack) -> None:
    job_id = stack.submit({"message": "long", "seconds": 30, "steps": 300}).json()["job_id"]
    stack.until(job_id, lambda b: b["state"] == "running" and (b["progress"]["done"] or 0) > 0)
    requested = stack.http.post(f"/jobs/{job_id}/cancel")
    assert requested.status_code == 202
    assert requested.json()["cancel_requested"] is True
    started = time.monotonic()
    final = stack.until(job_id, lambda b: b["state"] == "cancelled")
    # Seen at the next heartbeat (lease 5 s / 3), long before the job's 30 s.
    assert time.monotonic() - started < 10
    assert final["progress"]["done"] < 300


def test_events_until_the_terminal_state(stack: Stack) -> None:
    # Progress is written at heartbeats (every 5 s / 3): a job of several.
    job_id = stack.client.submit("echo", {"message": "sse", "seconds": 5, "steps": 10}).job_id
    events = list(stack.client.events(job_id))
    jobs = [e.job for e in events if e.job]
    assert jobs[0].state.value in ("queued", "running")
    assert jobs[-1].state.value == "succeeded"
    assert jobs[-1].result == {"message": "sse", "attempt": 1}
    assert "progress" in [e.event for e in events]
    # Reconnecting after the terminal event: nothing more (204), the stream ends.
    assert list(stack.client.events(job_id, last_event_id=events[-1].id)) == []


def test_the_blocking_client_waits_for_the_result(stack: Stack) -> None:
    submitted = stack.client.submit("echo", {"message": "client", "fail_times": 1})
    final = stack.client.wait(submitted.job_id, timeout=15)
    assert (final.state.value, final.attempts, final.result) == (
        "succeeded",
        2,
        {"message": "client", "attempt": 2},
    )
    big = stack.client.submit("big", {"size": 100_000})
    result = stack.client.wait(big.job_id, timeout=15)
    assert result.result_url is not None and len(result.result["blob"]) == 100_000


def test_the_blocking_client_sets_limits_and_pauses(stack: Stack) -> None:
    keyed = stack.client.submit("echo", {"message": "k"}, concurrency_key="customer-1")
    assert stack.client.wait(keyed.job_id, timeout=15).concurrency_key == "customer-1"
    with pytest.raises(APIError) as refused:
        stack.client.limits()  # KEY is bound to the default tenant
    assert refused.value.status == 403 and "every tenant" in str(refused.value)
    with chit.Client(stack.url, api_key=ROOT_KEY) as root:
        entry = root.set_limits("big", concurrency=2, rate="100/s")
        assert (entry.concurrency, entry.rate) == (2, "100/s")
        with pytest.raises(chit.InvalidRequest, match="rate 'fast' is not N/s"):
            root.set_limits("big", rate="fast")
        assert root.pause("nightly") is True and root.pause(kind="big") is True
        listing = root.limits()
        assert [(k.kind, k.concurrency) for k in listing.limits] == [("big", 2)]
        assert [(p.queue, p.kind) for p in listing.paused] == [("nightly", None), (None, "big")]
        assert root.resume("nightly") is True and root.resume(kind="big") is True
        assert root.clear_limits("big") is True
        assert root.limits().paused == []


def test_keys_are_required_over_the_wire(stack: Stack) -> None:
    response = httpx.get(f"{stack.url}/jobs", timeout=5)
    assert response.status_code == 401 and "Bearer" in response.json()["message"]
    metrics = stack.http.get("/metrics").text
    assert 'chit_completions_total{kind="echo"}' in metrics
    assert "chit_attempt_duration_seconds_bucket" in metrics


def test_cli_submit_and_wait_through_the_api(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    request = JobRequest("echo", {"message": "cli"}, idempotency_key="cli-1")
    code = submit_remote(stack.url, KEY, request, wait=True)
    captured = capsys.readouterr()
    assert code == 0
    assert json.loads(captured.out) == {"message": "cli", "attempt": 1}
    job_id = captured.err.splitlines()[0]
    assert submit_remote(stack.url, KEY, request) == 0
    assert capsys.readouterr().out.strip() == f"{job_id} (existing job, same key)"
    assert wait_remote(stack.url, KEY, job_id, as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "succeeded"
    failing = stack.client.submit("echo", {"message": "x", "permanent": True}).job_id
    assert wait_remote(stack.url, KEY, failing, timeout=15) == 1
    assert "failed: PermanentError" in capsys.readouterr().err
    delayed = stack.client.submit(
        "echo", {"message": "x"}, run_at=datetime.now(UTC) + timedelta(hours=1)
    ).job_id
    assert wait_remote(stack.url, KEY, delayed, timeout=0.5) == 1
    assert "still queued after 0.5s" in capsys.readouterr().err
    # The CLI's error handling applies: exit 2 for these, 3 for an unreachable API.
    with pytest.raises(chit.InvalidRequest, match="known kinds: big, echo"):
        submit_remote(stack.url, KEY, JobRequest("nope", {}))
    with pytest.raises(chit.ChitError, match="not recognised"):
        wait_remote(stack.url, "wrong-key-0123456789", job_id)
    with pytest.raises(chit.StoreError, match="cannot reach the chit API"):
        wait_remote("http://127.0.0.1:9", KEY, job_id)


def test_the_jobs_timeout_through_the_client_and_chit_submit_url(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    timed = stack.client.submit("echo", {"message": "t"}, timeout=7.5)
    assert stack.client.get(timed.job_id).timeout == 7.5
    argv = ["submit", "echo", '{"message": "t"}', "--timeout", "90s", "--json"]
    assert main([*argv, "--url", stack.url, "--api-key", KEY]) == 0
    job_id = json.loads(capsys.readouterr().out)["job_id"]
    assert stack.client.get(job_id).timeout == 90


def test_cli_limits_and_pauses_through_the_api(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    def chit_cli(*args: str, key: str = ROOT_KEY) -> tuple[int, str, str]:
        code = main([*args, "--url", stack.url, "--api-key", key])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = chit_cli(
        "submit", "echo", '{"message": "k"}', "--concurrency-key", "c-9", "--wait", key=KEY
    )
    assert code == 0 and json.loads(out) == {"message": "k", "attempt": 1}
    keyed = stack.client.list(kind="echo", limit=1).jobs[0]
    assert keyed.concurrency_key == "c-9"
    code, out, _ = chit_cli("limits", "set", "big", "--concurrency", "2", "--rate", "50/s")
    assert code == 0 and out.startswith("big: concurrency 2, rate 50/s")
    code, out, _ = chit_cli("limits")
    assert code == 0 and out.splitlines()[1].split()[:3] == ["big", "2", "50/s"]
    code, out, _ = chit_cli("limits", "--json")
    assert [k["kind"] for k in json.loads(out)["limits"]] == ["big"]
    assert chit_cli("pause", "--kind", "big")[1].startswith("paused kind big")
    assert "paused: kind big" in chit_cli("limits")[1]
    assert chit_cli("resume", "--kind", "big")[1] == "resumed kind big\n"
    assert "cleared" in chit_cli("limits", "clear", "big")[1]
    # Refused by the server or here: one line, exit 2, nothing stored.
    code, out, err = chit_cli("limits", "set", "big", "--rate", "0/s")
    assert (code, out) == (2, "") and err.startswith("chit: error: a rate allows 1 to")
    code, _, err = chit_cli("pause", "nightly", key=KEY)
    assert code == 2 and "every tenant" in err and err.count("\n") == 1
    assert json.loads(chit_cli("limits", "--json")[1]) == {"limits": [], "paused": []}


def test_the_blocking_client_manages_schedules(stack: Stack) -> None:
    with chit.Client(stack.url, api_key=ROOT_KEY) as root:
        # "big", not "echo": its jobs leave the other tests' echo jobs alone.
        tick = root.put_schedule("e2e-tick", "big", {"size": 1}, every="1s")
        try:
            assert (tick.rule, tick.source, tick.runs) == ("every 1s", "operator", [])

            def ran() -> Any:
                runs = root.get_schedule("e2e-tick").runs
                return runs and runs[-1].state.value == "succeeded" and runs

            [*_, first] = wait_until(ran, 30, 0.2, "a worker to run a slot of the schedule")
            assert stack.client.get(first.job_id).result == {"blob": "x"}
            assert "e2e-tick" in [s.name for s in root.schedules().schedules]
            assert root.pause_schedule("e2e-tick").paused is True
            assert root.resume_schedule("e2e-tick").paused is False
        finally:
            assert root.remove_schedule("e2e-tick").removed is True
        with pytest.raises(APINotFound) as missing:
            root.get_schedule("e2e-tick")
        assert missing.value.code == "schedule_not_found"
        with pytest.raises(APIInvalidRequest, match="does not parse") as bad:
            root.put_schedule("e2e-bad", "big", cron="61 * * * *")
        assert bad.value.status == 422
    with chit.Client(stack.url, api_key=READ_KEY) as reader:
        assert "e2e-tick" not in [s.name for s in reader.schedules().schedules]
        with pytest.raises(APIError) as refused:
            reader.put_schedule("e2e-read", "big", every="1h")
        assert refused.value.status == 403 and "needs admin" in str(refused.value)
    with pytest.raises(APIError) as bound:
        stack.client.schedules()  # KEY is bound to the default tenant
    assert bound.value.status == 403 and "every tenant" in str(bound.value)


def test_cli_schedules_through_the_api_say_what_they_say_on_the_database(
    stack: Stack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def remote(*args: str, key: str = ROOT_KEY) -> tuple[int, str, str]:
        code = main([*args, "--url", stack.url, "--api-key", key])
        out, err = capsys.readouterr()
        return code, out, err

    def local(*args: str) -> tuple[int, str, str]:
        """The same command on the stack's database: what --url must match."""
        code = main([*args, "--database-url", f"sqlite:///{stack.tmp / 'chit.db'}"])
        out, err = capsys.readouterr()
        return code, out, err

    def same(*args: str) -> tuple[int, str, str]:
        answered = remote(*args)
        assert answered == local(*args)
        return answered

    monkeypatch.delenv("CHIT_APP", raising=False)  # the local half: a plain queue
    capsys.readouterr()
    # Rules whose next slot is hours or days away: no worker moves them meanwhile.
    code, out, err = remote(
        "schedules",
        "add",
        "e2e-nightly",
        "--kind",
        "echo",
        "--cron",
        "0 8 * * *",
        "--tz",
        "Europe/Paris",
        "--payload",
        '{"message": "n"}',
        "--catch-up",
        "none",
    )
    assert (code, err) == (0, "")
    assert out.startswith("e2e-nightly: 0 8 * * * (Europe/Paris), kind echo; next run 20")
    code, out, err = remote(
        "schedules", "add", "e2e-weekly", "--kind", "big", "--every", "7d", "--json"
    )
    assert (code, err) == (0, "")
    weekly = json.loads(out)
    assert (weekly["rule"], weekly["every"], weekly["runs"]) == ("every 1w", 604800, None)

    code, listed, _ = same("schedules")
    lines = listed.splitlines()
    assert lines[0].split()[:3] == ["name", "kind", "rule"]
    assert any(line.startswith("e2e-nightly ") and "Europe/Paris" in line for line in lines)
    code, listed, _ = same("schedules", "--json")
    by_name = {s["name"]: s for s in json.loads(listed)["schedules"]}
    assert by_name["e2e-weekly"] == weekly
    nightly = by_name["e2e-nightly"]
    assert (nightly["payload"]["message"], nightly["catch_up"], nightly["paused"]) == (
        "n",
        "none",
        False,
    )
    # A read-only key of every tenant lists them too.
    assert remote("schedules", key=READ_KEY)[1] == local("schedules")[1]

    code, out, _ = remote("schedules", "pause", "e2e-weekly")
    assert (code, out) == (
        0,
        "paused e2e-weekly: no job is enqueued until chit schedules resume e2e-weekly\n",
    )
    assert same("schedules", "pause", "e2e-weekly") == (0, "e2e-weekly was paused already\n", "")
    code, out, _ = remote("schedules", "pause", "e2e-weekly", "--json")
    paused = json.loads(out)
    [stored] = [s for s in json.loads(local("schedules", "--json")[1])["schedules"] if s == paused]
    assert (code, stored["name"], stored["paused"]) == (0, "e2e-weekly", True)
    code, out, _ = remote("schedules", "resume", "e2e-weekly")
    assert code == 0 and out.startswith("resumed e2e-weekly: next run 20")
    assert out.endswith(" (the paused slots are skipped)\n")
    assert same("schedules", "resume", "e2e-weekly")[1] == "e2e-weekly was not paused already\n"
    # CHIT_API_KEY is the key when --api-key is not given.
    monkeypatch.setenv("CHIT_API_KEY", ROOT_KEY)
    assert main(["schedules", "remove", "e2e-weekly", "--url", stack.url]) == 0
    assert capsys.readouterr().out.startswith("removed e2e-weekly; its jobs stay")
    monkeypatch.delenv("CHIT_API_KEY")
    assert same("schedules", "remove", "e2e-weekly", "--json") == (
        0,
        '{\n  "name": "e2e-weekly",\n  "removed": false\n}\n',
        "",
    )

    # An unknown name: the database's message and exit code.
    for verb in ("pause", "resume", "remove"):
        assert same("schedules", verb, "e2e-nope") == (
            2,
            "",
            "chit: error: no schedule named 'e2e-nope': chit schedules lists them\n",
        )
    # A rule that does not parse: the server's 422, the local command's line.
    code, out, err = same("schedules", "add", "e2e-bad", "--kind", "echo", "--cron", "61 * * * *")
    assert (code, out) == (2, "") and err.startswith("chit: error: cron rule '61 * * * *' does not")
    # The server checks the kind against its app (the local half here has none).
    code, out, err = remote("schedules", "add", "e2e-bad", "--kind", "nope", "--every", "1m")
    assert (code, out) == (2, "") and "unknown job kind 'nope'; known kinds: big, echo" in err
    # Keys that may not: the server's 401 and 403, one line, exit 2.
    code, out, err = remote(
        "schedules", "add", "e2e-bad", "--kind", "echo", "--every", "1m", key=READ_KEY
    )
    assert (code, out, err) == (
        2,
        "",
        "chit: error: this API key has scope read; this route needs admin\n",
    )
    code, _, err = remote("schedules", key=KEY)
    assert code == 2 and "every tenant" in err and err.count("\n") == 1
    code, _, err = remote("schedules", key="wrong-key-0123456789")
    assert (code, err) == (
        2,
        "chit: error: API key not recognised: it is mistyped or was revoked\n",
    )
    assert [s["name"] for s in json.loads(same("schedules", "--json")[1])["schedules"]] == [
        "e2e-nightly"
    ]
    assert remote("schedules", "remove", "e2e-nightly")[0] == 0
    assert local("schedules")[1].startswith("no schedules: declare them")


def test_signals_through_the_blocking_client_and_chit_signal_url(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    """A signal sent before the job waits is kept for it (the job here delayed)."""
    later = datetime.now(UTC) + timedelta(hours=1)
    job_id = stack.client.submit("echo", {"message": "s"}, run_at=later).job_id
    sent = stack.client.signal(job_id, "approval", {"by": "ana"})
    assert (sent.created, sent.data) == (True, {"by": "ana"})
    argv = ["signal", job_id, "approval", '{"by": "bob"}', "--json"]
    assert main([*argv, "--url", stack.url, "--api-key", KEY]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "job_id": job_id,
        "name": "approval",
        "data": {"by": "ana"},
        "created": False,
    }
    assert main(["signal", job_id, "other", "{bad", "--url", stack.url, "--api-key", KEY]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    with pytest.raises(chit.JobNotFound):
        stack.client.signal("0" * 26, "approval")
