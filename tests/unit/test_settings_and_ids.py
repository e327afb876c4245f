from __future__ import annotations

import pytest

from chit.errors import ConfigError
from chit.ids import is_job_id, new_job_id
from chit.settings import Settings


def test_defaults_match_the_design() -> None:
    s = Settings.from_env({})
    assert s.database_url == "sqlite:///chit.db"
    assert s.port == 8718
    assert s.host == "127.0.0.1"


def test_values_come_from_chit_variables() -> None:
    s = Settings.from_env(
        {"CHIT_LEASE_SECONDS": "2.5", "CHIT_MAX_ATTEMPTS": "7", "CHIT_QUEUES": "high, default"}
    )
    assert (s.lease_seconds, s.max_attempts, s.queues) == (2.5, 7, ("high", "default"))


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CHIT_LEASE_SECONDS": "abc"}, "CHIT_LEASE_SECONDS has value 'abc': not a number"),
        ({"CHIT_MAX_ATTEMPTS": "2.5"}, "CHIT_MAX_ATTEMPTS has value '2.5': not a whole number"),
        ({"CHIT_MAX_ATTEMPTS": "0"}, "CHIT_MAX_ATTEMPTS"),
        ({"CHIT_PORT": "70000"}, "CHIT_PORT"),
        ({"CHIT_DATABASE_URL": "mysql://x"}, "CHIT_DATABASE_URL"),
        ({"CHIT_SQLITE_SYNCHRONOUS": "sometimes"}, "CHIT_SQLITE_SYNCHRONOUS"),
    ],
)
def test_a_bad_value_fails_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_env(env)


def test_job_ids_are_time_ordered_and_unique() -> None:
    ids = [new_job_id() for _ in range(10_000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(is_job_id(i) for i in ids[:100])
    assert not is_job_id("../etc/passwd")
