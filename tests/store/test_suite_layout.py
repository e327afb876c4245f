"""The shared files of this suite speak only the store contract and the
backend's inspection (support/store_inspection.py), so a new store passes them
unchanged once it joins conftest.py's BACKENDS. What is about one store, or
about the SQL stores alone, lives in a file named for it."""

from __future__ import annotations

import re
from pathlib import Path

STORE_ONLY = re.compile(r"^test_(sql|sqlite|postgres|redis)(_\w+)?\.py$")
RAW_SQL = re.compile(
    r"\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM|PRAGMA|TRUNCATE|LOCK TABLE)\b"
    r"|\.execute\(|\.executemany\("
)
# Drivers and the stores' own modules: conftest.py opens the stores, the tests do not.
STORE_INTERNALS = re.compile(r"\b(sqlite3|psycopg|chit\.store\.(sql|sqlite|postgres|redis))\b")


def _shared() -> list[Path]:
    here = Path(__file__)
    return [
        p
        for p in sorted(here.parent.glob("*.py"))
        if not STORE_ONLY.match(p.name) and p.name != here.name
    ]


def test_the_shared_files_hold_no_raw_sql_and_reach_no_store_internals() -> None:
    found = []
    for path in _shared():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if RAW_SQL.search(line) or (
                path.name != "conftest.py" and STORE_INTERNALS.search(line)
            ):
                found.append(f"{path.name}:{number}: {line.strip()}")
    assert found == []
    assert {"conftest.py", "test_contract.py"} <= {p.name for p in _shared()}
