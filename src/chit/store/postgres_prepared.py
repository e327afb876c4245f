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
    from psycopg.adapt import PyFormat, Transformer

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
        self._count = sql.count("%s")
        # Parameters go as text, typed by the statement's own casts: a dumper
        # that picks int2 for one call and int8 for the next cannot clash with
        # the types the statement was prepared with.
        self._formats = [PyFormat.TEXT] * self._count
        self._prepared_on: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()

    def row(self, conn: psycopg.Connection[Any], params: Sequence[Any]) -> tuple[Any, ...]:
        """The statement's one row (a tuple), on `conn`, an autocommit connection."""
        tx = Transformer.from_context(conn)
        values = tx.dump_sequence(params, self._formats)
        try:
            result = self._run(conn, values)
        except psycopg.Error as e:
            if e.sqlstate != _NO_SUCH_STATEMENT:
                raise
            self._prepared_on.discard(conn)
            result = self._run(conn, values)
        tx.set_pgresult(result)
        return tx.load_row(0, tuple)

    def _run(self, conn: psycopg.Connection[Any], values: Sequence[Any]) -> pq.abc.PGresult:
        pgconn = conn.pgconn
        if conn not in self._prepared_on:
            pgconn.send_prepare(self.name, self.sql)
            _checked(conn, conn.wait(generators.execute(pgconn)), pq.ExecStatus.COMMAND_OK)
            self._prepared_on.add(conn)
        pgconn.send_query_prepared(self.name, values)
        return _checked(conn, conn.wait(generators.execute(pgconn)), pq.ExecStatus.TUPLES_OK)


def _checked(
    conn: psycopg.Connection[Any], results: list[pq.abc.PGresult], expected: pq.ExecStatus
) -> pq.abc.PGresult:
    result = results[-1]
    if result.status != expected:
        raise psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
    return result
