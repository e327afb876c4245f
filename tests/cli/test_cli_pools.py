"""`chit worker` pool flags: a bad value is one line naming the setting, exit 2,
and the database untouched."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import chit
from support.cli import Result, snapshot

BAD_FLAGS = {
    "--pool fork": (["--pool", "fork"], "--pool has value 'fork': use thread or process"),
    "--max-jobs-per-child -1": (
        ["--max-jobs-per-child=-1"],
        "--max-jobs-per-child has value -1",
    ),
    "--max-jobs-per-child x": (
        ["--max-jobs-per-child", "x"],
        "argument --max-jobs-per-child: invalid int value: 'x'",
    ),
    "--max-memory-per-child -5": (
        ["--max-memory-per-child=-5"],
        "--max-memory-per-child has value -5",
    ),
    "--max-memory-per-child 1.5": (
        ["--max-memory-per-child", "1.5"],
        "argument --max-memory-per-child: invalid int value: '1.5'",
    ),
}


@pytest.mark.parametrize("flags, message", BAD_FLAGS.values(), ids=BAD_FLAGS.keys())
def test_bad_pool_flags_are_refused_in_one_line(
    cli: Callable[..., Result], app: chit.Queue, db_path: Path, flags: list[str], message: str
) -> None:
    app.enqueue("echo", {"n": 1})
    before = snapshot(db_path)
    result = cli("worker", *flags)
    assert result.code == 2, result
    assert "Traceback" not in result.err
    errors = [line for line in result.err.splitlines() if "error:" in line]
    assert len(errors) == 1, result.err
    assert errors[0].startswith("chit") and message in errors[0], errors[0]
    assert snapshot(db_path) == before


def test_a_process_pool_without_an_app_is_refused(
    cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHIT_APP")
    result = cli("worker", "--pool", "process")
    assert result.code == 2, result
    assert "chit: error: --pool process needs the app as module:queue" in result.err
    assert "Traceback" not in result.err
