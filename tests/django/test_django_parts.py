"""The parts of chit.contrib.django that need no database: reading an
exception's class back from a stored error, chit's URL for a Django database,
and what `chit worker --django` says when it cannot start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.processes import child_env


class LocalError(Exception):
    class Nested(Exception):
        pass


def stored(error: BaseException) -> str:
    """The error text chit's worker stores for an exception a handler raised."""
    from chit.worker.execute import describe

    try:
        raise error
    except BaseException as e:
        return describe(e)


def test_the_exception_class_path_is_read_from_the_stored_traceback() -> None:
    from chit.contrib.django.results import OUTSIDE_THE_TASK, exception_class_path

    assert exception_class_path(stored(ValueError("x: y"))) == "builtins.ValueError"
    assert exception_class_path(stored(LocalError("boom"))) == f"{__name__}.LocalError"
    nested = stored(LocalError.Nested("in"))
    assert exception_class_path(nested) == f"{__name__}.LocalError.Nested"
    try:
        try:
            raise KeyError("first")
        except KeyError as e:
            raise LocalError("second") from e
    except LocalError as e:
        from chit.worker.execute import describe

        chained = describe(e)
    assert "KeyError" in chained and exception_class_path(chained) == f"{__name__}.LocalError"
    # Errors no exception of the task's raised.
    for text in (
        "worker lost: lease expired after 3 attempts",
        "timed out after 5 s",
        "UnknownKind: this worker has no handler for 'x'",
        "",
    ):
        assert exception_class_path(text) == OUTSIDE_THE_TASK


def test_chit_urls_for_django_databases(tmp_path: Path) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from chit.contrib.django.database import chit_url

    sqlite = {"ENGINE": "django.db.backends.sqlite3", "NAME": tmp_path / "db.sqlite3"}
    assert chit_url("default", sqlite) == f"sqlite:///{tmp_path}/db.sqlite3"
    pg = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "shop",
        "USER": "app",
        "PASSWORD": "p@ss/word",
        "HOST": "db.internal",
        "PORT": 5433,
        "OPTIONS": {"sslmode": "require", "server_side_binding": True},
    }
    assert chit_url("default", pg) == (
        "postgresql://app:p%40ss%2Fword@db.internal:5433/shop?sslmode=require"
    )
    socket = {"ENGINE": "django.db.backends.postgresql", "NAME": "shop", "HOST": "/run/pg"}
    assert chit_url("default", socket) == "postgresql:///shop?host=%2Frun%2Fpg"
    for engine, name in (
        ("django.db.backends.sqlite3", ":memory:"),
        ("django.db.backends.mysql", "x"),
    ):
        with pytest.raises(ImproperlyConfigured):
            chit_url("default", {"ENGINE": engine, "NAME": name})


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nowhere.settings", "cannot import module 'nowhere'"),
        ("django_project.settings:missing", "no task backend 'missing' in TASKS"),
    ],
)
def test_chit_worker_django_says_why_it_cannot_start(
    spec: str, message: str, tmp_path: Path, django_databases: dict[str, str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "chit", "worker", "--django", spec],
        cwd=tmp_path,
        env=child_env() | django_databases,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
