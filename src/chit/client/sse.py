"""Server-Sent Events as the client reads them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from chit.api.schemas.jobs import JobStatus


@dataclass(frozen=True)
class Streamed:
    """One value a job emitted, as an `output` event carries it."""

    seq: int
    attempt: int
    data: Any


@dataclass(frozen=True)
class Event:
    """One Server-Sent Event: `state` or `progress` (with `job`), `output` (with
    `output`: a value the job emitted); `gone` (the job was deleted) or `error`
    (the database was away: reconnect) end the stream."""

    id: str | None
    event: str
    data: str

    @property
    def job(self) -> JobStatus | None:
        if self.event in ("state", "progress"):
            return JobStatus.model_validate_json(self.data)
        return None

    @property
    def output(self) -> Streamed | None:
        if self.event != "output":
            return None
        value = json.loads(self.data)
        return Streamed(int(value["seq"]), int(value["attempt"]), value["data"])


class SSEParser:
    """Incremental text/event-stream parsing (comments and `retry:` are skipped)."""

    def __init__(self) -> None:
        self._id: str | None = None
        self._event = "message"
        self._data: list[str] = []

    def feed(self, line: str) -> Event | None:
        if line == "":
            if not self._data:
                self._event = "message"
                return None
            event = Event(self._id, self._event, "\n".join(self._data))
            self._event, self._data = "message", []
            return event
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            self._id = value
        return None
