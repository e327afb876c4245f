from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import chit
from chit.settings import Settings


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[chit.Queue]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'chit.db'}",
        backoff_base=0.001,
        backoff_max=0.002,
        lease_seconds=30,
        concurrency=4,
    )
    q = chit.Queue(settings=settings)
    yield q
    q.close()
