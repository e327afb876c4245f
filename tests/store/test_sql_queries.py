"""The two dialects' queries.sql diff query by query: the same names, in the same
order, but for the names one backend has for a reason listed here."""

from __future__ import annotations

from chit.store import queries

# Where SQLite needs two statements PostgreSQL does it in one (a data-modifying
# CTE), or the backends wait for work, lock or plan differently.
ONLY_SQLITE = {
    "wake_waiters_of": "PostgreSQL wakes waiters in a trigger, which costs its claims nothing",
    "succeed_many": "PostgreSQL's succeed takes a batch already",
    "close_attempts_succeeded": "PostgreSQL closes attempts inside each outcome's statement",
    "has_due": "a read before the claim takes the write lock; SKIP LOCKED never waits",
    "open_attempt": "PostgreSQL opens attempts inside `claim`",
    "close_attempt": "PostgreSQL closes attempts inside each outcome's statement",
    "expire_attempts": "PostgreSQL closes them inside `rescue_expired` and `claim`",
    "list_recent": "one list query per index: SQLite has no statistics to choose",
    "list_by_tenant": "one list query per index",
    "list_by_state": "one list query per index",
    "list_by_kind": "one list query per index",
    "list_by_queue": "one list query per index",
    "list_by_state_kind_tenant": "one list query per index",
    "list_queued": "one list query per index",
    "list_running": "one list query per index",
    "data_version": "PostgreSQL LISTENs instead (`listen`)",
    "insert_output": "PostgreSQL inserts the values inside `append_output`",
    "enqueue_edges": "SQLite keeps depends_on out of chit_jobs (the *_edges migration)",
}
ONLY_POSTGRES = {
    "migration_lock": "SQLite's BEGIN IMMEDIATE already keeps a second migrator out",
    "enqueue_copy": "binary COPY for large batches",
    "enqueue_plain": "one job without keys as values, not JSON; SQLite inserts values already",
    "notify_queues": "wakes the workers of the queues enqueue_copy filled",
    "claim_due": "the CTEs `claim`, `succeed_and_claim` and `claim_ids` share",
    "lock_held": "the row locks the statements on held jobs share; SQLite has one writer",
    "lock_jobs": "row locks in id order before outcomes of several kinds",
    "release_dependents": "CTEs `succeed` and `succeed_and_claim` share; SQLite runs count_down",
    "succeed_and_claim": "one statement where SQLite runs both in one transaction",
    "list": "its WHERE clause is built from the filters, for the planner's statistics",
    "list_merged": "finished, waiting, queued and running jobs each by their own index",
    "listen": "SQLite checks PRAGMA data_version instead",
    "listen_output": "SQLite's event watcher checks PRAGMA data_version instead",
    "mark_listened": "SQLite's event watcher sees every commit",
    "lock_kinds": "SQLite's write lock already runs claims one at a time",
}


def test_both_dialects_define_the_same_queries_in_the_same_order() -> None:
    sqlite = list(queries.load("sqlite"))
    postgres = list(queries.load("postgres"))
    assert set(ONLY_SQLITE) <= set(sqlite) and not set(ONLY_SQLITE) & set(postgres)
    assert set(ONLY_POSTGRES) <= set(postgres) and not set(ONLY_POSTGRES) & set(sqlite)
    shared_sqlite = [name for name in sqlite if name not in ONLY_SQLITE]
    shared_postgres = [name for name in postgres if name not in ONLY_POSTGRES]
    assert shared_sqlite == shared_postgres


def test_succeed_and_claim_is_succeed_then_claim() -> None:
    """The combined statement repeats the two it combines; it must not drift from them."""
    q = queries.load("postgres")
    succeed_ctes = q["succeed"][q["succeed"].index("WITH ") : q["succeed"].rindex("\nSELECT")]
    claim_ctes = q["claim"][q["claim"].index("WITH ") + 5 : q["claim"].rindex("\nSELECT")]
    combined = q["succeed_and_claim"]
    assert succeed_ctes + ",\n" + claim_ctes in combined
