"""`chit serve`: the HTTP API under uvicorn. The server never runs jobs; start
`chit worker` processes for that (`chit up` starts both)."""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
from types import FrameType

import uvicorn

from chit.api.auth import parse_env_keys
from chit.cli.http_protocol import ChitH11Protocol
from chit.errors import ConfigError
from chit.queue import Queue
from chit.settings import Settings

log = logging.getLogger("chit.api")

# Seconds open requests (event streams above all) get to finish on SIGTERM.
SHUTDOWN_GRACE = 5
# uvicorn's limits, set on purpose (docs/http-api.md, "Limits"). A request line
# and headers over this many bytes are refused (h11's own default is 16 KiB).
MAX_HEAD_BYTES = 64 * 1024
# An idle keep-alive connection is closed after this many seconds.
KEEP_ALIVE_SECONDS = 5
# Connections and requests at once: CHIT_MAX_CONNECTIONS (Settings.max_connections,
# 1000); beyond it uvicorn answers 503 at once rather than queueing. Event
# streams count: each holds one.


class _Server(uvicorn.Server):
    """Stops gracefully on SIGTERM or SIGINT and exits 0, as `chit worker` does
    (uvicorn would re-raise the signal, ending the process by it); a second
    signal stops at once."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit:
            self.force_exit = True
        self.should_exit = True


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(settings: Settings, queue: Queue, host: str) -> None:
    """Refuse to listen beyond loopback when no API key exists anywhere."""
    if is_loopback(host) or parse_env_keys(settings.api_keys):
        return
    if queue.store.list_api_keys(include_revoked=True):  # closed, even if none is left
        return
    raise ConfigError(
        f"refusing to listen on {host} without API keys: anyone who can reach it could "
        "submit, read and cancel jobs. Create a key with `chit keys create` or set "
        "CHIT_API_KEYS, or listen on 127.0.0.1 (--host 127.0.0.1)"
    )


def check_port(host: str, port: int) -> None:
    """Refuse at once, in one line, a port another process listens on (uvicorn
    would log it inside a child, and `chit up` would run workers regardless).
    A race with whoever binds next remains; uvicorn then fails as before."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ConfigError(f"cannot listen on {host}: {e.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        # As uvicorn binds: a port left in TIME_WAIT by a stopped server is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"port {port} on {host} is already in use (another chit up or "
                    "chit serve?); stop it or choose another with --port or CHIT_PORT"
                ) from None
            raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror}") from None


def serve(
    settings: Settings,
    queue: Queue,
    *,
    host: str | None = None,
    port: int | None = None,
    log_level: str = "info",
) -> int:
    """Run the API until SIGINT/SIGTERM; returns the exit code. `host`/`port`
    default to CHIT_HOST/CHIT_PORT (127.0.0.1:8718)."""
    from chit.api import create_app

    host = host or settings.host
    port = port or settings.port
    # Opened here, not first in the app's startup: a store that is down or
    # refused is then one line and exit 3, not uvicorn's traceback.
    queue.store.schema_version()
    check_bind(settings, queue, host)
    check_port(host, port)
    app = create_app(queue, settings=settings, allow_open=is_loopback(host))
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level.lower(),
        timeout_graceful_shutdown=SHUTDOWN_GRACE,
        server_header=False,
        http=ChitH11Protocol,  # h11, with a header timeout and 431 (http_protocol.py)
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        limit_concurrency=settings.max_connections,
        # JSON lines: uvicorn's loggers left to the root's handler (chit.logs).
        log_config=None if settings.log_format == "json" else uvicorn.config.LOGGING_CONFIG,
    )
    try:
        _Server(config).run()
    finally:
        queue.close()
    return 0
