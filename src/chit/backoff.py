"""Retry delays: exponential, capped, with full jitter. Pure, so tests pass their own rng."""

from __future__ import annotations

import random


def delay(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds to wait before the attempt after `attempt` (1 = the first run failed).

    Full jitter (uniform between 0 and the exponential ceiling) spreads a burst
    of failures out instead of retrying them in lockstep.
    """
    if attempt < 1:
        raise ValueError("attempt starts at 1")
    ceiling = min(cap, base * 2.0 ** min(attempt - 1, 62))
    return (rng or random).uniform(0.0, ceiling)
