"""How chit's processes log: readable text (the default), or one JSON object a
line (`CHIT_LOG_FORMAT=json`, `--log-format json`) for a log pipeline to index.

A record about a job carries its fields as `extra` (`job_fields`), so that the
JSON line has them as keys while the text line reads as a sentence:

    log.info("job %s %s succeeded", kind, id, extra=job_fields("job.succeeded", ...))

The keys of a JSON line are listed in docs/operations.md ("Structured logs").
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from datetime import UTC, datetime
from typing import IO, Any

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# What a record may carry as `extra`, in the order a JSON line shows them.
FIELDS: tuple[str, ...] = ("job_id", "kind", "queue", "attempt", "max_attempts", "worker")
FIELDS += ("duration", "error", "retry_in", "method", "path", "status", "client")


def job_fields(
    event: str,
    job_id: str,
    kind: str | None = None,
    *,
    attempt: int | None = None,
    worker: str | None = None,
    duration: float | None = None,
    error: str | None = None,
    **more: Any,
) -> dict[str, Any]:
    """`extra` for a record about a job: the event's name and the job's fields
    (None ones left out)."""
    fields = {"event": event, "job_id": job_id, "kind": kind, "attempt": attempt}
    fields |= {"worker": worker, "duration": duration, "error": error} | more
    return {k: v for k, v in fields.items() if v is not None}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (ISO 8601, UTC), level, logger, event (the
    record's `event`, "http.request" for uvicorn's access lines, else "log"),
    message, then whichever of FIELDS the record has, and `exception` with the
    traceback when one is logged."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "event", None) or "log",
            "message": record.getMessage(),
        }
        args = record.args
        # uvicorn's access lines: (client, method, path, HTTP version, status).
        if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
            client, method, path, _, status = args
            line |= {"event": "http.request", "method": method, "path": path}
            line |= {"status": status, "client": client}
        for name in FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                line[name] = round(value, 6) if name == "duration" else value
        if record.exc_info:
            line["exception"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        return json.dumps(line, default=str, ensure_ascii=False)


# What `configure` last set, (level, format): a worker's `--pool process`
# children configure their logging the same way (`configure_like`).
_configured: tuple[str, str] | None = None


def configure(level: str = "INFO", fmt: str = "text", stream: IO[str] | None = None) -> None:
    """The root logger's one handler, on stderr, in `fmt` ("text" or "json").
    `warnings.warn` goes through it too (logger "py.warnings"), so a JSON log
    holds JSON lines only."""
    global _configured
    _configured = (level, fmt)
    logging.captureWarnings(True)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


def configured() -> tuple[str, str] | None:
    """(level, format) as `configure` last set them in this process, if it did."""
    return _configured


def json_line(event: str, message: str, level: str = "info", **fields: Any) -> str:
    """A JSON log line written without the logging module (`chit up`'s own lines)."""
    number = logging.getLevelName(level.upper())
    record = logging.LogRecord("chit.up", number, "", 0, message, (), None)
    record.__dict__.update(fields, event=event)
    return JsonFormatter().format(record)
