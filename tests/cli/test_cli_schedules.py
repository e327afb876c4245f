"""`chit schedules`, `chit schedules add|pause|resume|remove`: good input as text
and --json, and bad input refused with one line and exit 2, nothing stored."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import chit
from chit.worker.scheduler import Scheduler
from support.cli import Cli, assert_refused, ok


def test_no_schedules_says_how_to_make_one(cli: Cli) -> None:
    out = ok(cli("schedules")).out
    assert "no schedules" in out and "chit schedules add" in out
    assert ok(cli("schedules", "--json")).json() == {"schedules": []}


def test_times_are_printed_in_the_schedules_zone_and_named(cli: Cli) -> None:
    """08:00 in Paris is 07:00 or 06:00 UTC: printed as the rule says, zone named."""
    added = ok(
        cli(
            "schedules", "add", "n", "--kind", "echo", "--cron", "0 8 * * *", "--tz", "Europe/Paris"
        )
    ).out
    assert added.rstrip().endswith(("08:00:00 CET (Europe/Paris)", "08:00:00 CEST (Europe/Paris)"))
    in_utc = ok(cli("schedules", "add", "u", "--kind", "echo", "--cron", "0 8 * * *")).out
    assert in_utc.rstrip().endswith(" 08:00:00 UTC")
    rows = ok(cli("schedules")).out.splitlines()
    paris = next(r for r in rows if r.startswith("n "))
    assert " 08:00:00 CE" in paris and "Europe/Paris" in paris
    utc = next(r for r in rows if r.startswith("u "))
    assert " 08:00:00 UTC" in utc


def test_add_list_pause_resume_remove(cli: Cli, app: chit.Queue) -> None:
    out = ok(cli("schedules", "add", "hb", "--kind", "echo", "--every", "30s")).out
    assert out.startswith("hb: every 30s, kind echo; next run ")
    added = ok(
        cli(
            "schedules",
            "add",
            "nightly",
            "--kind",
            "report",
            "--cron",
            "0 8 * * *",
            "--tz",
            "Europe/Paris",
            "--payload",
            '{"region": "emea"}',
            "--catch-up",
            "none",
            "--json",
        )
    ).json()
    assert (added["rule"], added["catch_up"], added["source"]) == (
        "0 8 * * * (Europe/Paris)",
        "none",
        "operator",
    )
    assert added["payload"] == {"region": "emea", "seconds": 0.0}  # as the model stores it

    # A slot run: the list shows its last slot and its job's state.
    Scheduler(app.store, app).run_once(datetime.now(UTC) + timedelta(seconds=31))
    lines = ok(cli("schedules")).out.splitlines()
    assert lines[0].split() == [
        "name",
        "kind",
        "rule",
        "tz",
        "paused",
        "next",
        "run",
        "last",
        "slot",
        "last",
        "job",
    ]
    hb = next(line for line in lines if line.startswith("hb "))
    assert hb.split()[1:5] == ["echo", "every", "30s", "UTC"] and hb.endswith("queued")
    assert any(line.startswith("nightly ") and "Europe/Paris" in line for line in lines)

    assert "paused hb" in ok(cli("schedules", "pause", "hb")).out
    assert "already" in ok(cli("schedules", "pause", "hb")).out
    assert app.store.get_schedule("hb").paused  # type: ignore[union-attr]
    assert "resumed hb" in ok(cli("schedules", "resume", "hb")).out
    assert ok(cli("schedules", "remove", "hb", "--json")).json() == {"name": "hb", "removed": True}
    assert [s["name"] for s in ok(cli("schedules", "--json")).json()["schedules"]] == ["nightly"]


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["--cron", "61 * * * *"], "does not parse"),
        (["--cron", "0 8 * *"], "expected 5 fields"),
        (["--every", "0s"], "at least 1s"),
        (["--every", "1m", "--cron", "* * * * *"], "exactly one"),
        ([], "exactly one"),
        (["--cron", "* * * * *", "--tz", "Nowhere/Land"], "unknown time zone"),
        (["--every", "1m", "--catch-up", "sometimes"], "catch_up must be"),
        (["--every", "1m", "--payload", "{not json"], "--payload is not JSON"),
        (["--every", "1m", "--kind", "unknown"], "unknown"),
        (["--every", "1m", "--kind", "report", "--payload", '{"region": ""}'], "region"),
    ],
)
def test_bad_schedules_are_refused_and_nothing_is_stored(
    cli: Cli, app: chit.Queue, args: list[str], phrase: str
) -> None:
    kind = [] if "--kind" in args else ["--kind", "echo"]
    assert_refused(cli("schedules", "add", "s", *kind, *args), 2, phrase)
    assert app.store.list_schedules() == []


def test_an_oversized_or_unknown_name_is_refused(cli: Cli, app: chit.Queue) -> None:
    assert_refused(
        cli("schedules", "add", "x" * 201, "--kind", "echo", "--every", "1m"), 2, "1 to 200"
    )
    assert app.store.list_schedules() == []
    for verb in ("pause", "resume", "remove"):
        assert_refused(cli("schedules", verb, "nope"), 2, "no schedule named 'nope'")


# --url: the HTTP API (tests/api/test_api_e2e.py runs these against a real server)

DOWN = "http://127.0.0.1:9"  # nothing listens on the discard port


@pytest.mark.parametrize(
    "args",
    [
        ["schedules"],
        ["schedules", "--json"],
        ["schedules", "add", "s", "--kind", "echo", "--every", "1m"],
        ["schedules", "pause", "s"],
        ["schedules", "resume", "s"],
        ["schedules", "remove", "s", "--api-key", "some-key-0123456789"],
    ],
)
def test_an_unreachable_server_is_exit_3_with_its_url(cli: Cli, args: list[str]) -> None:
    assert_refused(cli(*args, "--url", DOWN), 3, f"cannot reach the chit API at {DOWN}")


def test_with_url_a_bad_name_or_payload_is_refused_before_anything_is_sent(cli: Cli) -> None:
    for args, phrase in (
        (["add", "a b", "--kind", "echo", "--every", "1m"], "a schedule name must be"),
        (["add", "x" * 201, "--kind", "echo", "--every", "1m"], "1 to 200"),
        (["add", "s", "--kind", "echo", "--every", "1m", "--payload", "{"], "--payload is not"),
        (["pause", "a/b"], "a schedule name must be"),
        (["remove", ""], "a schedule name must be"),
    ):
        assert_refused(cli("schedules", *args, "--url", DOWN), 2, phrase)
