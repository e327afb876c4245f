"""uvicorn's h11 protocol with two limits uvicorn does not have.

- A request whose line and headers do not arrive within HEAD_TIMEOUT seconds
  is answered 408 and closed (slowloris: uvicorn waits for a partial request
  forever, and each one holds a connection of `limit_concurrency`).
- A request line or headers over `h11_max_incomplete_event_size` get 431 (h11's
  own hint) instead of uvicorn's 400, and the connection closes gracefully:
  the rest of what the client sends is read and dropped for a moment, so the
  kernel does not reset the connection before the client reads the answer.
  h11 measures only a head still incomplete: one that arrives whole in a
  single read (a 100 KB header) is measured here.
"""

from __future__ import annotations

import asyncio
import json
import re

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# Seconds a client has to send a request's line and headers.
HEAD_TIMEOUT = 10.0
# Seconds to read and drop the rest of a refused request before closing.
LINGER_SECONDS = 2.0
# Where a request's head ends, as h11 finds it (a blank line, CR optional).
_HEAD_END = re.compile(rb"\n\r?\n")


class ChitH11Protocol(H11Protocol):
    _head_timer: asyncio.TimerHandle | None = None
    _lingering = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # the answer is sent: what else comes is dropped
        if self.conn.their_state is h11.IDLE and self._head_too_long(data):
            self._refuse(431, "the request line or headers are too long")
            return
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._cancel_head_timer()  # the head arrived; the route's limits apply

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_head_timer()  # a kept-alive connection's next request has as long

    def _head_too_long(self, data: bytes) -> bool:
        """Whether the head of the request starting in what is buffered and
        `data` runs past h11's limit: its end is looked for only that far."""
        limit = self.conn._max_incomplete_event_size
        pending = self.conn.trailing_data[0]
        head = bytes(pending) + data if pending else data
        return len(head) > limit and _HEAD_END.search(head, 0, limit + 3) is None

    def send_400_response(self, msg: str) -> None:
        # uvicorn calls this on any h11.RemoteProtocolError, the error gone by now:
        # a buffer over h11's limit is what makes it "Receive buffer too long".
        buffered = len(self.conn.trailing_data[0])
        if buffered > self.conn._max_incomplete_event_size:
            self._refuse(431, "the request line or headers are too long")
        else:
            self._refuse(400, "the request is not valid HTTP/1.1")

    def _refuse(self, status: int, message: str) -> None:
        body = json.dumps({"error": f"http_{status}", "message": message, "details": {}})
        data = body.encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Bad Request')}\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(data)}\r\nconnection: close\r\n\r\n"
        )
        self._cancel_head_timer()
        if self.transport.is_closing():
            return
        self.transport.write(head.encode() + data)
        self._lingering = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self._close)

    def _close(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def _on_head_timeout(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            if self.conn.trailing_data[0]:  # part of a request came: say why
                self._refuse(408, f"the request's headers took over {HEAD_TIMEOUT:g} s")
            else:
                self._close()

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT, self._on_head_timeout)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None


_REASONS = {400: "Bad Request", 408: "Request Timeout", 431: "Request Header Fields Too Large"}
