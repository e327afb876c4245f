"""SQLite only: what follows from how this backend runs its statements, which
PostgreSQL does differently (one statement per rescue there; a planner with
statistics). Everything else is in the shared suite (test_contract.py)."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from chit.jobs import DependencyCounts, JobFilter, NewJob, ReplaySelector, State, Succeeded
from chit.limits import Limits
from chit.store import queries
from chit.store.sql import kinds_term
from chit.store.sqlite import Q, SQLiteStore

PRIMARY_KEY = "sqlite_autoindex_chit_jobs_1 (id=?)"
# A claim's {held} as a worker runs it (the kinds it has code for) while
# another kind has a limit: the plan must not change.
HELD = kinds_term(["limited-kind"], frozenset({"noop", "other-kind", "limited-kind"}))
# Each hot query, the parameters it runs with, and the index it is written for.
HOT_QUERIES: dict[str, tuple[dict[str, object], list[str]]] = {
    "has_due": ({"queue": "default", "now": "now"}, ["chit_jobs_claimable (queue=?)"]),
    "claim": (
        {"queue": "default", "worker": "w", "limit": 8, "lease": "+30 seconds", "now": "now"},
        ["chit_jobs_claimable (queue=?)", PRIMARY_KEY],
    ),
    "heartbeat": (
        {"beats": '[{"id": "a", "token": "t"}]', "lease": "+30 seconds", "now": "now"},
        [PRIMARY_KEY],
    ),
    "succeed": (
        {"id": "a", "token": "t", "result": "1", "result_external": 0, "has_progress": 0}
        | {"done": None, "total": None, "message": None, "now": "now"},
        [PRIMARY_KEY],
    ),
    "fail": (
        {"id": "a", "token": "t", "error": "e", "retry": "+1 seconds", "now": "now"},
        [PRIMARY_KEY],
    ),
    "release": ({"id": "a", "token": "t", "now": "now", "free": 3}, [PRIMARY_KEY]),
    "rescue_expired": ({"now": "now"}, ["chit_jobs_leases (lease_expires_at<?)"]),
    "expire_attempts": ({"ids": '["a"]', "now": "now"}, ["chit_attempts_job (job_id=?)"]),
    "stats_stale": (
        {"now": "now", "tenant": None},
        ["chit_jobs_leases (lease_expires_at<?)"],
    ),
    "stats_last_hour": (
        {"now": "now", "tenant": None},
        ["chit_jobs_finished (finished_at>?)"],
    ),
    "get": ({"id": "a", "tenant": None, "now": "now"}, [PRIMARY_KEY]),
}


def test_sqlite_rescue_in_two_statements_closes_the_attempts_of_exactly_the_jobs_it_took_back(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chit.db"
    store = SQLiteStore(path)
    first = store.enqueue(NewJob("k", {}, priority=0)).id
    second = store.enqueue(NewJob("k", {}, priority=1)).id
    assert len(store.claim("w1", ["default"], 2, 30)) == 2
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        # The first lease is over; the second ends while the rescue is under way.
        expire = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?)"
        raw.execute(
            f"UPDATE chit_jobs SET lease_expires_at = {expire} WHERE id = ?", ("-1 seconds", first)
        )
        raw.execute(
            f"UPDATE chit_jobs SET lease_expires_at = {expire} WHERE id = ?",
            ("+0.3 seconds", second),
        )

    def slow_disk(statement: str) -> None:
        # A busy machine between the store's statements: the second lease runs out here.
        if "UPDATE chit_jobs" in statement and "lease expired after" in statement:
            time.sleep(0.5)

    store._conn()[0].set_trace_callback(slow_disk)
    report = store.rescue_expired()
    store._conn()[0].set_trace_callback(None)

    # Whichever of the two it took back, a job has an open attempt if and only if
    # it is running, and the next claims work.
    assert report.requeued >= 1
    with closing(sqlite3.connect(path)) as raw:
        running = raw.execute("SELECT id FROM chit_jobs WHERE state = 'running'").fetchall()
        open_attempts = raw.execute(
            "SELECT job_id FROM chit_attempts WHERE finished_at IS NULL"
        ).fetchall()
    assert sorted(open_attempts) == sorted(running)
    later = datetime.now(UTC) + timedelta(seconds=1)
    store.rescue_expired(now=later)
    assert {j.id for j in store.claim("w2", ["default"], 2, 30, now=later)} == {first, second}
    store.close()


@pytest.mark.parametrize("name", sorted(HOT_QUERIES))
def test_sqlite_without_statistics_runs_each_hot_query_on_the_index_written_for_it(
    tmp_path: Path, name: str
) -> None:
    """SQLite has no statistics (the store never runs ANALYZE), so its plans do not
    depend on the rows: an empty file shows what a million jobs get. Seen at
    1,000,000 finished and 100,000 queued jobs: heartbeat walked every running job
    by chit_jobs_state_id (3 ms a beat), stats_last_hour every job (200 ms)."""
    path = tmp_path / "chit.db"
    SQLiteStore(path).close()
    params, indexes = HOT_QUERIES[name]
    with closing(sqlite3.connect(path)) as conn:
        query = Q[name].replace("{held}", HELD)
        plan = [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + query, params)]
    text = "\n".join(plan)
    for index in indexes:
        assert re.search(rf"USING (COVERING )?INDEX {re.escape(index)}", text), text
    # No walk of the jobs table, nor of a whole index of it.
    assert not any(re.match(r"SCAN (chit_jobs|j)\b", line) for line in plan), text
    assert not any("chit_jobs_state_id" in line for line in plan), text


@pytest.mark.parametrize(
    ("where", "index"),
    [
        (JobFilter(tenant="acme"), "chit_jobs_tenant_id (tenant=?)"),
        (JobFilter(tenant="acme", since=datetime(2026, 1, 1, tzinfo=UTC)), "chit_jobs_tenant_id"),
        # With another filter the tenant is checked on the rows that filter's index finds
        # (SQLite cannot tell which is rarer), unless one index seeks on all of them.
        (JobFilter(tenant="acme", state=State.FAILED), "chit_jobs_state_id (state=?)"),
        (JobFilter(tenant="acme", kind="k"), "chit_jobs_kind_id (kind=?)"),
        (
            JobFilter(tenant="acme", state=State.FAILED, kind="k"),
            "chit_jobs_state_kind (state=? AND kind=? AND tenant=?)",
        ),
    ],
)
def test_sqlite_without_statistics_lists_a_tenants_jobs_by_an_index(
    tmp_path: Path, where: JobFilter, index: str
) -> None:
    """`GET /jobs` with a tenant's key. Before chit_jobs_tenant_id a tenant's page
    walked the primary key over every tenant's jobs: 300 ms at a million jobs for a
    tenant with none."""
    plan = _plan_of(tmp_path / "chit.db", lambda store: store.list(where, limit=50))
    assert any(f"USING INDEX {index}" in line for line in plan), plan


def test_sqlite_with_statistics_still_claims_in_index_order_without_sorting(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chit.db"
    store = SQLiteStore(path)
    store.enqueue_many([NewJob("k", {}) for _ in range(2000)])
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("ANALYZE")
        # The statistics ANALYZE wrote on a million finished jobs and a backlog
        # in one queue at one priority, which made SQLite skip-scan and sort
        # every due job.
        conn.execute("DELETE FROM sqlite_stat1 WHERE tbl = 'chit_jobs'")
        conn.executemany(
            "INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES ('chit_jobs', ?, ?)",
            [
                ("chit_jobs_finished", "1058152 159 159 159 159"),
                ("chit_jobs_queue_id", "1100000 1100000 1"),
                ("chit_jobs_state_kind", "1100000 550000 550000 550000 1"),
                ("chit_jobs_kind_id", "1100000 1100000 1"),
                ("chit_jobs_state_id", "1100000 550000 1"),
                ("chit_jobs_claimable", "41848 41848 41848 41848 1"),
                ("sqlite_autoindex_chit_jobs_1", "1100000 1"),
            ],
        )
        conn.commit()
    with closing(sqlite3.connect(path)) as conn:
        params = HOT_QUERIES["claim"][0]
        claim = "EXPLAIN QUERY PLAN " + Q["claim"].replace("{held}", HELD)
        plan = " | ".join(r[3] for r in conn.execute(claim, params))
    assert "chit_jobs_claimable (queue=?)" in plan, plan
    assert "TEMP B-TREE" not in plan, plan
    assert [j.attempt for j in store.claim("w", ["default"], 4, 30)] == [1, 1, 1, 1]
    store.close()


@pytest.mark.parametrize(
    ("call", "index"),
    [
        (lambda store: store.finished_per_minute("acme"), "chit_jobs_finished (finished_at>?)"),
        (lambda store: store.oldest_queued("acme"), "USING INDEX chit_jobs_groups"),
        (lambda store: store.stale_jobs("acme"), "chit_jobs_leases (lease_expires_at<?)"),
        (lambda store: store.count_jobs("acme"), "(state=? AND kind=? AND tenant=?)"),
        (lambda store: store.search("01", "acme"), "chit_jobs_tenant_id (tenant=? AND id>?"),
        (lambda store: store.replay(ReplaySelector(ids=("a",), tenant="acme")), "id=?)"),
        (
            lambda store: store.replay(ReplaySelector(kind="k", tenant="acme")),
            "(state=? AND kind=? AND tenant=?)",
        ),
        (
            lambda store: store.replay(ReplaySelector(error_prefix="E", tenant="acme")),
            "(state=?)",  # chit_jobs_state_id or chit_jobs_state_kind: the failed jobs
        ),
        (
            lambda store: store.replay(ReplaySelector(since=datetime.now(UTC), tenant="acme")),
            "(state=?)",
        ),
    ],
    ids=[
        "finished_per_minute",
        "oldest_queued",
        "stale_jobs",
        "count_jobs",
        "search",
        "replay ids",
        "replay kind",
        "replay error",
        "replay since",
    ],
)
def test_sqlite_without_statistics_keeps_a_tenants_other_queries_on_their_indexes(
    tmp_path: Path, call: Callable[[SQLiteStore], object], index: str
) -> None:
    """Without statistics SQLite takes any index on an equality over a range: with
    chit_jobs_tenant_id a tenant's throughput walked all its jobs (0.5 ms to 80 ms
    at a million jobs), and a replay by error prefix too (2 ms to 120 ms), unless
    the query only filters on the tenant."""
    plan = _plan_of(tmp_path / "chit.db", call)
    assert any(index in line for line in plan), plan


def _plan_of(path: Path, call: Callable[[SQLiteStore], object]) -> list[str]:
    """The plan of the last statement on chit_jobs that `call` runs on a new store."""
    store = SQLiteStore(path)
    statements: list[str] = []
    store._conn()[0].set_trace_callback(statements.append)
    call(store)
    store._conn()[0].set_trace_callback(None)
    store.close()
    query = [q for q in statements if re.search(r"\b(FROM|UPDATE) chit_jobs\b", q)]
    with closing(sqlite3.connect(path)) as conn:
        return [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + query[-1])]


def test_sqlite_edges_migration_moves_stored_dependencies_out_of_the_job_rows(
    tmp_path: Path,
) -> None:
    """A graph stored before the *_edges migration (depends_on in chit_jobs) reads and
    runs the same after it, its dependencies now in chit_edges."""
    store = SQLiteStore(tmp_path / "chit.db", migrate=False)
    with store._migrating() as conn:
        migrations = queries.migrations("sqlite")
        [edges] = [version for version, name, _ in migrations if name == "edges"]
        for version, name, script in migrations[: edges - 1]:
            store._run_script(conn, script)
            conn.execute(Q["record_migration"], {"version": version, "name": name})
        row = "INSERT INTO chit_jobs (id, kind, payload, max_attempts, run_at, created_at, "
        row += "updated_at, state, workflow_id, ref, depends_on, dependents, deps_pending) "
        row += "VALUES (?, ?, '{}', 3, '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z', "
        row += "'2026-01-01T00:00:00.000Z', ?, 'wf', ?, ?, ?, ?)"
        conn.execute(row, ("a", "part", "queued", "a", None, '["c"]', 0))
        conn.execute(row, ("b", "part", "succeeded", "b", None, '["c"]', 0))
        conn.execute(row, ("c", "merge", "waiting", "c", '["a", "b"]', None, 1))
    assert store.migrate() == len(queries.migrations("sqlite"))
    with closing(sqlite3.connect(store.path)) as conn:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(chit_jobs)")]
        edges = conn.execute("SELECT job_id, depends_on FROM chit_edges").fetchall()
    assert "depends_on" not in columns and edges == [("c", '["a", "b"]')]
    merge = store.get("c")
    assert merge is not None and merge.depends_on == ("a", "b")
    assert merge.dependencies == DependencyCounts(2, 1, 0, 0, 1)
    view = store.workflow("wf")
    assert view is not None
    assert {j.id: j.depends_on for j in view.jobs} == {"a": (), "b": (), "c": ("a", "b")}
    [part] = store.claim("w1", ["default"], 10, 30.0)
    assert part.id == "a" and not part.has_dependencies
    assert store.finish([Succeeded("a", part.lease_token, None)]) == [True]
    [claimed] = store.claim("w1", ["default"], 10, 30.0)
    assert claimed.id == "c" and claimed.has_dependencies
    assert [d.id for d in store.dependencies("c")] == ["a", "b"]
    store.close()


def test_sqlite_a_fan_in_callbacks_row_stays_narrow_and_its_edges_go_with_it(
    tmp_path: Path,
) -> None:
    """SQLite rewrites a whole row on each UPDATE: the callback's count-downs
    must not carry its list of dependencies (the *_edges migration). Deleting the job
    deletes its edges."""
    store = SQLiteStore(tmp_path / "chit.db")
    parts = [NewJob(kind="part", payload={}, ref=f"p{n}") for n in range(2_000)]
    merge = NewJob(kind="merge", payload={}, depends_on=tuple(f"p{n}" for n in range(2_000)))
    *_, last = store.enqueue_many([*parts, merge])
    with closing(sqlite3.connect(store.path)) as conn:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(chit_jobs)")]
        width = " + ".join(f"coalesce(length(CAST({c} AS BLOB)), 0)" for c in columns)
        [(size,)] = conn.execute(f"SELECT {width} FROM chit_jobs WHERE id = ?", (last.id,))
        assert size < 500  # its 2,000 dependency ids alone are 52 KB of JSON
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("DELETE FROM chit_jobs WHERE id = ?", (last.id,))
        conn.commit()
        assert conn.execute("SELECT count(*) FROM chit_edges").fetchall() == [(0,)]
    store.close()


_CLOSING_UNDER_READERS = """
import sys, threading, time
from chit.errors import StoreError
from chit.store.sqlite import SQLiteStore

store = SQLiteStore(sys.argv[1])
done = threading.Event()

def read():
    while not done.is_set():
        try:
            store.get_many(["01m8yadjchbd7zcy2kt2snpztm"] * 50)
        except StoreError:
            pass  # closed under it: the next call reopens

readers = [threading.Thread(target=read) for _ in range(4)]
for r in readers:
    r.start()
end = time.monotonic() + 2
while time.monotonic() < end:
    store.close()
done.set()
for r in readers:
    r.join()
print("ok")
"""


def test_sqlite_close_under_other_threads_statements_does_not_crash(tmp_path: Path) -> None:
    # Closing a connection while another thread runs a statement on it crashed
    # the process (SIGSEGV): an API thread still reading when an app or a test
    # closes its queue. close() now waits for each connection's statement. In
    # a child process, so a crash fails this test rather than the whole run.
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", _CLOSING_UNDER_READERS, str(tmp_path / "chit.db")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (run.returncode, run.stdout.strip()) == (0, "ok"), run.stderr[-2000:]


def test_sqlite_limits_and_pauses_of_other_kinds_leave_a_plain_claim_one_statement(
    tmp_path: Path,
) -> None:
    """Issue 22: a plain job pays nothing for other kinds' limits. The claim of a
    queue whose jobs are all of an unlimited kind stays the one statement; a job
    of the limited kind that comes in is left to the flow claim, which heeds it."""
    store = SQLiteStore(tmp_path / "chit.db")
    store.set_limits("limited", Limits(concurrency=1))
    store.pause(kind="paused")
    store.enqueue_many([NewJob("plain", {}) for _ in range(3)])
    statements: list[str] = []
    store._conn()[0].set_trace_callback(statements.append)
    assert len(store.claim("w", ["default"], 2, 30)) == 2
    # Python's trace repeats a statement for each row a trigger of its table
    # (chit_jobs_wake_waiters) runs for, WHEN clause false or not: one is one.
    distinct = [s for i, s in enumerate(statements) if i == 0 or statements[i - 1] != s]
    claims = [s for s in distinct if "chit_jobs_claimable" in s and "UPDATE" in s]
    assert len(claims) == 1 and "kind NOT IN ('limited', 'paused')" in claims[0], statements
    assert not any("WITH RECURSIVE kinds" in s for s in statements), statements  # queued_kinds
    # The queue's shape is a second old: the new jobs are not taken by the one
    # statement, but by the flow claim that follows it, up to the limit.
    store.enqueue_many([NewJob("limited", {}), NewJob("limited", {}), NewJob("paused", {})])
    statements.clear()
    assert sorted(j.kind for j in store.claim("w", ["default"], 4, 30)) == ["limited", "plain"]
    assert any("WITH RECURSIVE kinds" in s for s in statements), statements
    assert store.claim("w", ["default"], 4, 30) == []
    store._conn()[0].set_trace_callback(None)
    store.close()
