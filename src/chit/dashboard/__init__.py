"""The dashboard: server-rendered pages at `/ui` for the people who run chit.

Overview (counts, the last hour's throughput and failure rate, queue lag,
stale leases), Jobs (filters, search, keyset pages), a job's page (payload,
result, attempts, live progress, retry and cancel) and Failures (the grouped
dead-letter report, with replay). Same keys as the HTTP API: a `read` key
sees, an `admin` key also acts; a key sees only its tenant's jobs.

`create_app` mounts it; `chit.dashboard.routes.router` is the APIRouter.
"""
