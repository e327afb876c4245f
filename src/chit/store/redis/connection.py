"""Reaching the Redis server: the client, the durability chit insists on, the
function library (loaded by `migrate`, loaded again when a server lacks it),
and every error as one StoreError line that names the server, never its password."""

from __future__ import annotations

import importlib.resources
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis

from chit.errors import DatabaseRefused, StoreError

T = TypeVar("T")

# The library's parts, in order: chit.lua (the helpers the others use), the
# core contract's, then each capability's.
PARTS = (
    "chit.lua",
    "waits.lua",
    "enqueue.lua",
    "lifecycle.lua",
    "operating.lua",
    "flow.lua",
    "workflows.lua",
    "reports.lua",
    "access.lua",
    "schedules.lua",
    "fleet.lua",
)
_FILES = importlib.resources.files("chit.store.redis")
LIBRARY = "\n".join(_FILES.joinpath(part).read_text() for part in PARTS)
# The library's VERSION: what `migrate` loads and `schema_version` reports.
VERSION = int(LIBRARY.split("local VERSION = ", 1)[1].split("\n", 1)[0])
DEFAULT_PREFIX = "{chit}"


def server_name(url: str) -> str:
    """The server a URL names, without user or password: host:port, or the socket path."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return parts.path
    host = parts.hostname or "localhost"
    return f"{host}:{parts.port or 6379}"


def _take_prefix(url: str) -> tuple[str, str | None]:
    """The URL without its `prefix` query parameter (chit's, not redis-py's), and that."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    prefixes = [v for k, v in pairs if k == "prefix"]
    if not prefixes:
        return url, None
    query = urlencode([(k, v) for k, v in pairs if k != "prefix"])
    return urlunsplit(parts._replace(query=query)), prefixes[-1]


class Connection:
    """A thread-safe client (redis-py's pool) and the calls the store makes on it."""

    def __init__(self, url: str, prefix: str | None = None) -> None:
        self.name = server_name(url)
        url, from_url = _take_prefix(url)
        prefix = prefix or from_url or DEFAULT_PREFIX
        if "{" not in prefix or "}" not in prefix:
            raise StoreError(f"the Redis key prefix {prefix!r} needs a hash tag, e.g. '{{chit}}'")
        self.prefix = prefix
        try:
            self.client = redis.Redis.from_url(
                url, decode_responses=True, socket_connect_timeout=5, health_check_interval=30
            )
        except ValueError as e:
            raise StoreError(f"bad Redis URL for {self.name}: {e}") from None

    def run(self, call: Callable[[], T]) -> T:
        """Run one call, its errors made StoreErrors."""
        try:
            return call()
        except redis.AuthenticationError as e:
            # Refused, not unreachable: a worker does not wait for credentials to mend.
            raise DatabaseRefused(f"Redis at {self.name} refused the credentials: {e}") from None
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise StoreError(f"cannot reach Redis at {self.name}: {e}") from None
        except redis.ResponseError as e:
            raise StoreError(f"Redis at {self.name}: {e}") from None
        except redis.RedisError as e:
            raise StoreError(f"Redis at {self.name}: {e}") from None

    def fcall(self, function: str, *args: Any) -> Any:
        """Call a library function, loading the library first if the server
        lacks it (a restart without it, a promoted replica)."""
        try:
            return self.run(lambda: self.client.fcall(function, 1, self.prefix, *args))
        except StoreError as e:
            if "Function not found" not in str(e):
                raise
        self.load()
        return self.run(lambda: self.client.fcall(function, 1, self.prefix, *args))

    def fcall_ro(self, function: str, *args: Any) -> Any:
        try:
            return self.run(lambda: self.client.fcall_ro(function, 1, self.prefix, *args))
        except StoreError as e:
            if "Function not found" not in str(e):
                raise
        self.load()
        return self.run(lambda: self.client.fcall_ro(function, 1, self.prefix, *args))

    def load(self) -> None:
        self.run(lambda: self.client.function_load(LIBRARY, replace=True))

    def loaded_version(self) -> int:
        """The version of the library the server has; 0 when it has none."""
        try:
            return int(self.run(lambda: self.client.fcall_ro("chit_version_ro", 1, self.prefix)))
        except StoreError as e:
            if "Function not found" in str(e):
                return 0
            raise

    def check_durability(self) -> None:
        """Refuse a server that may lose or evict acknowledged jobs: AOF off, or
        an eviction policy other than noeviction, a replica. One line naming the
        setting; DatabaseRefused, as no wait mends it."""

        def read() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
            pipe = self.client.pipeline(transaction=False)
            pipe.info("persistence")
            pipe.info("memory")
            pipe.info("replication")
            persistence, memory, replication = pipe.execute()
            return persistence, memory, replication

        persistence, memory, replication = self.run(read)
        if not int(persistence.get("aof_enabled", 0)):
            raise DatabaseRefused(
                f"Redis at {self.name} has appendonly no: chit needs appendonly yes (CONFIG SET"
                " appendonly yes, and in redis.conf) so acknowledged jobs survive a restart"
            )
        policy = memory.get("maxmemory_policy", "")
        if policy != "noeviction":
            raise DatabaseRefused(
                f"Redis at {self.name} has maxmemory-policy {policy}: chit needs"
                " maxmemory-policy noeviction, or Redis may evict jobs"
            )
        if replication.get("role") == "slave":
            raise DatabaseRefused(f"Redis at {self.name} is a replica: point chit at the primary")

    def close(self) -> None:
        self.client.close()
        self.client.connection_pool.disconnect()
