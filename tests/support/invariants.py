"""The state machine's invariants as one query: the jobs that break one."""

# The invariants PostgreSQL's CHECK constraints held until migration 024, which
# keeps one (SQLite keeps them all): every test of the store suite on
# PostgreSQL, and the fault run, end by looking for a job that breaks one.
BROKEN_INVARIANTS = """
SELECT id, state FROM chit_jobs WHERE NOT (
    state IN ('waiting', 'queued', 'running', 'succeeded', 'failed', 'cancelled')
    AND (state <> 'running' OR (lease_expires_at IS NOT NULL AND lease_token IS NOT NULL))
    AND (state = 'running' OR lease_token IS NULL)
    AND (state <> 'failed' OR error IS NOT NULL)
    AND run_on IN ('succeeded', 'finished')
    AND max_attempts > 0
)
"""
