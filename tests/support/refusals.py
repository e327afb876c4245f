"""Requests refused before anything is stored: a queue with one task `t` on a
fresh SQLite file, the check that `enqueue` and `enqueue_many` both refuse a
field, and what the store holds afterwards (nothing, when refused)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import chit
from chit.errors import InvalidRequest
from chit.jobs import JobFilter
from chit.queue import JobRequest
from chit.settings import Settings


@contextmanager
def one_task_queue(tmp_path: Path) -> Iterator[chit.Queue]:
    q = chit.Queue(settings=Settings(database_url=f"sqlite:///{tmp_path / 'q.db'}"))
    q.task("t")(lambda job, body: None)
    try:
        yield q
    finally:
        q.close()


def stored(q: chit.Queue) -> list[str]:
    return [j.id for j in q.store.list(JobFilter(), limit=100).jobs]


def refused_both_ways(
    queue: chit.Queue, fields: dict[str, Any], message: str, in_a_batch: str | None = None
) -> None:
    """`enqueue("t", **fields)` raises InvalidRequest matching `message`, and so
    does `enqueue_many` with a good request before it (matching `in_a_batch`,
    `message` by default)."""
    with pytest.raises(InvalidRequest, match=message):
        queue.enqueue("t", **fields)
    with pytest.raises(InvalidRequest, match=in_a_batch or message):
        queue.enqueue_many([JobRequest("t"), JobRequest("t", **fields)])
