"""One statement run on a pooled connection's libpq handle, prepared on each
connection the first time it runs there.

What it is for: the one-job enqueue, a statement whose round trip is the whole
call. psycopg's cursor costs that call about 70 µs of client CPU on a 2-core
test machine (a cursor, its row maker, the prepared-statement cache's
bookkeeping), as much as the libpq round trip under it. This sends the same
prepared statement through the same libpq handle and waits for it the way
psycopg does (the connection's `wait`, which lets other threads run), and
reads the row with psycopg's own loaders; errors are psycopg's errors."""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from typing import Any

from chit.extras import needs

with needs("postgres", "a postgresql:// database needs psycopg"):
    import psycopg
    from psycopg import generators, pq
    from psycopg.abc import PQGen
    from psycopg.adapt import PyFormat, Transformer

AnyConnection = psycopg.Connection[Any] | psycopg.AsyncConnection[Any]

# SQLSTATE 26000: the server has no statement by that name (a session reset
# under us, say); prepared again, once.
_NO_SUCH_STATEMENT = "26000"


def numbered(sql: str) -> str:
    """A statement with psycopg's `%s` placeholders, with libpq's `$1`, `$2`, ... instead."""
    if re.search(r"%(?!s)", sql):
        raise ValueError("only %s placeholders can be numbered")
    parts = sql.split("%s")
    return "".join(part + (f"${i}" if i < len(parts) else "") for i, part in enumerate(parts, 1))


class PreparedStatement:
    """A statement of `%s` parameters that returns one row, run by `row`."""

    def __init__(self, name: str, sql: str) -> None:
        self.name = name.encode()
        self.sql = numbered(sql).encode()
        # Parameters go as text, typed by the statement's own casts: a dumper
        # that picks int2 for one call and int8 for the next cannot clash with
        # the types the statement was prepared with.
        self._formats = [PyFormat.TEXT] * sql.count("%s")
        self._prepared_on: weakref.WeakSet[AnyConnection] = weakref.WeakSet()

    def row(self, conn: psycopg.Connection[Any], params: Sequence[Any]) -> tuple[Any, ...]:
        """The statement's one row (a tuple), on `conn`, an autocommit connection."""
        tx = Transformer.from_context(conn)
        values = tx.dump_sequence(params, self._formats)
        tx.set_pgresult(conn.wait(self._run(conn, values)))
        return tx.load_row(0, tuple)

    async def arow(
        self, conn: psycopg.AsyncConnection[Any], params: Sequence[Any]
    ) -> tuple[Any, ...]:
        """`row` on an asyncio connection."""
        tx = Transformer.from_context(conn)
        values = tx.dump_sequence(params, self._formats)
        tx.set_pgresult(await conn.wait(self._run(conn, values)))
        return tx.load_row(0, tuple)

    def _run(self, conn: AnyConnection, values: Sequence[Any]) -> PQGen[pq.abc.PGresult]:
        """The round trips, as psycopg's generators: either connection's `wait` runs them."""
        pgconn = conn.pgconn
        for attempt in (1, 2):
            if conn not in self._prepared_on:
                pgconn.send_prepare(self.name, self.sql)
                prepared = (yield from generators.execute(pgconn))[-1]
                if prepared.status != pq.ExecStatus.COMMAND_OK:
                    raise _error(conn, prepared)
                self._prepared_on.add(conn)
            pgconn.send_query_prepared(self.name, values)
            result = (yield from generators.execute(pgconn))[-1]
            if result.status == pq.ExecStatus.TUPLES_OK:
                return result
            error = _error(conn, result)
            if error.sqlstate != _NO_SUCH_STATEMENT or attempt == 2:
                raise error
            self._prepared_on.discard(conn)
        raise AssertionError("unreachable")


def _error(conn: AnyConnection, result: pq.abc.PGresult) -> psycopg.Error:
    return psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
