"""The end-to-end app's next release: its tasks and one more kind, which the
workers of support.e2e_app do not have (tests/e2e/test_e2e_unknown_kinds.py)."""

from __future__ import annotations

import chit
from support.e2e_app import queue

__all__ = ["queue"]


@queue.task("shipped_tomorrow")
def shipped_tomorrow(job: chit.JobContext, body: dict) -> dict:
    return {"ran": "tomorrow"}
