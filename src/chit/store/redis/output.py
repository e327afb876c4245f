"""A job's output on Redis (`Output`; output.lua): one call per batch written
or page read, and a feed on the channel those writes publish on."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import redis
from redis.cluster import RedisCluster

from chit.jobs import OutputItem
from chit.store.capabilities import Output
from chit.store.feeds import OutputFeed
from chit.store.redis.codec import clock, loads, when
from chit.store.redis.core import RedisCore, tenant_arg

log = logging.getLogger("chit.api")


class OutputRedis(RedisCore, Output):
    def append_output(
        self,
        job_id: str,
        lease_token: str,
        values: Sequence[str],
        size: int,
        now: datetime | None = None,
    ) -> int | None:
        last = self.redis.fcall(
            "chit_append_output", clock(now), job_id, lease_token, size, *values
        )
        return None if last is None else int(last)

    def output_used(self, job_id: str) -> tuple[int, int]:
        out = self.redis.fcall_ro("chit_output_used", job_id, "")
        return (0, 0) if not out else (int(out[0]), int(out[1]))

    def output(
        self, job_id: str, after: int = 0, limit: int = 100, tenant: str | None = None
    ) -> list[OutputItem] | None:
        after = max(after, 0)  # seqs start at 1: nothing comes before it
        out = self.redis.fcall_ro("chit_output", job_id, after, limit, tenant_arg(tenant))
        if out is None:
            return None
        items = []
        for n, item in enumerate(out, start=after + 1):
            attempt, at, data = str(item).split("|", 2)
            moment = when(at)
            assert moment is not None
            items.append(OutputItem(n, int(attempt), loads(data), moment))
        return items

    def listen_to(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            self.redis.fcall("chit_listen", *job_ids)

    def output_heads(self, job_ids: Sequence[str]) -> dict[str, int]:
        if not job_ids:
            return {}
        out = self.redis.fcall_ro("chit_output_heads", *job_ids)
        return {out[i]: int(out[i + 1]) for i in range(0, len(out), 2)}

    def output_feed(self) -> RedisFeed:
        return RedisFeed(self.redis.client, f"{self.prefix}:out")


class RedisFeed(OutputFeed):
    """SUBSCRIBE on the channel `chit_append_output` publishes each batch's job id on."""

    def __init__(self, client: redis.Redis | RedisCluster, channel: str) -> None:
        self.client = client
        self.channel = channel
        self._pubsub: Any = None

    def wait(self, timeout: float) -> frozenset[str] | None:
        try:
            if self._pubsub is None:
                self._pubsub = self.client.pubsub(ignore_subscribe_messages=True)
                self._pubsub.subscribe(self.channel)
                return None  # anything may have been written while nobody listened
            ids: set[str] = set()
            message = self._pubsub.get_message(timeout=timeout)
            while message is not None:
                if message.get("type") == "message":
                    ids.add(str(message["data"]))
                message = self._pubsub.get_message(timeout=0)
            return frozenset(ids)
        except redis.RedisError as e:
            log.warning("output feed: Redis: %s", e)
            self.close()
            time.sleep(min(timeout, 1.0))
            return None

    def close(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(redis.RedisError):
                self._pubsub.close()
            self._pubsub = None
