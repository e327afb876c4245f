"""A request that says its length two ways is refused before any route runs.

With both Content-Length and Transfer-Encoding, a proxy in front and this
server may disagree where the body ends, and the rest is read as a second
request (request smuggling); RFC 9112 (6.3) lets a server refuse it, and chit
does: 400, whatever the route."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send


class RefuseAmbiguousLength:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            names = {name.lower() for name, _ in scope["headers"]}
            if b"content-length" in names and b"transfer-encoding" in names:
                await _refuse(send)
                return
        await self.app(scope, receive, send)


async def _refuse(send: Send) -> None:
    body = json.dumps(
        {
            "error": "bad_request",
            "message": "send Content-Length or Transfer-Encoding, not both",
            "details": {},
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 400,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
