"""Job ids: 26 characters, time-ordered (48-bit milliseconds, then 80 random bits),
Crockford base32, so new rows append to the primary-key index. Within one
process ids are strictly increasing, even inside one millisecond."""

from __future__ import annotations

import os
import re
import threading
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
# Two digits at a time: 13 lookups for an id rather than 26 divisions.
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
_SHIFTS = range(120, -1, -10)
# The first 18 digits (all but the low 40 bits), shared by the ids of a batch
# from one millisecond once they count up by one.
_HIGH_SHIFTS = range(120, 39, -10)
_RANDOM_BITS = 80
_lock = threading.Lock()
_last = 0

JOB_ID_PATTERN = re.compile(r"[0-9a-hjkmnp-tv-z]{26}")


def new_job_id() -> str:
    return new_job_ids(1)[0]


def new_job_ids(count: int) -> list[str]:
    """`count` new ids, increasing: for a batch, one clock reading and one call
    for random bytes rather than one each an id."""
    global _last
    ms = time.time_ns() // 1_000_000
    noise = os.urandom(10 * count)
    values = []
    with _lock:
        last = _last
        for start in range(0, 10 * count, 10):
            value = (ms << _RANDOM_BITS) | int.from_bytes(noise[start : start + 10], "big")
            last = value if value > last else last + 1
            values.append(last)
        _last = last
    ids = []
    high, prefix = -1, ""
    for value in values:
        if value >> 40 != high:
            high = value >> 40
            prefix = "".join([_PAIRS[(value >> shift) & 1023] for shift in _HIGH_SHIFTS])
        pairs = _PAIRS[(value >> 30) & 1023] + _PAIRS[(value >> 20) & 1023]
        ids.append(prefix + pairs + _PAIRS[(value >> 10) & 1023] + _PAIRS[value & 1023])
    return ids


def encode(value: int) -> str:
    """A 130-bit value as 26 base32 digits, most significant first."""
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])


def is_job_id(value: str) -> bool:
    return JOB_ID_PATTERN.fullmatch(value) is not None


def id_prefix_range(text: str) -> tuple[str, str] | None:
    """The first and last possible ids that start with `text` (any case), or None
    when `text` cannot begin an id: ids with that prefix are exactly those between
    the two, inclusive. Bounds of alphabet characters only, of one length, order
    alike in every collation."""
    prefix = text.strip().lower()
    if not prefix or not JOB_ID_PATTERN.fullmatch(prefix.ljust(26, "0")):
        return None
    return prefix.ljust(26, "0"), prefix.ljust(26, "z")
