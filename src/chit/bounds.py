"""The bounds every entry point shares. Code (`Queue`), the CLI and the HTTP API
refuse the same values, so each number lives here once."""

from __future__ import annotations

from datetime import UTC, datetime

# Attempts a job may have, at most (a task's, a job's and CHIT_MAX_ATTEMPTS).
MAX_ATTEMPTS = 1000
# Priorities beyond ± this are typing slips, and would not fit the database's integer.
PRIORITY_LIMIT = 1_000_000
# Kinds and queue names: 1 to this many characters.
NAME_MAX = 200
IDEMPOTENCY_KEY_MAX = 255
# A job's concurrency key (flow control): 1 to this many characters.
CONCURRENCY_KEY_MAX = 200
# A concurrency limit, and a rate's starts per period, at most: beyond is a slip.
CONCURRENCY_MAX = 100_000
RATE_MAX = 1_000_000
# A job's timeout, seconds: above 0 and at most 30 days. An attempt's budget
# beyond that is a slip (milliseconds typed for seconds), not a deadline.
TIMEOUT_MAX = 30 * 86400
# A durable step's name (JobContext.step): 1 to this many characters.
STEP_NAME_MAX = 200
# The default of CHIT_MAX_PAYLOAD_BYTES and CHIT_MAX_BODY_BYTES.
PAYLOAD_BYTES = 1024 * 1024

# Workflows: edges (dependencies) one enqueue_many call may store, and a ref's length.
DEPENDENCIES_MAX = 100_000
REF_MAX = 200

# Jobs on a page of a listing unless asked otherwise, and at most through the
# API; the CLI reads the database itself and may list more at once.
PAGE_SIZE = 50
API_PAGE_MAX = 500
CLI_PAGE_MAX = 1000
# Longer than any cursor or event id the API hands out.
CURSOR_MAX = 100
# An events token (chit.api.tokens) is under 200 characters; this bounds what is read.
EVENTS_TOKEN_MAX = 512
# What one replay request may name.
REPLAY_IDS_MAX = 1000
ERROR_PREFIX_MAX = 1000

# The store keeps times as UTC text with a four-digit year.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)
YEARS = "a year from 1970 to 9998"


def storable_time(value: datetime) -> datetime | None:
    """`value` in UTC (an aware datetime), or None if the store cannot keep it."""
    try:
        utc = value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+05:00 is in year 0 in UTC
        return None
    return utc if EARLIEST <= utc < LATEST else None
