"""Timeouts and pool settings refused before anything is stored or started:
a task's timeout, enqueue's, JobRequest's, CHIT_POOL and the child limits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import chit
from chit.bounds import TIMEOUT_MAX
from chit.errors import ConfigError
from chit.settings import Settings
from support.refusals import one_task_queue, refused_both_ways, stored

BAD_TIMEOUTS = {
    "zero": 0,
    "zero-float": 0.0,
    "negative": -1,
    "bool": True,
    "text": "30",
    "nan": float("nan"),
    "inf": float("inf"),
    "over-30-days": TIMEOUT_MAX + 1,
    "absurd": 10**12,
}


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[chit.Queue]:
    with one_task_queue(tmp_path) as q:
        yield q


@pytest.mark.parametrize("timeout", BAD_TIMEOUTS.values(), ids=BAD_TIMEOUTS.keys())
def test_a_bad_timeout_on_enqueue_is_refused_and_nothing_is_stored(
    queue: chit.Queue, timeout: object
) -> None:
    refused_both_ways(
        queue, {"timeout": timeout}, "timeout must be a number of seconds above 0", "timeout"
    )
    assert stored(queue) == []


@pytest.mark.parametrize("timeout", BAD_TIMEOUTS.values(), ids=BAD_TIMEOUTS.keys())
def test_a_bad_task_timeout_is_refused_when_registered(timeout: object) -> None:
    with pytest.raises(ConfigError, match="task 'x': timeout must be"):
        chit.Queue().task("x", timeout=timeout)  # type: ignore[arg-type]


def test_good_timeouts_are_kept_as_seconds(queue: chit.Queue) -> None:
    ids = [queue.enqueue("t", timeout=t).id for t in (0.001, 2, TIMEOUT_MAX)]
    assert [queue.store.get(i).timeout for i in ids] == [0.001, 2.0, float(TIMEOUT_MAX)]  # type: ignore[union-attr]


BAD_POOL_SETTINGS = {
    "CHIT_POOL=fork": ({"CHIT_POOL": "fork"}, "CHIT_POOL has value 'fork': use thread or process"),
    "CHIT_MAX_JOBS_PER_CHILD=-1": (
        {"CHIT_MAX_JOBS_PER_CHILD": "-1"},
        "CHIT_MAX_JOBS_PER_CHILD has value -1: must be >= 0",
    ),
    "CHIT_MAX_JOBS_PER_CHILD=lots": (
        {"CHIT_MAX_JOBS_PER_CHILD": "lots"},
        "CHIT_MAX_JOBS_PER_CHILD has value 'lots': not a whole number",
    ),
    "CHIT_MAX_MEMORY_PER_CHILD=-5": (
        {"CHIT_MAX_MEMORY_PER_CHILD": "-5"},
        "CHIT_MAX_MEMORY_PER_CHILD has value -5: must be >= 0",
    ),
    "CHIT_MAX_MEMORY_PER_CHILD=1.5": (
        {"CHIT_MAX_MEMORY_PER_CHILD": "1.5"},
        "CHIT_MAX_MEMORY_PER_CHILD has value '1.5': not a whole number",
    ),
}


@pytest.mark.parametrize("env, message", BAD_POOL_SETTINGS.values(), ids=BAD_POOL_SETTINGS.keys())
def test_a_bad_pool_setting_names_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        Settings.from_env(env)
    assert str(refused.value).startswith(message)


def test_pool_settings_read_from_the_environment() -> None:
    env = {
        "CHIT_POOL": "process",
        "CHIT_MAX_JOBS_PER_CHILD": "5",
        "CHIT_MAX_MEMORY_PER_CHILD": "200",
    }
    settings = Settings.from_env(env)
    assert (settings.pool, settings.max_jobs_per_child, settings.max_memory_per_child) == (
        "process",
        5,
        200,
    )
    assert Settings.from_env({}).pool == "thread"
