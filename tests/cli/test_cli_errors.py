"""Bad input to `chit`: one clear line on stderr, a non-zero exit, no
traceback, and nothing stored changed."""

from __future__ import annotations

from pathlib import Path

import pytest

import chit
from support.cli import Cli, assert_refused, forget_app, run_jobs, snapshot


@pytest.fixture
def seeded(cli: Cli, app: chit.Queue, db_path: Path) -> Path:
    """A database with a job in each of queued, succeeded and failed."""
    app.enqueue("echo", {"n": 1})
    app.enqueue("boom", {"message": "kaput"})
    run_jobs(app)
    app.enqueue("report", {"region": "emea"}, idempotency_key="emea-q3")
    assert cli("stats").code == 0
    return db_path


BAD_SUBMISSIONS = {
    "malformed JSON": (["submit", "echo", "{not json"], ["payload is not valid JSON"]),
    "truncated JSON": (["submit", "echo", '{"a": '], ["payload is not valid JSON"]),
    "NaN is not JSON": (["submit", "echo", "NaN"], ["not JSON"]),
    "unknown kind": (
        ["submit", "nope", "{}"],
        ["unknown job kind 'nope'", "known kinds: boom, echo, flaky, report"],
    ),
    "payload missing a field": (["submit", "report", "{}"], ["'report'", "region", "required"]),
    "payload field out of range": (
        ["submit", "report", '{"region": "emea", "seconds": -1}'],
        ["seconds", "greater than or equal to 0"],
    ),
    "payload of the wrong type": (["submit", "report", '{"region": 5}'], ["region"]),
    "key too long": (
        ["submit", "echo", "{}", "--idempotency-key", "k" * 256],
        ["idempotency key", "1 to 255 printable ASCII"],
    ),
    "key not printable": (
        ["submit", "echo", "{}", "--idempotency-key", "bad\x07key"],
        ["idempotency key"],
    ),
    "key with a newline": (
        ["submit", "echo", "{}", "--idempotency-key", "two\nlines"],
        ["idempotency key"],
    ),
    "empty key": (["submit", "echo", "{}", "--idempotency-key", ""], ["idempotency key"]),
    "key reused for another payload": (
        ["submit", "report", '{"region": "apac"}', "--idempotency-key", "emea-q3"],
        ["'emea-q3' was already used", "different request"],
    ),
    "bad --delay": (["submit", "echo", "{}", "--delay", "soon"], ["'soon' is not a duration"]),
    "bad --run-at": (["submit", "echo", "{}", "--run-at", "tuesday"], ["'tuesday'", "ISO 8601"]),
    "max attempts 0": (["submit", "echo", "{}", "--max-attempts", "0"], ["max_attempts"]),
    "--delay too long": (
        ["submit", "echo", "{}", "--delay", "99999999999d"],
        ["'99999999999d' is too long a duration", "36500d"],
    ),
    "--run-at before year 1 in UTC": (
        ["submit", "echo", "{}", "--run-at", "0001-01-01T00:00:00+05:00"],
        ["'0001-01-01T00:00:00+05:00' is out of range"],
    ),
    "--run-at after 9998": (
        ["submit", "echo", "{}", "--run-at", "9999-06-01T00:00:00Z"],
        ["run_at 9999-06-01T00:00:00+00:00 is out of range", "1970 to 9998"],
    ),
    "--priority beyond a 64-bit integer": (
        ["submit", "echo", "{}", "--priority", "9223372036854775808"],
        ["priority must be from -1,000,000 to 1,000,000, not 9223372036854775808"],
    ),
    "--priority just out of range": (
        ["submit", "echo", "{}", "--priority=-1000001"],
        ["priority must be from -1,000,000 to 1,000,000"],
    ),
    "--max-attempts beyond a 64-bit integer": (
        ["submit", "echo", "{}", "--max-attempts", "99999999999999999999"],
        ["max_attempts must be 1 to 1000, not 99999999999999999999"],
    ),
}


@pytest.mark.parametrize("args, phrases", BAD_SUBMISSIONS.values(), ids=BAD_SUBMISSIONS.keys())
def test_bad_submission_is_refused_and_changes_nothing(
    cli: Cli, seeded: Path, args: list[str], phrases: list[str]
) -> None:
    before = snapshot(seeded)
    assert_refused(cli(*args), 2, *phrases)
    assert snapshot(seeded) == before


def test_oversized_payload_is_refused_and_changes_nothing(
    cli: Cli, seeded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHIT_MAX_PAYLOAD_BYTES", "64")
    forget_app()  # the app's Queue reads the limit when imported
    before = snapshot(seeded)
    line = assert_refused(cli("submit", "echo", '{"text": "%s"}' % ("x" * 100)), 2)
    assert line == "chit: error: payload is 111 bytes as JSON; the limit is 64 bytes"
    assert snapshot(seeded) == before
    # Just under the limit is fine.
    assert cli("submit", "echo", '{"text": "%s"}' % ("x" * 50)).code == 0


BAD_OPERATIONS = {
    "status of an unknown id": (["status", "01nosuchjob"], 2, ["no job with id '01nosuchjob'"]),
    "wait for an unknown id": (["wait", "01nosuchjob"], 2, ["no job with id '01nosuchjob'"]),
    "cancel an unknown id": (["cancel", "01nosuchjob"], 2, ["no job with id '01nosuchjob'"]),
    "update an unknown id": (
        ["update", "01nosuchjob", "--priority", "1"],
        2,
        ["no job with id '01nosuchjob'"],
    ),
    "run-now of an unknown id": (["run-now", "01nosuchjob"], 2, ["no job with id '01nosuchjob'"]),
    "update with nothing to change": (["update", "01nosuchjob"], 2, ["say what to change"]),
    "update with a bad --payload": (
        ["update", "01nosuchjob", "--payload", "{x"],
        2,
        ["--payload is not valid JSON"],
    ),
    "update with a bad --priority": (
        ["update", "01nosuchjob", "--priority", "high"],
        2,
        ["--priority: invalid int value: 'high'"],
    ),
    "update with --delay and --run-at": (
        ["update", "01nosuchjob", "--delay", "5m", "--run-at", "2030-01-01T00:00:00Z"],
        2,
        ["not allowed with argument"],
    ),
    "update with a bad --delay": (["update", "01nosuchjob", "--delay", "soon"], 2, ["'soon'"]),
    "replay with no selector": (["replay"], 2, ["say what to replay", "--all"]),
    "replay with a bad --since": (["replay", "--since", "yesterday"], 2, ["'yesterday'"]),
    "replay --since too long ago": (
        ["replay", "--since", "99999999999d"],
        2,
        ["'99999999999d' is too long a duration"],
    ),
    "replay --since before year 1 in UTC": (
        ["replay", "--since", "0001-01-01T00:00:00+05:00"],
        2,
        ["is out of range"],
    ),
    "prune --older-than too long": (
        ["prune", "--older-than", "99999999999d"],
        2,
        ["'99999999999d' is too long a duration"],
    ),
    "prune with a bad --older-than": (
        ["prune", "--older-than", "a week"],
        2,
        ["'a week' is not a duration", "7d"],
    ),
    "prune with a negative --older-than": (["prune", "--older-than=-1d"], 2, ["duration"]),
    "list --limit 0": (["list", "--limit", "0"], 2, ["--limit", "between 1 and 1000"]),
    "list --limit 1001": (["list", "--limit", "1001"], 2, ["--limit", "between 1 and 1000"]),
    "list --limit abc": (
        ["list", "--limit", "abc"],
        2,
        ["argument --limit: 'abc' is not a whole number"],
    ),
    "list --state bogus": (["list", "--state", "bogus"], 2, ["--state", "invalid choice"]),
    "unknown command": (["frobnicate"], 2, ["invalid choice: 'frobnicate'"]),
    "--app that does not import": (
        ["list", "--app", "no_such_module:queue"],
        2,
        ["cannot import module 'no_such_module'"],
    ),
    "--app that is not a queue": (
        ["list", "--app", "support.cli_app:Report"],
        2,
        ["not a chit.Queue"],
    ),
}


@pytest.mark.parametrize("args, code, phrases", BAD_OPERATIONS.values(), ids=BAD_OPERATIONS.keys())
def test_bad_operation_is_refused_and_changes_nothing(
    cli: Cli, seeded: Path, args: list[str], code: int, phrases: list[str]
) -> None:
    before = snapshot(seeded)
    assert_refused(cli(*args), code, *phrases)
    assert snapshot(seeded) == before


BAD_ENVIRONMENT = {
    "CHIT_LEASE_SECONDS=abc": (
        "CHIT_LEASE_SECONDS",
        "abc",
        "CHIT_LEASE_SECONDS has value 'abc': not a number",
    ),
    "CHIT_LEASE_SECONDS=0": ("CHIT_LEASE_SECONDS", "0", "CHIT_LEASE_SECONDS has value 0.0"),
    "CHIT_MAX_ATTEMPTS=1.5": (
        "CHIT_MAX_ATTEMPTS",
        "1.5",
        "CHIT_MAX_ATTEMPTS has value '1.5': not a whole number",
    ),
    "CHIT_PORT=99999": ("CHIT_PORT", "99999", "CHIT_PORT has value 99999"),
    "CHIT_SQLITE_SYNCHRONOUS=fast": ("CHIT_SQLITE_SYNCHRONOUS", "fast", "CHIT_SQLITE_SYNCHRONOUS"),
    "CHIT_DATABASE_URL=mysql": ("CHIT_DATABASE_URL", "mysql://db/x", "CHIT_DATABASE_URL"),
    "CHIT_APP without a module": ("CHIT_APP", ":queue", "expected module:attribute"),
}


@pytest.mark.parametrize(
    "name, value, message", BAD_ENVIRONMENT.values(), ids=BAD_ENVIRONMENT.keys()
)
@pytest.mark.parametrize("command", [["list"], ["submit", "echo", "{}"], ["worker"]])
def test_bad_setting_names_the_variable_and_changes_nothing(
    cli: Cli,
    seeded: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    name: str,
    value: str,
    message: str,
) -> None:
    monkeypatch.setenv(name, value)
    before = snapshot(seeded)
    assert_refused(cli(*command), 2, message)
    assert snapshot(seeded) == before


# A bad flag is named as the flag, not as the CHIT_* variable nobody set (issue 26).
BAD_FLAGS = {
    "--lease 0": (["--lease", "0"], "--lease has value 0.0: must be greater than 0"),
    "--concurrency 0": (["--concurrency", "0"], "--concurrency has value 0"),
    "--concurrency -1": (["--concurrency", "-1"], "--concurrency has value -1"),
    "--prefetch -1": (["--prefetch=-1"], "--prefetch has value -1: must be >= 0"),
    "--prefetch 1.5": (["--prefetch", "1.5"], "argument --prefetch: invalid int value: '1.5'"),
    "--grace -1": (["--grace=-1"], "--grace has value -1.0"),
    "--lease soon": (["--lease", "soon"], "argument --lease: invalid float value: 'soon'"),
    "--lease nan": (["--lease", "nan"], "--lease has value nan: not a finite number"),
    "--grace inf": (["--grace", "inf"], "--grace has value inf: not a finite number"),
    "--pool fork": (["--pool", "fork"], "--pool has value 'fork': use thread or process"),
}


@pytest.mark.parametrize("flags, message", BAD_FLAGS.values(), ids=BAD_FLAGS.keys())
def test_bad_worker_flag_is_refused_naming_the_flag(
    cli: Cli, seeded: Path, flags: list[str], message: str
) -> None:
    before = snapshot(seeded)
    assert_refused(cli("worker", *flags), 2, message)
    assert snapshot(seeded) == before


def test_database_in_a_missing_directory_is_refused_and_not_created(
    cli: Cli, tmp_path: Path
) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    line = assert_refused(
        cli("submit", "echo", "{}", "--database-url", f"sqlite:///{missing}/x.db"),
        3,
        "cannot open SQLite database",
        str(missing / "x.db"),
    )
    assert "unable to open database file" in line
    assert not (tmp_path / "nonexistent").exists()


READERS = [
    ["list"],
    ["status", "01x"],
    ["stats"],
    ["failures"],
    ["wait", "01x"],
    ["workflow", "01x"],
    ["cancel", "01x"],
    ["run-now", "01x"],
    ["replay", "--all"],
    ["prune"],
]


@pytest.mark.parametrize("command", READERS, ids=" ".join)
def test_a_command_on_stored_jobs_names_a_missing_database_and_makes_none(
    cli: Cli, tmp_path: Path, command: list[str]
) -> None:
    """Run where no chit.db is (another directory): it says which database it
    looked for, rather than making an empty one and answering with nothing."""
    for url, path in (
        ("sqlite:///elsewhere.db", tmp_path / "elsewhere.db"),
        (f"sqlite:///{tmp_path}/missing/dir/x.db", tmp_path / "missing"),
    ):
        assert_refused(cli(*command, "--database-url", url), 2, "no job database at", f"({url})")
        assert not path.exists()


def test_database_url_naming_an_absolute_missing_directory_is_refused(cli: Cli) -> None:
    assert_refused(cli("list", "--database-url", "sqlite:////nonexistent/dir/x.db"), 2)
    assert not Path("/nonexistent").exists()


@pytest.mark.parametrize("command", [["list"], ["submit", "echo", "{}"], ["migrate"]])
def test_database_path_that_is_a_directory_is_refused_and_untouched(
    cli: Cli, tmp_path: Path, command: list[str]
) -> None:
    directory = tmp_path / "adir"
    directory.mkdir()
    (directory / "keep.txt").write_text("mine")
    assert_refused(cli(*command, "--database-url", f"sqlite:///{directory}"), 3, str(directory))
    assert sorted(p.name for p in directory.iterdir()) == ["keep.txt"]


@pytest.mark.parametrize("command", [["list"], ["submit", "echo", "{}"], ["migrate"]])
def test_file_that_is_not_a_database_is_refused_and_untouched(
    cli: Cli, tmp_path: Path, command: list[str]
) -> None:
    not_db = tmp_path / "notes.txt"
    content = b"these are my notes, not a database\n" * 200
    not_db.write_bytes(content)
    assert_refused(
        cli(*command, "--database-url", f"sqlite:///{not_db}"), 3, "file is not a database"
    )
    assert not_db.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_memory_database_is_refused(cli: Cli) -> None:
    assert_refused(cli("list", "--database-url", "sqlite:///:memory:"), 3, "file path")


def test_submit_without_an_app_says_how_to_name_one(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHIT_APP", raising=False)
    result = cli("submit", "echo", "{}")
    assert result.code != 0
    assert "none are registered" in result.err and "--app module:queue" in result.err
    assert "Traceback" not in result.err


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["worker", "--bogus"], "chit worker: error: unrecognized arguments: --bogus"),
        (
            ["limits", "set", "echo", "--burst", "5"],
            "chit limits set: error: unrecognized arguments: --burst 5",
        ),
        (["submit", "echo"], "chit submit: error: the following arguments are required: JSON"),
        (["wrk"], "chit: error: argument COMMAND: invalid choice: 'wrk'"),
        (["--nope", "list"], "chit: error: unrecognized arguments: --nope"),
        (["worker", "--concurrency", "x"], "chit worker: error: argument --concurrency: invalid"),
    ],
)
def test_a_wrong_flag_is_one_line_naming_it_and_the_commands_help(
    cli: Cli, args: list[str], line: str
) -> None:
    result = cli(*args)
    assert (result.code, result.out) == (2, "")
    [shown] = result.err.splitlines()
    command = line.split(":", 1)[0]
    assert shown.startswith(line) and shown.endswith(f"(see {command} --help)")
