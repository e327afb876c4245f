"""Job stores. `open_store(settings)` picks the backend from the database URL:
sqlite:, postgresql: (or postgres:), redis: (or rediss:, unix:, and
redis+cluster: or rediss+cluster: for a Redis Cluster)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chit.store.base import Store
from chit.store.capabilities import (
    ApiKeys,
    FlowControl,
    FullStore,
    Reports,
    Schedules,
    Secrets,
    Sessions,
    Workflows,
)

if TYPE_CHECKING:
    from chit.settings import Settings
    from chit.store.sql import SQLStore

__all__ = [
    "ApiKeys",
    "FlowControl",
    "FullStore",
    "Reports",
    "Schedules",
    "Secrets",
    "Sessions",
    "Store",
    "Workflows",
    "open_store",
]


def open_store(settings: Settings) -> FullStore:
    url = settings.database_url
    if url.startswith("sqlite:"):
        from chit.store.sqlite import SQLiteStore, path_from_url

        store: SQLStore = SQLiteStore(
            path_from_url(url),
            synchronous=settings.sqlite_synchronous,
            result_inline_bytes=settings.result_inline_bytes,
        )
    elif url.startswith(("postgresql:", "postgres:")):
        from chit.store.postgres import PostgresStore

        store = PostgresStore(
            url,
            result_inline_bytes=settings.result_inline_bytes,
            pool_size=settings.concurrency + 3,
        )
    elif url.startswith(("redis:", "rediss:", "redis+cluster:", "rediss+cluster:", "unix:")):
        from chit.store.redis import RedisStore

        redis_store = RedisStore(
            url,
            result_inline_bytes=settings.result_inline_bytes,
            wait_aof=settings.redis_wait_aof,
        )
        redis_store.free_hand_backs = settings.free_hand_backs
        return redis_store
    else:
        raise ValueError(f"unsupported database URL {url!r}")
    store.free_hand_backs = settings.free_hand_backs
    return store
