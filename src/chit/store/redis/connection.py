"""Reaching the Redis server: the client, the durability chit insists on, the
function library (loaded by `migrate`, loaded again when a server lacks it),
and every error as one StoreError line that names the server, never its password."""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisClusterUnreachableError
from redis.retry import Retry

from chit.errors import DatabaseRefused, StoreError
from chit.store.redis.wire import Wire

try:  # the C parser, when installed, packs a command in 3 µs where redis-py takes 20
    import hiredis
except ImportError:  # pragma: no cover - the hiredis extra is optional
    hiredis = None  # type: ignore[assignment]

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
    "output.lua",
)
_FILES = importlib.resources.files("chit.store.redis")
LIBRARY = "\n".join(_FILES.joinpath(part).read_text() for part in PARTS)
# The library's VERSION: what `migrate` loads and `schema_version` reports.
VERSION = int(LIBRARY.split("local VERSION = ", 1)[1].split("\n", 1)[0])
DEFAULT_PREFIX = "{chit}"
# How long an enqueue waits for the AOF fsync under CHIT_REDIS_WAIT_AOF
# (everysec fsyncs each second; a slow disk may take longer).
AOF_WAIT_MS = 5000
# redis-py's pool size before version 8 made it 100.
_UNBOUNDED_POOL = 2**31


# Schemes naming a Redis Cluster (any of its nodes): redis-py's cluster client
# finds the node that owns the prefix's slot and follows it when it moves.
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


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
    """A thread-safe client and the calls the store makes on it: `send` on
    connections of its own, the rest (blocking waits, pub/sub, a cluster's
    calls) through redis-py's pool."""

    def __init__(self, url: str, prefix: str | None = None) -> None:
        self.name = server_name(url)
        url, from_url = _take_prefix(url)
        prefix = prefix or from_url or DEFAULT_PREFIX
        if "{" not in prefix or "}" not in prefix:
            raise StoreError(f"the Redis key prefix {prefix!r} needs a hash tag, e.g. '{{chit}}'")
        self.prefix = prefix
        self.wait_aof = False
        self._idle: list[Wire] = []  # `send`'s connections, each with every reply read
        self._pid = os.getpid()
        self._closed = False
        scheme = urlsplit(url).scheme
        self.cluster = scheme in CLUSTER_SCHEMES
        # redis-py 8 bounds a pool at 100 connections, where 7 did not: a worker
        # of more threads, or an API under load, would fail its 101st call at
        # once. Connections are opened only as calls need them; a URL's own
        # max_connections bounds the pool (blocking waits, pub/sub, a cluster's
        # calls), not `send`'s, of which there are as many as calls at once.
        options: dict[str, Any] = {
            "decode_responses": True,
            "socket_connect_timeout": 5,
            "max_connections": _UNBOUNDED_POOL,
        }
        self.client: redis.Redis | RedisCluster
        try:
            if self.cluster:
                url = urlunsplit(urlsplit(url)._replace(scheme=CLUSTER_SCHEMES[scheme]))
                # redis-py's cluster client sends a call again, up to 10 times,
                # when its connection breaks or times out, though the server may
                # have run it: a claim run twice starts jobs nobody runs. Once,
                # as on one server; a MOVED or ASK is still followed.
                options["retry"] = Retry(NoBackoff(), 0)
                self.client = self.run(lambda: RedisCluster.from_url(url, **options))
            else:
                self.client = redis.Redis.from_url(url, health_check_interval=30, **options)
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
        except RedisClusterUnreachableError:
            raise StoreError(f"cannot reach the Redis Cluster at {self.name}") from None
        except RedisClusterException as e:
            # Not a cluster node (cluster mode off): no wait mends that.
            raise DatabaseRefused(f"Redis at {self.name}: {str(e).rsplit(': ', 1)[-1]}") from None

    def send(self, *commands: tuple[Any, ...]) -> list[Any]:
        """Commands written in one send on one connection, and their replies
        read in order (an error reply raised once all are read). This skips
        redis-py's per-command layer (events, metrics, a packer in Python),
        which cost a one-job call about 60 µs of CPU, and with the C parser its
        send and read too (wire.py). Like that layer with chit's client (no
        retries), a call whose connection breaks is not sent again, since the
        server may have run it. A cluster's calls go through redis-py's
        cluster client, which follows a slot that moves."""
        if self.cluster:
            if len(commands) == 1:
                return [self.client.execute_command(*commands[0])]
            pipe = self.node().pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            return list(pipe.execute())
        wire = self._take()
        try:
            if hiredis is not None:
                packed = b"".join([hiredis.pack_command(c) for c in commands])
                replies = wire.exchange(packed, len(commands))
            else:
                replies = _through_redis_py(wire, commands)
        finally:
            self._give_back(wire)
        # Raised once every reply is read, so none is left on the connection.
        # Not only ResponseErrors: a loading server's reply is a ConnectionError.
        errors = [r for r in replies if isinstance(r, redis.RedisError)]
        if errors:
            raise errors[0]
        return replies

    def _take(self) -> Wire:
        """A connection for one `send`: an idle one of this object's own, else
        a new one. Not redis-py's pool: its take and give back (a lock, three
        metrics, an event) cost an enqueue 8 µs of CPU, and connections held
        outside it would count against its bound. Like the pool, a connection
        with something to read (the server closed it: a restart, a timeout) is
        opened again before anything is sent on it. A list's pop and append are
        atomic, so threads share it without a lock."""
        if self._pid != os.getpid():  # the parent's sockets are not this process's
            self._idle, self._pid = [], os.getpid()
        try:
            wire = self._idle.pop()
        except IndexError:
            pool = self.node().connection_pool  # not a cluster's: its calls take another way
            return Wire(pool.connection_class(**pool.connection_kwargs))
        # One closed by a failed call stays closed: `send` opens it, once.
        if wire.is_open:
            try:
                if wire.stale():
                    wire.close()
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                wire.close()
        return wire

    def _give_back(self, wire: Wire) -> None:
        if self._closed or self._pid != os.getpid():
            wire.close()
            return
        self._idle.append(wire)
        if self._closed:  # `close` ran between the check and the append
            self._close_idle()

    def _close_idle(self) -> None:
        while True:
            try:
                wire = self._idle.pop()
            except IndexError:
                return
            wire.close()

    def fcall(self, function: str, *args: Any) -> Any:
        """Call a library function, loading the library first if the server
        lacks it (a restart without it, a promoted replica)."""
        return self._fcall("FCALL", function, args)

    def fcall_ro(self, function: str, *args: Any) -> Any:
        return self._fcall("FCALL_RO", function, args)

    def _fcall(self, verb: str, function: str, args: tuple[Any, ...]) -> Any:
        command = (verb, function, 1, self.prefix, *args)
        try:
            return self.run(lambda: self.send(command)[0])
        except StoreError as e:
            if "Function not found" not in str(e):
                raise
        self.load()
        return self.run(lambda: self.send(command)[0])

    def fcall_synced(self, function: str, *args: Any) -> Any:
        """`fcall`, and with `wait_aof` on, not returned before the server's AOF
        holds the write on disk: WAITAOF counts the writes of the connection
        it is sent on, so both go down one connection, in one round trip."""
        if not self.wait_aof:
            return self.fcall(function, *args)

        def call() -> Any:
            out, (synced, _) = self.send(
                ("FCALL", function, 1, self.prefix, *args), ("WAITAOF", 1, 0, AOF_WAIT_MS)
            )
            if not synced:
                raise StoreError(
                    f"Redis at {self.name} did not fsync its AOF within {AOF_WAIT_MS} ms"
                    " (CHIT_REDIS_WAIT_AOF): the write may be lost in a crash"
                )
            return out

        try:
            return self.run(call)
        except StoreError as e:
            if "Function not found" not in str(e):
                raise
        self.load()
        return self.run(call)

    def check_wait_aof(self) -> None:
        """Refuse `wait_aof` where the server has no WAITAOF (before Redis 7.2)."""
        try:
            self.run(lambda: self.client.execute_command("WAITAOF", 0, 0, 0))  # returns at once
        except StoreError as e:
            if "unknown command" not in str(e):
                raise
            raise DatabaseRefused(
                f"Redis at {self.name} has no WAITAOF (Redis 7.2+, Valkey 7.2+):"
                " CHIT_REDIS_WAIT_AOF=1 needs it; upgrade the server or unset it"
            ) from None

    def node(self) -> redis.Redis:
        """The client of the server that holds the keys (in a cluster, the node
        of their hash tag): where a pipeline of commands on them goes."""
        client = self.client
        if isinstance(client, RedisCluster):
            node: redis.Redis = client.get_node_from_key(self.prefix).redis_connection
            return node
        return client

    def load(self) -> None:
        self.run(lambda: self.client.function_load(LIBRARY, replace=True))

    def time(self) -> tuple[int, int]:
        """The server's TIME (seconds, microseconds); in a cluster, the clock of
        the node that runs the functions, as they read their own."""
        client = self.client
        if isinstance(client, RedisCluster):
            node = client.get_node_from_key(self.prefix)
            return self.run(lambda: client.time(target_nodes=node))
        return self.run(client.time)

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

        if isinstance(self.client, RedisCluster):
            # Each primary may come to own the prefix's slot; a cluster client
            # never writes to a replica, so no replica check.
            for node in self.run(self.client.get_primaries):
                sections = self.run(lambda n=node: _sections(n))  # type: ignore[misc]
                self._check_durability(node.name, *sections)
            return
        persistence, memory, replication = self.run(read)
        self._check_durability(self.name, persistence, memory, replication)

    def _check_durability(
        self,
        name: str,
        persistence: dict[str, Any],
        memory: dict[str, Any],
        replication: dict[str, Any] | None = None,
    ) -> None:
        if not int(persistence.get("aof_enabled", 0)):
            raise DatabaseRefused(
                f"Redis at {name} has appendonly no: chit needs appendonly yes (CONFIG SET"
                " appendonly yes, and in redis.conf) so acknowledged jobs survive a restart"
            )
        policy = memory.get("maxmemory_policy", "")
        if policy != "noeviction":
            raise DatabaseRefused(
                f"Redis at {name} has maxmemory-policy {policy}: chit needs"
                " maxmemory-policy noeviction, or Redis may evict jobs"
            )
        if replication is not None and replication.get("role") == "slave":
            raise DatabaseRefused(f"Redis at {name} is a replica: point chit at the primary")

    def close(self) -> None:
        self._closed = True  # a call still under way closes its connection after
        self._close_idle()
        self.client.close()
        if isinstance(self.client, redis.Redis):
            self.client.connection_pool.disconnect()


def _through_redis_py(wire: Wire, commands: tuple[tuple[Any, ...], ...]) -> list[Any]:
    """`send` without the C parser: redis-py packs, sends and reads, each error
    reply returned as its exception, as `Wire.exchange` returns it."""
    conn = wire.conn
    replies: list[Any] = []
    try:
        conn.send_packed_command(conn.pack_commands(commands))
        for _ in commands:
            try:
                replies.append(conn.read_response())
            except redis.ResponseError as e:
                replies.append(e)
    except BaseException:
        wire.close()  # broken, or a reply may be left unread on it
        raise
    return replies


def _sections(node: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A cluster node's persistence and memory sections."""
    client = node.redis_connection
    return client.info("persistence"), client.info("memory")
