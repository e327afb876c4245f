"""Named SQL blocks: a backend's queries live in `sql/<backend>/queries.sql`,
each introduced by a `-- name: NAME` line; both backends use the same names.
A `{fragment}` in a query is a block written once per dialect (`_FRAGMENTS`:
`{columns}` a job's columns, `{replay_reset}` a replayed job's reset, and so on;
each block's own comment says what it is), filled in here; other `{...}` are
filled in by the store."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_HEADER = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
# Blocks that other queries include, as `{fragment}`: written once per dialect.
_FRAGMENTS = {
    "columns": "job_columns",
    "replay_reset": "replay_reset",
    "release_dependents": "release_dependents",
    "unexpired": "unexpired",
    "unique_free": "unique_free",
    "schedule_columns": "schedule_columns",
    "lock_held": "lock_held",
    "claim_due": "claim_due",
}


@cache
def load(backend: str) -> dict[str, str]:
    text = resources.files("chit.store").joinpath("sql", backend, "queries.sql").read_text()
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice in {backend}/queries.sql")
        queries[name] = body.strip().rstrip(";")
    for fragment, block in _FRAGMENTS.items():
        lines = queries.get(block, "").splitlines()
        text = "\n".join(line for line in lines if not line.startswith("--"))
        queries = {name: body.replace(f"{{{fragment}}}", text) for name, body in queries.items()}
    return queries


@cache
def migrations(backend: str) -> list[tuple[int, str, str]]:
    """(version, name, sql) for each `NNN_name.sql` file, in order."""
    folder = resources.files("chit.store").joinpath("sql", backend, "migrations")
    found = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d+)_(\w+)\.sql", entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text()))
    found.sort()
    versions = [v for v, _, _ in found]
    if versions != list(range(1, len(versions) + 1)):
        raise ValueError(f"{backend} migrations are not numbered 1..n: {versions}")
    return found
