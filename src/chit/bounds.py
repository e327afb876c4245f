"""The bounds every entry point shares. Code (`Queue`), the CLI and the HTTP API
refuse the same values, so each number lives here once."""

from __future__ import annotations

import re
from datetime import UTC, datetime

# Attempts a job may have, at most (a task's, a job's and CHIT_MAX_ATTEMPTS).
MAX_ATTEMPTS = 1000
# Priorities beyond ± this are typing slips, and would not fit the database's integer.
PRIORITY_LIMIT = 1_000_000
# Kinds and queue names: 1 to this many characters.
NAME_MAX = 200
IDEMPOTENCY_KEY_MAX = 255
# What an Idempotency-Key header can carry of that: printable ASCII, and no
# space at either end (HTTP strips it), as the API's schema says.
IDEMPOTENCY_KEY_PATTERN = rf"^[!-~]([ -~]{{0,{IDEMPOTENCY_KEY_MAX - 2}}}[!-~])?$"
# A job's concurrency key (flow control): 1 to this many characters.
CONCURRENCY_KEY_MAX = 200
# A concurrency limit, and a rate's starts per period, at most: beyond is a slip.
CONCURRENCY_MAX = 100_000
RATE_MAX = 1_000_000
# A job's cost, and a cost_rate's cost per period, at most (a whole number:
# tokens, cents): a trillion a period is more than any provider grants.
COST_MAX = 1_000_000_000_000


def whole_cost(value: object, lowest: int) -> int | None:
    """`value` as a cost from `lowest` to COST_MAX (JSON's 3.0 is 3), or None.
    A bool is not a number here."""
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int or not lowest <= value <= COST_MAX:
        return None
    return value


# A job's timeout, seconds: above 0 and at most 30 days. An attempt's budget
# beyond that is a slip (milliseconds typed for seconds), not a deadline.
TIMEOUT_MAX = 30 * 86400
# `chit.Snooze(seconds)`: from 0 to 30 days; a longer wait is a slip, not a poll.
SNOOZE_MAX = 30 * 86400
# `expires_in` on enqueue: above 0 and at most ten years (the store keeps times
# to year 9998). A unique key (DESIGN.md "Time"): as long as an idempotency key.
EXPIRES_IN_MAX = 10 * 365 * 86400
UNIQUE_KEY_MAX = 255
# Debounce: a key as long as a unique key; a delay from a millisecond (SQLite
# reads the seconds as a modifier, which takes no exponent) to 30 days, and the
# bound on moving the start at most ten years after the first enqueue.
DEBOUNCE_KEY_MAX = 255
DEBOUNCE_MIN = 0.001
DEBOUNCE_MAX = 30 * 86400
DEBOUNCE_BOUND_MAX = EXPIRES_IN_MAX
# A durable step's name (JobContext.step): 1 to this many characters.
STEP_NAME_MAX = 200
# Waits (JobContext.wait_for, queue.signal): a signal's name as long as a step's,
# its data (a JSON object) at most this many bytes, a wait's timeout above 0 and
# at most ten years, and at most this many jobs one wait_for_jobs waits for.
SIGNAL_NAME_MAX = 200
SIGNAL_DATA_BYTES = 32 * 1024
WAIT_TIMEOUT_MAX = 10 * 365 * 86400
WAIT_JOBS_MAX = 10_000
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
# Text that names something (a ref, a concurrency key) holds no control
# character (Unicode Cc: NUL, newlines, escapes) and no lone surrogate.
# (The schema's pattern leaves surrogates out: generators cannot use the range,
# and JSON text holds a lone one only by an escape no client sends by mistake.)
PLAIN_TEXT_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*$"
_NOT_PLAIN = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def is_plain_text(value: str) -> bool:
    return _NOT_PLAIN.search(value) is None


# What one replay request may name.
REPLAY_IDS_MAX = 1000
ERROR_PREFIX_MAX = 1000

# The store keeps times as UTC text with a four-digit year. The range is of the
# year as written, whatever the offset (1970-01-01T00:30+05:00 is 1969 in UTC),
# so that the API's schema can say it: YEAR_PATTERN.
FIRST_YEAR, LAST_YEAR = 1970, 9998
YEARS = "a year from 1970 to 9998"
YEAR_PATTERN = r"^(19[7-9][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])-"


def storable_time(value: datetime) -> datetime | None:
    """`value` in UTC (an aware datetime), or None if the store cannot keep it."""
    if not FIRST_YEAR <= value.year <= LAST_YEAR:
        return None
    return value.astimezone(UTC)


# A job's output (JobContext.emit), in bytes of JSON over all its attempts:
# CHIT_MAX_OUTPUT_BYTES's default.
OUTPUT_BYTES = 16 * 1024 * 1024
# Output values a read returns at most (queue.output, GET /jobs/{id}/output).
OUTPUT_PAGE_MAX = 1000
# The largest seq a reader may name (an `after`): what every store's integer holds.
OUTPUT_SEQ_MAX = 2**53
# A progress message (job.progress(..., message=)): characters at most.
PROGRESS_MESSAGE_MAX = 1000
