"""Waiting for something to happen, however busy the machine: poll a condition
until it holds or a (generous) deadline passes. Never a fixed sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_until(
    predicate: Callable[[], Any], timeout: float, interval: float = 0.05, what: str = ""
) -> Any:
    """Poll `predicate` until it returns something truthy (returned); fail the
    test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


async def until(check: Callable[[], bool], what: str, timeout: float = 10) -> None:
    """`wait_until` for a test on an event loop: the loop keeps running meanwhile."""
    try:
        async with asyncio.timeout(timeout):
            while not check():
                await asyncio.sleep(0.005)
    except TimeoutError:
        pytest.fail(f"timed out after {timeout}s waiting for {what}")
