"""A real headless Chromium (Debian's `chromium`, or CHIT_TEST_CHROMIUM),
driven by Playwright, for the dashboard's and the API's browser tests. A test
module skips itself without Playwright (`pytest.importorskip`) before it gets here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("CHIT_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run")


def chromium_browser(*extra_args: str) -> Iterator[Any]:
    """Yields a launched browser (for a module-scoped fixture), closed at the end;
    fails the test, saying how to get one, when there is no Chromium."""
    from playwright import sync_api

    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"no Chromium at {CHROMIUM}: install Debian's `chromium` (`make test` does), "
            "or point CHIT_TEST_CHROMIUM at one",
            pytrace=False,
        )
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *extra_args])
        yield browser
        browser.close()
