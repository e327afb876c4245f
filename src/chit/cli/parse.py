"""Parsing what people type: durations ('90s', '15m', '7d') and times."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")


def duration(text: str) -> float:
    """Seconds in '30', '30s', '15m', '12h', '7d', '2w'."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a duration; use e.g. 30s, 15m, 12h, 7d")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def moment(text: str, now: datetime | None = None) -> datetime:
    """An ISO 8601 time (UTC if it has no zone), or a duration meaning that long ago."""
    try:
        return (now or datetime.now(UTC)) - timedelta(seconds=duration(text))
    except ValueError:
        pass
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither an ISO 8601 time nor a duration like 1h or 7d"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)
