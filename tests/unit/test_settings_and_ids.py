from __future__ import annotations

import math
import time
from types import SimpleNamespace

import pytest

from chit import ids as ids_module
from chit.errors import ConfigError
from chit.ids import encode, is_job_id, new_job_id, new_job_ids
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


def test_settings_rendered_as_chit_variables_read_back_the_same() -> None:
    s = Settings(
        database_url="sqlite:///x.db",
        lease_seconds=0.125,
        api_keys=("acme:read:k1", "k2"),
        queues=("high", "default"),
        app="mod:queue",
        retention="7d",
    )
    assert Settings.from_env(s.to_env()) == s
    assert Settings.from_env(Settings().to_env()) == Settings()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CHIT_LEASE_SECONDS": "abc"}, "CHIT_LEASE_SECONDS has value 'abc': not a number"),
        ({"CHIT_MAX_ATTEMPTS": "2.5"}, "CHIT_MAX_ATTEMPTS has value '2.5': not a whole number"),
        ({"CHIT_MAX_ATTEMPTS": "0"}, "CHIT_MAX_ATTEMPTS"),
        ({"CHIT_PORT": "70000"}, "CHIT_PORT"),
        ({"CHIT_DATABASE_URL": "mysql://x"}, "CHIT_DATABASE_URL"),
        ({"CHIT_SQLITE_SYNCHRONOUS": "sometimes"}, "CHIT_SQLITE_SYNCHRONOUS"),
        ({"CHIT_REDIS_WAIT_AOF": "maybe"}, "CHIT_REDIS_WAIT_AOF has value 'maybe': use 1 or 0"),
        ({"CHIT_LEASE_SECONDS": "nan"}, "CHIT_LEASE_SECONDS has value nan: not a finite number"),
        ({"CHIT_LEASE_SECONDS": "inf"}, "CHIT_LEASE_SECONDS has value inf: not a finite"),
        ({"CHIT_LEASE_SECONDS": "1e300"}, "CHIT_LEASE_SECONDS .* at most 315360000 seconds"),
        ({"CHIT_BACKOFF_BASE": "nan"}, "CHIT_BACKOFF_BASE has value nan"),
        ({"CHIT_BACKOFF_MAX": "infinity"}, "CHIT_BACKOFF_MAX has value inf"),
        ({"CHIT_POLL_INTERVAL": "-inf"}, "CHIT_POLL_INTERVAL has value -inf"),
        ({"CHIT_GRACE_SECONDS": "nan"}, "CHIT_GRACE_SECONDS has value nan: not a finite number"),
        ({"CHIT_GRACE_SECONDS": "inf"}, "CHIT_GRACE_SECONDS has value inf"),
        ({"CHIT_GRACE_SECONDS": "-1"}, "CHIT_GRACE_SECONDS has value -1.0: must be >= 0"),
        ({"CHIT_RESULT_INLINE_BYTES": "-1"}, "CHIT_RESULT_INLINE_BYTES has value -1: must be >= 0"),
        ({"CHIT_MAX_ATTEMPTS": "1001"}, "CHIT_MAX_ATTEMPTS has value 1001: must be at most 1000"),
        ({"CHIT_RETENTION": "99999999999d"}, "CHIT_RETENTION .* at most 10 years"),
        ({"CHIT_FREE_HAND_BACKS": "-1"}, "CHIT_FREE_HAND_BACKS has value -1: must be 0 to 1000"),
        ({"CHIT_FREE_HAND_BACKS": "2.5"}, "CHIT_FREE_HAND_BACKS has value '2.5': not a whole"),
    ],
)
def test_a_bad_value_fails_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_env(env)


@pytest.mark.parametrize(
    "field", ["lease_seconds", "backoff_base", "backoff_max", "poll_interval", "grace_seconds"]
)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_setting_made_in_code_must_be_finite_too(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=f"CHIT_{field.upper()} has value"):
        Settings(**{field: value}).validate()
    with pytest.raises(ConfigError, match=f"CHIT_{field.upper()} has value"):
        Settings().replace(**{field: value})


def test_zero_grace_and_zero_inline_bytes_are_allowed() -> None:
    s = Settings.from_env({"CHIT_GRACE_SECONDS": "0", "CHIT_RESULT_INLINE_BYTES": "0"})
    assert (s.grace_seconds, s.result_inline_bytes) == (0, 0)


def test_ids_are_crockford_base32_digits_most_significant_first() -> None:
    alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
    for value in (0, 1, 31, 32, 2**130 - 1, 0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0 >> 2):
        digits = "".join(alphabet[(value >> (5 * i)) & 31] for i in reversed(range(26)))
        assert encode(value) == digits
    assert encode(2**130 - 1) == "z" * 26 and encode(0) == "0" * 26


def test_job_ids_are_time_ordered_and_unique() -> None:
    ids = [new_job_id() for _ in range(5_000)] + new_job_ids(5_000) + [new_job_id()]
    ids += new_job_ids(1) + new_job_ids(0) + new_job_ids(3)
    assert ids == sorted(ids) and len(ids) == 10_005
    assert len(set(ids)) == len(ids)
    assert all(is_job_id(i) for i in ids[:100])
    assert not is_job_id("../etc/passwd")


def test_job_ids_start_with_their_creation_time_in_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    ids = new_job_ids(1000)
    after = time.time_ns() // 1_000_000
    alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
    for job_id in (ids[0], ids[-1]):
        value = 0
        for digit in job_id:
            value = value * 32 + alphabet.index(digit)
        assert before <= value >> 80 <= after


def test_a_batch_of_ids_counting_up_is_written_as_each_value_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch shares the digits above its low 40 bits while they stay the same:
    ids counting up across that boundary (and a carry through every digit)
    still read as their values, one by one."""
    for last in ((1 << 126) + (1 << 40) - 3, (1 << 128) - 3, 5 << 80):
        # A clock far behind the last id: each new one is the last plus one.
        monkeypatch.setattr(ids_module, "_last", last)
        monkeypatch.setattr(ids_module, "time", SimpleNamespace(time_ns=lambda: 0))
        assert new_job_ids(6) == [encode(last + n) for n in range(1, 7)]
    monkeypatch.undo()
    batch = new_job_ids(2_000)  # random low digits first, then counting up
    assert batch == sorted(set(batch))
