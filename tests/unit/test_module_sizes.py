"""Small modules with one job each: none in src/chit grows past 650 lines
(a module that does is doing two jobs; split it by what it does)."""

from __future__ import annotations

from pathlib import Path

import chit

SRC = Path(chit.__file__).parent
MOST_LINES = 650


def test_no_module_in_chit_is_over_650_lines() -> None:
    sizes = {
        str(path.relative_to(SRC)): len(path.read_text().splitlines()) for path in SRC.rglob("*.py")
    }
    assert len(sizes) > 50  # the package was found
    assert {name: n for name, n in sizes.items() if n > MOST_LINES} == {}
