"""What every part of the SQL stores stands on: a dialect (how one database
takes values and gives them back), connections, and rows read as values.

Both backends' connections have `execute(query, params)` returning a cursor
with `fetchone`, `fetchall` and `rowcount`, and rows readable by column name
(the names of the named queries).
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from chit.jobs import ClaimedJob, Job, Progress, RunOn, State, WaitingFor

# One encoder for every call: json.dumps with options builds a new one each time.
dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


@dataclass(frozen=True)
class Dialect:
    """How one database takes values (parameters) and gives them back (columns)."""

    name: str  # the folder of its queries.sql and migrations
    now: Callable[[datetime | None], Any]  # the database clock, unless a test gives a time
    interval: Callable[[float], Any]  # seconds: a lease, a delay, an age
    time: Callable[[datetime], Any]
    array: Callable[[Sequence[Any]], Any]  # ids, histogram bounds
    loads: Callable[[Any], Any]  # a JSON column
    when: Callable[[Any], datetime | None]  # a time column, as aware UTC
    query: Callable[..., Any]  # (name, **fragments): the named query, `{fragments}` filled in
    # `{tenant}`: every tenant, or an equality on j.tenant; with seek=False one that
    # only filters the rows another index finds (SQLite has no statistics to choose).
    tenant: Callable[[str | None, bool], str]
    prune_batch: Callable[[], int]  # rows a prune statement deletes at most
    text: Callable[[str], str] = str  # a text parameter, made storable


# A job's columns that are read as they come, in both dialects.
_AS_THEY_ARE: tuple[str, ...] = ("id", "kind", "queue", "priority", "attempts", "max_attempts")
_AS_THEY_ARE += ("tenant", "idempotency_key", "worker", "error", "concurrency_key", "timeout")
_AS_THEY_ARE += ("workflow_id", "ref", "unique_key", "debounce_key")


def scalar(cursor: Any) -> Any:
    row = cursor.fetchone()
    if row is None:
        return None
    return next(iter(row.values())) if isinstance(row, Mapping) else row[0]


def progressed(progress: Progress | None) -> dict[str, Any]:
    """The parameters of a write that sets progress when given it."""
    if progress is None:
        return {"has_progress": False, "done": None, "total": None, "message": None}
    done, total, message = progress.done, progress.total, progress.message
    return {"has_progress": True, "done": done, "total": total, "message": message}


class SQLBase(abc.ABC):
    """Connections, a dialect and its named queries: what each part of the SQL
    store (the modules beside this one) writes its statements with."""

    d: ClassVar[Dialect]
    Q: ClassVar[dict[str, str]]
    result_inline_bytes: int

    @abc.abstractmethod
    def _read(self) -> AbstractContextManager[Any]: ...

    @abc.abstractmethod
    def _write(self) -> AbstractContextManager[Any]:
        """A connection for writing: a transaction on SQLite, autocommit on PostgreSQL."""

    @abc.abstractmethod
    def _tx(self) -> AbstractContextManager[Any]:
        """A connection whose statements in the block commit together."""

    def _fixed_clock(self, conn: Any, now: Any) -> Any:
        """`now` as one instant for every statement of a transaction."""
        return now

    def _rows(self, query: Any, params: Mapping[str, Any], write: bool = False) -> Any:
        """All rows of one statement, run on its own."""
        with self._write() if write else self._read() as conn:
            return conn.execute(query, params).fetchall()

    def _changed(self, query: str, params: Mapping[str, Any]) -> int:
        """How many rows one write statement, run on its own, changed."""
        with self._write() as conn:
            return int(conn.execute(self.Q[query], params).rowcount)

    # Rows to values

    def _job(self, r: Any) -> Job:
        loads, when, at = self.d.loads, self.d.when, self._at
        fields: dict[str, Any] = {name: r[name] for name in _AS_THEY_ARE}
        fields |= {name: loads(r[name]) for name in ("payload", "checkpoint", "result")}
        fields |= {name: at(r[name]) for name in ("run_at", "created_at", "updated_at")}
        fields |= {
            name: when(r[name])
            for name in ("lease_expires_at", "started_at", "finished_at", "expires_at")
        }
        fields |= {name: bool(r[name]) for name in ("result_external", "cancel_requested", "stale")}
        return Job(
            **fields,
            state=State(r["state"]),
            progress=Progress(r["progress_done"], r["progress_total"], r["progress_message"]),
            run_on=RunOn(r["run_on"]),
            depends_on=tuple(loads(r["depends_on"]) or ()),
            waiting_for=self._waiting_for(r),
            cost=r["cost"] or 1,  # NULL: the default, 1
        )

    def _waiting_for(self, r: Any) -> WaitingFor | None:
        """What a waiting job waits for (a workflow's waiting job: None)."""
        if r["state"] != "waiting" or (r["wait_signal"] is None and r["wait_jobs"] is None):
            return None
        jobs = r["wait_jobs"]
        return WaitingFor(
            signal=r["wait_signal"],
            jobs=None
            if jobs is None
            else tuple(self.d.loads(jobs) if isinstance(jobs, str) else jobs),
            until=self.d.when(r["wait_until"]),
        )

    def _claimed(self, r: Any) -> ClaimedJob:
        return ClaimedJob(
            **{name: r[name] for name in ("id", "kind", "queue", "max_attempts", "lease_token")},
            payload=self.d.loads(r["payload"]),
            attempt=r["attempts"],
            checkpoint=self.d.loads(r["checkpoint"]),
            progress=Progress(r["progress_done"], r["progress_total"]),
            timeout=r["timeout"],
            has_dependencies=bool(r["has_dependencies"]),
            tenant=r["tenant"],
            traceparent=r["traceparent"],
        )

    def _at(self, value: Any) -> datetime:
        """A NOT NULL time column."""
        when = self.d.when(value)
        assert when is not None, "a NOT NULL time column was NULL"
        return when

    def _is_large(self, encoded: str) -> bool:
        """Whether a result is stored out of the job row."""
        return len(encoded.encode()) > self.result_inline_bytes

    # Workflows: what an outcome does to the jobs that depend on it, in the
    # transaction that records it. Each step reads the dependents from the rows
    # of the jobs that ended: work proportional to the dependents.

    def _settle(self, conn: Any, succeeded: Sequence[str], ended: Sequence[str], now: Any) -> None:
        """`succeeded`: jobs that just succeeded; `ended`: jobs that just failed
        or were cancelled. Only jobs that have dependents (or, on SQLite,
        waiters: has_dependents) need be given."""
        settled = list(succeeded)
        if succeeded:
            params = {"ids": self.d.array(list(succeeded)), "callbacks_only": False, "now": now}
            conn.execute(self.Q["count_down"], params)
        while ended:
            settled += ended
            params = {"ids": self.d.array(list(ended)), "callbacks_only": True, "now": now}
            conn.execute(self.Q["count_down"], params)
            rows = conn.execute(self.Q["cancel_dependents"], params).fetchall()
            ended = [r["id"] for r in rows if r["has_dependents"]]
        # The jobs waiting (wait_for_jobs) on those that ended, queued if theirs
        # have all ended: here on SQLite; PostgreSQL's trigger chit_wake_waiters
        # costs its claims nothing measurable, and locks the waiters before it
        # reads them in a fresh snapshot.
        if settled and "wake_waiters_of" in self.Q:
            conn.execute(self.Q["wake_waiters_of"], {"ids": self.d.array(settled), "now": now})

    def _replayed(self, query: Any, params: Mapping[str, Any]) -> int:
        """Run a replay query, and put back what the replayed jobs had cancelled:
        the dependents wait again, all the way down; callbacks count them pending."""
        with self._tx() as conn:
            rows = conn.execute(query, params).fetchall()
            replayed = [r["id"] for r in rows if r["has_dependents"]]
            now = self.d.now(None)
            while replayed:
                step = {"ids": self.d.array(replayed), "now": now}
                conn.execute(self.Q["count_up"], step)
                found = conn.execute(self.Q["uncancel_dependents"], step).fetchall()
                replayed = [r["id"] for r in found if r["has_dependents"]]
        return len(rows)
