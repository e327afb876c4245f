"""Reaching a PostgreSQL server: the first connection (`reach`), the pool's
check of a connection before it is handed out, and errors as one line that
names the server and never the password."""

from __future__ import annotations

import select
import time

from chit.errors import DatabaseRefused, StoreError
from chit.extras import needs

with needs("postgres", "a postgresql:// database needs psycopg"):
    import psycopg
    import psycopg.conninfo
    from psycopg import AsyncConnection, Connection
    from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed, PoolTimeout


def describe_url(url: str) -> str:
    """The server a URL names, for messages: its host and port, never the user,
    password or database (messages reach logs and terminals; issue 16)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error:
        return "PostgreSQL (unparsable URL)"
    host = info.get("host") or "localhost"
    port = f":{info['port']}" if info.get("port") else ""
    return f"PostgreSQL at {host}{port}"


def _summary(e: psycopg.Error) -> str:
    """The server's one-line message, without the SQL text or context lines
    psycopg's own message carries."""
    lines = str(e).strip().splitlines()
    return e.diag.message_primary or (lines[0] if lines else type(e).__name__)


def store_error(where: str, e: PoolClosed | PoolTimeout | psycopg.Error) -> StoreError:
    """A driver's or the pool's error as one line naming the server, never the password."""
    if isinstance(e, PoolClosed):
        return StoreError(f"this store for {where} is closed")
    if isinstance(e, PoolTimeout):
        return StoreError(
            f"no connection to {where}: the server is unreachable or every pooled"
            f" connection is busy ({e})"
        )
    if isinstance(e, psycopg.OperationalError):
        return StoreError(f"lost the connection to {where}: {_summary(e)}")
    if isinstance(e, psycopg.DataError):  # this value can never be stored: not worth a retry
        return StoreError(f"{where}: {_summary(e)}", transient=False)
    return StoreError(f"{where}: {_summary(e)}")


# How long a new store tries to reach its server before saying it cannot: a
# server that is starting refuses for a moment; one that is not there would
# otherwise hold the caller for the pool's whole timeout, behind multi-line
# warnings from the pool's background connector.
REACH_SECONDS = 3.0


# What a server that answered says when the URL itself is wrong: no waiting
# mends it. (libpq gives no SQLSTATE for a failed connection: its message it is.
# A server starting, shutting down or full says otherwise, and is waited for.)
_REFUSALS = (
    "does not exist",  # the database or the role
    "authentication failed",
    "no pg_hba.conf entry",
    "permission denied",
    "no password supplied",
)


def refused(e: psycopg.Error) -> bool:
    """Whether a failed connection was the server refusing this URL's database,
    user or password (not worth a retry) rather than a server away or starting."""
    return any(refusal in str(e) for refusal in _REFUSALS)


def reach(url: str, where: str, seconds: float) -> None:
    """One direct connection, retried for `seconds` while the server is away or
    starting; StoreError in one line (psycopg's own message's first line, never
    the password) if none succeeds; DatabaseRefused at once when the server
    refuses the URL's database or credentials."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            # connect_timeout is whole seconds, at least 2 for libpq to honour it.
            psycopg.connect(url, connect_timeout=max(2, round(seconds))).close()
            return
        except psycopg.Error as e:
            wrong = refused(e)
            if not wrong and time.monotonic() + 0.25 < deadline:
                time.sleep(0.25)
                continue
            reason = (str(e).strip().splitlines() or ["no answer"])[0]
            password = psycopg.conninfo.conninfo_to_dict(url).get("password")
            if password:
                reason = reason.replace(str(password), "***")
            if wrong:
                raise DatabaseRefused(
                    f"cannot connect to {where}: {reason}; check the URL's user, password"
                    " and database (`chit migrate` does not create the database)"
                ) from None
            raise StoreError(
                f"cannot connect to {where}: {reason}; is the server running and the URL "
                "(host, port, user, database) right?"
            ) from None


def check_connection(conn: Connection) -> None:
    """Raise if a pooled connection is dead, so the pool replaces it.

    An idle connection has nothing to read unless the server has spoken (a
    server that shuts down or ends the backend sends an error and closes the
    socket): so one with nothing to read is alive, with no round trip on the hot
    path, and one with something to read gets an empty query. A server that
    silently vanished is not caught here: the call fails with StoreError and the
    pool discards the connection."""
    if _has_spoken(conn):
        ConnectionPool.check_connection(conn)


async def acheck_connection(conn: AsyncConnection) -> None:
    """`check_connection` for aenqueue's async pool: no round trip on the hot path."""
    if _has_spoken(conn):
        await AsyncConnectionPool.check_connection(conn)


def _has_spoken(conn: Connection | AsyncConnection) -> bool:
    """Whether an idle connection has something to read (a select that never waits);
    OperationalError when it is closed or broken."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("connection is closed")
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    return bool(readable)
