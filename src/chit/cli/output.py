"""How results look: aligned text on a terminal, JSON with --json."""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo


def to_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v) for v in value]
    return value


def print_json(value: Any) -> None:
    json.dump(to_json(value), sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def submitted_line(job_id: str, created: bool, debounced: bool) -> str:
    """What `chit submit` prints of the job it stored, or found by its key."""
    if created:
        return job_id
    if debounced:
        return f"{job_id} (debounced: the key's job not started yet took this payload)"
    return f"{job_id} (existing job, same key)"


def when(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def when_in(value: datetime | None, tz: str) -> str:
    """A time in the zone `tz` (an IANA name), its abbreviation after it: a
    schedule's times read as its rule is written (`08:00:00 CET`, or `UTC`)."""
    if value is None:
        return "-"
    local = value.astimezone(ZoneInfo(tz))
    return f"{local.strftime('%Y-%m-%d %H:%M:%S')} {local.tzname() or tz}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines)


def progress_bar(done: int | None, total: int | None, width: int = 30) -> str:
    if done is None:
        return ""
    if not total:
        return f"{done} done"
    share = max(0.0, min(1.0, done / total))
    filled = int(share * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {share:4.0%}"


@dataclasses.dataclass(frozen=True)
class WorkflowRow:
    """One job of `chit workflow`, read from the database or the API alike."""

    id: str
    ref: str | None
    kind: str
    state: str
    depends_on: list[str]
    run_on: str


def workflow_table(workflow_id: str, jobs: list[WorkflowRow]) -> str:
    """The jobs in the order stored; edges by ref where the dependency has one."""
    names = {j.id: j.ref or j.id for j in jobs}
    counts: dict[str, int] = {}
    for j in jobs:
        counts[j.state] = counts.get(j.state, 0) + 1
    summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    rows = [
        (
            j.id,
            j.ref or "-",
            j.kind,
            j.state,
            ", ".join(names.get(d, d) for d in j.depends_on) or "-",
            "finished" if j.run_on == "finished" else "",
        )
        for j in jobs
    ]
    head = f"workflow {workflow_id}: {len(jobs)} jobs ({summary})"
    return head + "\n" + table(["id", "ref", "kind", "state", "depends on", "runs on"], rows)
