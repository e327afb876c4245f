"""Parsing what people type: durations ("90s", "15m", "7d") and times. The CLI
and the settings (CHIT_RETENTION) both read durations, so they live outside cli/."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")
# Longer is a typing slip; it also keeps `now` plus or minus a duration a valid time.
MAX_DURATION_SECONDS = 100 * 365 * 86400.0


class DurationTooLong(ValueError):
    pass


def duration(text: str) -> float:
    """Seconds in '30', '30s', '15m', '12h', '7d', '2w' (at most 100 years)."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a duration; use e.g. 30s, 15m, 12h, 7d")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not math.isfinite(seconds) or seconds > MAX_DURATION_SECONDS:
        raise DurationTooLong(f"{text!r} is too long a duration: at most 36500d (100 years)")
    return seconds


def moment(text: str, now: datetime | None = None) -> datetime:
    """An ISO 8601 time (UTC if it has no zone), or a duration meaning that long ago."""
    if _DURATION.fullmatch(text.strip()):
        return (now or datetime.now(UTC)) - timedelta(seconds=duration(text))
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither an ISO 8601 time nor a duration like 1h or 7d"
        ) from None
    value = value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+05:00 is in year 0 in UTC
        raise ValueError(f"{text!r} is out of range: years 1 to 9999 in UTC") from None
    return value
