"""`chit limits`, `chit limits set|clear`, `chit pause|resume`, `chit stats`'
limits and `chit submit --concurrency-key`: good input as text and --json, and
every bad value refused with one line and exit 2, nothing stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import chit
from chit.fleet import WorkerBeat
from chit.limits import Limits
from support.cli import Cli, assert_refused, ok, snapshot


def flow(q: chit.Queue) -> tuple[Any, Any]:
    """The limits and pauses stored, as the store reads them."""
    limits = [(k.kind, k.declared, k.override) for k in q.store.limits()]
    return limits, [(p.queue, p.kind, p.paused_at) for p in q.store.pauses()]


# Limits


def test_no_limits_says_how_to_make_some(cli: Cli) -> None:
    out = ok(cli("limits")).out
    assert "no limits" in out and "chit limits set KIND" in out
    assert ok(cli("limits", "--json")).json() == {"limits": [], "paused": []}


def test_set_show_merge_and_clear(cli: Cli, app: chit.Queue) -> None:
    out = ok(cli("limits", "set", "echo", "--concurrency", "3", "--rate", "10/s")).out
    assert out.startswith("echo: concurrency 3, rate 10/s") and "chit limits clear echo" in out
    [echo] = app.store.limits()
    assert echo.override == Limits.checked(concurrency=3, rate="10/s")

    merged = ok(
        cli("limits", "set", "echo", "--key-concurrency", "2", "--key-rate", "5/m", "--json")
    ).json()
    assert (merged["concurrency"], merged["rate"]) == (3, "10/s")
    assert (merged["key_concurrency"], merged["key_rate"]) == (2, "5/m")

    table = ok(cli("limits")).out.splitlines()
    assert table[0].split()[:3] == ["kind", "concurrency", "rate"]
    assert table[1].split() == ["echo", "3", "10/s", "2", "5/m", "0", "0", "operator"]
    [listed] = ok(cli("limits", "--json")).json()["limits"]
    assert listed == merged

    assert "cleared" in ok(cli("limits", "clear", "echo")).out
    assert "nothing changed" in ok(cli("limits", "clear", "echo")).out
    assert ok(cli("limits", "clear", "echo", "--json")).json() == {
        "kind": "echo",
        "cleared": False,
    }
    assert app.store.limits() == []


def test_a_kind_no_task_declares_takes_limits_with_force(cli: Cli, app: chit.Queue) -> None:
    ok(cli("limits", "set", "not_deployed_yet", "--concurrency", "2", "--force"))
    assert [k.kind for k in app.store.limits()] == ["not_deployed_yet"]
    # Once it has limits it is known: changing them needs no --force.
    ok(cli("limits", "set", "not_deployed_yet", "--rate", "5/s"))


def test_without_the_app_no_kind_is_known_until_a_worker_runs_it(
    cli: Cli, app: chit.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHIT_APP")
    assert_refused(
        cli("limits", "set", "echo", "--concurrency", "2"), 2, "(kinds declared: none seen)"
    )
    app.store.beat_worker(WorkerBeat("w1", "host", 1, ("default",), ("echo",), 1, 0), 60)
    ok(cli("limits", "set", "echo", "--concurrency", "2"))


def test_an_override_over_the_codes_limits(cli: Cli, app: chit.Queue) -> None:
    app.store.declare_limits({"report": Limits.checked(concurrency=2)})
    app.enqueue("report", {"region": "emea"})
    row = ok(cli("limits")).out.splitlines()[1].split()
    assert row == ["report", "2", "-", "-", "-", "0", "1", "code"]
    ok(cli("limits", "set", "report", "--rate", "1/h"))
    row = ok(cli("limits")).out.splitlines()[1].split()
    assert row == ["report", "2", "1/h", "-", "-", "0", "1", "code+operator"]
    ok(cli("limits", "clear", "report"))
    [report] = app.store.limits()
    assert report.effective == Limits.checked(concurrency=2)


# Pauses


def test_pause_and_resume_a_queue_and_a_kind(cli: Cli, app: chit.Queue) -> None:
    assert "paused queue emails" in ok(cli("pause", "emails")).out
    assert "was paused already" in ok(cli("pause", "emails")).out
    assert ok(cli("pause", "--kind", "echo", "--json")).json() == {
        "kind": "echo",
        "paused": True,
        "changed": True,
    }
    lines = ok(cli("limits")).out.splitlines()
    assert [line.split(" (since")[0] for line in lines if line.startswith("paused:")] == [
        "paused: queue emails",
        "paused: kind echo",
    ]
    paused = ok(cli("limits", "--json")).json()["paused"]
    assert [(p["queue"], p["kind"]) for p in paused] == [("emails", None), (None, "echo")]

    assert "resumed queue emails" in ok(cli("resume", "emails")).out
    assert "was not paused" in ok(cli("resume", "emails")).out
    assert ok(cli("resume", "--kind", "echo", "--json")).json() == {
        "kind": "echo",
        "paused": False,
        "changed": True,
    }
    assert app.store.pauses() == []


def test_stats_show_limits_and_pauses(cli: Cli, app: chit.Queue) -> None:
    app.enqueue("echo", {})
    ok(cli("limits", "set", "echo", "--concurrency", "4"))
    ok(cli("pause", "nightly"))
    lines = ok(cli("stats")).out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("kind  concurrency"))
    assert lines[header + 1].split() == ["echo", "4", "-", "-", "-", "0", "1", "operator"]
    assert lines[-3].startswith("paused: queue nightly (since ")
    # No worker runs now: the queued kind waits for one (workers claim their own kinds).
    assert lines[-1] == "waiting: no worker running now has code for kind echo (1 queued)"
    body = ok(cli("stats", "--json")).json()
    assert [(k["kind"], k["concurrency"], k["waiting"]) for k in body["limits"]] == [("echo", 4, 1)]
    assert [p["queue"] for p in body["paused"]] == ["nightly"]


# Concurrency keys


def test_submit_with_a_concurrency_key(cli: Cli, app: chit.Queue) -> None:
    result = ok(cli("submit", "echo", "{}", "--concurrency-key", "customer-42"))
    job_id = result.out.split()[0]
    job = app.store.get(job_id)
    assert job is not None and job.concurrency_key == "customer-42"
    assert "customer-42" in ok(cli("status", job_id)).out
    assert ok(cli("status", job_id, "--json")).json()["concurrency_key"] == "customer-42"


# Bad input


@pytest.fixture
def seeded(cli: Cli, app: chit.Queue, db_path: Path) -> Path:
    """A job, a declared limit, an override and a pause, for a refusal to leave alone."""
    app.enqueue("echo", {"n": 1})
    app.store.declare_limits({"report": Limits.checked(concurrency=2)})
    ok(cli("limits", "set", "echo", "--concurrency", "7", "--rate", "1/s"))
    ok(cli("pause", "held"))
    return db_path


LONG = "k" * 201
BAD = {
    "set with no limit": (["limits", "set", "echo"], ["say which limits to set", "--rate"]),
    "--concurrency 0": (
        ["limits", "set", "echo", "--concurrency", "0"],
        ["concurrency is a whole number from 1 to 100,000, not 0"],
    ),
    "--concurrency -1": (["limits", "set", "echo", "--concurrency", "-1"], ["not -1"]),
    "--concurrency abc": (["limits", "set", "echo", "--concurrency", "abc"], ["not 'abc'"]),
    "--concurrency 1.5": (["limits", "set", "echo", "--concurrency", "1.5"], ["not '1.5'"]),
    "--concurrency empty": (["limits", "set", "echo", "--concurrency", ""], ["not ''"]),
    "--concurrency 10**12": (
        ["limits", "set", "echo", "--concurrency", str(10**12)],
        ["not 1000000000000"],
    ),
    "--concurrency of 100 digits": (
        ["limits", "set", "echo", "--concurrency", "9" * 100],
        ["concurrency is a whole number"],
    ),
    "--rate 0/s": (
        ["limits", "set", "echo", "--rate", "0/s"],
        ["a rate allows 1 to 1,000,000 starts per period, not 0"],
    ),
    "--rate abc": (
        ["limits", "set", "echo", "--rate", "abc"],
        ["rate 'abc' is not N/s, N/m or N/h (for example 10/s, 600/m, 1000/h)"],
    ),
    "--rate empty": (["limits", "set", "echo", "--rate", ""], ["is not N/s, N/m or N/h"]),
    "--rate per day": (["limits", "set", "echo", "--rate", "5/d"], ["rate '5/d' is not N/s"]),
    "--rate negative": (["limits", "set", "echo", "--rate=-1/s"], ["rate '-1/s' is not N/s"]),
    "--rate too high": (["limits", "set", "echo", "--rate", "2000000/s"], ["not 2000000"]),
    "--rate absurdly long": (["limits", "set", "echo", "--rate", "9" * 500 + "/s"], ["not N/s"]),
    "--key-concurrency 0": (
        ["limits", "set", "echo", "--key-concurrency", "0"],
        ["key_concurrency is a whole number", "not 0"],
    ),
    "--key-concurrency abc": (
        ["limits", "set", "echo", "--key-concurrency", "abc"],
        ["key_concurrency", "'abc'"],
    ),
    "--key-rate 0/m": (["limits", "set", "echo", "--key-rate", "0/m"], ["not 0"]),
    "--key-rate abc": (["limits", "set", "echo", "--key-rate", "abc"], ["rate 'abc'"]),
    "a good flag beside a bad one": (
        ["limits", "set", "echo", "--concurrency", "3", "--rate", "abc"],
        ["rate 'abc'"],
    ),
    "set an empty kind": (["limits", "set", "", "--concurrency", "3"], ["a kind name is 1 to 200"]),
    "set a kind too long": (["limits", "set", LONG, "--concurrency", "3"], ["1 to 200"]),
    "set without a kind": (["limits", "set"], ["required: kind"]),
    "clear an empty kind": (["limits", "clear", ""], ["a kind name is 1 to 200"]),
    "clear a kind too long": (["limits", "clear", LONG], ["a kind name is 1 to 200"]),
    "an unknown action": (["limits", "raise", "echo"], ["invalid choice: 'raise'"]),
    "an unknown flag": (["limits", "set", "echo", "--burst", "5"], ["unrecognized arguments"]),
    "set a kind no task declares": (
        ["limits", "set", "ecko", "--concurrency", "3"],
        ["no task declares kind 'ecko'", "boom, echo, flaky", "--force"],
    ),
    "pause nothing": (["pause"], ["give a QUEUE or --kind KIND (exactly one)"]),
    "pause both": (["pause", "q", "--kind", "echo"], ["exactly one"]),
    "pause an empty queue": (["pause", ""], ["a queue name is 1 to 200"]),
    "pause a queue too long": (["pause", LONG], ["a queue name is 1 to 200"]),
    "pause an empty kind": (["pause", "--kind", ""], ["a kind name is 1 to 200"]),
    "resume nothing": (["resume"], ["exactly one"]),
    "resume both": (["resume", "held", "--kind", "echo"], ["exactly one"]),
    "resume a kind too long": (["resume", "--kind", LONG], ["a kind name is 1 to 200"]),
    "submit an empty concurrency key": (
        ["submit", "echo", "{}", "--concurrency-key", ""],
        ["concurrency key must be 1 to 200 printable characters"],
    ),
    "submit a concurrency key too long": (
        ["submit", "echo", "{}", "--concurrency-key", LONG],
        ["concurrency key must be 1 to 200"],
    ),
    "submit a concurrency key with a newline": (
        ["submit", "echo", "{}", "--concurrency-key", "two\nlines"],
        ["concurrency key"],
    ),
    "submit a concurrency key with a control character": (
        ["submit", "echo", "{}", "--concurrency-key", "bell\x07"],
        ["concurrency key"],
    ),
    "--cost-rate 0/m": (["limits", "set", "echo", "--cost-rate", "0/m"], ["cost_rate", "not 0"]),
    "--cost-rate abc": (["limits", "set", "echo", "--cost-rate", "abc"], ["rate 'abc'"]),
    "--key-cost-rate too much": (
        ["limits", "set", "echo", "--key-cost-rate", "9999999999999/s"],
        ["1 to 1,000,000,000,000 cost per period"],
    ),
    "submit a cost of 0": (["submit", "echo", "{}", "--cost", "0"], ["cost must be a whole"]),
    "submit a negative cost": (["submit", "echo", "{}", "--cost", "-3"], ["not -3"]),
    "submit a cost that is no number": (
        ["submit", "echo", "{}", "--cost", "lots"],
        ["--cost must be a whole number, not 'lots'"],
    ),
    "submit a fractional cost": (["submit", "echo", "{}", "--cost", "2.5"], ["--cost"]),
}


def test_cost_rates_are_set_shown_and_cleared(cli: Cli, app: chit.Queue) -> None:
    out = ok(cli("limits", "set", "echo", "--cost-rate", "90000/m", "--key-cost-rate", "5/s")).out
    assert out.startswith("echo: cost rate 90000/m, key cost rate 5/s"), out
    table = ok(cli("limits")).out.splitlines()
    assert "cost rate" in table[0] and "key cost rate" in table[0]
    assert table[1].split()[:7] == ["echo", "-", "-", "-", "-", "90000/m", "5/s"]
    [echo] = app.store.limits()
    assert echo.override == Limits.checked(cost_rate="90000/m", key_cost_rate="5/s")
    ok(cli("limits", "clear", "echo"))
    assert app.store.limits() == []


@pytest.mark.parametrize("args, phrases", BAD.values(), ids=BAD.keys())
def test_bad_input_is_refused_and_stores_nothing(
    cli: Cli, app: chit.Queue, seeded: Path, args: list[str], phrases: list[str]
) -> None:
    before, flow_before = snapshot(seeded), flow(app)
    assert_refused(cli(*args), 2, *phrases)
    assert snapshot(seeded) == before
    assert flow(app) == flow_before
