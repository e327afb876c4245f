"""One connection of the store's own calls (`Connection.send`), written to and
read by chit itself: redis-py opens it (TCP, TLS or a unix socket; AUTH,
SELECT, the client name) and closes it, and the C parser reads its replies.

redis-py's layer around a send and a read (a health check, debug hooks, a
Python reader around the C one, error text formatted on every read) cost a
call 6-22 µs of the client's CPU: a PING sent 20,000 times took 76-99 µs a
call against 82-121, five runs each on a 2-core machine. Without the C
parser, calls go through redis-py's own send and read."""

from __future__ import annotations

import select
import socket
from typing import Any

import redis
from redis._parsers.base import BaseParser

try:
    import hiredis
except ImportError:  # pragma: no cover - the hiredis extra is optional
    hiredis = None  # type: ignore[assignment]

_READ_SIZE = 65536
_CLOSED = "Connection closed by server."
# What the reader returns for "read more": not its default False, which a
# RESP3 reply (redis-py speaks RESP3 from version 8) can be.
_MORE = object()


class Wire:
    """A redis-py connection whose socket `exchange` uses directly. A read
    waits for its reply as long as the URL's socket_timeout allows (by default
    without bound), as redis-py's does: a blocking move (claim_on_wake) too."""

    __slots__ = ("_buffer", "_poll", "_reader", "_sock", "_view", "conn")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self._sock: socket.socket | None = None
        self._reader: Any = None
        self._poll: Any = None
        self._buffer = bytearray(_READ_SIZE)
        self._view = memoryview(self._buffer)

    @property
    def is_open(self) -> bool:
        return self.conn._sock is not None

    def stale(self) -> bool:
        """Whether the server wrote to or closed this idle connection (a
        restart, a timeout): it is to be opened again before a call goes on it.
        This, not redis-py's PING every 30 s, is the check before a call: a
        PING waits as long as the call would on a connection gone silent."""
        if self._poll is None:  # opened by redis-py's own send
            return bool(self.conn.can_read())
        pending = getattr(self._sock, "pending", None)  # TLS: bytes decrypted, not read
        return bool(self._reader.has_data() or (pending and pending()) or self._poll.poll(0))

    def close(self) -> None:
        self._sock = self._poll = None
        self.conn.disconnect()

    def _open(self) -> socket.socket:
        self.conn.connect()
        sock: socket.socket = self.conn._sock  # redis-py names no public way to it
        # A reply read as redis-py reads it: text decoded, each error reply the
        # class redis-py gives it (a replica's READONLY, a loading server's LOADING).
        self._reader = hiredis.Reader(
            encoding="utf-8", replyError=BaseParser.parse_error, notEnoughData=_MORE
        )
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)
        self._sock = sock
        return sock

    def exchange(self, packed: bytes, count: int) -> list[Any]:
        """Send `packed` (`count` commands) and read their replies; an error
        reply is returned as its exception, not raised. A connection that fails
        is closed (a reply may be left unread on it)."""
        sock = self._sock or self._open()
        try:
            sock.sendall(packed)
            replies: list[Any] = []
            reader = self._reader
            while len(replies) < count:
                reply = reader.gets()
                if reply is _MORE:
                    n = sock.recv_into(self._buffer)
                    if not n:
                        raise redis.ConnectionError(_CLOSED)
                    reader.feed(self._view, 0, n)
                elif not isinstance(reply, hiredis.PushNotification):
                    # A push (RESP3: a server's maintenance notice) answers no
                    # call: redis-py hands it to its handlers; chit has none.
                    replies.append(reply)
            return replies
        except TimeoutError:  # the socket's own (socket.timeout)
            self.close()
            raise redis.TimeoutError("Timeout talking to the server") from None
        except OSError as e:
            self.close()
            raise redis.ConnectionError(f"Error {e.errno} on the socket: {e.strerror or e}") from e
        except hiredis.ProtocolError as e:
            self.close()
            raise redis.ConnectionError(f"Protocol error: {e}") from None
        except BaseException:
            self.close()
            raise
