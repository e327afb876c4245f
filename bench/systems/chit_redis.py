"""chit on Redis: `chit worker` processes running noop_app, on the bench's
redis-server (AOF on, fsync every second, noeviction: what the store insists on)."""

from __future__ import annotations

from systems import CONCURRENCY, kind_limits
from systems.chit_sqlite import PREFETCH
from systems.chit_sqlite import Bench as SQLiteBench


class Bench(SQLiteBench):
    has_bulk = True

    def settings(self) -> str:
        return (
            f"`chit worker --concurrency {CONCURRENCY}` per process (threads; "
            f"`--prefetch {PREFETCH}`, the default); appendfsync everysec{kind_limits()}"
        )

    def seed(self, finished: int, queued: int, analyze: bool = False) -> None:
        raise NotImplementedError("chit-redis has no bulk seed: the growth steps skip it")
