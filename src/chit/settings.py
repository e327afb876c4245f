"""One settings object, read once from CHIT_* environment variables.

A bad value fails at start-up and names the variable:
"CHIT_LEASE_SECONDS has value 'abc': not a number".
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chit.cli.parse import duration
from chit.errors import ConfigError

DEFAULT_DATABASE_URL = "sqlite:///chit.db"


@dataclass(frozen=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    # How long a claim holds a job without a heartbeat; heartbeats come every third of it.
    lease_seconds: float = 30.0
    max_attempts: int = 5
    backoff_base: float = 2.0
    backoff_max: float = 300.0
    api_keys: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8718
    app: str | None = None
    # The longest an idle worker waits between looks for work it was not woken for.
    poll_interval: float = 1.0
    concurrency: int = 4
    grace_seconds: float = 30.0
    max_payload_bytes: int = 1024 * 1024
    # The HTTP API refuses request bodies larger than this with a 413.
    max_body_bytes: int = 1024 * 1024
    # Results larger than this (as JSON) go to the results table, out of status reads.
    result_inline_bytes: int = 64 * 1024
    # NORMAL in WAL mode: a committed job survives any process crash (kill -9);
    # only an OS crash or power cut can lose the last commits. FULL survives those too.
    sqlite_synchronous: str = "NORMAL"
    queues: tuple[str, ...] = ("default",)
    # Finished jobs older than this (e.g. "7d") are deleted by workers; "" keeps them.
    retention: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            name = f"CHIT_{f.name.upper()}"
            raw = env.get(name)
            if raw is None or raw == "":
                continue
            values[f.name] = _parse(name, raw, f.type)
        values.update({k: v for k, v in overrides.items() if v is not None})
        settings = cls(**values)
        settings.validate()
        return settings

    def replace(self, **changes: Any) -> Settings:
        changed = dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})
        changed.validate()
        return changed

    @property
    def retention_seconds(self) -> float | None:
        """CHIT_RETENTION in seconds; None when finished jobs are kept."""
        return duration(self.retention) if self.retention.strip() else None

    def validate(self) -> None:
        _positive("CHIT_LEASE_SECONDS", self.lease_seconds)
        _positive("CHIT_MAX_ATTEMPTS", self.max_attempts)
        _positive("CHIT_BACKOFF_BASE", self.backoff_base)
        _positive("CHIT_BACKOFF_MAX", self.backoff_max)
        _positive("CHIT_POLL_INTERVAL", self.poll_interval)
        _positive("CHIT_CONCURRENCY", self.concurrency)
        _positive("CHIT_MAX_PAYLOAD_BYTES", self.max_payload_bytes)
        _positive("CHIT_MAX_BODY_BYTES", self.max_body_bytes)
        if self.grace_seconds < 0:
            raise ConfigError(f"CHIT_GRACE_SECONDS has value {self.grace_seconds}: must be >= 0")
        if not 0 < self.port < 65536:
            raise ConfigError(f"CHIT_PORT has value {self.port}: not a TCP port")
        if self.sqlite_synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ConfigError(
                f"CHIT_SQLITE_SYNCHRONOUS has value {self.sqlite_synchronous!r}: "
                "use OFF, NORMAL, FULL or EXTRA"
            )
        if self.retention.strip():
            try:
                seconds = duration(self.retention)
            except ValueError:
                seconds = 0.0
            if seconds <= 0:
                raise ConfigError(
                    f"CHIT_RETENTION has value {self.retention!r}: not a duration; "
                    "use e.g. 12h, 7d or 4w, or leave it empty to keep finished jobs"
                )
        if not self.queues or any(not q for q in self.queues):
            raise ConfigError("CHIT_QUEUES must name at least one queue")
        if not self.database_url.startswith(("sqlite:", "postgresql:", "postgres:")):
            raise ConfigError(
                f"CHIT_DATABASE_URL has value {self.database_url!r}: "
                "expected sqlite:///path or postgresql://..."
            )


def _positive(name: str, value: float) -> None:
    if value <= 0:
        raise ConfigError(f"{name} has value {value}: must be greater than 0")


def _parse(name: str, raw: str, annotation: Any) -> Any:
    kind = str(annotation)
    try:
        if kind == "float":
            return float(raw)
        if kind == "int":
            return int(raw)
    except ValueError:
        noun = "a whole number" if kind == "int" else "a number"
        raise ConfigError(f"{name} has value {raw!r}: not {noun}") from None
    if kind.startswith("tuple"):
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    return raw
