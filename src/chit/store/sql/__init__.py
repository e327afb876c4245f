"""The SQL stores, written once over named queries (`<dialect>/queries.sql`).

A backend subclasses `SQLStore` and gives it what truly differs between
databases: connections and transactions (`_read`, `_write`, `_tx`, `_migrating`,
`_run_script`), a `Dialect` (how values are sent and read, how a query's
fragments are filled in), and its hot paths (`_finish`, `_opened`,
enqueue_many, list, wait_for_jobs). The rest is in one module per interface:

- `base`: the dialect, connections, rows read as values, what an outcome does
  to dependents;
- `lifecycle`: the rest of the core `Store` contract (outcomes, leases, one
  job, an operator's changes), over
- `enqueue`: storing new jobs (keys, debounce, workflows), as steps;
- `claims`: the one-statement claim, and the flow claim's reads answered;
- `limits`: limits and pauses (`FlowControl`);
- `waits`, `workflows`, `reports`, `access` (keys, sessions, secrets), `schedules`,
  `fleet`, `output`: the capabilities of `chit.store.capabilities`.
"""

from __future__ import annotations

from chit.store.capabilities import CallerTransactions, FullStore
from chit.store.sql.access import AccessSQL
from chit.store.sql.base import Dialect, dumps, progressed, scalar
from chit.store.sql.claims import kinds_term
from chit.store.sql.enqueue import InsertStep, QueryStep
from chit.store.sql.fleet import FleetSQL
from chit.store.sql.lifecycle import LifecycleSQL
from chit.store.sql.output import OutputSQL
from chit.store.sql.reports import ReportsSQL
from chit.store.sql.schedules import SchedulesSQL
from chit.store.sql.waits import WaitsSQL
from chit.store.sql.workflows import WorkflowsSQL

__all__ = [
    "Dialect",
    "InsertStep",
    "QueryStep",
    "SQLStore",
    "dumps",
    "kinds_term",
    "progressed",
    "scalar",
]


class SQLStore(
    LifecycleSQL,
    WorkflowsSQL,
    ReportsSQL,
    AccessSQL,
    SchedulesSQL,
    FleetSQL,
    OutputSQL,
    WaitsSQL,
    CallerTransactions,
    FullStore,
):
    """Every interface of `chit.store`, over one backend's connections."""
