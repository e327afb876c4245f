"""`make up` installs chit with its extras (the HTTP API it starts) and no
more; the test targets add the dev tools (a new user's first `make up` should
not spend a minute installing a browser driver)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def recipes(target: str) -> str:
    """Every command `make TARGET` would run on a fresh checkout (-B: all out of date)."""
    done = subprocess.run(
        ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_up_installs_no_dev_tools_and_the_tests_do() -> None:
    up = recipes("up")
    assert "pip install --quiet -e '.[all]'" in up and "[dev]" not in up
    for target in ("test", "test-fast", "lint"):
        assert "-e '.[dev]'" in recipes(target), target
