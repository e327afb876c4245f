"""One settings object, read once from CHIT_* environment variables.

A bad value fails at start-up and names the variable:
"CHIT_LEASE_SECONDS has value 'abc': not a number".
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chit.bounds import MAX_ATTEMPTS, OUTPUT_BYTES, PAYLOAD_BYTES
from chit.durations import DurationTooLong, duration
from chit.errors import ConfigError

DEFAULT_DATABASE_URL = "sqlite:///chit.db"
# The longest duration a setting may have. Far beyond it, a lease or retry time
# leaves the range SQLite can write (year 9999) and the claim itself fails.
MAX_SECONDS = 10 * 365 * 86400.0
POOLS = ("thread", "process")


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
    # Jobs a worker may claim beyond its free slots, started as slots free, so a
    # busy worker never waits on the database between short jobs. Used only while
    # jobs take under 20 ms on average, and no more than its slots run in 20 ms
    # at that average, so long jobs are not held back from other workers (but
    # those held when short jobs gave way to long ones stay). 0 turns it off.
    prefetch: int = 128
    grace_seconds: float = 30.0
    max_payload_bytes: int = PAYLOAD_BYTES
    # The HTTP API refuses request bodies larger than this with a 413.
    max_body_bytes: int = PAYLOAD_BYTES
    # A job's output (JobContext.emit) in bytes, every attempt's: past it emit raises.
    max_output_bytes: int = OUTPUT_BYTES
    # Results larger than this (as JSON) go to the results table, out of status reads.
    result_inline_bytes: int = 64 * 1024
    # NORMAL in WAL mode: a committed job survives any process crash (kill -9);
    # only an OS crash or power cut can lose the last commits. FULL survives those too.
    sqlite_synchronous: str = "NORMAL"
    # Redis: an enqueue returns only once the server's AOF holds it on disk
    # (WAITAOF, Redis 7.2+), closing everysec's window of a second or two.
    redis_wait_aof: bool = False
    queues: tuple[str, ...] = ("default",)
    # Finished jobs older than this (e.g. "7d") are deleted by workers; "" keeps them.
    retention: str = ""
    # Where sync handlers run: "thread" (the worker's threads) or "process" (a
    # pool of `concurrency` child processes, which a deadline really stops).
    pool: str = "thread"
    # A child process is replaced after this many jobs (0: never), or once its
    # memory (peak resident set) passes this many MB (0: never): leaky code.
    max_jobs_per_child: int = 0
    max_memory_per_child: int = 0
    # A dashboard session ends after this long without a request, and this long
    # after sign-in whatever happens.
    session_idle_seconds: float = 3600.0
    session_max_seconds: float = 12 * 3600.0
    # Web origins whose pages may call the API (CORS), exactly: "https://app.example".
    cors_origins: tuple[str, ...] = ()
    # How long a token for one job's event stream (events_token) is accepted.
    events_token_seconds: float = 300.0
    # Connections and requests `chit serve` takes at once; beyond, 503 at once
    # (each event stream holds one).
    max_connections: int = 1000
    # Hand-backs of a job (a worker stopping before it finished) that do not use
    # up an attempt; each later one does, so a job no deploy lets finish ends failed.
    free_hand_backs: int = 3
    # "text" (readable lines) or "json" (one JSON object a line: docs/operations.md).
    log_format: str = "text"

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

    def to_env(self) -> dict[str, str]:
        """Every setting as the CHIT_* variable that reads back as it (None and
        empty tuples as "", which reads as the default): what `chit up` hands
        its children."""
        env = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                text = ""
            elif isinstance(value, tuple):
                text = ",".join(value)
            else:
                text = str(value)
            env[f"CHIT_{f.name.upper()}"] = text
        return env

    @property
    def retention_seconds(self) -> float | None:
        """CHIT_RETENTION in seconds; None when finished jobs are kept."""
        return duration(self.retention) if self.retention.strip() else None

    def validate(self) -> None:
        _seconds("CHIT_LEASE_SECONDS", self.lease_seconds)
        _seconds("CHIT_BACKOFF_BASE", self.backoff_base)
        _seconds("CHIT_BACKOFF_MAX", self.backoff_max)
        _seconds("CHIT_POLL_INTERVAL", self.poll_interval)
        _seconds("CHIT_GRACE_SECONDS", self.grace_seconds, zero=True)
        _seconds("CHIT_SESSION_IDLE_SECONDS", self.session_idle_seconds)
        _seconds("CHIT_SESSION_MAX_SECONDS", self.session_max_seconds)
        _seconds("CHIT_EVENTS_TOKEN_SECONDS", self.events_token_seconds)
        _positive("CHIT_MAX_ATTEMPTS", self.max_attempts)
        if self.max_attempts > MAX_ATTEMPTS:
            raise ConfigError(
                f"CHIT_MAX_ATTEMPTS has value {self.max_attempts}: must be at most {MAX_ATTEMPTS}"
            )
        _positive("CHIT_CONCURRENCY", self.concurrency)
        _positive("CHIT_MAX_CONNECTIONS", self.max_connections)
        _finite("CHIT_FREE_HAND_BACKS", self.free_hand_backs)
        if not 0 <= self.free_hand_backs <= MAX_ATTEMPTS:
            raise ConfigError(
                f"CHIT_FREE_HAND_BACKS has value {self.free_hand_backs}: "
                f"must be 0 to {MAX_ATTEMPTS}"
            )
        _finite("CHIT_PREFETCH", self.prefetch)
        if self.prefetch < 0:
            raise ConfigError(f"CHIT_PREFETCH has value {self.prefetch}: must be >= 0")
        _positive("CHIT_MAX_PAYLOAD_BYTES", self.max_payload_bytes)
        _positive("CHIT_MAX_BODY_BYTES", self.max_body_bytes)
        _positive("CHIT_MAX_OUTPUT_BYTES", self.max_output_bytes)
        _finite("CHIT_RESULT_INLINE_BYTES", self.result_inline_bytes)
        if self.result_inline_bytes < 0:
            raise ConfigError(
                f"CHIT_RESULT_INLINE_BYTES has value {self.result_inline_bytes}: must be >= 0"
            )
        _finite("CHIT_PORT", self.port)
        if not 0 < self.port < 65536:
            raise ConfigError(f"CHIT_PORT has value {self.port}: not a TCP port")
        if self.sqlite_synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ConfigError(
                f"CHIT_SQLITE_SYNCHRONOUS has value {self.sqlite_synchronous!r}: "
                "use OFF, NORMAL, FULL or EXTRA"
            )
        for origin in self.cors_origins:
            _origin(origin)
        if self.retention.strip():
            try:
                seconds = duration(self.retention)
            except DurationTooLong:
                seconds = math.inf
            except ValueError:
                seconds = 0.0
            if seconds <= 0:
                raise ConfigError(
                    f"CHIT_RETENTION has value {self.retention!r}: not a duration; "
                    "use e.g. 12h, 7d or 4w, or leave it empty to keep finished jobs"
                )
            if seconds > MAX_SECONDS:
                raise ConfigError(
                    f"CHIT_RETENTION has value {self.retention!r}: must be at most 10 years"
                )
        if self.log_format not in ("text", "json"):
            raise ConfigError(f"CHIT_LOG_FORMAT has value {self.log_format!r}: use text or json")
        if self.pool not in POOLS:
            raise ConfigError(f"CHIT_POOL has value {self.pool!r}: use thread or process")
        for name, value in (
            ("CHIT_MAX_JOBS_PER_CHILD", self.max_jobs_per_child),
            ("CHIT_MAX_MEMORY_PER_CHILD", self.max_memory_per_child),
        ):
            _finite(name, value)
            if value < 0:
                raise ConfigError(f"{name} has value {value}: must be >= 0 (0: no limit)")
        if not self.queues or any(not q for q in self.queues):
            raise ConfigError("CHIT_QUEUES must name at least one queue")
        schemes: tuple[str, ...] = ("sqlite:", "postgresql:", "postgres:", "redis:", "rediss:")
        schemes += ("unix:", "redis+cluster:", "rediss+cluster:")
        if not self.database_url.startswith(schemes):
            raise ConfigError(
                f"CHIT_DATABASE_URL has value {self.database_url!r}: "
                "expected sqlite:///path, postgresql://... or redis://..."
            )


def _finite(name: str, value: float) -> None:
    if not math.isfinite(value):
        raise ConfigError(f"{name} has value {value}: not a finite number")


def _positive(name: str, value: float) -> None:
    _finite(name, value)
    if value <= 0:
        raise ConfigError(f"{name} has value {value}: must be greater than 0")


def _seconds(name: str, value: float, *, zero: bool = False) -> None:
    """A duration setting: finite, above 0 (or 0 itself, with `zero`), at most 10 years."""
    _finite(name, value)
    if value < 0 or (value == 0 and not zero):
        bound = ">= 0" if zero else "greater than 0"
        raise ConfigError(f"{name} has value {value}: must be {bound}")
    if value > MAX_SECONDS:
        raise ConfigError(
            f"{name} has value {value}: must be at most {MAX_SECONDS:.0f} seconds (10 years)"
        )


def _origin(origin: str) -> None:
    # An origin is compared exactly by browsers and by the CORS middleware: a
    # path, a trailing "/" or "*" would never match, or match every site.
    if origin == "*":
        raise ConfigError(
            "CHIT_CORS_ORIGINS has '*': list the exact origins whose pages may use "
            "the API (a page holding a key could otherwise be any site's)"
        )
    scheme, sep, rest = origin.partition("://")
    if scheme not in ("http", "https") or not sep or not rest or "/" in rest or "?" in rest:
        raise ConfigError(
            f"CHIT_CORS_ORIGINS has {origin!r}: not an origin; write scheme://host[:port], "
            "e.g. https://app.example.com, with no path or trailing /"
        )


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
    if kind == "bool":
        if raw.strip().lower() in {"1", "true", "yes", "on"}:
            return True
        if raw.strip().lower() in {"0", "false", "no", "off"}:
            return False
        raise ConfigError(f"{name} has value {raw!r}: use 1 or 0")
    if kind.startswith("tuple"):
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    return raw
